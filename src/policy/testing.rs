//! Helpers shared by the policy's unit tests.

use std::sync::Arc;

use super::Policy;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::store::{MemoryStore, Store};

/// The policy of `rules` (`[[rule]]` tables) behind a placeholder upstream,
/// compiled with new, empty tables.
pub fn compile(rules: &str) -> Policy {
    let text = format!("[server]\nupstream = \"http://127.0.0.1:1\"\n{rules}");
    let config = Config::from_toml(&text, "test.toml").unwrap_or_else(|e| panic!("{e}"));
    let store = Store::Memory(MemoryStore::new(1000));
    Policy::compile(Arc::new(config), &Metrics::new(), &store)
}
