//! The PostgreSQL store's reads: one record (with its clocks, or its remaining life for
//! the admin), the database's clock, and the operators' listing of in-progress records.
//! None of them writes or takes a row lock.

use std::time::Duration;

use super::{PostgresStore, Soonest};
use crate::store::record::decode;
use crate::store::{Record, StoreError};
use crate::store_key::StoreKey;

/// A record read with its clocks (`sql::clocks`, from column `at`): its lease's end and
/// first send on the database's clock replace the writer's estimates in its bytes, and
/// the database's `now()` comes along to judge them by.
pub(super) fn read(row: &tokio_postgres::Row, at: usize) -> Result<(Record, u64), StoreError> {
    let mut record = decode(row.get::<_, &[u8]>(at))?;
    let ms = |i: usize| row.get::<_, Option<i64>>(at + i).map(|v| v.max(0) as u64);
    if record.state == crate::store::RecordState::InProgress {
        if let Some(lease_until) = ms(1) {
            record.expires_at_ms = lease_until;
        }
    }
    if let Some(sent_at) = ms(2) {
        record.sent_at_ms = sent_at;
    }
    Ok((record, ms(3).unwrap_or(0)))
}

impl PostgresStore {
    pub async fn get(&self, key: &StoreKey) -> Result<Option<Record>, StoreError> {
        self.bounded(async {
            let mut client = self.client().await?;
            let stmt = client.prepare_cached(&self.shared.sql.get).await?;
            let row = client.query_opt(&stmt, &[&&key.0[..]]).await?;
            Ok(row.map(|row| read(&row, 0).map(|(record, _)| record)))
        })
        .await?
        .transpose()
    }

    /// The record with how long its row remains (`expires_at` against `now()`).
    pub async fn get_with_life(
        &self,
        key: &StoreKey,
    ) -> Result<Option<(Record, Duration)>, StoreError> {
        self.bounded(async {
            let mut client = self.client().await?;
            let stmt = client.prepare_cached(&self.shared.sql.get).await?;
            let row = client.query_opt(&stmt, &[&&key.0[..]]).await?;
            Ok(row.map(|row| {
                read(&row, 0).map(|(record, now)| {
                    let end = row.get::<_, i64>(4).max(0) as u64;
                    (record, Duration::from_millis(end.saturating_sub(now)))
                })
            }))
        })
        .await?
        .transpose()
    }

    /// The database's clock, `now()`, in unix ms.
    pub async fn clock_ms(&self) -> Result<u64, StoreError> {
        self.bounded(async {
            let mut client = self.client().await?;
            let stmt = client.prepare_cached(&self.shared.sql.clock).await?;
            let row = client.query_one(&stmt, &[]).await?;
            Ok(row.get::<_, i64>(0).max(0) as u64)
        })
        .await
    }

    pub async fn list_in_progress(
        &self,
        limit: usize,
    ) -> Result<Vec<(StoreKey, Record)>, StoreError> {
        let limit_param = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .bounded(async {
                let mut client = self.client().await?;
                let stmt = client
                    .prepare_cached(&self.shared.sql.list_in_progress)
                    .await?;
                client.query(&stmt, &[&limit_param]).await
            })
            .await?;
        let mut soonest = Soonest::new(limit);
        for row in rows {
            let key = <[u8; 32]>::try_from(row.get::<_, &[u8]>(0))
                .map_err(|_| StoreError::Corrupt("key is not 32 bytes".to_owned()))?;
            soonest.push(StoreKey(key), read(&row, 1)?.0);
        }
        Ok(soonest.finish())
    }
}
