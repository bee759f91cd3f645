//! Arbitrary bytes as a config file: `Config::from_toml` never panics, its
//! errors and warnings keep their documented shape (every problem has a
//! position inside the file and is one line), and a config it accepts
//! compiles into a policy.
//!
//! `[identity.jwt]` makes the parser read `public_key_file`/`jwks_file` and
//! an environment variable, so this target reads (at most 1 MiB of) any
//! path the fuzzer writes; run it with stdin closed (`</dev/null`) so that
//! `/dev/stdin` cannot block it.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use sluice::config::Config;
use sluice::metrics::Metrics;
use sluice::policy::Policy;
use sluice::store::{MemoryStore, Store};

const LINE_BREAKS: [char; 2] = ['\n', '\r'];

fuzz_target!(|data: &[u8]| {
    // Operators' files are read as UTF-8 (`read_to_string`); lossy keeps
    // every input useful instead of discarding the non-UTF-8 ones.
    let text = String::from_utf8_lossy(data);
    match Config::from_toml(&text, "fuzz.toml") {
        Ok(config) => {
            for warning in &config.warnings {
                assert!(
                    !warning.contains(LINE_BREAKS),
                    "multi-line warning: {warning:?}"
                );
            }
            // What `sluice check` accepts, `sluice run` must be able to load
            // (as `Proxy::new` does).
            let store = Store::Memory(MemoryStore::new(config.store.max_keys));
            let _ = Policy::compile(Arc::new(config), &Metrics::new(), &store);
        }
        Err(errors) => {
            assert!(!errors.errors.is_empty(), "an Err without errors");
            let lines = text.split('\n').count();
            for error in &errors.errors {
                assert!(
                    (1..=lines).contains(&error.line),
                    "line {} outside 1..={lines}: {error}",
                    error.line
                );
                assert!(error.column >= 1, "column 0: {error}");
                assert!(!error.message.is_empty(), "empty message at {error}");
                assert!(
                    !error.message.contains(LINE_BREAKS) && !error.path.contains(LINE_BREAKS),
                    "multi-line error: {error:?}"
                );
            }
            let _ = errors.to_string();
        }
    }
});
