//! A running proxy's policy replaced: by a reload of the config, or by the
//! key seed the instances sharing a store agree on. Each compiles against
//! the policy it replaces, one at a time, and is published whole: requests
//! in flight finish under the snapshot they started with.

use std::sync::Arc;

use super::Proxy;
use crate::clock::Clock;
use crate::config::Config;
use crate::policy::Policy;

impl Proxy {
    /// Replaces the policy with one compiled from `config`, atomically:
    /// requests in flight finish under the policy they started with. Rules
    /// whose name, key and algorithm are unchanged keep their buckets (a
    /// changed limit carries them over as the rule's `on_change` says).
    /// `config` must be valid; settings that only take effect at start
    /// (listen addresses, workers, ...) are returned, named, and not applied.
    /// Rebuilding may walk every bucket of a changed limit, so call it off
    /// the async workers (`spawn_blocking`).
    pub fn reload(&self, config: Config) -> Vec<&'static str> {
        let shared = &*self.shared;
        let _serialised = self.recompiling();
        let old = self.policy();
        let mut config = config;
        let ignored = crate::config::keep_startup_settings(&old.config, &mut config);
        shared.publish_routes(shared.upstreams.reload(&config.upstreams));
        // Opened (again) before requests see the new policy: a file renamed
        // by logrotate is written anew from here.
        shared.access_log.configure(&config.server.access_log);
        let tracer = shared.tracer(&config, shared.current.load().tracer.as_deref());
        let server = &config.server;
        shared
            .persisted_queries
            .serve(server.max_persisted_queries, &server.persisted_queries);
        let policy = Policy::recompile(
            Arc::new(config),
            &shared.metrics,
            &shared.store,
            Some(&old),
            shared.clock.now(),
        );
        shared.publish_policy(Arc::new(policy), tracer);
        shared.metrics.config_reloads_ok.inc();
        ignored
    }

    /// Derives bucket keys with `seed` from now on, the seed the instances
    /// sharing a store agree on: the policy is compiled again with fresh
    /// in-memory tables (a shared store keeps its buckets by name, so only
    /// the local fallback's counts start over). Nothing happens when the
    /// policy already uses it.
    pub fn reseed(&self, seed: crate::store::Seed) {
        let shared = &*self.shared;
        let _serialised = self.recompiling();
        let old = self.policy();
        if old.keys.seed() == Some(seed) {
            return;
        }
        let keys = crate::key::KeyHasher::with_seed(seed, old.config.server.ipv6_prefix);
        let policy = Policy::compile_with_keys(
            Arc::clone(&old.config),
            &shared.metrics,
            &shared.store,
            keys,
        );
        let tracer = shared.current.load().tracer.clone();
        shared.publish_policy(Arc::new(policy), tracer);
        tracing::info!("bucket keys derived with the seed the instances share");
    }

    /// The shared store's key seeds as they arrive (`None` for the memory
    /// store).
    pub fn store_seeds(&self) -> Option<tokio::sync::watch::Receiver<Option<crate::store::Seed>>> {
        self.shared.store.link().map(|link| link.seeds())
    }

    /// Counts a reload refused because the new config was invalid.
    pub fn reload_failed(&self) {
        self.shared.metrics.config_reloads_error.inc();
    }

    /// Opens the access log again where it is, as every reload does (a
    /// refused one too: logrotate's SIGHUP must not leave it writing to
    /// the renamed file). Blocks briefly: call it off the async workers.
    pub fn reopen_access_log(&self) {
        let running = self.policy();
        self.shared
            .access_log
            .configure(&running.config.server.access_log);
    }

    /// Serialises reloads and reseeds: each compiles against the policy it
    /// replaces.
    fn recompiling(&self) -> std::sync::MutexGuard<'_, ()> {
        self.shared
            .reloading
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
