//! Arbitrary bytes as a config file: `Config::from_toml` never panics, its
//! errors keep their documented shape (every problem has a position and a
//! one-line message), and a config it accepts compiles into a policy.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use sluice::config::Config;
use sluice::metrics::Metrics;
use sluice::policy::Policy;

fuzz_target!(|data: &[u8]| {
    // Operators' files are read as UTF-8 (`read_to_string`); lossy keeps
    // every input useful instead of discarding the non-UTF-8 ones.
    let text = String::from_utf8_lossy(data);
    match Config::from_toml(&text, "fuzz.toml") {
        Ok(config) => {
            // What `sluice check` accepts, `sluice run` must be able to load.
            let _ = Policy::compile(Arc::new(config), &Metrics::new());
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
                    !error.message.contains('\n'),
                    "multi-line message: {error:?}"
                );
            }
            let _ = errors.to_string();
        }
    }
});
