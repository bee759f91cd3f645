//! Helpers shared by the config's unit tests: a config text's outcome as
//! `check` reports it, and the values tests compare with.

use std::time::Duration;

use super::{Config, LimitConfig, OnLimit, Rate};

pub const UPSTREAM: &str = "[server]\nupstream = \"http://127.0.0.1:3000\"\n";

pub fn valid(text: &str) -> Config {
    match Config::from_toml(text, "test.toml") {
        Ok(config) => config,
        Err(errors) => panic!("expected a valid config, got:\n{errors}"),
    }
}

/// The error lines, as `check` would print them.
pub fn errors(text: &str) -> Vec<String> {
    match Config::from_toml(text, "test.toml") {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(errors) => errors.to_string().lines().map(str::to_owned).collect(),
    }
}

pub fn only_error(text: &str) -> String {
    let mut errors = errors(text);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    errors.remove(0)
}

/// Sets `name` to `value` for this test binary. Each test uses its own
/// variable, so parallel tests never see each other's values.
pub fn set_env(name: &str, value: &str) {
    std::env::set_var(name, value);
}

/// One rule named "a" after [`UPSTREAM`]: its fields start on line 5.
pub fn rule_a(fields: &str) -> String {
    format!("{UPSTREAM}[[rule]]\nname = \"a\"\n{fields}")
}

pub fn limit(count: u64, secs: u64, capacity: u64) -> LimitConfig {
    LimitConfig {
        rate: Rate {
            count,
            period: Duration::from_secs(secs),
        },
        capacity,
        calendar: None,
    }
}

pub fn delay(secs: u64, max_queue: u64) -> OnLimit {
    OnLimit::Delay {
        max_delay: Duration::from_secs(secs),
        max_queue,
    }
}
