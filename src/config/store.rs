//! `[store]` and `[store.redis]`: where bucket state lives.

use std::borrow::Cow;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use toml::Spanned;

use super::raw::{RawConfig, RawRedis, Start};
use super::validate::{non_empty, Validator};
use super::{OnError, RedisConfig, RedisMode, StoreBackend, StoreConfig};

/// The shortest `sync_interval`: below it a sync's own round trip is most
/// of the interval.
const MIN_SYNC_INTERVAL: Duration = Duration::from_millis(5);
/// The longest `sync_interval`: the overshoot grows with it (one
/// interval's traffic, two at worst), and fresh keys wait up to one
/// interval for their full budget.
const MAX_SYNC_INTERVAL: Duration = Duration::from_secs(10);
/// The bounds of `settle_retry_for`: a second rides out no restart or
/// failover; past a day, settlements would wait in memory (and their
/// markers in Redis) for an outage no operator leaves unattended.
const MIN_SETTLE_RETRY: Duration = Duration::from_secs(1);
const MAX_SETTLE_RETRY: Duration = Duration::from_secs(24 * 3600);

impl Validator<'_> {
    pub(super) fn store(&mut self, raw: &RawConfig) -> StoreConfig {
        let store = raw.store.as_ref();
        let redis = store.and_then(|s| s.redis.as_ref());
        let mut backend = StoreBackend::Memory;
        if let Some(field) = store.and_then(|s| s.backend.as_ref()) {
            match field.get_ref().as_str() {
                "memory" => {}
                "redis" => {
                    backend =
                        StoreBackend::Redis(self.redis(redis.unwrap_or(&RawRedis::default()), true))
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
            // so that switching the backend does not reveal old mistakes
            // (the password's variable excepted: it is the environment's,
            // not the file's).
            self.redis(redis, false);
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
    /// `[store.redis]`; `in_use` when the backend is Redis.
    fn redis(&mut self, raw: &RawRedis, in_use: bool) -> RedisConfig {
        // As [server]'s: each reader takes `raw.<key>`, named `store.redis.<key>`.
        macro_rules! read {
            ($how:ident, $key:ident, $($arg:expr),+) => {
                self.$how(raw.$key.as_ref(), concat!("store.redis.", stringify!($key)), $($arg),+)
            };
        }
        // Checked in either mode, so that switching modes reveals no old
        // mistake.
        let sync_interval = self.timeout_within(
            raw.sync_interval.as_ref(),
            "store.redis.sync_interval",
            Duration::from_millis(50),
            MIN_SYNC_INTERVAL..=MAX_SYNC_INTERVAL,
            "sync_interval must be between 5ms and 10s: the overshoot a fleet allows grows \
             with it (one interval's traffic, two at worst)",
        );
        let settle_retry_for = self.timeout_within(
            raw.settle_retry_for.as_ref(),
            "store.redis.settle_retry_for",
            Duration::from_secs(600),
            MIN_SETTLE_RETRY..=MAX_SETTLE_RETRY,
            "settle_retry_for must be between 1s and 24h: how long a charge or a give-back \
             Redis does not take is kept and retried",
        );
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
        let (urls, urls_at, urls_path) = self.redis_urls(raw, cluster);
        let over_tls = urls.iter().filter(|url| is_tls(url)).count();
        if over_tls != 0 && over_tls != urls.len() {
            self.error(
                urls_at,
                urls_path,
                "some nodes are rediss:// (TLS) and others are not: a Cluster's nodes all speak \
                 TLS or none does",
            );
        }
        let ca = non_empty(&raw.ca).map(|field| self.redis_ca(field, over_tls));
        let password_env = non_empty(&raw.password_env)
            .map(|field| self.password_env(field, in_use, &urls, urls_path));
        RedisConfig {
            mode,
            urls,
            cluster,
            timeout: read!(timeout, timeout, Duration::from_millis(20)),
            on_error: read!(
                choice,
                on_error,
                &[
                    ("local", OnError::Local),
                    ("allow", OnError::Allow),
                    ("deny", OnError::Deny),
                ],
                OnError::Local
            ),
            settle_retry_for,
            instances: read!(int, instances, 0, 0..=1_000_000),
            password_env,
            ca,
        }
    }

    /// A duration that must lie in `range` (else `why`, where written).
    fn timeout_within(
        &mut self,
        field: Option<&Spanned<String>>,
        path: &str,
        default: Duration,
        range: RangeInclusive<Duration>,
        why: &str,
    ) -> Duration {
        let duration = self.timeout(field, path, default);
        if let Some(field) = field.filter(|_| !range.contains(&duration)) {
            self.error(field.span().start, path, why);
        }
        duration
    }

    /// `url` or `urls` (the nodes of a cluster), with where they are
    /// written and as what, for errors about them all.
    fn redis_urls(&mut self, raw: &RawRedis, cluster: bool) -> (Vec<String>, usize, &'static str) {
        let urls = self.list(raw.urls.as_ref(), "store.redis.urls", |url| {
            redis_url(url).map(|()| url.to_owned())
        });
        let problem = match (&raw.urls, &raw.url) {
            (Some(_), _) if !cluster => {
                "urls names the nodes of a Redis Cluster: set cluster = true, or use url"
            }
            (Some(_), Some(_)) => {
                "write the cluster's nodes in urls, or one of them in url, not both"
            }
            _ => "",
        };
        if !problem.is_empty() {
            self.error(raw.urls.start_or(0), "store.redis.urls", problem);
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
        let (urls_at, urls_path) = match (&raw.url, &raw.urls) {
            (Some(url), _) => (url.span().start, "store.redis.url"),
            (None, Some(urls)) => (urls.span().start, "store.redis.urls"),
            (None, None) => (0, "store.redis.url"),
        };
        (urls, urls_at, urls_path)
    }

    /// `ca`: roots that verify rediss:// servers (`over_tls` of the URLs).
    fn redis_ca(&mut self, field: &Spanned<String>, over_tls: usize) -> PathBuf {
        let path = self.file_path(field.get_ref());
        let read = crate::tls::read_roots(Some(&path)).and_then(|_| match over_tls {
            // An error, not a warning: whoever names a CA means the
            // link to be verified TLS, and it would go in clear.
            0 => Err(
                "ca verifies rediss:// servers, and no URL here is rediss://: the \
                      connection (and any password) would go in clear; write \
                      rediss://host:port"
                    .to_owned(),
            ),
            _ => Ok(()),
        });
        self.ok(field.span().start, "store.redis.ca", read);
        path
    }

    /// `password_env`: a variable that, when the store is `in_use`, holds
    /// the password; a password in the URLs is then not used.
    fn password_env(
        &mut self,
        field: &Spanned<String>,
        in_use: bool,
        urls: &[String],
        urls_path: &str,
    ) -> String {
        let name = field.get_ref();
        let at = field.span().start;
        let path = "store.redis.password_env";
        let problem = match std::env::var_os(name) {
            _ if !in_use => None,
            None => Some("is not set; it must hold the password sluice gives Redis (AUTH)"),
            Some(value) if value.is_empty() => Some("is empty; it must hold the Redis password"),
            Some(value) if value.to_str().is_none() => Some("is not UTF-8 text"),
            Some(_) => None,
        };
        if let Some(problem) = problem {
            self.error(
                at,
                path,
                format!("the environment variable {name} {problem}"),
            );
        }
        if urls.iter().any(|url| url_has_password(url)) {
            self.warn(
                at,
                path,
                format_args!(
                    "the password in {urls_path} is not used: the one in {name} is; \
                         remove it from the file"
                ),
            );
        }
        name.clone()
    }
}

/// `[store.redis] url` when none is written.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// `url` as it may be shown (by `check`, in a config error, in a log, in
/// an error message): a password in it, or user information without one
/// (a lone word before `@` may be a password written without its colon),
/// replaced by `***`, and so is a `pass=` in its query (where `unix://`
/// URLs carry it). The one place a Redis URL is masked
/// (docs/edge.md, "Managed Redis: TLS and AUTH").
pub fn shown_redis_url(url: &str) -> Cow<'_, str> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.into();
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    let user = authority
        .rfind('@')
        .map(|at| (&authority[..at], &authority[at + 1..]));
    let query = tail
        .find('?')
        .map(|start| start + 1..tail.find('#').unwrap_or(tail.len()));
    let query_has_password = query
        .clone()
        .is_some_and(|query| tail[query].split('&').any(|pair| pair.starts_with("pass=")));
    if user.is_none() && !query_has_password {
        return url.into();
    }
    let mut shown = format!("{scheme}://");
    match user {
        Some((info, host)) => {
            match info.split_once(':') {
                Some((name, _password)) => shown.extend([name, ":***@"]),
                None => shown.push_str("***@"),
            }
            shown.push_str(host);
        }
        None => shown.push_str(authority),
    }
    match query.filter(|_| query_has_password) {
        Some(query) => {
            shown.push_str(&tail[..query.start]);
            for (index, pair) in tail[query.clone()].split('&').enumerate() {
                if index > 0 {
                    shown.push('&');
                }
                shown.push_str(if pair.starts_with("pass=") {
                    "pass=***"
                } else {
                    pair
                });
            }
            shown.push_str(&tail[query.end..]);
        }
        None => shown.push_str(tail),
    }
    shown.into()
}

/// Whether `url` speaks TLS (`rediss://`).
fn is_tls(url: &str) -> bool {
    url.starts_with("rediss://")
}

/// Whether `url` carries a password (`user:password@`, or `pass=` in a
/// `unix://` URL's query); a lone user name does not.
fn url_has_password(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    let in_user_info = authority
        .rfind('@')
        .is_some_and(|at| authority[..at].contains(':'));
    let in_query = tail.split_once('?').is_some_and(|(_, query)| {
        query
            .split(['&', '#'])
            .any(|pair| pair.starts_with("pass="))
    });
    in_user_info || in_query
}

/// Checks a Redis URL the way the client will read it.
fn redis_url(url: &str) -> Result<(), String> {
    let shown = shown_redis_url(url);
    if !["redis://", "rediss://", "unix://"]
        .iter()
        .any(|scheme| url.starts_with(scheme))
    {
        return Err(format!(
            "\"{shown}\" is not a Redis URL; use redis://host:port[/db], rediss://host:port[/db] \
             (TLS) or unix:///path"
        ));
    }
    if url.contains('#') {
        // The client reads `#insecure` as "do not verify the server": there
        // is no such switch here.
        return Err(format!(
            "\"{shown}\" has a fragment (#...); a rediss:// server is always verified, against \
             ca or the system's roots"
        ));
    }
    let parsed = url
        .parse::<http::Uri>()
        .map_err(|error| format!("\"{shown}\" is not a valid URL: {error}"))?;
    if !url.starts_with("unix://") && parsed.host().is_none_or(str::is_empty) {
        return Err(format!("\"{shown}\" names no host"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::shown_redis_url;
    use crate::config::testing::{errors, set_env, valid, UPSTREAM};
    use crate::config::StoreBackend;

    #[test]
    fn a_redis_urls_password_is_never_shown() {
        for (url, shown) in [
            ("redis://cache:6380/1", "redis://cache:6380/1"),
            ("redis://u:pw@cache:6380/1", "redis://u:***@cache:6380/1"),
            ("rediss://u:pw@cache:6380", "rediss://u:***@cache:6380"),
            (
                "rediss://default:pw@cache.example.com:6380/0",
                "rediss://default:***@cache.example.com:6380/0",
            ),
            ("redis://:pw@cache", "redis://:***@cache"),
            ("redis://pw@cache", "redis://***@cache"),
            ("redis://u:p@w@cache/0?x=@", "redis://u:***@cache/0?x=@"),
            ("unix:///run/redis.sock", "unix:///run/redis.sock"),
            (
                "unix:///run/redis.sock?user=u&pass=pw&db=1",
                "unix:///run/redis.sock?user=u&pass=***&db=1",
            ),
            (
                "unix:///run/redis.sock?pass=pw#x",
                "unix:///run/redis.sock?pass=***#x",
            ),
            (
                "redis://cache:6380/1?protocol=resp3",
                "redis://cache:6380/1?protocol=resp3",
            ),
            ("not a url", "not a url"),
        ] {
            assert_eq!(shown_redis_url(url), shown, "{url}");
        }
    }

    /// A config on the Redis store with `redis` as its `[store.redis]`.
    fn on_redis(redis: &str) -> String {
        format!(
            "{UPSTREAM}[store]\nbackend = \"redis\"\n[store.redis]\n{redis}\
             [[rule]]\nname = \"a\"\nrate = \"1/s\"\n"
        )
    }

    fn redis_of(text: &str) -> crate::config::RedisConfig {
        match valid(text).store.backend {
            StoreBackend::Redis(redis) => redis,
            other => panic!("{other:?}"),
        }
    }

    /// A PEM file of a CA made for the test, in a directory of its own.
    fn ca_file(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("sluice-redis-ca-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cert = rcgen::generate_simple_self_signed(vec!["ca.test".to_owned()]).unwrap();
        let path = dir.join("ca.pem");
        std::fs::write(&path, cert.cert.pem()).unwrap();
        path
    }

    #[test]
    fn rediss_urls_are_read_with_their_ca() {
        let ca = ca_file("good");
        let redis = redis_of(&on_redis(&format!(
            "url = \"rediss://default@cache.example.com:6380\"\nca = \"{}\"\n",
            ca.display()
        )));
        assert_eq!(redis.urls, ["rediss://default@cache.example.com:6380"]);
        assert_eq!(redis.ca.as_deref(), Some(ca.as_path()));
        // No ca: the system's roots.
        let redis = redis_of(&on_redis(
            "cluster = true\nurls = [\"rediss://10.0.0.1:7000\", \"rediss://10.0.0.2:7000\"]\n",
        ));
        assert_eq!(redis.ca, None);
        assert_eq!(redis.urls.len(), 2);
    }

    #[test]
    fn a_ca_that_does_not_load_or_verifies_nothing_is_an_error_where_written() {
        let missing = "/nonexistent/sluice/ca.pem";
        let lines = errors(&on_redis(&format!(
            "url = \"rediss://cache:6380\"\nca = \"{missing}\"\n"
        )));
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(
            lines[0].starts_with(&format!(
                "test.toml:7:6: store.redis.ca: cannot read {missing}"
            )),
            "{lines:#?}"
        );
        let not_pem = ca_file("not-pem").with_file_name("not.pem");
        std::fs::write(&not_pem, "not a certificate\n").unwrap();
        let lines = errors(&on_redis(&format!(
            "url = \"rediss://cache:6380\"\nca = \"{}\"\n",
            not_pem.display()
        )));
        assert_eq!(
            lines,
            [format!(
                "test.toml:7:6: store.redis.ca: {} holds no PEM certificate",
                not_pem.display()
            )]
        );
        // A CA beside a URL in clear: the operator meant TLS.
        let ca = ca_file("clear");
        let lines = errors(&on_redis(&format!(
            "url = \"redis://cache:6379\"\nca = \"{}\"\n",
            ca.display()
        )));
        assert_eq!(
            lines,
            [
                "test.toml:7:6: store.redis.ca: ca verifies rediss:// servers, and no URL here is \
              rediss://: the connection (and any password) would go in clear; write \
              rediss://host:port"
            ]
        );
    }

    #[test]
    fn verification_cannot_be_turned_off_and_nodes_agree_on_tls() {
        let lines = errors(&on_redis(
            "url = \"rediss://u:secret@cache:6380/#insecure\"\n",
        ));
        assert_eq!(
            lines,
            [
                "test.toml:6:7: store.redis.url: \"rediss://u:***@cache:6380/#insecure\" has a \
              fragment (#...); a rediss:// server is always verified, against ca or the \
              system's roots"
            ]
        );
        let lines = errors(&on_redis(
            "cluster = true\nurls = [\"rediss://a:7000\", \"redis://b:7000\"]\n",
        ));
        assert_eq!(
            lines,
            [
                "test.toml:7:8: store.redis.urls: some nodes are rediss:// (TLS) and others are \
              not: a Cluster's nodes all speak TLS or none does"
            ]
        );
        let lines = errors(&on_redis("url = \"valkeys://cache:6380\"\n"));
        assert_eq!(
            lines,
            [
                "test.toml:6:7: store.redis.url: \"valkeys://cache:6380\" is not a Redis URL; use \
              redis://host:port[/db], rediss://host:port[/db] (TLS) or unix:///path"
            ]
        );
    }

    #[test]
    fn password_env_must_name_a_set_variable_when_redis_is_the_store() {
        set_env("SLUICE_TEST_REDIS_PASSWORD_SET", "hunter2-redis");
        let redis = redis_of(&on_redis(
            "url = \"rediss://default@cache:6380\"\npassword_env = \"SLUICE_TEST_REDIS_PASSWORD_SET\"\n",
        ));
        assert_eq!(
            redis.password_env.as_deref(),
            Some("SLUICE_TEST_REDIS_PASSWORD_SET")
        );
        let lines = errors(&on_redis(
            "url = \"rediss://cache:6380\"\npassword_env = \"SLUICE_TEST_REDIS_PASSWORD_NEVER_SET\"\n",
        ));
        assert_eq!(
            lines,
            [
                "test.toml:7:16: store.redis.password_env: the environment variable \
              SLUICE_TEST_REDIS_PASSWORD_NEVER_SET is not set; it must hold the password \
              sluice gives Redis (AUTH)"
            ]
        );
        set_env("SLUICE_TEST_REDIS_PASSWORD_EMPTY", "");
        let lines = errors(&on_redis(
            "url = \"rediss://cache:6380\"\npassword_env = \"SLUICE_TEST_REDIS_PASSWORD_EMPTY\"\n",
        ));
        assert_eq!(
            lines,
            [
                "test.toml:7:16: store.redis.password_env: the environment variable \
              SLUICE_TEST_REDIS_PASSWORD_EMPTY is empty; it must hold the Redis password"
            ]
        );
        // The memory store does not need the variable: switching the
        // backend to test locally needs no secret.
        let config = valid(&format!(
            "{UPSTREAM}[store.redis]\nurl = \"rediss://cache:6380\"\n\
             password_env = \"SLUICE_TEST_REDIS_PASSWORD_NEVER_SET\"\n"
        ));
        assert_eq!(config.store.backend, StoreBackend::Memory);
    }

    #[test]
    fn password_env_wins_over_a_urls_password_and_says_so() {
        set_env("SLUICE_TEST_REDIS_PASSWORD_BOTH", "from-the-environment");
        let config = valid(&on_redis(
            "url = \"rediss://u:in-the-file@cache:6380\"\npassword_env = \"SLUICE_TEST_REDIS_PASSWORD_BOTH\"\n",
        ));
        assert_eq!(
            config.warnings,
            [
                "test.toml:7:16: store.redis.password_env: the password in store.redis.url is not \
              used: the one in SLUICE_TEST_REDIS_PASSWORD_BOTH is; remove it from the file"
            ]
        );
        // A user name alone is what password_env wants beside it.
        let config = valid(&on_redis(
            "url = \"rediss://u@cache:6380\"\npassword_env = \"SLUICE_TEST_REDIS_PASSWORD_BOTH\"\n",
        ));
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    }

    #[test]
    fn settle_retry_for_is_ten_minutes_unless_set_within_a_second_and_a_day() {
        assert_eq!(
            redis_of(&on_redis("")).settle_retry_for,
            std::time::Duration::from_secs(600)
        );
        assert_eq!(
            redis_of(&on_redis("settle_retry_for = \"90s\"\n")).settle_retry_for,
            std::time::Duration::from_secs(90)
        );
        let out_of_bounds = "settle_retry_for must be between 1s and 24h: how long a charge or a \
                             give-back Redis does not take is kept and retried";
        for (written, error) in [
            ("\"2d\"", out_of_bounds.to_owned()),
            ("\"500ms\"", out_of_bounds.to_owned()),
            (
                "\"0s\"",
                "must be longer than zero (default \"600s\")".to_owned(),
            ),
        ] {
            let lines = errors(&on_redis(&format!("settle_retry_for = {written}\n")));
            assert_eq!(
                lines,
                [format!(
                    "test.toml:6:20: store.redis.settle_retry_for: {error}"
                )],
                "{written}"
            );
        }
        let lines = errors(&on_redis("settle_retry_for = \"soon\"\n"));
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(
            lines[0].starts_with("test.toml:6:20: store.redis.settle_retry_for: "),
            "{lines:#?}"
        );
    }

    #[test]
    fn a_redis_configs_debug_masks_its_passwords() {
        let redis = redis_of(&on_redis("url = \"rediss://u:in-the-file@cache:6380\"\n"));
        let shown = format!("{redis:?}");
        assert!(!shown.contains("in-the-file"), "{shown}");
        assert!(shown.contains("rediss://u:***@cache:6380"), "{shown}");
    }
}
