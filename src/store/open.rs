//! The store a config asks for, opened: the memory store, or the Redis
//! store with its link started. What the proxy does when the store fails
//! (`on_error`) comes with it.

use super::{MemoryStore, OnError, RedisSettings, RedisStore, Store};
use crate::config::{StoreBackend, StoreConfig};

/// Opens the store `config` describes. A Redis store that cannot be built
/// (`check` validated its URLs as the client reads them, so this is rare)
/// leaves the memory store deciding alone, said loudly.
pub fn open(config: &StoreConfig) -> (Store, OnError) {
    let max_keys = config.max_keys;
    let redis = match &config.backend {
        StoreBackend::Memory => return (Store::Memory(MemoryStore::new(max_keys)), OnError::Local),
        StoreBackend::Redis(redis) => redis,
    };
    let settings = RedisSettings {
        urls: redis.urls.clone(),
        cluster: redis.cluster,
        timeout: redis.timeout,
        prefix: "sluice".into(),
        instances: redis.instances,
    };
    match RedisStore::new(settings, max_keys) {
        Ok(store) => {
            store.start();
            (Store::Redis(store), redis.on_error)
        }
        Err(error) => {
            tracing::error!(%error, "the Redis store cannot be used; deciding in memory");
            (Store::Memory(MemoryStore::new(max_keys)), OnError::Local)
        }
    }
}
