//! Validation: the [`raw`](super::raw) structs as written → the domain types
//! of [`config`](super), with the defaults `config/sluice.toml` documents filled in.
//!
//! Owns the rule that every problem is found in one pass: each check records
//! its error ([`ConfigErrors`]) with the key's path (`rule[2].burst`), line
//! and column, and carries on with a placeholder value; only when nothing
//! was recorded is a [`Config`] returned. Non-fatal findings go to
//! [`Config::warnings`]. This file holds the pass itself ([`Validator`]) and
//! the readers of plain values (numbers, durations, choices, lists); the
//! checks of each part of the file are methods of [`Validator`] in the
//! sibling files: `server` (`[server]`, `[admin]`, `[store]`, `[response]`,
//! `[access]`), `identity` (`[identity.jwt]`), `rules` (one `[[rule]]`),
//! `matching`, `keys`, `limits`, `on_limit`, `variants` (tiers and
//! overrides), `sunset` and `ban`. Nothing here knows about requests, and
//! only `[identity.jwt]` reads outside the text: its key material (an
//! environment variable or a key file) is loaded and checked there, so a bad
//! key is a config error with a position.

use std::borrow::Cow;
use std::fmt;
use std::net::SocketAddr;
use std::ops::{Range, RangeInclusive};
use std::time::Duration;

use toml::Spanned;

use super::errors::{ConfigError, ConfigErrors};
use super::raw::{OneOrMany, RawConfig, Start};
use super::units::parse_duration;
use super::{AccessConfig, Config, IdentityConfig};

/// Parses and validates `text`; `origin` names it in messages.
pub(super) fn from_toml(text: &str, origin: &str) -> Result<Config, ConfigErrors> {
    let source = Source::new(text);
    // serde stops at the first unknown key. To report every error at once,
    // each unknown key's line is blanked (keeping line numbers) and the file
    // parsed again, up to a bound; the remaining problems are then found by
    // validation as usual.
    let mut parse_errors = Vec::new();
    let mut working = Cow::Borrowed(text);
    let raw: Option<RawConfig> = loop {
        let err = match toml::from_str::<RawConfig>(&working) {
            Ok(raw) => break Some(raw),
            Err(err) => err,
        };
        let offset = err.span().map_or(0, |span| span.start);
        let (line, column) = source.position(offset);
        let mut message = parse_error_message(err.message());
        if message.is_empty() {
            // toml leaves some errors (a control character in a comment)
            // without a message; `check` must still say what is wrong.
            message = unexplained_syntax_error(&working, offset);
        }
        let unknown_key = message.starts_with("unknown field");
        parse_errors.push(ConfigError {
            line,
            column,
            path: String::new(),
            message,
        });
        let line_text = working[source.line_start(offset)..]
            .lines()
            .next()
            .unwrap_or("");
        // An unknown table header cannot be blanked without re-homing its
        // keys into the previous table; stop there.
        if !unknown_key
            || line_text.trim_start().starts_with('[')
            || parse_errors.len() >= MAX_PARSE_ERRORS
        {
            break None;
        }
        working = Cow::Owned(blank_line(&working, source.line_start(offset)));
    };
    let mut errors = parse_errors;
    if let Some(raw) = raw {
        let mut validator = Validator {
            source,
            origin,
            errors: Vec::new(),
            warnings: Vec::new(),
        };
        let config = validator.config(&raw);
        if validator.errors.is_empty() && errors.is_empty() {
            return Ok(config);
        }
        errors.append(&mut validator.errors);
        errors.sort_by_key(|e| (e.line, e.column));
    }
    let origin = origin.to_owned();
    Err(ConfigErrors {
        origin,
        errors,
        io: None,
    })
}

/// toml's own syntax messages span lines ("invalid key" then "expected
/// ..."): they are joined with "; ". serde's messages are one line, and any
/// line break in them is a quoted key from the file (`unknown field
/// `a\nb``), so it is escaped instead (found by fuzz/config).
fn parse_error_message(message: &str) -> String {
    let message = message.trim();
    if message.starts_with("unknown field") || message.starts_with("unknown variant") {
        return one_line(message.to_owned());
    }
    one_line(super::joined(message.lines().map(str::trim), "; "))
}

/// Messages quote values from the file, and a TOML string can hold a line
/// break (`"a\nb"`): control characters other than tab are written as
/// escapes so that every problem stays on one line (found by fuzz/config).
fn one_line(text: String) -> String {
    if !text.chars().any(|c| c.is_control() && c != '\t') {
        return text;
    }
    text.chars()
        .map(|c| match c {
            '\t' => c.to_string(),
            c if c.is_control() => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// The message for a TOML syntax error that came without one: names the
/// character at `offset`.
fn unexplained_syntax_error(text: &str, offset: usize) -> String {
    match text.get(offset..).and_then(|rest| rest.chars().next()) {
        Some(c) if c.is_control() => format!(
            "control character U+{:04X} is not allowed in TOML, not even in a comment \
             (only tab is)",
            u32::from(c)
        ),
        Some(c) => format!("invalid TOML syntax at {c:?}"),
        None => "invalid TOML syntax at the end of the file".to_owned(),
    }
}

/// Unknown keys reported before giving up on finding more.
const MAX_PARSE_ERRORS: usize = 50;

/// `text` with the line starting at byte `start` replaced by spaces.
fn blank_line(text: &str, start: usize) -> String {
    let end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let mut out = String::with_capacity(text.len());
    out.push_str(&text[..start]);
    // One space per byte keeps every later byte offset (and so every
    // reported position) unchanged.
    out.extend(std::iter::repeat_n(' ', end - start));
    out.push_str(&text[end..]);
    out
}

/// The text being validated, for turning byte offsets into line:column.
pub(super) struct Source<'a> {
    pub(super) text: &'a str,
    /// Byte offset of the start of each line.
    pub(super) line_starts: Vec<usize>,
}

impl<'a> Source<'a> {
    fn new(text: &'a str) -> Source<'a> {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Source { text, line_starts }
    }

    /// Byte offset of the start of the line holding `offset`.
    fn line_start(&self, offset: usize) -> usize {
        let line = self.line_starts.partition_point(|&start| start <= offset);
        self.line_starts
            .get(line.wrapping_sub(1))
            .copied()
            .unwrap_or(0)
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub(super) fn position(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&start| start <= offset);
        let start = self
            .line_starts
            .get(line.wrapping_sub(1))
            .copied()
            .unwrap_or(0);
        let column = match self.text.get(start..offset) {
            Some(prefix) => prefix.chars().count(),
            None => offset - start,
        };
        (line.max(1), column + 1)
    }

    /// Offsets of every table header line that reads `header` (e.g.
    /// `[[rule]]`), ignoring spaces and a trailing comment. Used to place
    /// errors about tables, which toml cannot always give a span.
    pub(super) fn headers(&self, header: &str) -> Vec<usize> {
        let mut found = Vec::new();
        for (&start, line) in self.line_starts.iter().zip(self.text.split('\n')) {
            let trimmed = line.trim_start();
            if !trimmed.starts_with('[') {
                continue;
            }
            let code = trimmed.split('#').next().unwrap_or("");
            let compact: String = code.chars().filter(|c| !c.is_whitespace()).collect();
            if compact == header {
                found.push(start + (line.len() - trimmed.len()));
            }
        }
        found
    }
}

/// A string field, unless it is empty (which, for a file or a variable
/// name, means none).
pub(super) fn non_empty(field: &Option<Spanned<String>>) -> Option<&Spanned<String>> {
    field.as_ref().filter(|field| !field.get_ref().is_empty())
}

/// Collects errors and warnings while turning raw values into domain values.
/// On an error each method returns a placeholder so validation carries on.
pub(super) struct Validator<'a> {
    pub(super) source: Source<'a>,
    pub(super) origin: &'a str,
    pub(super) errors: Vec<ConfigError>,
    /// Line, column and the finished sentence, sorted before they are handed out.
    pub(super) warnings: Vec<(usize, usize, String)>,
}

impl Validator<'_> {
    /// A file the config names: a relative path is read from the config
    /// file's directory, as nginx reads one from its prefix.
    pub(super) fn file_path(&self, written: &str) -> std::path::PathBuf {
        let written = std::path::Path::new(written);
        match std::path::Path::new(self.origin).parent() {
            Some(dir) if written.is_relative() => dir.join(written),
            _ => written.to_path_buf(),
        }
    }

    pub(super) fn error(&mut self, at: usize, path: &str, message: impl Into<String>) {
        let (line, column) = self.source.position(at);
        self.errors.push(ConfigError {
            line,
            column,
            path: one_line(path.to_owned()),
            message: one_line(message.into()),
        });
    }

    /// Reports an error and gives the placeholder validation carries on
    /// with (`None`, an empty list, `false`).
    pub(super) fn invalid<T: Default>(
        &mut self,
        at: usize,
        path: &str,
        message: impl Into<String>,
    ) -> T {
        self.error(at, path, message);
        T::default()
    }

    /// `result`'s value, or `None` with its error reported at `at`.
    pub(super) fn ok<T>(&mut self, at: usize, path: &str, result: Result<T, String>) -> Option<T> {
        result.map_err(|message| self.error(at, path, message)).ok()
    }

    pub(super) fn warn(&mut self, at: usize, path: &str, message: impl fmt::Display) {
        let (line, column) = self.source.position(at);
        let (path, message) = (one_line(path.to_owned()), one_line(message.to_string()));
        let text = format!("{}:{line}:{column}: {path}: {message}", self.origin);
        self.warnings.push((line, column, text));
    }

    /// The warnings in file order.
    fn take_warnings(&mut self) -> Vec<String> {
        let mut warnings = std::mem::take(&mut self.warnings);
        warnings.sort_by_key(|(line, column, _)| (*line, *column));
        warnings.into_iter().map(|(_, _, text)| text).collect()
    }

    fn config(&mut self, raw: &RawConfig) -> Config {
        let server = self.server(raw.server.as_ref());
        let admin = self.admin(raw);
        if admin.listen == server.listen && server.listen.port() != 0 {
            let at = raw
                .admin
                .as_ref()
                .and_then(|a| a.listen.start())
                .unwrap_or(0);
            self.error(
                at,
                "admin.listen",
                format!(
                    "{} is also server.listen; the admin listener needs its own address",
                    admin.listen
                ),
            );
        }
        let store = self.store(raw);
        let response = self.response(raw);
        let identity = IdentityConfig {
            jwt: self.identity(raw),
        };
        let raw_access = raw.access.as_ref();
        let access = AccessConfig {
            allow: self.cidrs(raw_access.and_then(|a| a.allow.as_ref()), "access.allow"),
            deny: self.cidrs(raw_access.and_then(|a| a.deny.as_ref()), "access.deny"),
        };
        let rules = self.rules(&raw.rule, server.ipv6_prefix);
        self.calls_unread_past_the_bound(&raw.rule, &rules, &server);
        let upstreams = self.upstreams(raw, &server);
        self.folded_patterns(raw, server.paths_alike);
        self.jwt_sources_need_identity(&raw.rule, identity.jwt.is_some());
        let rls = self.rls(raw, &[server.listen, admin.listen], &rules);
        let tracing = self.tracing(raw);
        let warnings = self.take_warnings();
        Config {
            server,
            admin,
            store,
            response,
            access,
            identity,
            rules,
            upstreams,
            rls,
            tracing,
            warnings,
        }
    }

    /// Parses each element of a string-or-list field; errors name the element.
    pub(super) fn list<T>(
        &mut self,
        field: Option<&Spanned<OneOrMany>>,
        path: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Vec<T> {
        let Some(field) = field else {
            return Vec::new();
        };
        let items = field.get_ref().items_at(field.span(), path);
        if items.is_empty() {
            self.warn(
                field.span().start,
                path,
                "an empty list restricts nothing; remove it",
            );
        }
        let parse = |(text, span, path): (&str, Range<usize>, String)| {
            self.ok(span.start, &path, parse(text))
        };
        items.into_iter().filter_map(parse).collect()
    }

    pub(super) fn socket_addr(
        &mut self,
        field: Option<&Spanned<String>>,
        path: &str,
        default: &str,
    ) -> SocketAddr {
        let fallback = SocketAddr::from(([0, 0, 0, 0], 0));
        let Some(field) = field else {
            return default.parse().unwrap_or(fallback);
        };
        let addr = field.get_ref().parse().map_err(|_| {
            format!(
                "\"{}\" is not IP:PORT; write an address such as \"{default}\" or \"[::]:8080\" \
                 (host names are not resolved)",
                field.get_ref()
            )
        });
        self.ok(field.span().start, path, addr).unwrap_or(fallback)
    }

    pub(super) fn duration(
        &mut self,
        field: Option<&Spanned<String>>,
        path: &str,
        default: Duration,
    ) -> Duration {
        let Some(field) = field else {
            return default;
        };
        let parsed = parse_duration(field.get_ref());
        self.ok(field.span().start, path, parsed).unwrap_or(default)
    }

    /// A duration that must be longer than zero.
    pub(super) fn timeout(
        &mut self,
        field: Option<&Spanned<String>>,
        path: &str,
        default: Duration,
    ) -> Duration {
        let duration = self.duration(field, path, default);
        if let (Some(field), true) = (field, duration.is_zero()) {
            let shown = if default.subsec_nanos() == 0 {
                format!("{}s", default.as_secs())
            } else {
                format!("{}ms", default.as_millis())
            };
            let message = format!("must be longer than zero (default \"{shown}\")");
            self.error(field.span().start, path, message);
            return default;
        }
        duration
    }

    pub(super) fn int(
        &mut self,
        field: Option<&Spanned<i64>>,
        path: &str,
        default: u64,
        range: RangeInclusive<u64>,
    ) -> u64 {
        let Some(field) = field else {
            return default;
        };
        let value = *field.get_ref();
        let checked = u64::try_from(value)
            .ok()
            .filter(|v| range.contains(v))
            .ok_or_else(|| {
                let allowed =
                    if *range.end() >= i64::MAX as u64 || *range.end() >= u64::from(u32::MAX) {
                        format!("must be at least {}", range.start())
                    } else {
                        format!("must be between {} and {}", range.start(), range.end())
                    };
                format!("{value} is out of range: {allowed} (default {default})")
            });
        self.ok(field.span().start, path, checked)
            .unwrap_or(default)
    }

    /// Reports the keys of a table that are missing (`(key, present)`), as
    /// `needs a and b: <example>`; whether none was.
    pub(super) fn require(
        &mut self,
        at: usize,
        path: &str,
        keys: &[(&str, bool)],
        example: &str,
    ) -> bool {
        let missing: Vec<&str> = keys
            .iter()
            .filter_map(|&(key, present)| (!present).then_some(key))
            .collect();
        if !missing.is_empty() {
            self.error(
                at,
                path,
                format!("needs {}: {example}", missing.join(" and ")),
            );
        }
        missing.is_empty()
    }

    pub(super) fn choice<T: Copy>(
        &mut self,
        field: Option<&Spanned<String>>,
        path: &str,
        options: &[(&str, T)],
        default: T,
    ) -> T {
        let Some(field) = field else {
            return default;
        };
        let value = field.get_ref();
        if let Some((_, choice)) = options.iter().find(|(name, _)| name == value) {
            return *choice;
        }
        let allowed = super::joined(options.iter().map(|(name, _)| format!("\"{name}\"")), ", ");
        self.error(
            field.span().start,
            path,
            format!("\"{value}\" is not allowed; use one of {allowed}"),
        );
        default
    }

    /// Where to report a problem with a whole table: its header if written
    /// as one, else its first key, else the top of the file.
    pub(super) fn table_position(&self, header: &str, fields: &[Option<Range<usize>>]) -> usize {
        self.source
            .headers(header)
            .first()
            .copied()
            .or_else(|| fields.iter().flatten().map(|span| span.start).min())
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderName, Method, StatusCode, Uri};
    use ipnet::IpNet;

    use crate::config::testing::*;
    use crate::config::{
        AlgorithmKind, ClaimPath, ForwardedHeader, HeaderStyle, JwtAlgorithm, KeySource,
        LimitConfig, MissingPolicy, OnLimit, Rate, StoreBackend,
    };

    #[test]
    fn fills_in_the_defaults_of_the_spec() {
        let config = valid(UPSTREAM);
        let s = &config.server;
        assert_eq!(s.listen, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(
            config.upstreams.default_pool().servers[0].url,
            "http://127.0.0.1:3000/".parse::<Uri>().unwrap()
        );
        assert_eq!(s.workers, 0);
        assert!(s.trusted_proxies.is_empty());
        assert_eq!(s.connect_timeout, Duration::from_secs(2));
        assert_eq!(s.upstream_timeout, Duration::from_secs(60));
        assert_eq!(s.header_read_timeout, Duration::from_secs(10));
        assert_eq!(s.max_connections, 10_000);
        assert_eq!(s.shutdown_grace, Duration::from_secs(30));
        assert_eq!(s.shutdown_delay, Duration::ZERO);
        assert!(s.normalize_path);
        assert_eq!(s.max_header_bytes, 32_768);
        assert_eq!(s.max_headers, 100);
        assert_eq!(s.max_uri_bytes, 8_192);
        assert_eq!(s.max_body_bytes, 0);
        assert_eq!(s.body_timeout, Duration::from_secs(60));
        assert_eq!(s.idle_timeout, Duration::from_secs(60));
        assert_eq!(s.send_timeout, Duration::from_secs(60));
        assert_eq!(s.forwarded_header, ForwardedHeader::XForwardedFor);
        assert_eq!(s.ipv6_prefix, 64);
        assert_eq!(config.admin.listen, "127.0.0.1:9090".parse().unwrap());
        assert_eq!(config.admin.token_env, "SLUICE_ADMIN_TOKEN");
        assert_eq!(config.store.backend, StoreBackend::Memory);
        assert_eq!(config.store.max_keys, 1_000_000);
        assert_eq!(config.response.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(config.response.headers, HeaderStyle::Both);
        assert!(config.response.on_success);
        assert!(config.access.allow.is_empty() && config.access.deny.is_empty());
        assert!(config.rules.is_empty());
        assert_eq!(config.warnings.len(), 1, "no rules: {:?}", config.warnings);
    }

    #[test]
    fn reads_a_full_config() {
        let config = valid(
            r#"
[server]
listen = "127.0.0.1:8081"
upstream = "http://backend.internal:3000"
workers = 4
trusted_proxies = ["10.0.0.0/8", "192.0.2.7", "2001:db8::/32"]
connect_timeout = "500ms"
upstream_timeout = "30s"
header_read_timeout = "5s"
max_connections = 50
shutdown_grace = "0s"
shutdown_delay = "5s"
normalize_path = false
max_header_bytes = 16384
max_headers = 50
max_uri_bytes = 4096
max_body_bytes = 1048576
body_timeout = "1m"
idle_timeout = "2m"
send_timeout = "1h"
forwarded_header = "forwarded"
ipv6_prefix = 56

[admin]
listen = "[::1]:9091"
token_env = "MY_TOKEN"

[store]
backend = "memory"
max_keys = 1_000

[response]
status = 503
headers = "ietf"
on_success = false

[access]
allow = ["127.0.0.1"]
deny = ["203.0.113.0/24", "::1/128"]

[[rule]]
name = "search.v2"
match = { path = "/api/search", path_prefix = ["/api/s/", "/v2/"], path_glob = "/api/*/report/**", method = ["get", "Post"], host = ["API.Example.com:8443", "[::1]:80"] }
key = ["ip", "header:X-Api-Key", "query:token", "path", "method", "host", "global"]
missing = "reject"
algorithm = "token_bucket"
rate = "5/15m"
burst = 2
on_limit = "reject"
cost = 1
shadow = true

[[rule]]
name = "one_key"
key = "header:x-api-key"
missing = "skip"
rate = "10/s"
[rule.match]
method = "DELETE"
"#,
        );
        let s = &config.server;
        assert_eq!(s.listen, "127.0.0.1:8081".parse().unwrap());
        assert_eq!(
            config.upstreams.default_pool().servers[0].url.to_string(),
            "http://backend.internal:3000/"
        );
        assert_eq!(s.workers, 4);
        assert_eq!(
            s.trusted_proxies,
            vec![
                "10.0.0.0/8".parse::<IpNet>().unwrap(),
                "192.0.2.7/32".parse().unwrap(),
                "2001:db8::/32".parse().unwrap()
            ]
        );
        assert_eq!(s.connect_timeout, Duration::from_millis(500));
        assert_eq!(s.shutdown_grace, Duration::ZERO);
        assert_eq!(s.shutdown_delay, Duration::from_secs(5));
        assert!(!s.normalize_path);
        assert_eq!(s.max_body_bytes, 1_048_576);
        assert_eq!(s.send_timeout, Duration::from_secs(3600));
        assert_eq!(s.forwarded_header, ForwardedHeader::Forwarded);
        assert_eq!(s.ipv6_prefix, 56);
        assert_eq!(config.admin.listen, "[::1]:9091".parse().unwrap());
        assert_eq!(config.admin.token_env, "MY_TOKEN");
        assert_eq!(config.store.max_keys, 1_000);
        assert_eq!(config.response.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(config.response.headers, HeaderStyle::Ietf);
        assert!(!config.response.on_success);
        assert_eq!(
            config.access.allow,
            vec!["127.0.0.1/32".parse::<IpNet>().unwrap()]
        );
        assert_eq!(config.access.deny.len(), 2);

        let search = &config.rules[0];
        assert_eq!(search.name, "search.v2");
        assert_eq!(search.matcher.path, vec!["/api/search"]);
        assert_eq!(search.matcher.path_prefix, vec!["/api/s/", "/v2/"]);
        assert_eq!(search.matcher.path_glob, vec!["/api/*/report/**"]);
        assert_eq!(search.matcher.method, vec![Method::GET, Method::POST]);
        assert_eq!(search.matcher.host, vec!["api.example.com", "[::1]"]);
        assert_eq!(
            search.key,
            vec![
                KeySource::Ip,
                KeySource::Header(HeaderName::from_static("x-api-key")),
                KeySource::Query("token".to_owned()),
                KeySource::Path,
                KeySource::Method,
                KeySource::Host,
                KeySource::Global,
            ]
        );
        assert_eq!(search.missing, MissingPolicy::Reject);
        assert_eq!(search.algorithm, AlgorithmKind::TokenBucket);
        assert_eq!(
            search.limits,
            vec![LimitConfig {
                rate: Rate {
                    count: 5,
                    period: Duration::from_secs(900)
                },
                capacity: 2,
                calendar: None,
            }]
        );
        assert_eq!(search.cost, 1);
        assert!(search.shadow);
        assert_eq!(search.on_limit, OnLimit::Reject);
        assert_eq!(search.max_in_flight, None);

        let one = &config.rules[1];
        assert_eq!(
            one.key,
            vec![KeySource::Header(HeaderName::from_static("x-api-key"))]
        );
        assert_eq!(one.missing, MissingPolicy::Skip);
        assert_eq!(one.matcher.method, vec![Method::DELETE]);
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    }

    #[test]
    fn accepts_dotted_keys_and_inline_rule_arrays() {
        let config = valid(
            "server.upstream = \"http://127.0.0.1:3000\"\n\
             rule = [{ name = \"a\", rate = \"1/s\", match.path = \"/x\" }]\n",
        );
        assert_eq!(config.rules[0].matcher.path, vec!["/x"]);
    }

    #[test]
    fn reports_a_syntax_error_with_its_position() {
        let line = only_error("[server]\nupstream = \"http://127.0.0.1:3000\"\nworkers = \n");
        assert!(line.starts_with("test.toml:3:11: "), "{line}");
        assert!(!line.contains('\n'));
    }

    #[test]
    fn a_control_character_in_a_comment_is_named_not_left_blank() {
        // Found by fuzz/config: toml reports this error with an empty message.
        let line = only_error("# a\u{1}b\n[server]\nupstream = \"http://127.0.0.1:3000\"\n");
        assert_eq!(
            line,
            "test.toml:1:4: control character U+0001 is not allowed in TOML, not even in a \
             comment (only tab is)"
        );
    }

    #[test]
    fn a_value_with_a_line_break_is_quoted_on_one_line() {
        // Found by fuzz/config: the value was echoed with its line break.
        let line = only_error(&format!(
            "{UPSTREAM}trusted_proxies = [\"a\\nb\\r\\u0001c\"]\n"
        ));
        assert!(
            line.starts_with(
                "test.toml:3:20: server.trusted_proxies[0]: \"a\\nb\\r\\u{1}c\" is not a CIDR"
            ),
            "{line}"
        );
    }

    #[test]
    fn an_unknown_key_with_a_line_break_is_quoted_on_one_line() {
        // Found by fuzz/config: a quoted table name's `\n` became "; " and
        // its `\r` stayed raw.
        let line = only_error(&format!("{UPSTREAM} [\"a\\nb\\r\\u0001c\"]\n"));
        assert!(
            line.starts_with("test.toml:3:3: unknown field `a\\nb\\r\\u{1}c`, expected one of"),
            "{line}"
        );
    }

    #[test]
    fn reports_a_wrong_type_with_its_position() {
        let line = only_error("[server]\nupstream = \"http://127.0.0.1:3000\"\nworkers = \"4\"\n");
        assert!(
            line.starts_with("test.toml:3:11: invalid type: string \"4\""),
            "{line}"
        );
    }

    #[test]
    fn reports_an_unknown_key_and_lists_the_allowed_ones() {
        let line = only_error(
            "[server]\nupstream = \"http://127.0.0.1:3000\"\n  listn = \"0.0.0.0:80\"\n",
        );
        assert!(
            line.starts_with(
                "test.toml:3:3: unknown field `listn`, expected one of `listen`, `upstream`"
            ),
            "{line}"
        );
        assert!(line.contains("`ipv6_prefix`"), "{line}");

        let line = only_error(&format!(
            "{UPSTREAM}[[rule]]\nname = \"a\"\nrate = \"1/s\"\nmatch = {{ paht = \"/\" }}\n"
        ));
        assert!(
            line.starts_with(
                "test.toml:6:11: unknown field `paht`, expected one of `path`, `path_prefix`"
            ),
            "{line}"
        );

        let line = only_error(&format!("{UPSTREAM}[rules]\n"));
        assert!(
            line.starts_with("test.toml:3:2: unknown field `rules`"),
            "{line}"
        );
        assert!(line.contains("`rule`"), "{line}");
    }

    #[test]
    fn every_key_of_the_spec_is_known() {
        let text = r#"
[server]
upstream = "http://127.0.0.1:3000"
[store]
backend = "redis"
[store.redis]
urls = ["redis://a", "redis://b"]
cluster = true
mode = "strict"
sync_interval = "50ms"
timeout = "20ms"
on_error = "local"
instances = 0
[tracing]
otlp = "http://127.0.0.1:4318"
sample = 0.01
parent = "trusted"
propagators = ["tracecontext"]
[identity.jwt]
header = "authorization"
algorithms = ["HS256"]
secret_env = "SLUICE_JWT_SECRET"
public_key_file = "keys/jwt.pem"
verify = false
[[rule]]
name = "everything"
algorithm = "token_bucket"
limits = ["100/m", "1000/h"]
burst = 20
on_limit = "delay"
max_delay = "30s"
max_queue = 1000
cost = 2
charge = "elapsed_ms"
refund_on = ["5xx"]
tiers = { by = "header:x-tier", gold = { rate = "10/s" } }
overrides = { "203.0.113.7" = { rate = "2/s" } }
ban = { after = 3, within = "1m", for = "10m" }
on_change = "keep"
[[rule]]
name = "retired"
rate = "100/d"
sunset = { start = 2025-01-01T00:00:00Z, end = "2025-06-01T00:00:00Z", to = "0/m", step = "1d", link = "https://example.com" }
[[rule]]
name = "in-flight"
algorithm = "concurrency"
max_in_flight = 10
[[upstream]]
name = "api"
servers = ["http://10.0.0.11:3000", { url = "http://10.0.0.12:3000", weight = 2 }]
protocol = "h2c"
balance = "hash:header:x-user"
resolve_every = "30s"
retries = 1
health = { path = "/healthz", interval = "5s", timeout = "1s", fails = 3, passes = 2, host = "api" }
eject = { after = 5, for = "30s", max_share = 0.5 }
connect_timeout = "1s"
upstream_timeout = "10s"
upstream_ca = ""
[[route]]
match = { host = "grpc.example.com" }
upstream = "api"
[rls]
listen = "127.0.0.1:8081"
[[rule]]
name = "envoy-edge"
match = { domain = "edge", descriptor = { generic_key = "slow" } }
key = ["descriptor:remote_address"]
rate = "10/s"
"#;
        // Every key is read, and this release implements all of them.
        valid(text);
    }

    #[test]
    fn the_redis_store_is_read_with_its_defaults() {
        let config =
            valid("[server]\nupstream = \"http://127.0.0.1:3000\"\n[store]\nbackend = \"redis\"\n");
        let StoreBackend::Redis(redis) = config.store.backend else {
            panic!("{:?}", config.store.backend);
        };
        assert_eq!(redis.urls, ["redis://127.0.0.1:6379"]);
        assert!(!redis.cluster);
        assert_eq!(redis.timeout, Duration::from_millis(20));
        assert_eq!(redis.on_error, crate::config::OnError::Local);
        assert_eq!(redis.instances, 0);
        assert_eq!(redis.mode, crate::config::RedisMode::Strict);
        let config = valid(
            "[server]\nupstream = \"http://127.0.0.1:3000\"\n[store]\nbackend = \"redis\"\n\
             [store.redis]\nurl = \"redis://cache:6380/2\"\ntimeout = \"50ms\"\non_error = \"deny\"\ninstances = 4\n",
        );
        let StoreBackend::Redis(redis) = config.store.backend else {
            panic!("{:?}", config.store.backend);
        };
        assert_eq!(redis.urls, ["redis://cache:6380/2"]);
        assert_eq!(redis.timeout, Duration::from_millis(50));
        assert_eq!(redis.on_error, crate::config::OnError::Deny);
        assert_eq!(redis.instances, 4);
        let config = valid(
            "[server]\nupstream = \"http://127.0.0.1:3000\"\n[store]\nbackend = \"redis\"\n\
             [store.redis]\ncluster = true\nurls = [\"redis://10.0.0.1:7000\", \"redis://10.0.0.2:7000\"]\n",
        );
        let StoreBackend::Redis(redis) = config.store.backend else {
            panic!("{:?}", config.store.backend);
        };
        assert!(redis.cluster);
        assert_eq!(
            redis.urls,
            ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]
        );
        for (written, interval) in [("", 50), ("sync_interval = \"10ms\"\n", 10)] {
            let config = valid(&format!(
                "[server]\nupstream = \"http://127.0.0.1:3000\"\n[store]\nbackend = \"redis\"\n\
                 [store.redis]\nmode = \"hybrid\"\n{written}"
            ));
            let StoreBackend::Redis(redis) = config.store.backend else {
                panic!("{:?}", config.store.backend);
            };
            let sync_interval = Duration::from_millis(interval);
            assert_eq!(
                redis.mode,
                crate::config::RedisMode::Hybrid { sync_interval }
            );
        }
    }

    #[test]
    fn bad_redis_settings_are_errors_where_written() {
        let lines = errors(
            r#"[server]
upstream = "http://127.0.0.1:3000"
[store]
backend = "redis"
[store.redis]
url = "http://127.0.0.1:6379"
urls = ["redis://a:7000"]
mode = "eventual"
sync_interval = "1ms"
timeout = "0s"
on_error = "maybe"
"#,
        );
        assert_eq!(
            lines,
            vec![
                "test.toml:6:7: store.redis.url: \"http://127.0.0.1:6379\" is not a Redis URL; use redis://host:port[/db], rediss://host:port[/db] (TLS) or unix:///path",
                "test.toml:7:8: store.redis.urls: urls names the nodes of a Redis Cluster: set cluster = true, or use url",
                "test.toml:8:8: store.redis.mode: \"eventual\" is not allowed; use \"strict\" or \"hybrid\"",
                "test.toml:9:17: store.redis.sync_interval: sync_interval must be between 5ms and 10s: the overshoot a fleet allows grows with it (one interval's traffic, two at worst)",
                "test.toml:10:11: store.redis.timeout: must be longer than zero (default \"20ms\")",
                "test.toml:11:12: store.redis.on_error: \"maybe\" is not allowed; use one of \"local\", \"allow\", \"deny\"",
            ],
            "{lines:#?}"
        );
    }

    #[test]
    fn reports_every_error_at_once_in_file_order() {
        let text = r#"[server]
listen = "localhost:80"
upstream = "ftp://example.com"
workers = 2000
connect_timeout = "2 s"
ipv6_prefix = 0

[admin]
token_env = "1TOKEN"

[store]
max_keys = 0

[response]
status = 200
headers = "all"

[access]
deny = ["10.0.0.0/33"]

[[rule]]
name = "per ip"
key = ["ip", "cookie:x", "ip"]
missing = "never"
rate = "100/minute"
burst = 0

[[rule]]
name = "b"
rate = "10/s"
burst = 0
match = { path = "api", path_prefix = "/a/../b", path_glob = "/api/x*/y", method = "G T", host = "a@b" }

[[rule]]
name = "b"

[[rule]]
rate = "0/s"
burst = -1
"#;
        let lines = errors(text);
        let expected = [
            "test.toml:2:10: server.listen: \"localhost:80\" is not IP:PORT",
            "test.toml:3:12: server.upstream: \"ftp://example.com\" must start with http:// or https://",
            "test.toml:4:11: server.workers: 2000 is out of range: must be between 0 and 1024",
            "test.toml:5:19: server.connect_timeout: \"2 s\" contains a space",
            "test.toml:6:15: server.ipv6_prefix: 0 is out of range: must be between 1 and 128",
            "test.toml:9:13: admin.token_env: \"1TOKEN\" is not an environment variable name",
            "test.toml:12:12: store.max_keys: 0 is out of range: must be at least 1",
            "test.toml:15:10: response.status: 200 is not a 4xx or 5xx status code",
            "test.toml:16:11: response.headers: \"all\" is not allowed; use one of \"legacy\", \"ietf\", \"both\", \"none\"",
            "test.toml:19:9: access.deny[0]: \"10.0.0.0/33\" is not a CIDR or an IP address",
            "test.toml:22:8: rule[0].name: \"per ip\" contains ' '",
            "test.toml:23:14: rule[0].key[1]: unknown key source \"cookie:x\"; allowed: ip, path, method, host, global, header:<name>, query:<name>",
            "test.toml:23:26: rule[0].key[2]: \"ip\" is already in this key",
            "test.toml:24:11: rule[0].missing: \"never\" is not allowed; use one of \"shared\", \"skip\", \"reject\"",
            "test.toml:25:8: rule[0].rate: \"minute\" is not a valid PERIOD",
            "test.toml:31:9: rule[1].burst: 0 must be at least 1, or no request could ever pass",
            "test.toml:32:18: rule[1].match.path: \"api\" must start with '/'",
            "test.toml:32:39: rule[1].match.path_prefix: \"/a/../b\" contains a \"..\" segment",
            "test.toml:32:62: rule[1].match.path_glob: \"/api/x*/y\": '*' and '**' must be a whole segment",
            "test.toml:32:84: rule[1].match.method: \"G T\" is not an HTTP method",
            "test.toml:32:98: rule[1].match.host: \"a@b\" is not a host",
            "test.toml:34:1: rule[2]: rate is required",
            "test.toml:35:8: rule[2].name: \"b\" is already the name of rule[1]; rule names must be unique",
            "test.toml:37:1: rule[3]: name is required",
            "test.toml:39:9: rule[3].burst: -1 cannot be negative",
        ];
        for (line, want) in lines.iter().zip(expected) {
            assert!(line.starts_with(want), "\n got: {line}\nwant: {want}");
        }
        assert_eq!(lines.len(), expected.len(), "{lines:#?}");
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        let line = only_error(&format!(
            "{UPSTREAM}[[rule]]\nname = \"a\"\nrate = \"1/s\"\nkey = \"héader\"  # é\n"
        ));
        assert!(
            line.starts_with("test.toml:6:7: rule[0].key[0]: unknown key source"),
            "{line}"
        );
        let line = only_error(&format!(
            "# ééé\n{UPSTREAM}[[rule]]\nname = \"ééé!\"\nrate = \"1/s\"\n"
        ));
        assert!(line.starts_with("test.toml:5:8: rule[0].name:"), "{line}");
    }

    #[test]
    fn every_example_config_is_valid() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).expect("config/ exists") {
            let path = entry.expect("readable entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("toml") {
                continue;
            }
            let config = match Config::load(&path) {
                Ok(config) => config,
                Err(errors) => panic!("{errors}"),
            };
            assert!(
                config.warnings.is_empty(),
                "{}: {:?}",
                path.display(),
                config.warnings
            );
            assert!(!config.rules.is_empty(), "{}", path.display());
            checked += 1;
        }
        assert!(
            checked >= 3,
            "found only {checked} example configs in {}",
            dir.display()
        );
    }

    #[test]
    fn the_commented_jwt_example_is_valid_once_uncommented() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/sluice.toml");
        let text = std::fs::read_to_string(path).unwrap();
        // `#key = ...` lines are the example; `# words` lines stay comments.
        // secret_env, public_key_file and jwks_file are alternatives: keep
        // the first.
        let uncommented: String = text
            .lines()
            .map(|line| match line.strip_prefix('#') {
                Some(rest)
                    if rest.starts_with("public_key_file") || rest.starts_with("jwks_file") =>
                {
                    line
                }
                Some(rest) if rest.starts_with(|c: char| c.is_ascii_lowercase() || c == '[') => {
                    rest
                }
                _ => line,
            })
            .map(|line| format!("{line}\n"))
            .collect::<String>()
            .replace("\"SLUICE_JWT_SECRET\"", "\"SLUICE_TEST_EXAMPLE_SECRET\"");
        set_env("SLUICE_TEST_EXAMPLE_SECRET", &"e".repeat(32));
        let config = valid(&uncommented);
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
        let jwt = config.identity.jwt.expect("identity.jwt");
        assert_eq!(jwt.algorithms, vec![JwtAlgorithm::HS256]);
        let rule = config.rules.last().unwrap();
        assert_eq!(rule.name, "seller-reports");
        assert_eq!(
            rule.key,
            vec![KeySource::Jwt(ClaimPath(vec!["seller_id".to_owned()]))]
        );
    }

    #[test]
    fn the_commented_tracing_example_is_valid_once_uncommented() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/sluice.toml");
        let text = std::fs::read_to_string(path).unwrap();
        let example: String = text
            .lines()
            .skip_while(|line| *line != "# [tracing]")
            .take_while(|line| line.starts_with('#'))
            .map(|line| format!("{}\n", line.trim_start_matches('#').trim_start()))
            .collect();
        let rule = "[[rule]]\nname = \"r\"\nrate = \"1/s\"\n";
        let config = valid(&format!("{UPSTREAM}{example}{rule}"));
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
        let crate::config::Tracing::On(tracing) = config.tracing else {
            panic!("{:?}", config.tracing);
        };
        assert_eq!(tracing.sample, 0.01);
        assert_eq!(tracing.export.endpoint, "http://127.0.0.1:4318/v1/traces");
    }

    #[test]
    fn the_commented_rate_limit_service_example_is_valid_once_uncommented() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/sluice.toml");
        let text = std::fs::read_to_string(path).unwrap();
        let example: String = text
            .lines()
            .skip_while(|line| *line != "# [rls]")
            .take_while(|line| line.starts_with('#'))
            .map(|line| format!("{}\n", line.trim_start_matches('#').trim_start()))
            .collect();
        let config = valid(&format!("{UPSTREAM}{example}"));
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
        assert_eq!(config.rls.unwrap().listen.port(), 8081);
        assert_eq!(config.rules[0].matcher.domain.as_deref(), Some("edge"));
    }

    #[test]
    fn the_demo_config_has_the_rules_the_tour_expects() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
        let config = Config::load(&dir.join("demo.toml")).expect("demo.toml is valid");
        let names: Vec<&str> = config.rules.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["per-ip", "search", "exports"]);
        assert_eq!(
            config.rules[0].limits[0].rate,
            Rate {
                count: 15,
                period: Duration::from_secs(10)
            }
        );
        let search = &config.rules[1];
        assert_eq!(search.matcher.path_prefix, vec!["/api/search"]);
        assert_eq!(
            search.key,
            vec![KeySource::Header(HeaderName::from_static("x-api-key"))]
        );
        assert_eq!(
            search.limits[0].rate,
            Rate {
                count: 3,
                period: Duration::from_secs(10)
            }
        );
        assert_eq!(search.missing, MissingPolicy::Shared);
        let exports = &config.rules[2];
        assert_eq!(exports.algorithm, AlgorithmKind::LeakyBucket);
        assert_eq!(exports.limits[0].capacity, 2);
        assert!(matches!(
            exports.on_limit,
            OnLimit::Delay { max_queue: 2, .. }
        ));
    }
}
