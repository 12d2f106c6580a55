//! Redis standalone backend.

use std::time::Duration;

use super::{Record, Reserve, StoreError, Token, Watch};
use crate::key::StoreKey;

#[derive(Clone)]
pub struct RedisStore {
    _private: (),
}

impl RedisStore {
    pub async fn reserve(
        &self,
        key: &StoreKey,
        record: &Record,
        lease: Duration,
    ) -> Result<Reserve, StoreError> {
        let _ = (key, record, lease);
        unimplemented!()
    }

    pub async fn replace_if_owner(
        &self,
        key: &StoreKey,
        owner: &Token,
        record: &Record,
        ttl: Duration,
        notify: bool,
    ) -> Result<bool, StoreError> {
        let _ = (key, owner, record, ttl, notify);
        unimplemented!()
    }

    pub async fn release_if_owner(
        &self,
        key: &StoreKey,
        owner: &Token,
    ) -> Result<bool, StoreError> {
        let _ = (key, owner);
        unimplemented!()
    }

    pub async fn get(&self, key: &StoreKey) -> Result<Option<Record>, StoreError> {
        let _ = key;
        unimplemented!()
    }

    pub async fn delete(&self, key: &StoreKey) -> Result<bool, StoreError> {
        let _ = key;
        unimplemented!()
    }

    pub fn watch(&self, key: &StoreKey) -> Watch {
        let _ = key;
        unimplemented!()
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        unimplemented!()
    }
}
