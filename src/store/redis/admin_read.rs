//! The admin's view of one key: its record with its remaining life (`PTTL`), so
//! `keys get` shows both a lease's end and the record's own end.

use std::time::Duration;

use super::RedisStore;
use crate::store::record::decode_owned;
use crate::store::{Record, StoreError};
use crate::store_key::StoreKey;

impl RedisStore {
    /// `GET` and `PTTL` in one pipeline (one key, so one node on a Cluster).
    pub async fn get_with_life(
        &self,
        key: &StoreKey,
    ) -> Result<Option<(Record, Duration)>, StoreError> {
        let mut link = self.conn.link();
        let store_key = self.layout.store_key(key);
        let mut pipe = redis::pipe();
        pipe.cmd("GET").arg(&store_key[..]);
        pipe.cmd("PTTL").arg(&store_key[..]);
        let (bytes, pttl): (Option<Vec<u8>>, i64) = self
            .bounded(&self.conn, pipe.query_async(&mut link))
            .await?;
        let life = Duration::from_millis(u64::try_from(pttl).unwrap_or(0));
        bytes
            .map(|b| decode_owned(b.into()).map(|record| (record, life)))
            .transpose()
    }
}
