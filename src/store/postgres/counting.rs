//! How many records the table holds, for `idem_store_records{state="completed"}`.

use super::PostgresStore;
use crate::store::StoreError;

impl PostgresStore {
    /// Rows in the table from the planner's statistics (`pg_class.reltuples`, which
    /// autovacuum's `ANALYZE` keeps current): an estimate read in constant time, where a
    /// `count(*)` would read the whole table every refresh. 0 before the first `ANALYZE`.
    pub async fn record_count(&self) -> Result<u64, StoreError> {
        let table = self
            .shared
            .sql
            .channel
            .trim_end_matches("_events")
            .to_owned();
        self.bounded(async {
            let mut client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "SELECT GREATEST(reltuples, 0)::bigint FROM pg_class WHERE oid = to_regclass($1)",
                )
                .await?;
            let row = client.query_opt(&stmt, &[&table]).await?;
            Ok(row.map_or(0, |row| row.get::<_, i64>(0).max(0) as u64))
        })
        .await
    }
}
