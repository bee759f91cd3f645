//! `[store]` and `[store.redis]`: where bucket state lives.

use std::borrow::Cow;
use std::time::Duration;

use super::raw::{RawConfig, RawRedis};
use super::validate::Validator;
use super::{OnError, RedisConfig, RedisMode, StoreBackend, StoreConfig};

/// The shortest `sync_interval`: below it a sync's own round trip is most
/// of the interval.
const MIN_SYNC_INTERVAL: Duration = Duration::from_millis(5);
/// The longest `sync_interval`: the overshoot grows with it (one
/// interval's traffic, two at worst), and fresh keys wait up to one
/// interval for their full budget.
const MAX_SYNC_INTERVAL: Duration = Duration::from_secs(10);

impl Validator<'_> {
    pub(super) fn store(&mut self, raw: &RawConfig) -> StoreConfig {
        let store = raw.store.as_ref();
        let redis = store.and_then(|s| s.redis.as_ref());
        let mut backend = StoreBackend::Memory;
        if let Some(field) = store.and_then(|s| s.backend.as_ref()) {
            match field.get_ref().as_str() {
                "memory" => {}
                "redis" => {
                    backend = StoreBackend::Redis(self.redis(redis.unwrap_or(&RawRedis::default())))
                }
                other => self.error(
                    field.span().start,
                    "store.backend",
                    format!("unknown backend \"{other}\"; allowed: \"memory\", \"redis\""),
                ),
            }
        }
        if let (StoreBackend::Memory, Some(redis)) = (&backend, redis) {
            // Settings for a store that is not used: validated all the same,
            // so that switching the backend does not reveal old mistakes.
            self.redis(redis);
        }
        let max_keys = self.int(
            store.and_then(|s| s.max_keys.as_ref()),
            "store.max_keys",
            1_000_000,
            1..=i64::MAX as u64,
        );
        StoreConfig {
            backend,
            max_keys: usize::try_from(max_keys).unwrap_or(usize::MAX),
        }
    }
    /// `[store.redis]`.
    fn redis(&mut self, raw: &RawRedis) -> RedisConfig {
        // Checked in either mode, so that switching modes reveals no old
        // mistake.
        let sync_interval = self.timeout(
            raw.sync_interval.as_ref(),
            "store.redis.sync_interval",
            Duration::from_millis(50),
        );
        if let Some(field) = &raw.sync_interval {
            if !(MIN_SYNC_INTERVAL..=MAX_SYNC_INTERVAL).contains(&sync_interval) {
                self.error(
                    field.span().start,
                    "store.redis.sync_interval",
                    "sync_interval must be between 5ms and 10s: the overshoot a fleet allows \
                     grows with it (one interval's traffic, two at worst)",
                );
            }
        }
        let mut mode = RedisMode::Strict;
        if let Some(field) = &raw.mode {
            match field.get_ref().as_str() {
                "strict" => {}
                "hybrid" => mode = RedisMode::Hybrid { sync_interval },
                other => self.error(
                    field.span().start,
                    "store.redis.mode",
                    format!("\"{other}\" is not allowed; use \"strict\" or \"hybrid\""),
                ),
            }
        }
        let cluster = raw.cluster.as_ref().is_some_and(|c| *c.get_ref());
        let urls = self.list(raw.urls.as_ref(), "store.redis.urls", |url| {
            redis_url(url).map(|()| url.to_owned())
        });
        if let Some(field) = &raw.urls {
            if !cluster {
                self.error(
                    field.span().start,
                    "store.redis.urls",
                    "urls names the nodes of a Redis Cluster: set cluster = true, or use url",
                );
            } else if raw.url.is_some() {
                self.error(
                    field.span().start,
                    "store.redis.urls",
                    "write the cluster's nodes in urls, or one of them in url, not both",
                );
            }
        }
        let urls = match &raw.url {
            Some(url) => {
                if let Err(error) = redis_url(url.get_ref()) {
                    self.error(url.span().start, "store.redis.url", error);
                }
                vec![url.get_ref().clone()]
            }
            None if urls.is_empty() => vec![DEFAULT_REDIS_URL.to_owned()],
            None => urls,
        };
        RedisConfig {
            mode,
            urls,
            cluster,
            timeout: self.timeout(
                raw.timeout.as_ref(),
                "store.redis.timeout",
                Duration::from_millis(20),
            ),
            on_error: self.choice(
                raw.on_error.as_ref(),
                "store.redis.on_error",
                &[
                    ("local", OnError::Local),
                    ("allow", OnError::Allow),
                    ("deny", OnError::Deny),
                ],
                OnError::Local,
            ),
            instances: self.int(
                raw.instances.as_ref(),
                "store.redis.instances",
                0,
                0..=1_000_000,
            ),
            password_env: raw
                .password_env
                .as_ref()
                .map(|name| name.get_ref().clone())
                .filter(|name| !name.is_empty()),
            ca: raw
                .ca
                .as_ref()
                .filter(|ca| !ca.get_ref().is_empty())
                .map(|ca| self.file_path(ca.get_ref())),
        }
    }
}

/// `[store.redis] url` when none is written.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// `url` as it may be shown (by `check`, in a config error, in a log): a
/// password in it, or user information without one, replaced by `***`
/// (docs/operations.md, "Keys in logs and admin views").
pub fn shown_redis_url(url: &str) -> Cow<'_, str> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.into();
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let Some(at) = authority.rfind('@') else {
        return url.into();
    };
    let host = &rest[at + 1..];
    match authority[..at].split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}").into(),
        None => format!("{scheme}://***@{host}").into(),
    }
}

/// Checks a Redis URL the way the client will read it.
fn redis_url(url: &str) -> Result<(), String> {
    let shown = shown_redis_url(url);
    if !(url.starts_with("redis://") || url.starts_with("unix://")) {
        return Err(format!(
            "\"{shown}\" is not a Redis URL; use redis://host:port[/db] (TLS is not supported)"
        ));
    }
    let parsed = url
        .parse::<http::Uri>()
        .map_err(|error| format!("\"{shown}\" is not a valid URL: {error}"))?;
    if url.starts_with("redis://") && parsed.host().is_none_or(str::is_empty) {
        return Err(format!("\"{shown}\" names no host"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::shown_redis_url;

    #[test]
    fn a_redis_urls_password_is_never_shown() {
        for (url, shown) in [
            ("redis://cache:6380/1", "redis://cache:6380/1"),
            ("redis://u:pw@cache:6380/1", "redis://u:***@cache:6380/1"),
            ("redis://:pw@cache", "redis://:***@cache"),
            ("redis://pw@cache", "redis://***@cache"),
            ("redis://u:p@w@cache/0?x=@", "redis://u:***@cache/0?x=@"),
            ("unix:///run/redis.sock", "unix:///run/redis.sock"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(shown_redis_url(url), shown, "{url}");
        }
    }
}
