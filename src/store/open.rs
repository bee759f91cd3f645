//! The store a config asks for, opened: the memory store, or the Redis
//! store (strict or hybrid mode) with its link started. What the proxy does
//! when the store fails (`on_error`) comes with it.

use std::sync::Arc;

use super::redis::{Access, Password};
use super::{HybridStore, MemoryStore, OnError, RedisSettings, RedisStore, Store};
use crate::clock::ProxyClock;
use crate::config::{RedisMode, StoreBackend, StoreConfig};

/// Opens the store `config` describes; a hybrid store's sync reads `clock`.
/// A Redis store that cannot be built (`check` validated its URLs as the
/// client reads them, so this is rare) leaves the memory store deciding
/// alone, said loudly.
pub fn open(config: &StoreConfig, clock: &ProxyClock) -> (Store, OnError) {
    let max_keys = config.max_keys;
    let redis = match &config.backend {
        StoreBackend::Memory => return (Store::Memory(MemoryStore::new(max_keys)), OnError::Local),
        StoreBackend::Redis(redis) => redis,
    };
    let memory = || (Store::Memory(MemoryStore::new(max_keys)), OnError::Local);
    // `check` saw the variable set; a process that lost it since says so.
    let password = match redis.password_env.as_deref().map(Password::from_env) {
        None => None,
        Some(Ok(password)) => Some(password),
        Some(Err(error)) => {
            tracing::error!(%error, "the Redis store cannot be used (password_env); deciding in memory");
            return memory();
        }
    };
    let settings = RedisSettings {
        urls: redis.urls.clone(),
        access: Access {
            password,
            ca: redis.ca.clone(),
        },
        cluster: redis.cluster,
        timeout: redis.timeout,
        prefix: "sluice".into(),
        instances: redis.instances,
        settle_retry_for: redis.settle_retry_for,
    };
    let opened = match redis.mode {
        RedisMode::Strict => RedisStore::new(settings, max_keys).map(|store| {
            store.start(clock.clone());
            store.mirror_bans(clock.clone());
            Store::Redis(store)
        }),
        RedisMode::Hybrid { sync_interval } => HybridStore::new(settings, max_keys, sync_interval)
            .map(|store| {
                let store = Arc::new(store);
                store.start(clock.clone());
                Store::Hybrid(store)
            }),
    };
    match opened {
        Ok(store) => (store, redis.on_error),
        Err(error) => {
            tracing::error!(%error, "the Redis store cannot be used; deciding in memory");
            memory()
        }
    }
}
