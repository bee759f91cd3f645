//! Validation: the [`raw`](super::raw) structs as written → the domain types
//! of [`config`](super), with SPEC.md's defaults filled in.
//!
//! Owns the error type of the config file ([`ConfigErrors`]) and the rule
//! that every problem is found in one pass: each check records its error with
//! the key's path (`rule[2].burst`), line and column, and carries on with a
//! placeholder value; only when nothing was recorded is a [`Config`] returned.
//! Non-fatal findings go to [`Config::warnings`]. Nothing here knows about
//! requests, and only `[identity.jwt]` reads outside the text: its key
//! material (an environment variable or a key file) is loaded and checked
//! here, so a bad key is a config error with a position.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::{Range, RangeInclusive};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use http::uri::{Authority, Scheme};
use http::{HeaderName, Method, StatusCode, Uri};
use ipnet::IpNet;
use toml::Spanned;

use super::raw::{
    Key, Located, OneOrMany, Present, RawBan, RawConfig, RawMatch, RawOverrides, RawRule,
    RawServer, RawSunset, RawTiers, RawVariant,
};
use super::units::{datetime_to_unix_nanos, parse_duration, parse_rate, parse_timestamp};
use super::{
    AccessConfig, AdminConfig, AlgorithmKind, BanConfig, ClaimPath, Config, ForwardedHeader,
    HeaderStyle, IdentityConfig, JwtAlgorithm, JwtConfig, JwtKey, KeySource, LimitConfig,
    MatchConfig, MissingPolicy, OnChange, OnLimit, Rate, ResponseConfig, RuleConfig, ServerConfig,
    StoreBackend, StoreConfig, SunsetConfig, Tiers, Variant,
};

/// One problem in a config file, at the position of the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// 1-based line; 0 when the problem has no position (the file could not be read).
    pub line: usize,
    /// 1-based column in characters; 0 when `line` is 0.
    pub column: usize,
    /// Where in the config the problem is, like `rule[2].burst`; empty for
    /// TOML syntax and type errors, whose message names the key.
    pub path: String,
    /// What is wrong and what is allowed; one line.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}: ", self.line, self.column)?;
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Every problem found in one config file. Displays as one line per problem:
/// `FILE:LINE:COLUMN: path: message`.
#[derive(Debug, Clone)]
pub struct ConfigErrors {
    /// The file name as given (or whatever the caller named the text).
    pub origin: String,
    /// In file order; never empty.
    pub errors: Vec<ConfigError>,
    /// Kept as the `source()` when the file could not be read.
    io: Option<Arc<std::io::Error>>,
}

impl ConfigErrors {
    /// The file could not be read at all.
    pub fn io(origin: &str, err: std::io::Error) -> ConfigErrors {
        ConfigErrors {
            origin: origin.to_owned(),
            errors: vec![ConfigError {
                line: 0,
                column: 0,
                path: String::new(),
                message: format!("cannot read the config file: {err}"),
            }],
            io: Some(Arc::new(err)),
        }
    }

    /// The problems, in file order.
    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.errors.iter()
    }

    /// How many problems were found.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// Always false for errors built by this module; here for clippy's sake.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            if error.line == 0 {
                write!(f, "{}: {error}", self.origin)?;
            } else {
                write!(f, "{}:{error}", self.origin)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.io
            .as_deref()
            .map(|err| err as &(dyn std::error::Error + 'static))
    }
}

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
        let mut message = err
            .message()
            .trim()
            .lines()
            .map(str::trim)
            .collect::<Vec<_>>()
            .join("; ");
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
    let Some(raw) = raw else {
        return Err(ConfigErrors {
            origin: origin.to_owned(),
            errors: parse_errors,
            io: None,
        });
    };
    let mut validator = Validator {
        source,
        origin,
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    let config = validator.config(&raw);
    if validator.errors.is_empty() && parse_errors.is_empty() {
        Ok(config)
    } else {
        let mut errors = parse_errors;
        errors.append(&mut validator.errors);
        errors.sort_by_key(|e| (e.line, e.column));
        Err(ConfigErrors {
            origin: origin.to_owned(),
            errors,
            io: None,
        })
    }
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

/// Largest `public_key_file` / `jwks_file` read. Real keys and key sets are
/// a few KiB; the bound keeps `/dev/zero` or a mistyped path to a huge file
/// from taking all memory (fuzz/config writes such paths).
const MAX_KEY_FILE_BYTES: u64 = 1024 * 1024;

fn read_key_file(file: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(file)?
        .take(MAX_KEY_FILE_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "it is larger than {} KiB, which no key file is",
            MAX_KEY_FILE_BYTES / 1024
        )));
    }
    Ok(bytes)
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
struct Source<'a> {
    text: &'a str,
    /// Byte offset of the start of each line.
    line_starts: Vec<usize>,
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
    fn position(&self, offset: usize) -> (usize, usize) {
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
    fn headers(&self, header: &str) -> Vec<usize> {
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

/// Collects errors and warnings while turning raw values into domain values.
/// On an error each method returns a placeholder so validation carries on.
struct Validator<'a> {
    source: Source<'a>,
    origin: &'a str,
    errors: Vec<ConfigError>,
    /// Line, column and the finished sentence, sorted before they are handed out.
    warnings: Vec<(usize, usize, String)>,
}

const NOT_SUPPORTED: &str = "is not supported by this version of sluice yet";

/// Above this COUNT a `sliding_log` limit draws a warning (not an error): the
/// log keeps one 8-byte timestamp per admitted unit, so each key may hold
/// COUNT of them — 80 KB per key at 10 000, 80 GB for a million such keys.
const SLIDING_LOG_WARN_COUNT: u64 = 10_000;

/// One limit as the operator wrote it (`rate`, or one element of `limits`),
/// kept with its position for the checks that need the whole rule.
#[derive(Clone)]
struct WrittenLimit {
    rate: Rate,
    /// The rate string as written, for messages.
    text: String,
    /// Byte offset of the value.
    at: usize,
    /// `rate`, `limits[1]` or `tiers.free.rate`: how messages about other
    /// keys name it.
    key: String,
    /// Full path for its own messages: `rule[0].limits[1]`.
    path: String,
}

/// The limits of a rule or of one of its tiers or overrides.
struct BuiltLimits {
    /// Never empty except for `concurrency`; placeholders when the rates
    /// were invalid (already reported).
    limits: Vec<LimitConfig>,
    /// The index of the limit whose capacity is the written `burst`.
    burst_sized: Option<usize>,
}

/// What tiers, overrides, sunset and ban need to know about their rule.
struct RuleContext<'r> {
    index: usize,
    /// Where the rule starts, for errors about tables without a span.
    at: usize,
    /// `None` when invalid (already reported).
    algorithm: Option<AlgorithmKind>,
    /// The rule's own rates; `None` when missing or invalid (already reported).
    written: Option<&'r [WrittenLimit]>,
    /// The rule's cost when written.
    cost: Option<u64>,
}

impl Validator<'_> {
    fn error(&mut self, at: usize, path: &str, message: impl Into<String>) {
        let (line, column) = self.source.position(at);
        self.errors.push(ConfigError {
            line,
            column,
            path: one_line(path.to_owned()),
            message: one_line(message.into()),
        });
    }

    fn warn(&mut self, at: usize, path: &str, message: impl fmt::Display) {
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
                .and_then(|a| a.listen.as_ref())
                .map_or(0, |l| l.span().start);
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
        let access = AccessConfig {
            allow: self.cidrs(
                raw.access.as_ref().and_then(|a| a.allow.as_ref()),
                "access.allow",
            ),
            deny: self.cidrs(
                raw.access.as_ref().and_then(|a| a.deny.as_ref()),
                "access.deny",
            ),
        };
        let rules = self.rules(&raw.rule, server.ipv6_prefix);
        self.jwt_sources_need_identity(&raw.rule, identity.jwt.is_some());
        Config {
            server,
            admin,
            store,
            response,
            access,
            identity,
            rules,
            warnings: self.take_warnings(),
        }
    }

    fn server(&mut self, raw: Option<&RawServer>) -> ServerConfig {
        let empty = RawServer::default();
        let raw = raw.unwrap_or(&empty);
        let secs = Duration::from_secs;
        let trusted_proxies = self.cidrs(raw.trusted_proxies.as_ref(), "server.trusted_proxies");
        if let Some(field) = &raw.trusted_proxies {
            for net in &trusted_proxies {
                if net.prefix_len() == 0 {
                    self.warn(
                        field.span().start,
                        "server.trusted_proxies",
                        format_args!(
                            "{net} trusts every peer, so any client can choose its own IP \
                             with a forwarding header"
                        ),
                    );
                }
            }
        }
        ServerConfig {
            listen: self.socket_addr(raw.listen.as_ref(), "server.listen", "0.0.0.0:8080"),
            upstream: self.upstream(raw),
            workers: self.int(raw.workers.as_ref(), "server.workers", 0, 0..=1024) as usize,
            trusted_proxies,
            connect_timeout: self.timeout(
                raw.connect_timeout.as_ref(),
                "server.connect_timeout",
                secs(2),
            ),
            upstream_timeout: self.timeout(
                raw.upstream_timeout.as_ref(),
                "server.upstream_timeout",
                secs(60),
            ),
            header_read_timeout: self.timeout(
                raw.header_read_timeout.as_ref(),
                "server.header_read_timeout",
                secs(10),
            ),
            max_connections: self.int(
                raw.max_connections.as_ref(),
                "server.max_connections",
                10_000,
                1..=u32::MAX as u64,
            ) as usize,
            shutdown_grace: self.duration(
                raw.shutdown_grace.as_ref(),
                "server.shutdown_grace",
                secs(30),
            ),
            normalize_path: raw.normalize_path.as_ref().is_none_or(|v| *v.get_ref()),
            max_header_bytes: self.int(
                raw.max_header_bytes.as_ref(),
                "server.max_header_bytes",
                32_768,
                1..=u32::MAX as u64,
            ) as usize,
            max_headers: self.int(
                raw.max_headers.as_ref(),
                "server.max_headers",
                100,
                1..=u32::MAX as u64,
            ) as usize,
            max_uri_bytes: self.int(
                raw.max_uri_bytes.as_ref(),
                "server.max_uri_bytes",
                8_192,
                1..=u32::MAX as u64,
            ) as usize,
            max_body_bytes: self.int(
                raw.max_body_bytes.as_ref(),
                "server.max_body_bytes",
                0,
                0..=i64::MAX as u64,
            ),
            body_timeout: self.timeout(raw.body_timeout.as_ref(), "server.body_timeout", secs(60)),
            idle_timeout: self.timeout(raw.idle_timeout.as_ref(), "server.idle_timeout", secs(60)),
            send_timeout: self.timeout(raw.send_timeout.as_ref(), "server.send_timeout", secs(60)),
            forwarded_header: self.choice(
                raw.forwarded_header.as_ref(),
                "server.forwarded_header",
                &[
                    ("x-forwarded-for", ForwardedHeader::XForwardedFor),
                    ("forwarded", ForwardedHeader::Forwarded),
                ],
                ForwardedHeader::XForwardedFor,
            ),
            ipv6_prefix: self.int(raw.ipv6_prefix.as_ref(), "server.ipv6_prefix", 64, 1..=128)
                as u8,
        }
    }

    fn upstream(&mut self, raw: &RawServer) -> Uri {
        let placeholder = Uri::from_static("http://127.0.0.1/");
        let path = "server.upstream";
        let Some(field) = &raw.upstream else {
            let at = self
                .source
                .headers("[server]")
                .first()
                .copied()
                .unwrap_or(0);
            self.error(
                at,
                path,
                "is required: the address of the protected service, for example \
                 upstream = \"http://127.0.0.1:3000\"",
            );
            return placeholder;
        };
        match parse_upstream(field.get_ref()) {
            Ok(uri) => uri,
            Err(message) => {
                self.error(field.span().start, path, message);
                placeholder
            }
        }
    }

    fn admin(&mut self, raw: &RawConfig) -> AdminConfig {
        let admin = raw.admin.as_ref();
        let listen = self.socket_addr(
            admin.and_then(|a| a.listen.as_ref()),
            "admin.listen",
            "127.0.0.1:9090",
        );
        let token_env = match admin.and_then(|a| a.token_env.as_ref()) {
            None => "SLUICE_ADMIN_TOKEN".to_owned(),
            Some(field) => {
                let name = field.get_ref();
                let valid = name
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !valid {
                    self.error(
                        field.span().start,
                        "admin.token_env",
                        format!(
                            "\"{name}\" is not an environment variable name; use letters, digits \
                             and '_', not starting with a digit (default \"SLUICE_ADMIN_TOKEN\")"
                        ),
                    );
                }
                name.clone()
            }
        };
        AdminConfig { listen, token_env }
    }

    fn store(&mut self, raw: &RawConfig) -> StoreConfig {
        let store = raw.store.as_ref();
        if let Some(field) = store.and_then(|s| s.backend.as_ref()) {
            match field.get_ref().as_str() {
                "memory" => {}
                "redis" => self.error(
                    field.span().start,
                    "store.backend",
                    format!("backend = \"redis\" {NOT_SUPPORTED}; use \"memory\""),
                ),
                other => self.error(
                    field.span().start,
                    "store.backend",
                    format!(
                        "unknown backend \"{other}\"; allowed: \"memory\" (\"redis\" is planned)"
                    ),
                ),
            }
        }
        if let Some(redis) = store.and_then(|s| s.redis.as_ref()) {
            let first_field = [
                redis.url.as_ref().map(Spanned::span),
                redis.urls.as_ref().map(Spanned::span),
                redis.cluster.as_ref().map(Spanned::span),
                redis.mode.as_ref().map(Spanned::span),
                redis.sync_interval.as_ref().map(Spanned::span),
                redis.timeout.as_ref().map(Spanned::span),
                redis.on_error.as_ref().map(Spanned::span),
            ];
            let at = self.table_position("[store.redis]", &first_field);
            self.error(
                at,
                "store.redis",
                format!("[store.redis] {NOT_SUPPORTED}; remove it"),
            );
        }
        let max_keys = self.int(
            store.and_then(|s| s.max_keys.as_ref()),
            "store.max_keys",
            1_000_000,
            1..=i64::MAX as u64,
        );
        StoreConfig {
            backend: StoreBackend::Memory,
            max_keys: usize::try_from(max_keys).unwrap_or(usize::MAX),
        }
    }

    fn response(&mut self, raw: &RawConfig) -> ResponseConfig {
        let response = raw.response.as_ref();
        let status = match response.and_then(|r| r.status.as_ref()) {
            None => StatusCode::TOO_MANY_REQUESTS,
            Some(field) => match u16::try_from(*field.get_ref())
                .ok()
                .filter(|code| (400..=599).contains(code))
                .and_then(|code| StatusCode::from_u16(code).ok())
            {
                Some(status) => status,
                None => {
                    self.error(
                        field.span().start,
                        "response.status",
                        format!(
                            "{} is not a 4xx or 5xx status code; limited requests need an error \
                             status (default 429)",
                            field.get_ref()
                        ),
                    );
                    StatusCode::TOO_MANY_REQUESTS
                }
            },
        };
        ResponseConfig {
            status,
            headers: self.choice(
                response.and_then(|r| r.headers.as_ref()),
                "response.headers",
                &[
                    ("legacy", HeaderStyle::Legacy),
                    ("ietf", HeaderStyle::Ietf),
                    ("both", HeaderStyle::Both),
                    ("none", HeaderStyle::None),
                ],
                HeaderStyle::Both,
            ),
            on_success: response
                .and_then(|r| r.on_success.as_ref())
                .is_none_or(|v| *v.get_ref()),
        }
    }

    /// `[identity.jwt]`, with its key material loaded and checked.
    fn identity(&mut self, raw: &RawConfig) -> Option<JwtConfig> {
        let jwt = raw.identity.as_ref()?.jwt.as_ref()?;
        let at = self.table_position(
            "[identity.jwt]",
            &[
                jwt.header.as_ref().map(Spanned::span),
                jwt.algorithms.as_ref().map(Spanned::span),
                jwt.secret_env.as_ref().map(Spanned::span),
                jwt.public_key_file.as_ref().map(Spanned::span),
                jwt.jwks_file.as_ref().map(Spanned::span),
                jwt.verify.as_ref().map(Spanned::span),
            ],
        );
        let header = match &jwt.header {
            None => HeaderName::from_static("authorization"),
            Some(field) => {
                match HeaderName::from_bytes(field.get_ref().to_ascii_lowercase().as_bytes()) {
                    Ok(name) => name,
                    Err(_) => {
                        self.error(
                            field.span().start,
                            "identity.jwt.header",
                            format!(
                                "\"{}\" is not a valid header name (default \"authorization\")",
                                field.get_ref()
                            ),
                        );
                        HeaderName::from_static("authorization")
                    }
                }
            }
        };
        let algorithms = self.jwt_algorithms(jwt.algorithms.as_ref());
        let verify = jwt.verify.as_ref().is_none_or(|v| *v.get_ref());
        if let (false, Some(field)) = (verify, &jwt.verify) {
            self.warn(
                field.span().start,
                "identity.jwt.verify",
                "tokens are read without checking their signature, so any client can pick its \
                 bucket by writing its own claims; use only behind a gateway that rejects \
                 every unverified token",
            );
        }
        let key = match algorithms.first() {
            // Not needed without verification; invalid algorithms are
            // already reported.
            _ if !verify => None,
            None => None,
            Some(alg) if alg.is_hmac() => self.jwt_secret(jwt, at, &algorithms),
            Some(_) => self.jwt_public_key(jwt, at, &algorithms),
        };
        Some(JwtConfig {
            header,
            algorithms,
            key,
            verify,
        })
    }

    /// `identity.jwt.algorithms` (default `["HS256"]`): known algorithms,
    /// never `none`, never HMAC together with public-key ones.
    fn jwt_algorithms(&mut self, field: Option<&Spanned<OneOrMany>>) -> Vec<JwtAlgorithm> {
        const PATH: &str = "identity.jwt.algorithms";
        let Some(field) = field else {
            return vec![JwtAlgorithm::HS256];
        };
        let allowed = JwtAlgorithm::ALL
            .iter()
            .map(|alg| format!("\"{}\"", alg.name()))
            .collect::<Vec<_>>()
            .join(", ");
        let items = field.get_ref().items(field.span());
        if items.is_empty() {
            self.error(
                field.span().start,
                PATH,
                format!("must list at least one algorithm: {allowed}"),
            );
        }
        let many = matches!(field.get_ref(), OneOrMany::Many(_));
        let mut algorithms: Vec<JwtAlgorithm> = Vec::with_capacity(items.len());
        for (i, (text, span)) in items.into_iter().enumerate() {
            let path = if many {
                format!("{PATH}[{i}]")
            } else {
                PATH.to_owned()
            };
            let Some(alg) = JwtAlgorithm::ALL.into_iter().find(|a| a.name() == text) else {
                let message = if text.eq_ignore_ascii_case("none") {
                    format!(
                        "\"{text}\" is never accepted: an unsigned token proves nothing, anyone \
                         can write one; use one of {allowed}"
                    )
                } else {
                    format!("\"{text}\" is not an algorithm sluice verifies; use one of {allowed}")
                };
                self.error(span.start, &path, message);
                continue;
            };
            if algorithms.contains(&alg) {
                self.error(
                    span.start,
                    &path,
                    format!("\"{text}\" is already listed; list each algorithm once"),
                );
                continue;
            }
            if let Some(first) = algorithms.first().filter(|f| f.is_hmac() != alg.is_hmac()) {
                self.error(
                    span.start,
                    &path,
                    format!(
                        "\"{text}\" cannot be listed with \"{}\": HMAC and public-key \
                         algorithms together let a token \"signed\" with the public key as an \
                         HMAC secret verify (algorithm confusion); list only HS* algorithms \
                         (with secret_env) or only RS*/ES* ones (with public_key_file or \
                         jwks_file)",
                        first.name()
                    ),
                );
                continue;
            }
            algorithms.push(alg);
        }
        algorithms
    }

    /// The HMAC secret, from the environment variable `secret_env` names.
    fn jwt_secret(
        &mut self,
        jwt: &super::raw::RawJwt,
        at: usize,
        algorithms: &[JwtAlgorithm],
    ) -> Option<JwtKey> {
        let names = jwt_names(algorithms);
        for (key, field) in [
            ("public_key_file", &jwt.public_key_file),
            ("jwks_file", &jwt.jwks_file),
        ] {
            if let Some(field) = field {
                self.error(
                    field.span().start,
                    &format!("identity.jwt.{key}"),
                    format!(
                        "{names} tokens are verified with a shared secret (secret_env), not a \
                         public key; remove {key}, or list RS*/ES* algorithms"
                    ),
                );
            }
        }
        let (name, at) = match &jwt.secret_env {
            Some(field) => (field.get_ref().as_str(), field.span().start),
            None => ("SLUICE_JWT_SECRET", at),
        };
        let path = "identity.jwt.secret_env";
        if name.is_empty() {
            self.error(at, path, "must name an environment variable");
            return None;
        }
        let secret = match std::env::var_os(name) {
            None => {
                self.error(
                    at,
                    path,
                    format!(
                        "the environment variable {name} is not set; it must hold the secret \
                         tokens are signed with ({names})"
                    ),
                );
                return None;
            }
            Some(value) if value.is_empty() => {
                self.error(
                    at,
                    path,
                    format!("the environment variable {name} is empty; it must hold the secret"),
                );
                return None;
            }
            Some(value) => value.into_encoded_bytes(),
        };
        // RFC 7518 §3.2: at least as long as the hash's output.
        let wanted = algorithms
            .iter()
            .map(|alg| match alg {
                JwtAlgorithm::HS384 => 48,
                JwtAlgorithm::HS512 => 64,
                _ => 32,
            })
            .max()
            .unwrap_or(32);
        if secret.len() < wanted {
            self.warn(
                at,
                path,
                format_args!(
                    "the secret in {name} is {} bytes; use at least {wanted} for {names} (RFC \
                     7518 §3.2), or it may be guessed offline from any token",
                    secret.len()
                ),
            );
        }
        Some(JwtKey::Secret(secret))
    }

    /// The PEM public key from `public_key_file`, which must serve every
    /// listed algorithm, or the JWKS from `jwks_file` (either relative to
    /// the config file's directory).
    fn jwt_public_key(
        &mut self,
        jwt: &super::raw::RawJwt,
        at: usize,
        algorithms: &[JwtAlgorithm],
    ) -> Option<JwtKey> {
        let names = jwt_names(algorithms);
        if let Some(field) = &jwt.secret_env {
            self.error(
                field.span().start,
                "identity.jwt.secret_env",
                format!(
                    "{names} tokens are verified with a public key (public_key_file or \
                     jwks_file), not a shared secret; remove secret_env, or list HS* algorithms"
                ),
            );
        }
        let (key, field, wrap): (_, _, fn(Vec<u8>) -> JwtKey) =
            match (&jwt.public_key_file, &jwt.jwks_file) {
                (Some(_), Some(jwks)) => {
                    self.error(
                        jwks.span().start,
                        "identity.jwt.jwks_file",
                        "give either public_key_file or jwks_file, not both",
                    );
                    return None;
                }
                (Some(pem), None) => ("public_key_file", pem, JwtKey::PublicKeyPem),
                (None, Some(jwks)) => ("jwks_file", jwks, JwtKey::Jwks),
                (None, None) => {
                    self.error(
                        at,
                        "identity.jwt.public_key_file",
                        format!(
                            "{names} tokens need public_key_file = \"path/to/public.pem\" (or \
                             jwks_file = \"path/to/jwks.json\")"
                        ),
                    );
                    return None;
                }
            };
        let path = format!("identity.jwt.{key}");
        let written = std::path::Path::new(field.get_ref());
        let file = match std::path::Path::new(self.origin).parent() {
            Some(dir) if written.is_relative() => dir.join(written),
            _ => written.to_path_buf(),
        };
        let bytes = match read_key_file(&file) {
            Ok(bytes) => bytes,
            Err(err) => {
                self.error(
                    field.span().start,
                    &path,
                    format!("cannot read {}: {err}", file.display()),
                );
                return None;
            }
        };
        let key = wrap(bytes);
        if let Err(message) = crate::key::jwt::verification_keys(&key, algorithms) {
            self.error(
                field.span().start,
                &path,
                format!("{} {message}", file.display()),
            );
            return None;
        }
        Some(key)
    }

    /// Every `jwt:<claim>` in a rule's key needs `[identity.jwt]`: without
    /// it no token could verify.
    fn jwt_sources_need_identity(&mut self, raw: &[RawRule], configured: bool) {
        if configured {
            return;
        }
        for (index, rule) in raw.iter().enumerate() {
            let keys = rule
                .key
                .iter()
                .flat_map(|field| field.get_ref().items(field.span()))
                .enumerate()
                .map(|(i, item)| (format!("rule[{index}].key[{i}]"), item));
            let tier_by = rule
                .tiers
                .as_ref()
                .and_then(|tiers| tiers.value.by.as_ref())
                .map(|by| {
                    (
                        format!("rule[{index}].tiers.by"),
                        (by.get_ref().as_str(), by.span()),
                    )
                });
            for (path, (text, span)) in keys.chain(tier_by) {
                if let Ok(KeySource::Jwt(_)) = parse_key_source(text) {
                    self.error(
                        span.start,
                        &path,
                        format!(
                            "\"{text}\" needs an [identity.jwt] table saying how tokens are \
                             verified"
                        ),
                    );
                }
            }
        }
    }

    fn rules(&mut self, raw: &[RawRule], ipv6_prefix: u8) -> Vec<RuleConfig> {
        if raw.is_empty() {
            self.warn(
                0,
                "rule",
                "no [[rule]] is configured, so every request is forwarded without a limit",
            );
        }
        // Where each rule starts, for errors about the rule as a whole. Only
        // trusted when every rule was written as a `[[rule]]` header.
        let headers = self.source.headers("[[rule]]");
        let headers = (headers.len() == raw.len()).then_some(headers);
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut rules = Vec::with_capacity(raw.len());
        for (index, rule) in raw.iter().enumerate() {
            let at = match headers.as_ref().and_then(|h| h.get(index)) {
                Some(&header) => header,
                None => [
                    rule.name.as_ref().map(Spanned::span),
                    rule.rate.as_ref().map(Spanned::span),
                    rule.limits.as_ref().map(Spanned::span),
                ]
                .into_iter()
                .flatten()
                .map(|span| span.start)
                .min()
                .unwrap_or(0),
            };
            let validated = self.rule(index, at, rule, ipv6_prefix);
            if let Some(field) = &rule.name {
                let name = field.get_ref();
                if let Some(first) = names.get(name) {
                    self.error(
                        field.span().start,
                        &format!("rule[{index}].name"),
                        format!("\"{name}\" is already the name of rule[{first}]; rule names must be unique"),
                    );
                } else {
                    names.insert(name.clone(), index);
                }
            }
            rules.push(validated);
        }
        rules
    }

    fn rule(&mut self, index: usize, at: usize, raw: &RawRule, ipv6_prefix: u8) -> RuleConfig {
        let path = |field: &str| format!("rule[{index}].{field}");
        let name = match &raw.name {
            None => {
                self.error(
                    at,
                    &format!("rule[{index}]"),
                    "name is required: a unique name such as name = \"per-ip\"",
                );
                String::new()
            }
            Some(field) => {
                let name = field.get_ref();
                if let Err(message) = check_rule_name(name) {
                    self.error(field.span().start, &path("name"), message);
                }
                name.clone()
            }
        };

        self.unsupported_rule_keys(index, at, raw);
        // `None` when the algorithm is invalid (already reported), so that
        // nothing is judged against a made-up algorithm.
        let algorithm = match &raw.algorithm {
            None => Some(AlgorithmKind::TokenBucket),
            Some(field) => self.algorithm(&path("algorithm"), field),
        };
        let concurrency = algorithm == Some(AlgorithmKind::Concurrency);

        let matcher = raw
            .matcher
            .as_ref()
            .map(|m| self.matcher(index, m))
            .unwrap_or_default();

        let key = match &raw.key {
            None => vec![KeySource::Ip],
            Some(field) => self.key(index, field),
        };
        let missing = self.choice(
            raw.missing.as_ref(),
            &path("missing"),
            &[
                ("shared", MissingPolicy::Shared),
                ("skip", MissingPolicy::Skip),
                ("reject", MissingPolicy::Reject),
            ],
            MissingPolicy::Shared,
        );

        // `None` when the limits are missing or invalid (already reported),
        // so that `burst` and `cost` are not judged against made-up ones.
        // A concurrency rule has none: it counts requests in flight.
        let base = format!("rule[{index}]");
        let written = if concurrency {
            for (key, field) in [
                ("rate", raw.rate.as_ref().map(Spanned::span)),
                ("limits", raw.limits.as_ref().map(Spanned::span)),
            ] {
                if let Some(span) = field {
                    self.not_for_concurrency(index, span.start, key);
                }
            }
            None
        } else {
            self.written_limits(&base, "", at, raw.rate.as_ref(), raw.limits.as_ref())
        };
        let written = self.one_rate_if_leaky(&base, algorithm, written, raw.limits.as_ref(), at);
        for limit in written.iter().flatten() {
            self.check_limit(algorithm, limit);
        }
        let default_burst = if raw.rate.is_none() && raw.limits.is_some() {
            "the COUNT of the shortest-period limit"
        } else {
            "the rate's COUNT"
        };
        let built = self.build_limits(
            index,
            &base,
            written.as_deref(),
            raw.burst.as_ref(),
            algorithm,
            default_burst,
        );

        let cost = match &raw.cost {
            Some(field) if concurrency => {
                self.not_for_concurrency(index, field.span().start, "cost");
                1
            }
            field => self.int(field.as_ref(), &path("cost"), 1, 1..=i64::MAX as u64),
        };
        if let (Some(field), Some(written)) = (&raw.cost, &written) {
            if let Some((_, message)) =
                self.cost_misfit(&cost.to_string(), cost, algorithm, written, &built)
            {
                self.error(field.span().start, &path("cost"), message);
            }
        }
        let limits = built.limits;

        let context = RuleContext {
            index,
            at,
            algorithm,
            written: written.as_deref(),
            cost: raw.cost.is_some().then_some(cost),
        };
        let tiers = raw.tiers.as_ref().and_then(|t| self.tiers(&context, t));
        let overrides = match &raw.overrides {
            Some(o) => self.overrides(&context, o, &key, ipv6_prefix),
            None => Vec::new(),
        };
        let sunset = raw
            .sunset
            .as_ref()
            .and_then(|s| self.sunset(&context, s, raw));
        let ban = raw.ban.as_ref().and_then(|b| self.ban(&context, b, raw));
        let on_change = self.choice(
            raw.on_change.as_ref(),
            &path("on_change"),
            &[
                ("keep", OnChange::Keep),
                ("proportional", OnChange::Proportional),
                ("reset", OnChange::Reset),
            ],
            OnChange::Proportional,
        );

        // A leaky bucket's queue is its capacity: how many may wait.
        let queue = limits.first().map_or(1, |limit| limit.capacity);
        let on_limit = self.on_limit(index, raw, algorithm, queue);
        let max_in_flight = self.max_in_flight(index, raw, algorithm);

        RuleConfig {
            name,
            matcher,
            key,
            missing,
            algorithm: algorithm.unwrap_or(AlgorithmKind::TokenBucket),
            limits,
            cost,
            shadow: raw.shadow.as_ref().is_some_and(|v| *v.get_ref()),
            on_limit,
            max_in_flight,
            tiers,
            overrides,
            sunset,
            ban,
            on_change,
        }
    }

    /// `on_limit` with its `max_delay` and `max_queue`. `queue` is a leaky
    /// bucket's capacity, which is its queue.
    fn on_limit(
        &mut self,
        index: usize,
        raw: &RawRule,
        algorithm: Option<AlgorithmKind>,
        queue: u64,
    ) -> OnLimit {
        let path = |field: &str| format!("rule[{index}].{field}");
        let leaky = algorithm == Some(AlgorithmKind::LeakyBucket);
        // Whether the rule holds requests; `None` when that is unknown (an
        // invalid on_limit or algorithm, already reported), so that
        // max_delay and max_queue are not judged against a guess.
        let mut delay = Some(false);
        if let Some(field) = &raw.on_limit {
            let at = field.span().start;
            match (field.get_ref().as_str(), algorithm) {
                ("reject", Some(AlgorithmKind::LeakyBucket)) => self.error(
                    at,
                    &path("on_limit"),
                    "a leaky bucket always holds requests until they can leave at its rate, so \
                     it cannot reject at once; remove on_limit, or use algorithm = \
                     \"token_bucket\" to answer at once",
                ),
                ("reject", _) => {}
                ("delay", Some(AlgorithmKind::SlidingWindow)) => {
                    self.error(
                        at,
                        &path("on_limit"),
                        "delay is not supported with sliding_window; use token_bucket, \
                         leaky_bucket, fixed_window or sliding_log",
                    );
                    delay = Some(true);
                }
                ("delay", _) => delay = Some(true),
                (other, _) => {
                    self.error(
                        at,
                        &path("on_limit"),
                        format!("unknown on_limit \"{other}\"; allowed: \"reject\" or \"delay\""),
                    );
                    delay = None;
                }
            }
        }
        if leaky {
            delay = Some(true);
        } else if algorithm.is_none() && delay == Some(false) {
            delay = None;
        }

        let default_delay = Duration::from_secs(30);
        let max_delay = match &raw.max_delay {
            Some(field) if delay == Some(false) => {
                self.needs_delay(index, field.span().start, "max_delay", raw);
                default_delay
            }
            field => self.timeout(field.as_ref(), &path("max_delay"), default_delay),
        };
        let max_queue = match &raw.max_queue {
            Some(field) if leaky => {
                self.error(
                    field.span().start,
                    &path("max_queue"),
                    "a leaky bucket's queue is its burst: how many requests may wait (default \
                     the rate's COUNT); remove max_queue and set burst instead",
                );
                queue
            }
            Some(field) if delay == Some(false) => {
                self.needs_delay(index, field.span().start, "max_queue", raw);
                1000
            }
            _ if leaky => queue,
            field => self.int(
                field.as_ref(),
                &path("max_queue"),
                1000,
                1..=i64::MAX as u64,
            ),
        };
        match delay {
            Some(true) => OnLimit::Delay {
                max_delay,
                max_queue,
            },
            _ => OnLimit::Reject,
        }
    }

    /// `max_delay` or `max_queue` written on a rule that rejects at once.
    fn needs_delay(&mut self, index: usize, at: usize, key: &str, raw: &RawRule) {
        let message = match &raw.on_limit {
            Some(field) => {
                let (line, _) = self.source.position(field.span().start);
                format!(
                    "needs on_limit = \"delay\": with on_limit = \"reject\" (line {line}) a limited \
                     request is answered at once and never waits; set on_limit = \"delay\", or \
                     remove {key}"
                )
            }
            None => format!(
                "needs on_limit = \"delay\": by default (on_limit = \"reject\") a limited request \
                 is answered at once and never waits; add on_limit = \"delay\", or remove {key}"
            ),
        };
        self.error(at, &format!("rule[{index}].{key}"), message);
    }

    /// `max_in_flight`: for concurrency only.
    fn max_in_flight(
        &mut self,
        index: usize,
        raw: &RawRule,
        algorithm: Option<AlgorithmKind>,
    ) -> Option<u64> {
        let path = format!("rule[{index}].max_in_flight");
        match (&raw.max_in_flight, algorithm) {
            (field, Some(AlgorithmKind::Concurrency)) => {
                Some(self.int(field.as_ref(), &path, 100, 1..=i64::MAX as u64))
            }
            (Some(field), Some(kind)) => {
                self.error(
                    field.span().start,
                    &path,
                    format!(
                        "only algorithm = \"concurrency\" takes max_in_flight: a {} rule is bounded \
                         by its rate; remove max_in_flight, or use algorithm = \"concurrency\" to \
                         bound requests in flight",
                        kind.name()
                    ),
                );
                None
            }
            (Some(field), None) => {
                // The algorithm is invalid (already reported): still check the value.
                self.int(Some(field), &path, 100, 1..=i64::MAX as u64);
                None
            }
            (None, _) => None,
        }
    }

    /// `rate`, `limits`, `burst` or `cost` written on a concurrency rule.
    fn not_for_concurrency(&mut self, index: usize, at: usize, key: &str) {
        let hint = match key {
            "burst" => "max_in_flight (default 100) is how many may be in flight at once",
            "cost" => "each request holds one permit while it is in flight",
            "tiers" | "overrides" | "sunset" => {
                "they change a rate, and a concurrency rule has none; write a separate rule \
                 (with its own match or key) for callers that need another max_in_flight"
            }
            _ => "bound them with max_in_flight (default 100), or choose another algorithm for a rate",
        };
        self.error(
            at,
            &format!("rule[{index}].{key}"),
            format!("concurrency counts requests in flight, so it takes no {key}; {hint}"),
        );
    }

    /// A leaky bucket takes a single rate; several are reported (at `limits`)
    /// and dropped.
    fn one_rate_if_leaky(
        &mut self,
        base: &str,
        algorithm: Option<AlgorithmKind>,
        written: Option<Vec<WrittenLimit>>,
        limits: Option<&Spanned<OneOrMany>>,
        at: usize,
    ) -> Option<Vec<WrittenLimit>> {
        match written {
            Some(written) if algorithm == Some(AlgorithmKind::LeakyBucket) && written.len() > 1 => {
                let at = limits.map_or(at, |field| field.span().start);
                self.error(
                    at,
                    &format!("{base}.limits"),
                    "a leaky bucket lets requests leave at one constant rate, so it takes a single \
                     rate such as rate = \"10/s\"; use token_bucket for several limits that must \
                     all hold",
                );
                None
            }
            written => written,
        }
    }

    /// The limits (with capacities) of `written` and `burst`, checking the
    /// burst; the same for a rule and for each of its tiers and overrides.
    /// `default_burst` says what the burst defaults to, for messages.
    fn build_limits(
        &mut self,
        index: usize,
        base: &str,
        written: Option<&[WrittenLimit]>,
        burst_field: Option<&Spanned<i64>>,
        algorithm: Option<AlgorithmKind>,
        default_burst: &str,
    ) -> BuiltLimits {
        let path = format!("{base}.burst");
        let leaky = algorithm == Some(AlgorithmKind::LeakyBucket);
        // The shortest-period limit is the one `burst` sizes.
        let shortest =
            written.and_then(|limits| (0..limits.len()).min_by_key(|&i| limits[i].rate.period));
        let count = written
            .zip(shortest)
            .map(|(limits, i)| limits[i].rate.count);

        let burst = match (burst_field, algorithm) {
            (None, _) => None,
            (Some(field), Some(AlgorithmKind::Concurrency)) => {
                self.not_for_concurrency(index, field.span().start, "burst");
                None
            }
            (Some(field), Some(kind))
                if !matches!(
                    kind,
                    AlgorithmKind::TokenBucket | AlgorithmKind::LeakyBucket
                ) =>
            {
                self.error(
                    field.span().start,
                    &path,
                    format!(
                        "only algorithm = \"token_bucket\" (its capacity) and \"leaky_bucket\" \
                         (how many may wait) take a burst: the capacity of a {} limit is its \
                         COUNT; remove burst, or change the COUNT",
                        kind.name()
                    ),
                );
                None
            }
            (Some(field), _) => {
                let value = *field.get_ref();
                let min = if count == Some(0) || count.is_none() {
                    0
                } else {
                    1
                };
                if value < min {
                    let why = if min == 1 {
                        "must be at least 1, or no request could ever pass"
                    } else {
                        "cannot be negative"
                    };
                    self.error(
                        field.span().start,
                        &path,
                        format!("{value} {why}; it defaults to {default_burst}"),
                    );
                    Some(1)
                } else {
                    let burst = u64::try_from(value).unwrap_or(0);
                    if count == Some(0) && burst > 0 && leaky {
                        self.warn(
                            field.span().start,
                            &path,
                            "with a COUNT of 0 nothing ever leaves a leaky bucket, so no request \
                             is admitted whatever the burst",
                        );
                    } else if count == Some(0) && burst > 0 {
                        self.warn(
                            field.span().start,
                            &path,
                            format_args!(
                                "with a COUNT of 0 the bucket never refills: each key gets {burst} \
                                 request(s) in total"
                            ),
                        );
                    }
                    Some(burst)
                }
            }
        };

        let limits: Vec<LimitConfig> = match written {
            _ if algorithm == Some(AlgorithmKind::Concurrency) => Vec::new(),
            Some(written) if !written.is_empty() => written
                .iter()
                .enumerate()
                .map(|(i, limit)| LimitConfig {
                    rate: limit.rate,
                    capacity: match burst {
                        Some(burst) if Some(i) == shortest => burst,
                        _ => limit.rate.count,
                    },
                })
                .collect(),
            _ => vec![LimitConfig {
                rate: Rate {
                    count: 1,
                    period: Duration::from_secs(1),
                },
                capacity: burst.unwrap_or(1),
            }],
        };
        BuiltLimits {
            limits,
            burst_sized: burst.and(shortest),
        }
    }

    /// The first open limit whose capacity cannot hold `cost` (its index and
    /// the sentence saying so), if any. A leaky bucket holds a request until
    /// its cost has leaked out, so any cost fits it; it only waits longer.
    fn cost_misfit(
        &self,
        subject: &str,
        cost: u64,
        algorithm: Option<AlgorithmKind>,
        written: &[WrittenLimit],
        built: &BuiltLimits,
    ) -> Option<(usize, String)> {
        if algorithm == Some(AlgorithmKind::LeakyBucket) {
            return None;
        }
        let (i, (written, limit)) = written
            .iter()
            .zip(&built.limits)
            .enumerate()
            .find(|(_, (written, limit))| written.rate.count > 0 && limit.capacity < cost)?;
        let (what, raise) = if built.burst_sized == Some(i) {
            ("its burst", "burst")
        } else {
            ("its COUNT", "that COUNT")
        };
        Some((
            i,
            format!(
                "{subject} can never fit in {} \"{}\", whose capacity is {} ({what}): such a \
                 request would never be admitted; lower cost or raise {raise}",
                written.key, written.text, limit.capacity
            ),
        ))
    }

    /// `tiers = { by = "<key source>", <value> = { rate, limits, burst }, ... }`.
    fn tiers(&mut self, rule: &RuleContext, raw: &Located<RawTiers>) -> Option<Tiers> {
        let index = rule.index;
        let at = raw.span.as_ref().map_or(rule.at, |span| span.start);
        if rule.algorithm == Some(AlgorithmKind::Concurrency) {
            self.not_for_concurrency(index, at, "tiers");
            return None;
        }
        let path = format!("rule[{index}].tiers");
        let by = match &raw.value.by {
            None => {
                self.error(
                    at,
                    &path,
                    "needs by = \"<key source>\", the source whose value picks the tier, such as \
                     by = \"header:x-plan\" or by = \"jwt:plan\"",
                );
                None
            }
            Some(field) => match parse_key_source(field.get_ref()) {
                Ok(source) => Some(source),
                Err(message) => {
                    self.error(field.span().start, &format!("{path}.by"), message);
                    None
                }
            },
        };
        if raw.value.tiers.is_empty() {
            self.error(
                at,
                &path,
                "lists no tier: add a table per tier value next to by, such as premium = { rate = \
                 \"100/s\" }",
            );
            return None;
        }
        let mut tiers = Vec::with_capacity(raw.value.tiers.len());
        for (name, table) in &raw.value.tiers {
            let relative = format!("tiers.{}", key_in_path(&name.text));
            tiers.push(self.variant(rule, &relative, name, table));
        }
        let tiers = tiers.into_iter().collect::<Option<Vec<_>>>()?;
        Some(Tiers { by: by?, tiers })
    }

    /// `overrides = { "<bucket key>" = { rate, limits, burst }, ... }`.
    fn overrides(
        &mut self,
        rule: &RuleContext,
        raw: &Located<RawOverrides>,
        key: &[KeySource],
        ipv6_prefix: u8,
    ) -> Vec<Variant> {
        let index = rule.index;
        if rule.algorithm == Some(AlgorithmKind::Concurrency) {
            let at = raw.span.as_ref().map_or(rule.at, |span| span.start);
            self.not_for_concurrency(index, at, "overrides");
            return Vec::new();
        }
        let mut overrides = Vec::with_capacity(raw.value.0.len());
        for (name, table) in &raw.value.0 {
            let relative = format!("overrides.{}", key_in_path(&name.text));
            if let Err(message) = check_bucket_key(&name.text, key, ipv6_prefix) {
                let at = name
                    .span
                    .as_ref()
                    .or(table.span.as_ref())
                    .map_or(rule.at, |span| span.start);
                self.error(at, &format!("rule[{index}].{relative}"), message);
            }
            if let Some(variant) = self.variant(rule, &relative, name, table) {
                overrides.push(variant);
            }
        }
        overrides
    }

    /// One tier or override: its limits, computed like the rule's own. One
    /// that sets only `burst` keeps the rule's rates; one that sets `rate`
    /// or `limits` takes its own COUNT as the default burst.
    fn variant(
        &mut self,
        rule: &RuleContext,
        relative: &str,
        name: &Key,
        table: &Located<RawVariant>,
    ) -> Option<Variant> {
        let base = format!("rule[{}].{relative}", rule.index);
        let raw = &table.value;
        let at = name
            .span
            .as_ref()
            .or(table.span.as_ref())
            .map_or(rule.at, |span| span.start);
        for key in &raw.unknown {
            let at = key.span.as_ref().map_or(at, |span| span.start);
            self.error(
                at,
                &format!("{base}.{}", key_in_path(&key.text)),
                format!(
                    "unknown key \"{}\"; a tier or override sets rate, limits and/or burst",
                    key.text
                ),
            );
        }
        if raw.rate.is_none() && raw.limits.is_none() && raw.burst.is_none() {
            if !raw.unknown.is_empty() {
                return None;
            }
            self.error(
                at,
                &base,
                "sets nothing: give rate, limits and/or burst, such as { rate = \"100/s\" } (one \
                 that sets only burst keeps the rule's rates)",
            );
            return None;
        }
        let errors_before = self.errors.len();
        let own_rates = raw.rate.is_some() || raw.limits.is_some();
        let written = if own_rates {
            let prefix = format!("{relative}.");
            let written =
                self.written_limits(&base, &prefix, at, raw.rate.as_ref(), raw.limits.as_ref());
            let written =
                self.one_rate_if_leaky(&base, rule.algorithm, written, raw.limits.as_ref(), at);
            for limit in written.iter().flatten() {
                self.check_limit(rule.algorithm, limit);
            }
            written
        } else {
            rule.written.map(<[WrittenLimit]>::to_vec)
        };
        let default_burst = match (&raw.rate, &raw.limits) {
            (None, Some(_)) => "the COUNT of its shortest-period limit",
            _ => "its rate's COUNT",
        };
        let built = self.build_limits(
            rule.index,
            &base,
            written.as_deref(),
            raw.burst.as_ref(),
            rule.algorithm,
            default_burst,
        );
        let written = written?;
        // A table already refused for its own values is not judged further.
        let cost = rule.cost.filter(|_| self.errors.len() == errors_before);
        if let Some(cost) = cost {
            let subject = format!("the rule's cost {cost}");
            if let Some((i, message)) =
                self.cost_misfit(&subject, cost, rule.algorithm, &written, &built)
            {
                // An inherited rate that cannot hold the cost was reported
                // at the rule already; only this table's own values are new.
                match (&raw.burst, built.burst_sized == Some(i)) {
                    (Some(burst), true) => {
                        self.error(burst.span().start, &format!("{base}.burst"), message)
                    }
                    _ if own_rates => self.error(written[i].at, &written[i].path, message),
                    _ => {}
                }
            }
        }
        Some(Variant {
            name: name.text.clone(),
            limits: built.limits,
        })
    }

    /// `sunset = { start, end, to, step, link }`.
    fn sunset(
        &mut self,
        rule: &RuleContext,
        raw: &Located<RawSunset>,
        raw_rule: &RawRule,
    ) -> Option<SunsetConfig> {
        let index = rule.index;
        let path = |key: &str| format!("rule[{index}].sunset.{key}");
        let at = raw.span.as_ref().map_or(rule.at, |span| span.start);
        if rule.algorithm == Some(AlgorithmKind::Concurrency) {
            self.not_for_concurrency(index, at, "sunset");
            return None;
        }
        let mut valid = true;
        if let (Some(written), Some(limits)) = (rule.written, &raw_rule.limits) {
            if written.len() > 1 {
                let (line, _) = self.source.position(limits.span().start);
                self.error(
                    at,
                    &format!("rule[{index}].sunset"),
                    format!(
                        "lowers one rate step by step, so the rule needs exactly one, but limits \
                         (line {line}) lists {}; keep one limit, or put the others in a rule of \
                         their own",
                        written.len()
                    ),
                );
                valid = false;
            }
        }
        for (key, field) in [
            (
                "tiers",
                raw_rule.tiers.as_ref().and_then(|t| t.span.clone()),
            ),
            (
                "overrides",
                raw_rule.overrides.as_ref().and_then(|o| o.span.clone()),
            ),
        ] {
            let present = match key {
                "tiers" => raw_rule.tiers.is_some(),
                _ => raw_rule.overrides.is_some(),
            };
            if present {
                let line = field.map_or(String::new(), |span| {
                    format!(" (line {})", self.source.position(span.start).0)
                });
                self.error(
                    at,
                    &format!("rule[{index}].sunset"),
                    format!(
                        "cannot be combined with {key}{line}: a sunset lowers the rule's one rate \
                         for every caller; retire the old API version in a rule without {key}"
                    ),
                );
                valid = false;
            }
        }
        let sunset = &raw.value;
        let missing: Vec<&str> = [
            ("start", sunset.start.is_none()),
            ("end", sunset.end.is_none()),
            ("to", sunset.to.is_none()),
        ]
        .into_iter()
        .filter_map(|(key, missing)| missing.then_some(key))
        .collect();
        if !missing.is_empty() {
            self.error(
                at,
                &format!("rule[{index}].sunset"),
                format!(
                    "needs {}: sunset = {{ start = 2026-12-01T00:00:00Z, end = \
                     2027-01-01T00:00:00Z, to = \"0/d\" }} (step defaults to \"1d\"; link is \
                     optional)",
                    missing.join(" and ")
                ),
            );
            valid = false;
        }
        let start = sunset
            .start
            .as_ref()
            .and_then(|field| self.timestamp(field, &path("start")));
        let end = sunset
            .end
            .as_ref()
            .and_then(|field| self.timestamp(field, &path("end")));
        if let (Some(start), Some(end), Some(field)) = (start, end, &sunset.end) {
            if end <= start {
                let line = sunset
                    .start
                    .as_ref()
                    .map_or(0, |s| self.source.position(s.span().start).0);
                self.error(
                    field.span().start,
                    &path("end"),
                    format!("must be after start (line {line}): the limit falls from start to end"),
                );
                valid = false;
            }
        }
        let rate = rule
            .written
            .filter(|written| written.len() == 1)
            .map(|written| &written[0]);
        let to = match &sunset.to {
            None => None,
            Some(field) => match parse_rate(field.get_ref()) {
                Err(message) => {
                    self.error(field.span().start, &path("to"), message);
                    None
                }
                Ok(to) => match rate {
                    // The rule's own rate is invalid (already reported).
                    None => None,
                    Some(from) => {
                        let converted = u128::from(to.count) * from.rate.period.as_nanos()
                            / to.period.as_nanos();
                        match u64::try_from(converted) {
                            Ok(converted) if converted <= from.rate.count => Some(converted),
                            _ => {
                                self.error(
                                    field.span().start,
                                    &path("to"),
                                    format!(
                                        "\"{}\" is {converted} per period of the rule's {} \
                                         \"{}\", more than its COUNT {}: a sunset only lowers a \
                                         limit",
                                        field.get_ref(),
                                        from.key,
                                        from.text,
                                        from.rate.count
                                    ),
                                );
                                None
                            }
                        }
                    }
                },
            },
        };
        let step = match &sunset.step {
            None => Some(Duration::from_secs(86_400)),
            Some(field) => match parse_duration(field.get_ref()) {
                Ok(step) if !step.is_zero() => Some(step),
                Ok(_) => {
                    self.error(
                        field.span().start,
                        &path("step"),
                        "must be longer than zero (default \"1d\")",
                    );
                    None
                }
                Err(message) => {
                    self.error(field.span().start, &path("step"), message);
                    None
                }
            },
        };
        let link = match &sunset.link {
            None => Some(None),
            Some(field) => match check_link(field.get_ref()) {
                Ok(()) => Some(Some(field.get_ref().clone())),
                Err(message) => {
                    self.error(field.span().start, &path("link"), message);
                    None
                }
            },
        };
        let step_at = sunset
            .step
            .as_ref()
            .map(Spanned::span)
            .or_else(|| sunset.end.as_ref().map(Spanned::span));
        if let (Some(start), Some(end), Some(step_len), Some(at)) = (start, end, step, step_at) {
            let steps = u128::from(end.saturating_sub(start)).div_ceil(step_len.as_nanos().max(1));
            if steps > u128::from(crate::limiter::sunset::MAX_STEPS) {
                self.error(
                    at.start,
                    &path("step"),
                    format!(
                        "makes {steps} steps from start to end; at most {} are allowed, so use a \
                         longer step",
                        crate::limiter::sunset::MAX_STEPS
                    ),
                );
                valid = false;
            }
        }
        if !valid {
            return None;
        }
        Some(SunsetConfig {
            start: start?,
            end: end?,
            to: to?,
            step: step?,
            link: link?,
        })
    }

    /// A timestamp: an RFC 3339 string or a TOML offset datetime.
    fn timestamp(&mut self, field: &Spanned<toml::Value>, path: &str) -> Option<u64> {
        let parsed = match field.get_ref() {
            toml::Value::String(text) => parse_timestamp(text),
            toml::Value::Datetime(datetime) => datetime_to_unix_nanos(datetime),
            other => Err(format!(
                "must be a timestamp, not {} {other}; write an RFC 3339 timestamp such as \
                 2026-12-01T00:00:00Z (bare or quoted)",
                match other {
                    toml::Value::Integer(_) => "the number",
                    toml::Value::Float(_) => "the number",
                    toml::Value::Boolean(_) => "the boolean",
                    _ => "the value",
                }
            )),
        };
        match parsed {
            Ok(nanos) => Some(nanos),
            Err(message) => {
                self.error(field.span().start, path, message);
                None
            }
        }
    }

    /// `ban = { after = N, within = "1m", for = "10m" }`.
    fn ban(
        &mut self,
        rule: &RuleContext,
        raw: &Located<RawBan>,
        raw_rule: &RawRule,
    ) -> Option<BanConfig> {
        let index = rule.index;
        let path = |key: &str| format!("rule[{index}].ban.{key}");
        let at = raw.span.as_ref().map_or(rule.at, |span| span.start);
        let mut valid = true;
        if let Some(shadow) = raw_rule.shadow.as_ref().filter(|s| *s.get_ref()) {
            let (line, _) = self.source.position(shadow.span().start);
            self.error(
                at,
                &format!("rule[{index}].ban"),
                format!(
                    "a shadow rule (line {line}) never limits anyone, so it would never ban; \
                     remove ban, or set shadow = false"
                ),
            );
            valid = false;
        }
        let ban = &raw.value;
        let missing: Vec<&str> = [
            ("after", ban.after.is_none()),
            ("within", ban.within.is_none()),
            ("for", ban.duration.is_none()),
        ]
        .into_iter()
        .filter_map(|(key, missing)| missing.then_some(key))
        .collect();
        if !missing.is_empty() {
            self.error(
                at,
                &format!("rule[{index}].ban"),
                format!(
                    "needs {}: ban = {{ after = 20, within = \"1m\", for = \"10m\" }} bans a key \
                     limited 20 times within a minute for 10 minutes",
                    missing.join(" and ")
                ),
            );
            valid = false;
        }
        let after = ban.after.as_ref().and_then(|field| {
            let value = *field.get_ref();
            if value >= 1 {
                u64::try_from(value).ok()
            } else {
                self.error(
                    field.span().start,
                    &path("after"),
                    format!(
                        "{value} is out of range: must be at least 1 (how many limited answers \
                         within `within` start a ban)"
                    ),
                );
                None
            }
        });
        let within = ban
            .within
            .as_ref()
            .and_then(|field| self.positive_duration(field, &path("within")));
        let duration = ban
            .duration
            .as_ref()
            .and_then(|field| self.positive_duration(field, &path("for")));
        if !valid {
            return None;
        }
        Some(BanConfig {
            after: after?,
            within: within?,
            duration: duration?,
        })
    }

    /// A duration with no default that must be longer than zero.
    fn positive_duration(&mut self, field: &Spanned<String>, path: &str) -> Option<Duration> {
        match parse_duration(field.get_ref()) {
            Ok(duration) if !duration.is_zero() => Some(duration),
            Ok(_) => {
                self.error(field.span().start, path, "must be longer than zero");
                None
            }
            Err(message) => {
                self.error(field.span().start, path, message);
                None
            }
        }
    }

    fn algorithm(&mut self, path: &str, field: &Spanned<String>) -> Option<AlgorithmKind> {
        const ALL: [AlgorithmKind; 6] = [
            AlgorithmKind::TokenBucket,
            AlgorithmKind::LeakyBucket,
            AlgorithmKind::FixedWindow,
            AlgorithmKind::SlidingWindow,
            AlgorithmKind::SlidingLog,
            AlgorithmKind::Concurrency,
        ];
        let name = field.get_ref().as_str();
        if let Some(kind) = ALL.iter().find(|kind| kind.name() == name) {
            return Some(*kind);
        }
        let allowed = ALL
            .iter()
            .map(|kind| format!("\"{}\"", kind.name()))
            .collect::<Vec<_>>()
            .join(", ");
        self.error(
            field.span().start,
            path,
            format!("unknown algorithm \"{name}\"; allowed: {allowed}"),
        );
        None
    }

    /// The rule's `rate` or `limits`, parsed, in file order; `None` (with the
    /// problem reported) when neither, both, or an invalid one was written.
    /// `base` is the path of the table holding them (`rule[0]`,
    /// `rule[0].tiers.premium`) and `prefix` how other keys' messages name
    /// them relative to the rule (`""`, `"tiers.premium."`).
    fn written_limits(
        &mut self,
        base: &str,
        prefix: &str,
        at: usize,
        rate: Option<&Spanned<String>>,
        limits: Option<&Spanned<OneOrMany>>,
    ) -> Option<Vec<WrittenLimit>> {
        match (rate, limits) {
            (None, None) => {
                self.error(
                    at,
                    base,
                    "rate is required: COUNT/PERIOD such as rate = \"100/m\", or \
                     limits = [\"100/m\", \"1000/h\"] for several limits that must all hold",
                );
                None
            }
            (Some(rate), None) => self.rate(base, prefix, rate).map(|limit| vec![limit]),
            (None, Some(limits)) => self.limit_list(base, prefix, limits),
            (Some(rate), Some(limits)) => {
                // Each is still read, so its own mistakes are reported too.
                self.rate(base, prefix, rate);
                self.limit_list(base, prefix, limits);
                let (later, key, earlier, other) = if limits.span().start > rate.span().start {
                    (limits.span().start, "limits", rate.span().start, "rate")
                } else {
                    (rate.span().start, "rate", limits.span().start, "limits")
                };
                let (line, _) = self.source.position(earlier);
                self.error(
                    later,
                    &format!("{base}.{key}"),
                    format!(
                        "cannot be used together with {other} (line {line}); write one limit as \
                         rate = \"100/m\" or several as limits = [\"100/m\", \"1000/h\"]"
                    ),
                );
                None
            }
        }
    }

    fn rate(&mut self, base: &str, prefix: &str, field: &Spanned<String>) -> Option<WrittenLimit> {
        let path = format!("{base}.rate");
        match parse_rate(field.get_ref()) {
            Ok(rate) => Some(WrittenLimit {
                rate,
                text: field.get_ref().clone(),
                at: field.span().start,
                key: format!("{prefix}rate"),
                path,
            }),
            Err(message) => {
                self.error(field.span().start, &path, message);
                None
            }
        }
    }

    fn limit_list(
        &mut self,
        base: &str,
        prefix: &str,
        field: &Spanned<OneOrMany>,
    ) -> Option<Vec<WrittenLimit>> {
        let path = format!("{base}.limits");
        let items = match field.get_ref() {
            OneOrMany::Many(items) => items,
            OneOrMany::One(text) => {
                self.error(
                    field.span().start,
                    &path,
                    format!(
                        "must be a list of rates, such as limits = [\"{text}\"]; for a single \
                         limit rate = \"{text}\" works too"
                    ),
                );
                return None;
            }
        };
        if items.is_empty() {
            self.error(
                field.span().start,
                &path,
                "must list at least one rate, such as limits = [\"100/m\", \"1000/h\"]",
            );
            return None;
        }
        let mut limits: Vec<WrittenLimit> = Vec::with_capacity(items.len());
        let mut valid = true;
        for (i, item) in items.iter().enumerate() {
            let key = format!("{prefix}limits[{i}]");
            let path = format!("{base}.limits[{i}]");
            let text = item.get_ref();
            let rate = match parse_rate(text) {
                Ok(rate) => rate,
                Err(message) => {
                    self.error(item.span().start, &path, message);
                    valid = false;
                    continue;
                }
            };
            if let Some(first) = limits.iter().find(|l| l.rate.period == rate.period) {
                let message = format!(
                    "\"{text}\" has the same period as {} \"{}\"; each limit needs its own \
                     period, so keep only one of them",
                    first.key, first.text
                );
                self.error(item.span().start, &path, message);
                continue;
            }
            limits.push(WrittenLimit {
                rate,
                text: text.clone(),
                at: item.span().start,
                key,
                path,
            });
        }
        valid.then_some(limits)
    }

    /// The checks of one limit that depend on the algorithm, and the warnings.
    fn check_limit(&mut self, algorithm: Option<AlgorithmKind>, limit: &WrittenLimit) {
        let count = limit.rate.count;
        if count == 0 {
            self.warn(
                limit.at,
                &limit.path,
                format_args!(
                    "\"{}\" closes the route: every matching request is limited",
                    limit.text
                ),
            );
        }
        let Some(kind) = algorithm else {
            return;
        };
        let counts_in_32_bits = !matches!(
            kind,
            AlgorithmKind::TokenBucket | AlgorithmKind::LeakyBucket
        );
        if counts_in_32_bits && count > u64::from(u32::MAX) {
            self.error(
                limit.at,
                &limit.path,
                format!(
                    "the COUNT {count} is too large for {}, which counts in 32 bits; at most {}",
                    kind.name(),
                    u32::MAX
                ),
            );
        } else if kind == AlgorithmKind::SlidingLog && count > SLIDING_LOG_WARN_COUNT {
            self.warn(
                limit.at,
                &limit.path,
                format_args!(
                    "sliding_log keeps one 8-byte timestamp per admitted unit, so each key may \
                     hold {count} of them ({} per key); algorithm = \"sliding_window\" keeps two \
                     counters per key instead",
                    format_bytes(count.saturating_mul(8))
                ),
            );
        }
    }

    /// Keys of SPEC.md's Rules table that this release does not implement.
    fn unsupported_rule_keys(&mut self, index: usize, at: usize, raw: &RawRule) {
        let keys: [(&str, &Option<Present>); 2] =
            [("charge", &raw.charge), ("refund_on", &raw.refund_on)];
        for (key, value) in keys {
            if let Some(present) = value {
                let at = present.span.as_ref().map_or(at, |span| span.start);
                self.error(
                    at,
                    &format!("rule[{index}].{key}"),
                    format!("{key} {NOT_SUPPORTED}; remove it"),
                );
            }
        }
    }

    fn key(&mut self, index: usize, field: &Spanned<OneOrMany>) -> Vec<KeySource> {
        let items = field.get_ref().items(field.span());
        if items.is_empty() {
            self.error(
                field.span().start,
                &format!("rule[{index}].key"),
                "must name at least one source; use [\"global\"] for one bucket shared by everyone",
            );
            return vec![KeySource::Global];
        }
        let mut sources: Vec<KeySource> = Vec::with_capacity(items.len());
        for (i, (text, span)) in items.into_iter().enumerate() {
            let path = format!("rule[{index}].key[{i}]");
            match parse_key_source(text) {
                Ok(source) if sources.contains(&source) => {
                    self.error(
                        span.start,
                        &path,
                        format!("\"{text}\" is already in this key; list each source once"),
                    );
                }
                Ok(source) => sources.push(source),
                Err(message) => self.error(span.start, &path, message),
            }
        }
        sources
    }

    fn matcher(&mut self, index: usize, raw: &RawMatch) -> MatchConfig {
        let base = format!("rule[{index}].match");
        MatchConfig {
            path: self.list(raw.path.as_ref(), &format!("{base}.path"), |p| {
                check_path(p, false).map(|()| p.to_owned())
            }),
            path_prefix: self.list(
                raw.path_prefix.as_ref(),
                &format!("{base}.path_prefix"),
                |p| check_path(p, false).map(|()| p.to_owned()),
            ),
            path_glob: self.list(raw.path_glob.as_ref(), &format!("{base}.path_glob"), |p| {
                check_path(p, true).map(|()| p.to_owned())
            }),
            method: self.list(raw.method.as_ref(), &format!("{base}.method"), parse_method),
            host: self.list(raw.host.as_ref(), &format!("{base}.host"), parse_host),
        }
    }

    /// Parses each element of a string-or-list field; errors name the element.
    fn list<T>(
        &mut self,
        field: Option<&Spanned<OneOrMany>>,
        path: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Vec<T> {
        let Some(field) = field else {
            return Vec::new();
        };
        let many = matches!(field.get_ref(), OneOrMany::Many(_));
        let items = field.get_ref().items(field.span());
        if items.is_empty() {
            self.warn(
                field.span().start,
                path,
                "an empty list restricts nothing; remove it",
            );
        }
        let mut values = Vec::with_capacity(items.len());
        for (i, (text, span)) in items.into_iter().enumerate() {
            match parse(text) {
                Ok(value) => values.push(value),
                Err(message) => {
                    let path = if many {
                        format!("{path}[{i}]")
                    } else {
                        path.to_owned()
                    };
                    self.error(span.start, &path, message);
                }
            }
        }
        values
    }

    fn cidrs(&mut self, field: Option<&Spanned<OneOrMany>>, path: &str) -> Vec<IpNet> {
        let Some(field) = field else {
            return Vec::new();
        };
        let many = matches!(field.get_ref(), OneOrMany::Many(_));
        let mut nets = Vec::new();
        for (i, (text, span)) in field.get_ref().items(field.span()).into_iter().enumerate() {
            let path = if many {
                format!("{path}[{i}]")
            } else {
                path.to_owned()
            };
            match parse_cidr(text) {
                Ok(net) => {
                    let trunc = net.trunc();
                    if trunc != net {
                        self.warn(
                            span.start,
                            &path,
                            format_args!("{net} has host bits set; it is read as {trunc}"),
                        );
                    }
                    nets.push(trunc);
                }
                Err(message) => self.error(span.start, &path, message),
            }
        }
        nets
    }

    fn socket_addr(
        &mut self,
        field: Option<&Spanned<String>>,
        path: &str,
        default: &str,
    ) -> SocketAddr {
        let fallback = SocketAddr::from(([0, 0, 0, 0], 0));
        let Some(field) = field else {
            return default.parse().unwrap_or(fallback);
        };
        match field.get_ref().parse() {
            Ok(addr) => addr,
            Err(_) => {
                self.error(
                    field.span().start,
                    path,
                    format!(
                        "\"{}\" is not IP:PORT; write an address such as \"{default}\" or \
                         \"[::]:8080\" (host names are not resolved)",
                        field.get_ref()
                    ),
                );
                fallback
            }
        }
    }

    fn duration(
        &mut self,
        field: Option<&Spanned<String>>,
        path: &str,
        default: Duration,
    ) -> Duration {
        let Some(field) = field else {
            return default;
        };
        match parse_duration(field.get_ref()) {
            Ok(duration) => duration,
            Err(message) => {
                self.error(field.span().start, path, message);
                default
            }
        }
    }

    /// A duration that must be longer than zero.
    fn timeout(
        &mut self,
        field: Option<&Spanned<String>>,
        path: &str,
        default: Duration,
    ) -> Duration {
        let duration = self.duration(field, path, default);
        if let (Some(field), true) = (field, duration.is_zero()) {
            self.error(
                field.span().start,
                path,
                format!(
                    "must be longer than zero (default \"{}s\")",
                    default.as_secs()
                ),
            );
            return default;
        }
        duration
    }

    fn int(
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
        match u64::try_from(value).ok().filter(|v| range.contains(v)) {
            Some(value) => value,
            None => {
                let allowed =
                    if *range.end() >= i64::MAX as u64 || *range.end() >= u64::from(u32::MAX) {
                        format!("must be at least {}", range.start())
                    } else {
                        format!("must be between {} and {}", range.start(), range.end())
                    };
                self.error(
                    field.span().start,
                    path,
                    format!("{value} is out of range: {allowed} (default {default})"),
                );
                default
            }
        }
    }

    fn choice<T: Copy>(
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
        let allowed: Vec<String> = options
            .iter()
            .map(|(name, _)| format!("\"{name}\""))
            .collect();
        self.error(
            field.span().start,
            path,
            format!(
                "\"{value}\" is not allowed; use one of {}",
                allowed.join(", ")
            ),
        );
        default
    }

    /// Where to report a problem with a whole table: its header if written
    /// as one, else its first key, else the top of the file.
    fn table_position(&self, header: &str, fields: &[Option<Range<usize>>]) -> usize {
        self.source
            .headers(header)
            .first()
            .copied()
            .or_else(|| fields.iter().flatten().map(|span| span.start).min())
            .unwrap_or(0)
    }
}

fn parse_upstream(text: &str) -> Result<Uri, String> {
    const HELP: &str = "write http://HOST[:PORT], for example \"http://127.0.0.1:3000\"";
    let uri: Uri = text
        .parse()
        .map_err(|_| format!("\"{text}\" is not a URI; {HELP}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(format!(
                "https upstreams are not supported yet; put the service on http:// or a TLS-terminating \
                 proxy in between ({HELP})"
            ))
        }
        _ => return Err(format!("\"{text}\" must start with http://; {HELP}")),
    }
    let authority = match uri.authority() {
        Some(authority) if !authority.host().is_empty() => authority.clone(),
        _ => return Err(format!("\"{text}\" has no host; {HELP}")),
    };
    if authority.as_str().contains('@') {
        return Err(format!(
            "\"{text}\" must not contain user information; {HELP}"
        ));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(format!(
            "\"{text}\" must not have a path or query: each request keeps its own path; {HELP}"
        ));
    }
    Uri::builder()
        .scheme(Scheme::HTTP)
        .authority(authority)
        .path_and_query("/")
        .build()
        .map_err(|err| format!("\"{text}\" is not a usable upstream ({err}); {HELP}"))
}

/// A size in the largest decimal unit that keeps it at least 1: "80 KB",
/// "8 MB", "1.5 GB" (one decimal below 10, whole numbers above).
fn format_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("GB", 1_000_000_000),
        ("MB", 1_000_000),
        ("KB", 1_000),
        ("bytes", 1),
    ];
    let (unit, size) = UNITS
        .into_iter()
        .find(|&(_, size)| bytes >= size)
        .unwrap_or(("bytes", 1));
    let value = bytes as f64 / size as f64;
    if value < 10.0 && size > 1 {
        let text = format!("{value:.1}");
        format!("{} {unit}", text.trim_end_matches(".0"))
    } else {
        format!("{value:.0} {unit}")
    }
}

/// `"HS256"`, `"HS256, HS384"`: the listed algorithms, for messages.
fn jwt_names(algorithms: &[JwtAlgorithm]) -> String {
    algorithms
        .iter()
        .map(|alg| alg.name())
        .collect::<Vec<_>>()
        .join(", ")
}

fn check_rule_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty; it appears in headers, metrics and logs".to_owned());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "\"{name}\" contains {bad:?}; a rule name may use only letters, digits, '_', '.' and '-' \
             because it appears in headers"
        ));
    }
    Ok(())
}

/// A tier value or bucket key as it appears in an error path: bare when
/// it is a bare TOML key, else quoted.
fn key_in_path(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
    {
        text.to_owned()
    } else {
        format!("{text:?}")
    }
}

/// Sources whose value never contains `|`, so that the parts of a bucket
/// key next to them can be told apart.
fn never_holds_a_bar(source: &KeySource) -> bool {
    matches!(source, KeySource::Ip | KeySource::Host | KeySource::Global)
}

/// An `overrides` key against the rule's `key`: the sources' values joined
/// by `|` (SPEC.md, Keys). Checked as far as that is decidable: a header,
/// query, path, method or JWT value may itself contain `|`, so parts are
/// only matched to sources before the first and after the last such source.
fn check_bucket_key(text: &str, sources: &[KeySource], ipv6_prefix: u8) -> Result<(), String> {
    let parts: Vec<&str> = text.split('|').collect();
    let any_free = sources.iter().any(|s| !never_holds_a_bar(s));
    if parts.len() < sources.len() || (parts.len() > sources.len() && !any_free) {
        let key = sources
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("|");
        return Err(format!(
            "\"{text}\" has {} part(s) but the rule's key has {} source(s) ({key}); a bucket key \
             is the sources' values joined by '|' in the order of key",
            parts.len(),
            sources.len()
        ));
    }
    let first_free = sources
        .iter()
        .position(|s| !never_holds_a_bar(s))
        .unwrap_or(sources.len());
    let last_free = sources.iter().rposition(|s| !never_holds_a_bar(s));
    for (i, source) in sources.iter().enumerate() {
        let part = if i < first_free {
            parts[i]
        } else if last_free.is_some_and(|last| i > last) {
            parts[parts.len() - (sources.len() - i)]
        } else {
            continue;
        };
        match source {
            KeySource::Ip => check_ip_part(part, ipv6_prefix)?,
            KeySource::Global if !part.is_empty() => {
                return Err(format!(
                    "\"{text}\": the part of the global source is always empty (\"{part}\" \
                     given); a bucket key is the sources' values joined by '|' in the order of key"
                ))
            }
            KeySource::Host if part.contains(':') || part != part.to_ascii_lowercase() => {
                return Err(format!(
                    "\"{text}\": the host part is lower-case and without a port, such as \
                     \"{}\"",
                    part.split(':').next().unwrap_or("").to_ascii_lowercase()
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The client-IP part of a bucket key, in the text the runtime keys by:
/// IPv4 dotted, IPv6 as its `server.ipv6_prefix` network.
fn check_ip_part(part: &str, ipv6_prefix: u8) -> Result<(), String> {
    let key_text = |ip: IpAddr| {
        let mut text = String::new();
        crate::key::client_ip::write_key(ip, ipv6_prefix, &mut text);
        text
    };
    let ip = match (part.parse::<IpAddr>(), part.parse::<IpNet>()) {
        (Ok(ip), _) => Some(ip),
        (_, Ok(IpNet::V6(net))) => Some(IpAddr::V6(net.addr())),
        (_, Ok(IpNet::V4(net))) => Some(IpAddr::V4(net.addr())),
        _ => None,
    };
    let Some(ip) = ip else {
        return Err(format!(
            "\"{part}\" is not a client IP; the ip part of a bucket key is an IPv4 address such as \
             \"203.0.113.7\" or an IPv6 network such as \"2001:db8:1:2::/{ipv6_prefix}\""
        ));
    };
    let want = key_text(ip);
    if want == part {
        return Ok(());
    }
    let why = match crate::key::client_ip::canonical(ip) {
        IpAddr::V6(_) if ipv6_prefix < 128 => {
            format!(" (IPv6 clients are keyed by their /{ipv6_prefix} network, server.ipv6_prefix)")
        }
        _ => String::new(),
    };
    Err(format!(
        "\"{part}\" is not how that client appears in a bucket key; write \"{want}\"{why}"
    ))
}

/// `sunset.link`: an absolute URI, sent in `Link: <...>; rel="sunset"`.
fn check_link(text: &str) -> Result<(), String> {
    let help = "write an absolute URI such as \"https://api.example.com/docs/migrate-to-v2\"";
    let uri: Uri = text
        .parse()
        .map_err(|_| format!("\"{text}\" is not a URI; {help}"))?;
    if uri.scheme().is_none() || uri.authority().is_none_or(|a| a.host().is_empty()) {
        return Err(format!("\"{text}\" is not an absolute URI; {help}"));
    }
    Ok(())
}

fn parse_key_source(text: &str) -> Result<KeySource, String> {
    const ALLOWED: &str =
        "allowed: ip, path, method, host, global, header:<name>, query:<name>, jwt:<claim>";
    match text {
        "ip" => return Ok(KeySource::Ip),
        "path" => return Ok(KeySource::Path),
        "method" => return Ok(KeySource::Method),
        "host" => return Ok(KeySource::Host),
        "global" => return Ok(KeySource::Global),
        _ => {}
    }
    if let Some(name) = text.strip_prefix("header:") {
        return HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
            .map(KeySource::Header)
            .map_err(|_| {
                format!("\"{name}\" is not a valid header name (for example header:x-api-key)")
            });
    }
    if let Some(name) = text.strip_prefix("query:") {
        if name.is_empty() {
            return Err("query: needs a parameter name, for example query:api_key".to_owned());
        }
        return Ok(KeySource::Query(name.to_owned()));
    }
    if let Some(claim) = text.strip_prefix("jwt:") {
        if claim.is_empty() {
            return Err(
                "jwt: needs a claim name, for example jwt:sub (or jwt:org.id for a \
                        nested claim)"
                    .to_owned(),
            );
        }
        if claim.split('.').any(str::is_empty) {
            return Err(format!(
                "\"{text}\" has an empty claim name between dots; a nested claim is written \
                 jwt:org.id"
            ));
        }
        return Ok(KeySource::Jwt(ClaimPath(
            claim.split('.').map(str::to_owned).collect(),
        )));
    }
    Err(format!("unknown key source \"{text}\"; {ALLOWED}"))
}

/// A path, prefix or glob in `match`: written the way requests look after
/// normalisation, since that is what it is compared with.
fn check_path(path: &str, glob: bool) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!(
            "\"{path}\" must start with '/', for example \"/api/search\""
        ));
    }
    if path.contains('?') {
        return Err(format!(
            "\"{path}\": the query is not part of the path; remove it from '?'"
        ));
    }
    if path.contains('#') {
        return Err(format!(
            "\"{path}\": a fragment never reaches the server; remove it from '#'"
        ));
    }
    if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "\"{path}\" contains a space or control character; percent-encode it"
        ));
    }
    let segments: Vec<&str> = path[1..].split('/').collect();
    let last = segments.len() - 1;
    for (i, segment) in segments.iter().enumerate() {
        if segment.is_empty() && i != last {
            return Err(format!(
                "\"{path}\" contains \"//\", which requests have collapsed to \"/\" before matching"
            ));
        }
        if matches!(*segment, "." | "..") {
            return Err(format!(
                "\"{path}\" contains a \"{segment}\" segment, which requests have resolved before \
                 matching; write the resolved path"
            ));
        }
        if glob && segment.contains('*') && !matches!(*segment, "*" | "**") {
            return Err(format!(
                "\"{path}\": '*' and '**' must be a whole segment (\"/api/*/report\", \"/static/**\")"
            ));
        }
    }
    let bytes = path.as_bytes();
    for (i, _) in path.match_indices('%') {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        let Some(value) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) else {
            return Err(format!(
                "\"{path}\" has a '%' not followed by two hex digits"
            ));
        };
        if value.is_ascii_alphanumeric() || matches!(value, b'-' | b'.' | b'_' | b'~') {
            return Err(format!(
                "\"{path}\": %{:02X} is '{}', which requests have decoded before matching; write '{}'",
                value, value as char, value as char
            ));
        }
    }
    Ok(())
}

fn parse_method(text: &str) -> Result<Method, String> {
    let upper = text.to_ascii_uppercase();
    if upper.is_empty() {
        return Err("a method must not be empty (for example \"GET\")".to_owned());
    }
    Method::from_bytes(upper.as_bytes())
        .map_err(|_| format!("\"{text}\" is not an HTTP method (for example \"GET\" or \"POST\")"))
}

fn parse_host(text: &str) -> Result<String, String> {
    let help = "write a host name such as \"api.example.com\" (a port is ignored)";
    if text.is_empty() || text.contains('@') || text.contains('/') {
        return Err(format!("\"{text}\" is not a host; {help}"));
    }
    let authority =
        Authority::from_str(text).map_err(|_| format!("\"{text}\" is not a host; {help}"))?;
    let host = authority.host();
    if host.is_empty() {
        return Err(format!("\"{text}\" is not a host; {help}"));
    }
    Ok(host.to_ascii_lowercase())
}

fn parse_cidr(text: &str) -> Result<IpNet, String> {
    if let Ok(net) = text.parse::<IpNet>() {
        return Ok(net);
    }
    text.parse::<IpAddr>().map(IpNet::from).map_err(|_| {
        format!(
            "\"{text}\" is not a CIDR or an IP address; write for example \"10.0.0.0/8\", \
             \"2001:db8::/32\" or \"192.0.2.7\""
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPSTREAM: &str = "[server]\nupstream = \"http://127.0.0.1:3000\"\n";

    fn valid(text: &str) -> Config {
        match Config::from_toml(text, "test.toml") {
            Ok(config) => config,
            Err(errors) => panic!("expected a valid config, got:\n{errors}"),
        }
    }

    /// The error lines, as `check` would print them.
    fn errors(text: &str) -> Vec<String> {
        match Config::from_toml(text, "test.toml") {
            Ok(_) => panic!("expected errors for:\n{text}"),
            Err(errors) => errors.to_string().lines().map(str::to_owned).collect(),
        }
    }

    fn only_error(text: &str) -> String {
        let mut errors = errors(text);
        assert_eq!(errors.len(), 1, "{errors:#?}");
        errors.remove(0)
    }

    #[test]
    fn fills_in_the_defaults_of_the_spec() {
        let config = valid(UPSTREAM);
        let s = &config.server;
        assert_eq!(s.listen, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(s.upstream, "http://127.0.0.1:3000/".parse::<Uri>().unwrap());
        assert_eq!(s.workers, 0);
        assert!(s.trusted_proxies.is_empty());
        assert_eq!(s.connect_timeout, Duration::from_secs(2));
        assert_eq!(s.upstream_timeout, Duration::from_secs(60));
        assert_eq!(s.header_read_timeout, Duration::from_secs(10));
        assert_eq!(s.max_connections, 10_000);
        assert_eq!(s.shutdown_grace, Duration::from_secs(30));
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
    fn a_rule_with_only_name_and_rate_takes_the_defaults() {
        let config = valid(&format!(
            "{UPSTREAM}[[rule]]\nname = \"per-ip\"\nrate = \"100/m\"\n"
        ));
        let rule = &config.rules[0];
        assert_eq!(rule.name, "per-ip");
        assert_eq!(rule.key, vec![KeySource::Ip]);
        assert_eq!(rule.missing, MissingPolicy::Shared);
        assert_eq!(rule.algorithm, AlgorithmKind::TokenBucket);
        assert_eq!(
            rule.limits,
            vec![LimitConfig {
                rate: Rate {
                    count: 100,
                    period: Duration::from_secs(60)
                },
                capacity: 100
            }]
        );
        assert_eq!(rule.cost, 1);
        assert!(!rule.shadow);
        assert_eq!(rule.on_limit, OnLimit::Reject);
        assert_eq!(rule.max_in_flight, None);
        assert!(rule.matcher.path.is_empty() && rule.matcher.method.is_empty());
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
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
        assert_eq!(s.upstream.to_string(), "http://backend.internal:3000/");
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
                capacity: 2
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
        // Unsupported keys are errors, but never "unknown field".
        let text = r#"
[server]
upstream = "http://127.0.0.1:3000"
[store]
backend = "redis"
[store.redis]
url = "redis://127.0.0.1:6379"
urls = ["redis://a", "redis://b"]
cluster = false
mode = "strict"
sync_interval = "50ms"
timeout = "20ms"
on_error = "local"
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
"#;
        let lines = errors(text);
        assert!(lines.iter().all(|l| !l.contains("unknown")), "{lines:#?}");
        assert!(
            lines.iter().all(|l| l.contains("not supported")),
            "{lines:#?}"
        );
        // Only charge and refund_on are left of the rule keys.
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert_eq!(lines[0], "test.toml:5:11: store.backend: backend = \"redis\" is not supported by this version of sluice yet; use \"memory\"");
        assert_eq!(lines[1], "test.toml:6:1: store.redis: [store.redis] is not supported by this version of sluice yet; remove it");
        assert_eq!(lines[2], "test.toml:29:10: rule[0].charge: charge is not supported by this version of sluice yet; remove it");
        assert_eq!(lines[3], "test.toml:30:13: rule[0].refund_on: refund_on is not supported by this version of sluice yet; remove it");
    }

    #[test]
    fn an_unsupported_key_written_as_dotted_table_is_placed_at_its_rule() {
        let lines = errors(&format!(
            "{UPSTREAM}[[rule]]\nname = \"a\"\nrate = \"1/s\"\ncharge.a = 3\n"
        ));
        assert_eq!(lines, vec!["test.toml:3:1: rule[0].charge: charge is not supported by this version of sluice yet; remove it"]);
    }

    /// Sets `name` to `value` for this test binary. Each test uses its own
    /// variable, so parallel tests never see each other's values.
    fn set_env(name: &str, value: &str) {
        std::env::set_var(name, value);
    }

    fn jwt_rule() -> &'static str {
        "[[rule]]\nname = \"a\"\nrate = \"1/s\"\nkey = \"jwt:sub\"\n"
    }

    #[test]
    fn a_jwt_key_needs_identity_jwt() {
        let line = only_error(&format!(
            "{UPSTREAM}[[rule]]\nname = \"a\"\nrate = \"1/s\"\nkey = [\"ip\", \"jwt:sub\"]\n"
        ));
        assert_eq!(
            line,
            "test.toml:6:14: rule[0].key[1]: \"jwt:sub\" needs an [identity.jwt] table saying \
             how tokens are verified"
        );
    }

    #[test]
    fn jwt_claims_may_be_nested_but_not_empty() {
        set_env("SLUICE_TEST_NESTED_SECRET", &"s".repeat(32));
        let config = valid(&format!(
            "{UPSTREAM}[identity.jwt]\nsecret_env = \"SLUICE_TEST_NESTED_SECRET\"\n\
             [[rule]]\nname = \"a\"\nrate = \"1/s\"\nkey = [\"jwt:org.id\", \"jwt:sub\"]\n"
        ));
        assert_eq!(
            config.rules[0].key,
            vec![
                KeySource::Jwt(ClaimPath(vec!["org".to_owned(), "id".to_owned()])),
                KeySource::Jwt(ClaimPath(vec!["sub".to_owned()])),
            ]
        );
        let lines = errors(&format!(
            "{UPSTREAM}[identity.jwt]\nsecret_env = \"SLUICE_TEST_NESTED_SECRET\"\n\
             [[rule]]\nname = \"a\"\nrate = \"1/s\"\nkey = [\"jwt:\", \"jwt:a..b\", \"jwt:.a\"]\n"
        ));
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(
            lines[0].starts_with("test.toml:8:8: rule[0].key[0]: jwt: needs a claim name"),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].starts_with(
                "test.toml:8:16: rule[0].key[1]: \"jwt:a..b\" has an empty claim name"
            ),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].starts_with("test.toml:8:28: rule[0].key[2]: \"jwt:.a\" has an empty"),
            "{}",
            lines[2]
        );
    }

    #[test]
    fn identity_jwt_defaults_to_hs256_from_the_authorization_header() {
        set_env(
            "SLUICE_TEST_DEFAULTS_SECRET",
            "0123456789abcdef0123456789abcdef",
        );
        let config = valid(&format!(
            "{UPSTREAM}[identity.jwt]\nsecret_env = \"SLUICE_TEST_DEFAULTS_SECRET\"\n{}",
            jwt_rule()
        ));
        let jwt = config.identity.jwt.expect("identity.jwt");
        assert_eq!(jwt.header, "authorization");
        assert_eq!(jwt.algorithms, vec![JwtAlgorithm::HS256]);
        assert!(jwt.verify);
        assert!(
            matches!(&jwt.key, Some(JwtKey::Secret(s)) if s == b"0123456789abcdef0123456789abcdef")
        );
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    }

    #[test]
    fn an_unset_or_empty_secret_variable_is_an_error_naming_it() {
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nsecret_env = \"SLUICE_TEST_NEVER_SET\"\n{}",
            jwt_rule()
        ));
        assert_eq!(
            line,
            "test.toml:4:14: identity.jwt.secret_env: the environment variable \
             SLUICE_TEST_NEVER_SET is not set; it must hold the secret tokens are signed with \
             (HS256)"
        );
        set_env("SLUICE_TEST_EMPTY_SECRET", "");
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nsecret_env = \"SLUICE_TEST_EMPTY_SECRET\"\n{}",
            jwt_rule()
        ));
        assert!(
            line.starts_with("test.toml:4:14: identity.jwt.secret_env: the environment variable SLUICE_TEST_EMPTY_SECRET is empty"),
            "{line}"
        );
    }

    #[test]
    fn a_short_secret_is_a_warning_that_never_shows_it() {
        set_env("SLUICE_TEST_SHORT_SECRET", "hunter2");
        let config = valid(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = [\"HS256\", \"HS512\"]\n\
             secret_env = \"SLUICE_TEST_SHORT_SECRET\"\n{}",
            jwt_rule()
        ));
        assert_eq!(
            config.warnings,
            vec![
                "test.toml:5:14: identity.jwt.secret_env: the secret in SLUICE_TEST_SHORT_SECRET \
                  is 7 bytes; use at least 64 for HS256, HS512 (RFC 7518 §3.2), or it may be \
                  guessed offline from any token"
            ]
        );
    }

    #[test]
    fn none_and_unknown_algorithms_are_errors_listing_the_allowed_ones() {
        let lines = errors(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = [\"none\", \"PS256\", \"hs256\"]\nverify = false\n{}",
            jwt_rule()
        ));
        let allowed = "\"HS256\", \"HS384\", \"HS512\", \"RS256\", \"RS384\", \"RS512\", \"ES256\", \"ES384\"";
        assert_eq!(
            lines,
            vec![
                format!("test.toml:4:15: identity.jwt.algorithms[0]: \"none\" is never accepted: an unsigned token proves nothing, anyone can write one; use one of {allowed}"),
                format!("test.toml:4:23: identity.jwt.algorithms[1]: \"PS256\" is not an algorithm sluice verifies; use one of {allowed}"),
                format!("test.toml:4:32: identity.jwt.algorithms[2]: \"hs256\" is not an algorithm sluice verifies; use one of {allowed}"),
            ]
        );
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = []\nverify = false\n{}",
            jwt_rule()
        ));
        assert!(
            line.starts_with(
                "test.toml:4:14: identity.jwt.algorithms: must list at least one algorithm"
            ),
            "{line}"
        );
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = \"None\"\nverify = false\n{}",
            jwt_rule()
        ));
        assert!(
            line.starts_with("test.toml:4:14: identity.jwt.algorithms: \"None\" is never accepted"),
            "{line}"
        );
    }

    #[test]
    fn hmac_and_public_key_algorithms_cannot_be_mixed() {
        let lines = errors(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = [\"RS256\", \"HS256\", \"RS256\"]\n\
             public_key_file = \"tests/fixtures/jwt/rsa-public.pem\"\n{}",
            jwt_rule()
        ));
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(
            lines[0].starts_with(
                "test.toml:4:24: identity.jwt.algorithms[1]: \"HS256\" cannot be listed with \"RS256\": HMAC and public-key algorithms together"
            ),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains("algorithm confusion"), "{}", lines[0]);
        assert_eq!(
            lines[1],
            "test.toml:4:33: identity.jwt.algorithms[2]: \"RS256\" is already listed; list each algorithm once"
        );
    }

    #[test]
    fn public_key_algorithms_read_a_pem_file() {
        let config = valid(&format!(
            "{UPSTREAM}[identity.jwt]\nheader = \"X-Token\"\nalgorithms = [\"RS256\", \"RS512\"]\n\
             public_key_file = \"tests/fixtures/jwt/rsa-public.pem\"\n{}",
            jwt_rule()
        ));
        let jwt = config.identity.jwt.expect("identity.jwt");
        assert_eq!(jwt.header, "x-token");
        assert_eq!(
            jwt.algorithms,
            vec![JwtAlgorithm::RS256, JwtAlgorithm::RS512]
        );
        assert!(
            matches!(&jwt.key, Some(JwtKey::PublicKeyPem(pem)) if pem.starts_with(b"-----BEGIN PUBLIC KEY-----"))
        );
        valid(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = \"ES256\"\n\
             public_key_file = \"tests/fixtures/jwt/ec256-public.pem\"\n{}",
            jwt_rule()
        ));
    }

    #[test]
    fn a_key_file_that_is_missing_or_does_not_fit_is_an_error_at_its_path() {
        let cases = [
            ("RS256", "tests/fixtures/jwt/nowhere.pem", "cannot read tests/fixtures/jwt/nowhere.pem: "),
            ("RS256", "tests/fixtures/jwt/README.md", "tests/fixtures/jwt/README.md is not a PEM public key"),
            ("RS256", "tests/fixtures/jwt/rsa-private.pem", "tests/fixtures/jwt/rsa-private.pem holds a private key"),
            ("RS256", "tests/fixtures/jwt/ec256-public.pem", "tests/fixtures/jwt/ec256-public.pem holds no key usable for RS256 (an RSA public key)"),
            ("ES384", "tests/fixtures/jwt/ec256-public.pem", "tests/fixtures/jwt/ec256-public.pem holds no key usable for ES384 (an EC P-384 public key)"),
        ];
        for (alg, file, message) in cases {
            let line = only_error(&format!(
                "{UPSTREAM}[identity.jwt]\nalgorithms = \"{alg}\"\npublic_key_file = \"{file}\"\n{}",
                jwt_rule()
            ));
            let expected = format!("test.toml:5:19: identity.jwt.public_key_file: {message}");
            assert!(line.starts_with(&expected), "{line}\nwanted {expected}");
        }
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = \"RS256\"\n{}",
            jwt_rule()
        ));
        assert_eq!(line, "test.toml:3:1: identity.jwt.public_key_file: RS256 tokens need public_key_file = \"path/to/public.pem\" (or jwks_file = \"path/to/jwks.json\")");
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn an_endless_key_file_is_refused_after_a_mebibyte() {
        // Seen with fuzz/config: `/dev/zero` was read until memory ran out.
        for key in ["public_key_file", "jwks_file"] {
            let line = only_error(&format!(
                "{UPSTREAM}[identity.jwt]\nalgorithms = \"RS256\"\n{key} = \"/dev/zero\"\n{}",
                jwt_rule()
            ));
            assert!(
                line.ends_with(&format!(
                    "identity.jwt.{key}: cannot read /dev/zero: it is larger than 1024 KiB, \
                     which no key file is"
                )),
                "{line}"
            );
        }
    }

    #[test]
    fn a_jwks_file_is_the_other_way_to_give_public_keys() {
        let config = valid(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = [\"RS256\", \"ES256\"]\n\
             jwks_file = \"tests/fixtures/jwt/jwks.json\"\n{}",
            jwt_rule()
        ));
        let jwt = config.identity.jwt.expect("identity.jwt");
        assert!(matches!(jwt.key, Some(JwtKey::Jwks(_))));

        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = \"RS256\"\n\
             public_key_file = \"tests/fixtures/jwt/rsa-public.pem\"\n\
             jwks_file = \"tests/fixtures/jwt/jwks.json\"\n{}",
            jwt_rule()
        ));
        assert_eq!(line, "test.toml:6:13: identity.jwt.jwks_file: give either public_key_file or jwks_file, not both");
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = \"RS256\"\n\
             jwks_file = \"tests/fixtures/jwt/jwks.json\"\n{}",
            jwt_rule()
        ));
        assert_eq!(line, "test.toml:5:13: identity.jwt.jwks_file: tests/fixtures/jwt/jwks.json key \"ec-1\" is for ES256, which algorithms (RS256) does not list");
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = \"RS256\"\n\
             jwks_file = \"tests/fixtures/jwt/rsa-public.pem\"\n{}",
            jwt_rule()
        ));
        assert!(line.starts_with("test.toml:5:13: identity.jwt.jwks_file: tests/fixtures/jwt/rsa-public.pem is not a JWKS"), "{line}");
        set_env("SLUICE_TEST_JWKS_SECRET", &"s".repeat(32));
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nsecret_env = \"SLUICE_TEST_JWKS_SECRET\"\n\
             jwks_file = \"tests/fixtures/jwt/jwks.json\"\n{}",
            jwt_rule()
        ));
        assert!(line.starts_with("test.toml:5:13: identity.jwt.jwks_file: HS256 tokens are verified with a shared secret (secret_env), not a public key; remove jwks_file"), "{line}");
    }

    #[test]
    fn a_relative_key_file_is_read_from_the_config_files_directory() {
        let dir = tempfile::tempdir().unwrap();
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jwt");
        std::fs::copy(fixtures.join("rsa-public.pem"), dir.path().join("key.pem")).unwrap();
        let path = dir.path().join("sluice.toml");
        std::fs::write(
            &path,
            format!(
                "{UPSTREAM}[identity.jwt]\nalgorithms = \"RS256\"\npublic_key_file = \"key.pem\"\n{}",
                jwt_rule()
            ),
        )
        .unwrap();
        Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn the_key_must_fit_the_algorithm_family() {
        set_env("SLUICE_TEST_FAMILY_SECRET", &"s".repeat(32));
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nsecret_env = \"SLUICE_TEST_FAMILY_SECRET\"\n\
             public_key_file = \"tests/fixtures/jwt/rsa-public.pem\"\n{}",
            jwt_rule()
        ));
        assert!(line.starts_with("test.toml:5:19: identity.jwt.public_key_file: HS256 tokens are verified with a shared secret (secret_env), not a public key"), "{line}");
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nalgorithms = [\"ES256\"]\nsecret_env = \"SLUICE_TEST_FAMILY_SECRET\"\n\
             public_key_file = \"tests/fixtures/jwt/ec256-public.pem\"\n{}",
            jwt_rule()
        ));
        assert!(line.starts_with("test.toml:5:14: identity.jwt.secret_env: ES256 tokens are verified with a public key (public_key_file or jwks_file), not a shared secret"), "{line}");
    }

    #[test]
    fn verify_false_needs_no_key_and_is_a_warning() {
        let config = valid(&format!(
            "{UPSTREAM}[identity.jwt]\nsecret_env = \"SLUICE_TEST_NEVER_SET\"\nverify = false\n{}",
            jwt_rule()
        ));
        let jwt = config.identity.jwt.expect("identity.jwt");
        assert!(!jwt.verify);
        assert!(jwt.key.is_none());
        assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
        assert!(
            config.warnings[0].starts_with("test.toml:5:10: identity.jwt.verify: tokens are read without checking their signature"),
            "{}",
            config.warnings[0]
        );
    }

    #[test]
    fn a_bad_header_name_is_an_error() {
        let line = only_error(&format!(
            "{UPSTREAM}[identity.jwt]\nheader = \"not a header\"\nverify = false\n{}",
            jwt_rule()
        ));
        assert_eq!(line, "test.toml:4:10: identity.jwt.header: \"not a header\" is not a valid header name (default \"authorization\")");
    }

    #[test]
    fn reports_every_error_at_once_in_file_order() {
        let text = r#"[server]
listen = "localhost:80"
upstream = "https://example.com"
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
            "test.toml:3:12: server.upstream: https upstreams are not supported yet",
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
    fn upstream_is_required() {
        assert_eq!(
            only_error("[server]\nlisten = \"0.0.0.0:80\"\n"),
            "test.toml:1:1: server.upstream: is required: the address of the protected service, \
             for example upstream = \"http://127.0.0.1:3000\""
        );
        assert!(only_error("").starts_with("test.toml:1:1: server.upstream: is required"));
    }

    #[test]
    fn upstream_is_scheme_and_authority_only() {
        for (upstream, message) in [
            ("127.0.0.1:3000", "must start with http://"),
            ("ftp://h", "must start with http://"),
            ("http://h/api", "must not have a path or query"),
            ("http://h/?a=1", "must not have a path or query"),
            ("http://u:p@h", "must not contain user information"),
            ("http:///x", "not a URI"),
            ("not a uri", "not a URI"),
        ] {
            let line = only_error(&format!("[server]\nupstream = \"{upstream}\"\n"));
            assert!(
                line.starts_with("test.toml:2:12: server.upstream: "),
                "{line}"
            );
            assert!(line.contains(message), "{upstream}: {line}");
        }
        let config = valid("[server]\nupstream = \"http://Svc:8000/\"\n");
        assert_eq!(config.server.upstream.host(), Some("Svc"));
        assert_eq!(config.server.upstream.port_u16(), Some(8000));
        assert_eq!(config.server.upstream.path(), "/");
    }

    #[test]
    fn burst_defaults_to_the_count_and_may_be_zero_only_for_a_closed_route() {
        let config = valid(&format!(
            "{UPSTREAM}[[rule]]\nname = \"closed\"\nrate = \"0/m\"\n[[rule]]\nname = \"z\"\nrate = \"0/m\"\nburst = 0\n"
        ));
        assert_eq!(config.rules[0].limits[0].capacity, 0);
        assert_eq!(config.rules[1].limits[0].capacity, 0);
        assert_eq!(config.warnings.len(), 2, "{:?}", config.warnings);
        assert!(
            config.warnings[0].starts_with("test.toml:5:8: rule[0].rate: \"0/m\" closes the route"),
            "{:?}",
            config.warnings
        );
    }

    /// One rule named "a" after [`UPSTREAM`]: its fields start on line 5.
    fn rule_a(fields: &str) -> String {
        format!("{UPSTREAM}[[rule]]\nname = \"a\"\n{fields}")
    }

    fn limit(count: u64, secs: u64, capacity: u64) -> LimitConfig {
        LimitConfig {
            rate: Rate {
                count,
                period: Duration::from_secs(secs),
            },
            capacity,
        }
    }

    #[test]
    fn algorithm_defaults_to_the_token_bucket_and_takes_the_windows_and_the_log() {
        let config = valid(&rule_a("rate = \"100/m\"\n"));
        assert_eq!(config.rules[0].algorithm, AlgorithmKind::TokenBucket);
        for kind in [
            AlgorithmKind::TokenBucket,
            AlgorithmKind::FixedWindow,
            AlgorithmKind::SlidingWindow,
            AlgorithmKind::SlidingLog,
        ] {
            let config = valid(&rule_a(&format!(
                "algorithm = \"{}\"\nrate = \"100/m\"\n",
                kind.name()
            )));
            let rule = &config.rules[0];
            assert_eq!(rule.algorithm, kind);
            assert_eq!(rule.limits, vec![limit(100, 60, 100)], "{kind:?}");
            assert_eq!(rule.cost, 1);
        }
    }

    #[test]
    fn an_unknown_algorithm_lists_all_six() {
        assert_eq!(
            only_error(&rule_a("rate = \"1/s\"\nalgorithm = \"gcra\"\n")),
            "test.toml:6:13: rule[0].algorithm: unknown algorithm \"gcra\"; allowed: \
             \"token_bucket\", \"leaky_bucket\", \"fixed_window\", \"sliding_window\", \
             \"sliding_log\", \"concurrency\""
        );
    }

    #[test]
    fn limits_are_kept_in_file_order_each_with_its_count_as_capacity() {
        let config = valid(&rule_a(
            "algorithm = \"fixed_window\"\nlimits = [\"1000/h\", \"100/m\"]\n",
        ));
        assert_eq!(
            config.rules[0].limits,
            vec![limit(1000, 3600, 1000), limit(100, 60, 100)]
        );
        let config = valid(&rule_a("limits = [\"5/15m\"]\n"));
        assert_eq!(config.rules[0].limits, vec![limit(5, 900, 5)]);
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    }

    #[test]
    fn burst_sizes_the_shortest_period_limit_even_when_it_is_listed_second() {
        let config = valid(&rule_a(
            "limits = [\"1000/h\", \"100/m\", \"10000/d\"]\nburst = 20\n",
        ));
        assert_eq!(
            config.rules[0].limits,
            vec![
                limit(1000, 3600, 1000),
                limit(100, 60, 20),
                limit(10_000, 86_400, 10_000)
            ]
        );
        assert_eq!(
            only_error(&rule_a("limits = [\"1000/h\", \"100/m\"]\nburst = 0\n")),
            "test.toml:6:9: rule[0].burst: 0 must be at least 1, or no request could ever pass; \
             it defaults to the COUNT of the shortest-period limit"
        );
    }

    #[test]
    fn a_rule_needs_exactly_one_of_rate_and_limits() {
        assert_eq!(
            only_error(&rule_a("")),
            "test.toml:3:1: rule[0]: rate is required: COUNT/PERIOD such as rate = \"100/m\", \
             or limits = [\"100/m\", \"1000/h\"] for several limits that must all hold"
        );
        assert_eq!(
            only_error(&rule_a("rate = \"1/s\"\nlimits = [\"100/m\"]\n")),
            "test.toml:6:10: rule[0].limits: cannot be used together with rate (line 5); write \
             one limit as rate = \"100/m\" or several as limits = [\"100/m\", \"1000/h\"]"
        );
        // Reported at whichever comes second, and each is still checked.
        assert_eq!(
            errors(&rule_a("limits = [\"1/x\"]\nrate = \"1/s\"\n")),
            vec![
                "test.toml:5:11: rule[0].limits[0]: \"x\" is not a valid PERIOD; write \
                 COUNT/PERIOD with a whole COUNT (0 closes the route) and a PERIOD that is a unit \
                 s, m, h or d or a duration such as 15m, 2s or 500ms (for example \"100/m\" or \
                 \"5/15m\")",
                "test.toml:6:8: rule[0].rate: cannot be used together with limits (line 5); write \
                 one limit as rate = \"100/m\" or several as limits = [\"100/m\", \"1000/h\"]",
            ]
        );
    }

    #[test]
    fn limits_must_be_a_non_empty_list_of_valid_rates() {
        assert_eq!(
            only_error(&rule_a("limits = []\n")),
            "test.toml:5:10: rule[0].limits: must list at least one rate, such as \
             limits = [\"100/m\", \"1000/h\"]"
        );
        assert_eq!(
            only_error(&rule_a("limits = \"100/m\"\n")),
            "test.toml:5:10: rule[0].limits: must be a list of rates, such as \
             limits = [\"100/m\"]; for a single limit rate = \"100/m\" works too"
        );
        let line = only_error(&rule_a("limits = [\"100/m\", \"5/x\"]\nburst = 0\n"));
        assert!(
            line.starts_with("test.toml:5:20: rule[0].limits[1]: \"x\" is not a valid PERIOD"),
            "{line}"
        );
    }

    #[test]
    fn two_limits_with_the_same_period_are_an_error_at_the_second() {
        assert_eq!(
            only_error(&rule_a("limits = [\"100/m\", \"1000/h\", \"60/60s\"]\n")),
            "test.toml:5:30: rule[0].limits[2]: \"60/60s\" has the same period as limits[0] \
             \"100/m\"; each limit needs its own period, so keep only one of them"
        );
    }

    #[test]
    fn burst_is_only_for_the_token_and_leaky_buckets() {
        for kind in ["fixed_window", "sliding_window", "sliding_log"] {
            assert_eq!(
                only_error(&rule_a(&format!(
                    "algorithm = \"{kind}\"\nrate = \"10/s\"\nburst = 20\n"
                ))),
                format!(
                    "test.toml:7:9: rule[0].burst: only algorithm = \"token_bucket\" (its capacity) \
                     and \"leaky_bucket\" (how many may wait) take a burst: the capacity of a \
                     {kind} limit is its COUNT; remove burst, or change the COUNT"
                )
            );
        }
    }

    #[test]
    fn window_and_log_counts_must_fit_in_32_bits() {
        for kind in ["fixed_window", "sliding_window", "sliding_log"] {
            assert_eq!(
                only_error(&rule_a(&format!(
                    "algorithm = \"{kind}\"\nlimits = [\"4294967295/h\", \"4294967296/d\"]\n"
                ))),
                format!(
                    "test.toml:6:27: rule[0].limits[1]: the COUNT 4294967296 is too large for \
                     {kind}, which counts in 32 bits; at most 4294967295"
                )
            );
        }
        let config = valid(&rule_a("rate = \"4294967296/d\"\n"));
        assert_eq!(config.rules[0].limits[0].capacity, 4_294_967_296);
    }

    #[test]
    fn cost_defaults_to_one_and_must_be_a_whole_number_of_at_least_one() {
        assert_eq!(valid(&rule_a("rate = \"1/s\"\n")).rules[0].cost, 1);
        assert_eq!(
            valid(&rule_a("rate = \"10/s\"\ncost = 10\n")).rules[0].cost,
            10
        );
        assert_eq!(
            only_error(&rule_a("rate = \"10/s\"\ncost = 0\n")),
            "test.toml:6:8: rule[0].cost: 0 is out of range: must be at least 1 (default 1)"
        );
        assert_eq!(
            only_error(&rule_a("rate = \"10/s\"\ncost = -2\n")),
            "test.toml:6:8: rule[0].cost: -2 is out of range: must be at least 1 (default 1)"
        );
        let line = only_error(&rule_a("rate = \"10/s\"\ncost = 1.5\n"));
        assert!(
            line.starts_with("test.toml:6:8: invalid type: floating point `1.5`"),
            "{line}"
        );
    }

    #[test]
    fn cost_must_fit_in_the_capacity_of_every_open_limit() {
        assert_eq!(
            only_error(&rule_a("limits = [\"10/s\", \"5/m\"]\ncost = 6\n")),
            "test.toml:6:8: rule[0].cost: 6 can never fit in limits[1] \"5/m\", whose capacity is \
             5 (its COUNT): such a request would never be admitted; lower cost or raise that COUNT"
        );
        assert_eq!(
            only_error(&rule_a("rate = \"100/m\"\nburst = 3\ncost = 4\n")),
            "test.toml:7:8: rule[0].cost: 4 can never fit in rate \"100/m\", whose capacity is 3 \
             (its burst): such a request would never be admitted; lower cost or raise burst"
        );
        // A limit with a COUNT of 0 closes the route whatever the cost.
        let config = valid(&rule_a("limits = [\"0/s\", \"10/m\"]\ncost = 10\n"));
        assert_eq!(config.rules[0].cost, 10);
        assert_eq!(
            config.warnings,
            vec![
                "test.toml:5:11: rule[0].limits[0]: \"0/s\" closes the route: every matching \
                 request is limited"
            ]
        );
    }

    #[test]
    fn a_sliding_log_with_a_large_count_is_a_warning_at_that_limit() {
        let config = valid(&rule_a(
            "algorithm = \"sliding_log\"\nlimits = [\"10000/m\", \"50000/h\"]\n",
        ));
        assert_eq!(
            config.warnings,
            vec![
                "test.toml:6:22: rule[0].limits[1]: sliding_log keeps one 8-byte timestamp per \
                 admitted unit, so each key may hold 50000 of them (400 KB per key); \
                 algorithm = \"sliding_window\" keeps two counters per key instead"
            ]
        );
        let config = valid(&rule_a(
            "algorithm = \"sliding_log\"\nrate = \"2000000/d\"\n",
        ));
        assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
        assert!(
            config.warnings[0].starts_with("test.toml:6:8: rule[0].rate: sliding_log keeps"),
            "{:?}",
            config.warnings
        );
        assert!(
            config.warnings[0].contains("(16 MB per key)"),
            "{:?}",
            config.warnings
        );
        // The counters of the other algorithms do not grow with the COUNT.
        let config = valid(&rule_a(
            "algorithm = \"sliding_window\"\nrate = \"2000000/d\"\n",
        ));
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    }

    fn delay(secs: u64, max_queue: u64) -> OnLimit {
        OnLimit::Delay {
            max_delay: Duration::from_secs(secs),
            max_queue,
        }
    }

    #[test]
    fn on_limit_defaults_to_reject_and_delay_defaults_to_30s_and_a_queue_of_1000() {
        let config = valid(&rule_a("rate = \"10/s\"\non_limit = \"reject\"\n"));
        assert_eq!(config.rules[0].on_limit, OnLimit::Reject);
        for kind in ["token_bucket", "fixed_window", "sliding_log"] {
            let config = valid(&rule_a(&format!(
                "algorithm = \"{kind}\"\nrate = \"10/s\"\non_limit = \"delay\"\n"
            )));
            assert_eq!(config.rules[0].on_limit, delay(30, 1000), "{kind}");
            assert_eq!(config.rules[0].max_in_flight, None);
        }
    }

    #[test]
    fn delay_reads_max_delay_and_max_queue() {
        let config = valid(&rule_a(
            "rate = \"10/s\"\non_limit = \"delay\"\nmax_delay = \"1500ms\"\nmax_queue = 5\n",
        ));
        assert_eq!(
            config.rules[0].on_limit,
            OnLimit::Delay {
                max_delay: Duration::from_millis(1500),
                max_queue: 5
            }
        );
        assert_eq!(
            errors(&rule_a(
                "rate = \"10/s\"\non_limit = \"delay\"\nmax_delay = \"0s\"\nmax_queue = 0\n"
            )),
            vec![
                "test.toml:7:13: rule[0].max_delay: must be longer than zero (default \"30s\")",
                "test.toml:8:13: rule[0].max_queue: 0 is out of range: must be at least 1 \
                 (default 1000)",
            ]
        );
        let line = only_error(&rule_a(
            "rate = \"10/s\"\non_limit = \"delay\"\nmax_delay = \"soon\"\n",
        ));
        assert!(
            line.starts_with(
                "test.toml:7:13: rule[0].max_delay: \"soon\" does not start with a number"
            ),
            "{line}"
        );
        let line = only_error(&rule_a(
            "rate = \"10/s\"\non_limit = \"delay\"\nmax_delay = 30\n",
        ));
        assert!(
            line.starts_with("test.toml:7:13: invalid type: integer `30`"),
            "{line}"
        );
    }

    #[test]
    fn max_delay_and_max_queue_need_on_limit_delay() {
        assert_eq!(
            errors(&rule_a(
                "rate = \"10/s\"\nmax_delay = \"5s\"\nmax_queue = 10\n"
            )),
            vec![
                "test.toml:6:13: rule[0].max_delay: needs on_limit = \"delay\": by default \
                 (on_limit = \"reject\") a limited request is answered at once and never waits; \
                 add on_limit = \"delay\", or remove max_delay",
                "test.toml:7:13: rule[0].max_queue: needs on_limit = \"delay\": by default \
                 (on_limit = \"reject\") a limited request is answered at once and never waits; \
                 add on_limit = \"delay\", or remove max_queue",
            ]
        );
        assert_eq!(
            only_error(&rule_a(
                "rate = \"10/s\"\non_limit = \"reject\"\nmax_queue = 10\n"
            )),
            "test.toml:7:13: rule[0].max_queue: needs on_limit = \"delay\": with on_limit = \
             \"reject\" (line 6) a limited request is answered at once and never waits; set \
             on_limit = \"delay\", or remove max_queue"
        );
        // Not judged against an invalid on_limit or algorithm.
        assert_eq!(
            only_error(&rule_a(
                "rate = \"10/s\"\non_limit = \"wait\"\nmax_delay = \"5s\"\n"
            )),
            "test.toml:6:12: rule[0].on_limit: unknown on_limit \"wait\"; allowed: \"reject\" or \
             \"delay\""
        );
        let line = only_error(&rule_a(
            "rate = \"10/s\"\nalgorithm = \"leaky\"\nmax_queue = 10\n",
        ));
        assert!(
            line.starts_with("test.toml:6:13: rule[0].algorithm: unknown algorithm \"leaky\""),
            "{line}"
        );
    }

    #[test]
    fn sliding_window_cannot_delay() {
        assert_eq!(
            only_error(&rule_a(
                "algorithm = \"sliding_window\"\nrate = \"10/s\"\non_limit = \"delay\"\n\
                 max_queue = 10\n"
            )),
            "test.toml:7:12: rule[0].on_limit: delay is not supported with sliding_window; use \
             token_bucket, leaky_bucket, fixed_window or sliding_log"
        );
        let config = valid(&rule_a(
            "algorithm = \"sliding_window\"\nrate = \"10/s\"\non_limit = \"reject\"\n",
        ));
        assert_eq!(config.rules[0].on_limit, OnLimit::Reject);
    }

    #[test]
    fn a_shadow_rule_may_delay() {
        let config = valid(&rule_a(
            "rate = \"10/s\"\non_limit = \"delay\"\nshadow = true\n",
        ));
        assert!(config.rules[0].shadow);
        assert_eq!(config.rules[0].on_limit, delay(30, 1000));
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    }

    #[test]
    fn a_leaky_bucket_always_delays_and_its_burst_is_the_queue() {
        let config = valid(&rule_a("algorithm = \"leaky_bucket\"\nrate = \"10/s\"\n"));
        let rule = &config.rules[0];
        assert_eq!(rule.algorithm, AlgorithmKind::LeakyBucket);
        assert_eq!(rule.limits, vec![limit(10, 1, 10)]);
        assert_eq!(rule.on_limit, delay(30, 10));
        assert_eq!(rule.max_in_flight, None);
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
        // on_limit = "delay" is redundant but allowed; max_delay applies.
        let config = valid(&rule_a(
            "algorithm = \"leaky_bucket\"\nrate = \"10/s\"\nburst = 3\non_limit = \"delay\"\n\
             max_delay = \"2s\"\n",
        ));
        assert_eq!(config.rules[0].limits, vec![limit(10, 1, 3)]);
        assert_eq!(config.rules[0].on_limit, delay(2, 3));
        // A list of one rate is one rate.
        let config = valid(&rule_a(
            "algorithm = \"leaky_bucket\"\nlimits = [\"100/m\"]\n",
        ));
        assert_eq!(config.rules[0].limits, vec![limit(100, 60, 100)]);
        assert_eq!(config.rules[0].on_limit, delay(30, 100));
    }

    #[test]
    fn a_leaky_bucket_cannot_reject_at_once_or_take_max_queue() {
        assert_eq!(
            errors(&rule_a(
                "algorithm = \"leaky_bucket\"\nrate = \"10/s\"\non_limit = \"reject\"\n\
                 max_queue = 50\nmax_delay = \"1s\"\n"
            )),
            vec![
                "test.toml:7:12: rule[0].on_limit: a leaky bucket always holds requests until \
                 they can leave at its rate, so it cannot reject at once; remove on_limit, or use \
                 algorithm = \"token_bucket\" to answer at once",
                "test.toml:8:13: rule[0].max_queue: a leaky bucket's queue is its burst: how many \
                 requests may wait (default the rate's COUNT); remove max_queue and set burst \
                 instead",
            ]
        );
    }

    #[test]
    fn a_leaky_bucket_takes_one_rate_and_a_burst_of_at_least_one() {
        assert_eq!(
            only_error(&rule_a(
                "algorithm = \"leaky_bucket\"\nlimits = [\"10/s\", \"100/m\"]\nburst = 5\n"
            )),
            "test.toml:6:10: rule[0].limits: a leaky bucket lets requests leave at one constant \
             rate, so it takes a single rate such as rate = \"10/s\"; use token_bucket for several \
             limits that must all hold"
        );
        assert_eq!(
            only_error(&rule_a("algorithm = \"leaky_bucket\"\n")),
            "test.toml:3:1: rule[0]: rate is required: COUNT/PERIOD such as rate = \"100/m\", \
             or limits = [\"100/m\", \"1000/h\"] for several limits that must all hold"
        );
        assert_eq!(
            only_error(&rule_a(
                "algorithm = \"leaky_bucket\"\nrate = \"10/s\"\nburst = 0\n"
            )),
            "test.toml:7:9: rule[0].burst: 0 must be at least 1, or no request could ever pass; \
             it defaults to the rate's COUNT"
        );
    }

    #[test]
    fn a_closed_leaky_bucket_holds_nobody() {
        let config = valid(&rule_a("algorithm = \"leaky_bucket\"\nrate = \"0/m\"\n"));
        assert_eq!(config.rules[0].limits, vec![limit(0, 60, 0)]);
        assert_eq!(config.rules[0].on_limit, delay(30, 0));
        assert_eq!(
            config.warnings,
            vec![
                "test.toml:6:8: rule[0].rate: \"0/m\" closes the route: every matching request \
                 is limited"
            ]
        );
        let config = valid(&rule_a(
            "algorithm = \"leaky_bucket\"\nrate = \"0/m\"\nburst = 4\n",
        ));
        assert_eq!(config.warnings.len(), 2, "{:?}", config.warnings);
        assert_eq!(
            config.warnings[1],
            "test.toml:7:9: rule[0].burst: with a COUNT of 0 nothing ever leaves a leaky bucket, \
             so no request is admitted whatever the burst"
        );
    }

    #[test]
    fn a_leaky_bucket_takes_any_cost_of_at_least_one_and_counts_in_64_bits() {
        let config = valid(&rule_a(
            "algorithm = \"leaky_bucket\"\nrate = \"10/s\"\nburst = 2\ncost = 5\n",
        ));
        assert_eq!(config.rules[0].cost, 5);
        assert_eq!(
            only_error(&rule_a(
                "algorithm = \"leaky_bucket\"\nrate = \"10/s\"\ncost = 0\n"
            )),
            "test.toml:7:8: rule[0].cost: 0 is out of range: must be at least 1 (default 1)"
        );
        let config = valid(&rule_a(
            "algorithm = \"leaky_bucket\"\nrate = \"4294967296/d\"\n",
        ));
        assert_eq!(config.rules[0].limits[0].capacity, 4_294_967_296);
    }

    #[test]
    fn concurrency_counts_requests_in_flight_100_by_default() {
        let config = valid(&rule_a("algorithm = \"concurrency\"\n"));
        let rule = &config.rules[0];
        assert_eq!(rule.algorithm, AlgorithmKind::Concurrency);
        assert_eq!(rule.max_in_flight, Some(100));
        assert!(rule.limits.is_empty(), "{:?}", rule.limits);
        assert_eq!(rule.cost, 1);
        assert_eq!(rule.on_limit, OnLimit::Reject);
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
        let config = valid(&rule_a(
            "algorithm = \"concurrency\"\nmax_in_flight = 8\non_limit = \"delay\"\n\
             max_delay = \"5s\"\nmax_queue = 20\n",
        ));
        assert_eq!(config.rules[0].max_in_flight, Some(8));
        assert_eq!(config.rules[0].on_limit, delay(5, 20));
        assert_eq!(
            only_error(&rule_a("algorithm = \"concurrency\"\nmax_in_flight = 0\n")),
            "test.toml:6:17: rule[0].max_in_flight: 0 is out of range: must be at least 1 \
             (default 100)"
        );
    }

    #[test]
    fn concurrency_takes_no_rate_limits_burst_or_cost() {
        assert_eq!(
            errors(&rule_a(
                "algorithm = \"concurrency\"\nrate = \"10/s\"\nlimits = [\"x\"]\nburst = 5\n\
                 cost = 2\n"
            )),
            vec![
                "test.toml:6:8: rule[0].rate: concurrency counts requests in flight, so it takes \
                 no rate; bound them with max_in_flight (default 100), or choose another \
                 algorithm for a rate",
                "test.toml:7:10: rule[0].limits: concurrency counts requests in flight, so it \
                 takes no limits; bound them with max_in_flight (default 100), or choose another \
                 algorithm for a rate",
                "test.toml:8:9: rule[0].burst: concurrency counts requests in flight, so it takes \
                 no burst; max_in_flight (default 100) is how many may be in flight at once",
                "test.toml:9:8: rule[0].cost: concurrency counts requests in flight, so it takes \
                 no cost; each request holds one permit while it is in flight",
            ]
        );
    }

    #[test]
    fn max_in_flight_is_only_for_concurrency() {
        for kind in [
            "token_bucket",
            "leaky_bucket",
            "fixed_window",
            "sliding_window",
            "sliding_log",
        ] {
            assert_eq!(
                only_error(&rule_a(&format!(
                    "algorithm = \"{kind}\"\nrate = \"10/s\"\nmax_in_flight = 5\n"
                ))),
                format!(
                    "test.toml:7:17: rule[0].max_in_flight: only algorithm = \"concurrency\" takes \
                     max_in_flight: a {kind} rule is bounded by its rate; remove max_in_flight, or \
                     use algorithm = \"concurrency\" to bound requests in flight"
                )
            );
        }
        let line = only_error(&rule_a("rate = \"10/s\"\nmax_in_flight = 5\n"));
        assert!(
            line.starts_with(
                "test.toml:6:17: rule[0].max_in_flight: only algorithm = \"concurrency\" takes \
                 max_in_flight: a token_bucket rule"
            ),
            "{line}"
        );
    }

    #[test]
    fn sizes_are_shown_in_their_largest_decimal_unit() {
        assert_eq!(format_bytes(999), "999 bytes");
        assert_eq!(format_bytes(80_008), "80 KB");
        assert_eq!(format_bytes(1_500_000), "1.5 MB");
        assert_eq!(format_bytes(16_000_000), "16 MB");
        assert_eq!(format_bytes(34_359_738_360), "34 GB");
    }

    #[test]
    fn warns_when_every_peer_is_trusted() {
        let config = valid(&format!(
            "{UPSTREAM}trusted_proxies = [\"0.0.0.0/0\", \"::/0\", \"10.1.2.3/8\"]\n[[rule]]\nname = \"a\"\nrate = \"1/s\"\n"
        ));
        assert_eq!(
            config.server.trusted_proxies[2],
            "10.0.0.0/8".parse::<IpNet>().unwrap()
        );
        let warnings = config.warnings.join("\n");
        assert!(
            warnings.contains("0.0.0.0/0 trusts every peer"),
            "{warnings}"
        );
        assert!(warnings.contains("::/0 trusts every peer"), "{warnings}");
        assert!(
            warnings.contains("10.1.2.3/8 has host bits set; it is read as 10.0.0.0/8"),
            "{warnings}"
        );
    }

    #[test]
    fn match_paths_must_be_written_normalised() {
        for (path, message) in [
            ("/a//b", "\"//\""),
            ("/a/./b", "\".\" segment"),
            ("/a?x=1", "query"),
            ("/a#x", "fragment"),
            ("/a b", "space"),
            ("/%zz", "two hex digits"),
            ("/%62", "%62 is 'b'"),
        ] {
            let line = only_error(&format!(
                "{UPSTREAM}[[rule]]\nname = \"a\"\nrate = \"1/s\"\nmatch.path = \"{path}\"\n"
            ));
            assert!(
                line.starts_with("test.toml:6:14: rule[0].match.path: "),
                "{line}"
            );
            assert!(line.contains(message), "{path}: {line}");
        }
        let config = valid(&format!(
            "{UPSTREAM}[[rule]]\nname = \"a\"\nrate = \"1/s\"\nmatch.path = [\"/\", \"/a/\", \"/a%2Fb\"]\n"
        ));
        assert_eq!(config.rules[0].matcher.path, vec!["/", "/a/", "/a%2Fb"]);
    }

    #[test]
    fn admin_and_server_need_their_own_addresses() {
        let line = only_error(&format!(
            "{UPSTREAM}listen = \"127.0.0.1:9000\"\n[admin]\nlisten = \"127.0.0.1:9000\"\n"
        ));
        assert!(
            line.starts_with("test.toml:5:10: admin.listen: 127.0.0.1:9000 is also server.listen"),
            "{line}"
        );
    }

    #[test]
    fn zero_timeouts_are_refused() {
        let line = only_error(&format!("{UPSTREAM}idle_timeout = \"0s\"\n"));
        assert_eq!(
            line,
            "test.toml:3:16: server.idle_timeout: must be longer than zero (default \"60s\")"
        );
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
    fn an_unreadable_file_is_one_error_without_position() {
        let errors = ConfigErrors::io(
            "missing.toml",
            std::io::Error::from(std::io::ErrorKind::NotFound),
        );
        assert_eq!(errors.len(), 1);
        assert!(
            errors
                .to_string()
                .starts_with("missing.toml: cannot read the config file: "),
            "{errors}"
        );
        assert!(std::error::Error::source(&errors).is_some());
        let errors = Config::load(std::path::Path::new("/nonexistent/sluice.toml")).unwrap_err();
        assert!(
            errors
                .to_string()
                .starts_with("/nonexistent/sluice.toml: cannot read"),
            "{errors}"
        );
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

    fn header(name: &str) -> KeySource {
        KeySource::Header(HeaderName::from_bytes(name.as_bytes()).unwrap())
    }

    const PLAN: &str = "key = [\"header:x-api-key\"]\nrate = \"20/s\"\nburst = 10\n";

    #[test]
    fn tiers_compute_their_limits_like_the_rule() {
        let config = valid(&rule_a(&format!(
            "{PLAN}tiers = {{ by = \"header:x-plan\", premium = {{ rate = \"100/s\" }}, free = {{ limits = [\"10/s\", \"1000/d\"], burst = 5 }}, gold = {{ burst = 50 }} }}\n"
        )));
        let tiers = config.rules[0].tiers.clone().expect("tiers");
        assert_eq!(tiers.by, header("x-plan"));
        assert_eq!(
            tiers.tiers,
            vec![
                // Its own rate: the burst defaults to its own COUNT.
                Variant {
                    name: "premium".into(),
                    limits: vec![limit(100, 1, 100)]
                },
                Variant {
                    name: "free".into(),
                    limits: vec![limit(10, 1, 5), limit(1000, 86_400, 1000)]
                },
                // Only a burst: the rule's rate.
                Variant {
                    name: "gold".into(),
                    limits: vec![limit(20, 1, 50)]
                },
            ]
        );
        assert_eq!(config.rules[0].limits, vec![limit(20, 1, 10)]);
    }

    #[test]
    fn tiers_may_be_written_as_tables_or_dotted_keys() {
        for fields in [
            "rate = \"20/s\"\n[rule.tiers]\nby = \"header:x-plan\"\n[rule.tiers.premium]\nrate = \"100/s\"\n",
            "rate = \"20/s\"\ntiers.by = \"header:x-plan\"\ntiers.premium.rate = \"100/s\"\n",
            "rate = \"20/s\"\n[rule.tiers]\nby = \"header:x-plan\"\npremium = { rate = \"100/s\" }\n",
        ] {
            let config = valid(&rule_a(fields));
            let tiers = config.rules[0].tiers.clone().expect(fields);
            assert_eq!(tiers.by, header("x-plan"), "{fields}");
            assert_eq!(
                tiers.tiers,
                vec![Variant {
                    name: "premium".into(),
                    limits: vec![limit(100, 1, 100)]
                }],
                "{fields}"
            );
        }
    }

    #[test]
    fn tier_errors_point_at_the_value() {
        // b and c are refused for their own reasons, so cost is not judged there.
        let lines = errors(&rule_a(
            "rate = \"20/s\"\ncost = 3\n\
             tiers = { by = \"cookie:plan\", a = {}, b = { limits = [\"1/s\", \"2/s\"] }, c = { burst = 0 }, d = { burst = 2 }, e = { rate = \"2/m\" } }\n",
        ));
        assert_eq!(
            lines,
            vec![
                "test.toml:7:16: rule[0].tiers.by: unknown key source \"cookie:plan\"; allowed: ip, path, method, host, global, header:<name>, query:<name>, jwt:<claim>",
                "test.toml:7:31: rule[0].tiers.a: sets nothing: give rate, limits and/or burst, such as { rate = \"100/s\" } (one that sets only burst keeps the rule's rates)",
                "test.toml:7:62: rule[0].tiers.b.limits[1]: \"2/s\" has the same period as tiers.b.limits[0] \"1/s\"; each limit needs its own period, so keep only one of them",
                "test.toml:7:86: rule[0].tiers.c.burst: 0 must be at least 1, or no request could ever pass; it defaults to its rate's COUNT",
                "test.toml:7:105: rule[0].tiers.d.burst: the rule's cost 3 can never fit in rate \"20/s\", whose capacity is 2 (its burst): such a request would never be admitted; lower cost or raise burst",
                "test.toml:7:123: rule[0].tiers.e.rate: the rule's cost 3 can never fit in tiers.e.rate \"2/m\", whose capacity is 2 (its COUNT): such a request would never be admitted; lower cost or raise that COUNT",
            ]
        );
    }

    #[test]
    fn an_unknown_key_in_a_tier_lists_the_allowed_ones() {
        let line = only_error(&rule_a(
            "rate = \"20/s\"\n[rule.tiers]\nby = \"header:x-plan\"\npremium = { rte = \"100/s\" }\n",
        ));
        assert_eq!(
            line,
            "test.toml:8:13: rule[0].tiers.premium.rte: unknown key \"rte\"; a tier or override sets rate, limits and/or burst"
        );
    }

    #[test]
    fn tiers_need_by_and_at_least_one_tier() {
        assert_eq!(
            only_error(&rule_a("rate = \"1/s\"\ntiers = { premium = { rate = \"2/s\" } }\n")),
            "test.toml:6:9: rule[0].tiers: needs by = \"<key source>\", the source whose value picks the tier, such as by = \"header:x-plan\" or by = \"jwt:plan\""
        );
        assert_eq!(
            only_error(&rule_a("rate = \"1/s\"\ntiers = { by = \"header:x-plan\" }\n")),
            "test.toml:6:9: rule[0].tiers: lists no tier: add a table per tier value next to by, such as premium = { rate = \"100/s\" }"
        );
    }

    #[test]
    fn tiers_follow_the_algorithm_rules() {
        // Windows count in 32 bits and take no burst; a leaky bucket takes one rate.
        let lines = errors(&rule_a(
            "algorithm = \"fixed_window\"\nrate = \"1/s\"\ntiers = { by = \"ip\", a = { rate = \"5000000000/s\" }, b = { burst = 3 } }\n",
        ));
        assert_eq!(
            lines,
            vec![
                "test.toml:7:35: rule[0].tiers.a.rate: the COUNT 5000000000 is too large for fixed_window, which counts in 32 bits; at most 4294967295",
                "test.toml:7:67: rule[0].tiers.b.burst: only algorithm = \"token_bucket\" (its capacity) and \"leaky_bucket\" (how many may wait) take a burst: the capacity of a fixed_window limit is its COUNT; remove burst, or change the COUNT",
            ]
        );
        let line = only_error(&rule_a(
            "algorithm = \"leaky_bucket\"\nrate = \"1/s\"\ntiers = { by = \"ip\", a = { limits = [\"1/s\", \"5/m\"] } }\n",
        ));
        assert!(line.starts_with("test.toml:7:37: rule[0].tiers.a.limits: a leaky bucket lets requests leave at one constant rate"), "{line}");
        // A leaky tier's burst is its queue.
        let config = valid(&rule_a(
            "algorithm = \"leaky_bucket\"\nrate = \"1/s\"\ntiers = { by = \"ip\", a = { rate = \"5/s\", burst = 8 } }\n",
        ));
        assert_eq!(
            config.rules[0].tiers.as_ref().unwrap().tiers[0].limits,
            vec![limit(5, 1, 8)]
        );
    }

    #[test]
    fn concurrency_rules_take_no_tiers_overrides_or_sunset() {
        let lines = errors(&rule_a(
            "algorithm = \"concurrency\"\ntiers = { by = \"ip\", a = { rate = \"1/s\" } }\noverrides = { \"1.2.3.4\" = { rate = \"1/s\" } }\nsunset = { start = 2026-01-01T00:00:00Z, end = 2026-02-01T00:00:00Z, to = \"0/d\" }\n",
        ));
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(lines[0].starts_with("test.toml:6:9: rule[0].tiers: concurrency counts requests in flight, so it takes no tiers; they change a rate"), "{}", lines[0]);
        assert!(lines[1].starts_with("test.toml:7:13: rule[0].overrides: concurrency counts requests in flight, so it takes no overrides"), "{}", lines[1]);
        assert!(lines[2].starts_with("test.toml:8:10: rule[0].sunset: concurrency counts requests in flight, so it takes no sunset"), "{}", lines[2]);
    }

    #[test]
    fn overrides_are_keyed_by_bucket_key_text() {
        let config = valid(&rule_a(
            "key = [\"ip\", \"header:x-seller\"]\nrate = \"10/s\"\n\
             overrides = { \"203.0.113.7|seller-42\" = { rate = \"1000/s\" }, \"2001:db8:1:2::/64|a|b\" = { burst = 20 } }\n",
        ));
        assert_eq!(
            config.rules[0].overrides,
            vec![
                Variant {
                    name: "203.0.113.7|seller-42".into(),
                    limits: vec![limit(1000, 1, 1000)]
                },
                Variant {
                    name: "2001:db8:1:2::/64|a|b".into(),
                    limits: vec![limit(10, 1, 20)]
                },
            ]
        );
        // The default key is the client IP.
        let config = valid(&rule_a(
            "rate = \"10/s\"\n[rule.overrides]\n\"198.51.100.1\" = { rate = \"1/s\" }\n",
        ));
        assert_eq!(config.rules[0].overrides[0].name, "198.51.100.1");
    }

    #[test]
    fn override_keys_must_match_the_rule_key_where_that_is_decidable() {
        let lines = errors(&rule_a(
            "key = [\"ip\", \"host\"]\nrate = \"10/s\"\n\
             overrides = { \"seller-42\" = { rate = \"1/s\" }, \"1.2.3.4|a.example|x\" = { rate = \"1/s\" }, \"2001:DB8::1|a.example\" = { rate = \"1/s\" }, \"::ffff:1.2.3.4|a.example\" = { rate = \"1/s\" }, \"1.2.3.4|A.example:80\" = { rate = \"1/s\" } }\n",
        ));
        assert_eq!(
            lines,
            vec![
                "test.toml:7:15: rule[0].overrides.seller-42: \"seller-42\" has 1 part(s) but the rule's key has 2 source(s) (ip|host); a bucket key is the sources' values joined by '|' in the order of key",
                "test.toml:7:47: rule[0].overrides.\"1.2.3.4|a.example|x\": \"1.2.3.4|a.example|x\" has 3 part(s) but the rule's key has 2 source(s) (ip|host); a bucket key is the sources' values joined by '|' in the order of key",
                "test.toml:7:89: rule[0].overrides.\"2001:DB8::1|a.example\": \"2001:DB8::1\" is not how that client appears in a bucket key; write \"2001:db8::/64\" (IPv6 clients are keyed by their /64 network, server.ipv6_prefix)",
                "test.toml:7:133: rule[0].overrides.\"::ffff:1.2.3.4|a.example\": \"::ffff:1.2.3.4\" is not how that client appears in a bucket key; write \"1.2.3.4\"",
                "test.toml:7:180: rule[0].overrides.\"1.2.3.4|A.example:80\": \"1.2.3.4|A.example:80\": the host part is lower-case and without a port, such as \"a.example\"",
            ]
        );
        // A header value may contain '|': only the IP at the front is checked.
        let line = only_error(&rule_a(
            "key = [\"ip\", \"header:x-a\"]\nrate = \"10/s\"\noverrides = { \"nope|a|b\" = { rate = \"1/s\" } }\n",
        ));
        assert!(
            line.starts_with(
                "test.toml:7:15: rule[0].overrides.\"nope|a|b\": \"nope\" is not a client IP"
            ),
            "{line}"
        );
    }

    const SUNSET_START: u64 = 1_796_083_200_000_000_000;
    const DAY_NANOS: u64 = 86_400_000_000_000;

    #[test]
    fn sunset_reads_timestamps_and_converts_to_to_the_rule_period() {
        let config = valid(&rule_a(
            "rate = \"100/d\"\nsunset = { start = 2026-12-01T00:00:00Z, end = \"2027-01-01T01:00:00+01:00\", to = \"1/h\", link = \"https://api.example.com/v2\" }\n",
        ));
        assert_eq!(
            config.rules[0].sunset,
            Some(SunsetConfig {
                start: SUNSET_START,
                end: SUNSET_START + 31 * DAY_NANOS,
                to: 24,
                step: Duration::from_secs(86_400),
                link: Some("https://api.example.com/v2".into()),
            })
        );
        let config = valid(&rule_a(
            "rate = \"100/d\"\n[rule.sunset]\nstart = \"2026-12-01T00:00:00Z\"\nend = 2026-12-02T00:00:00Z\nto = \"0/d\"\nstep = \"1h\"\n",
        ));
        let sunset = config.rules[0].sunset.clone().unwrap();
        assert_eq!(
            (sunset.to, sunset.step, sunset.link),
            (0, Duration::from_secs(3600), None)
        );
    }

    #[test]
    fn sunset_errors_point_at_the_value() {
        let lines = errors(&rule_a(
            "rate = \"100/d\"\nsunset = { start = 2026-12-01T00:00:00, end = \"2026-11-01\", to = \"5/h\", step = \"0s\", link = \"/v2\" }\n",
        ));
        assert_eq!(
            lines,
            vec![
                "test.toml:6:20: rule[0].sunset.start: 2026-12-01T00:00:00 has no offset, so it would mean a different instant on each server; add Z for UTC or an offset such as +01:00 (\"2026-12-01T00:00:00Z\")",
                "test.toml:6:47: rule[0].sunset.end: 2026-11-01 has no time of day; write an RFC 3339 timestamp with a date, a time and an offset, such as \"2026-12-01T00:00:00Z\" or \"2026-12-01T09:00:00+09:00\" (a TOML datetime 2026-12-01T00:00:00Z works too)",
                "test.toml:6:66: rule[0].sunset.to: \"5/h\" is 120 per period of the rule's rate \"100/d\", more than its COUNT 100: a sunset only lowers a limit",
                "test.toml:6:80: rule[0].sunset.step: must be longer than zero (default \"1d\")",
                "test.toml:6:93: rule[0].sunset.link: \"/v2\" is not an absolute URI; write an absolute URI such as \"https://api.example.com/docs/migrate-to-v2\"",
            ]
        );
        let lines = errors(&rule_a(
            "limits = [\"100/d\", \"10/m\"]\nsunset = { start = 2026-12-01T00:00:00Z, end = 2026-11-01T00:00:00Z }\n",
        ));
        assert_eq!(
            lines,
            vec![
                "test.toml:6:10: rule[0].sunset: lowers one rate step by step, so the rule needs exactly one, but limits (line 5) lists 2; keep one limit, or put the others in a rule of their own",
                "test.toml:6:10: rule[0].sunset: needs to: sunset = { start = 2026-12-01T00:00:00Z, end = 2027-01-01T00:00:00Z, to = \"0/d\" } (step defaults to \"1d\"; link is optional)",
                "test.toml:6:48: rule[0].sunset.end: must be after start (line 6): the limit falls from start to end",
            ]
        );
        let line = only_error(&rule_a(
            "rate = \"1/s\"\nsunset = { start = 1, end = 2026-11-01T00:00:00Z, to = \"0/s\" }\n",
        ));
        assert!(
            line.starts_with(
                "test.toml:6:20: rule[0].sunset.start: must be a timestamp, not the number 1"
            ),
            "{line}"
        );
    }

    #[test]
    fn ban_needs_after_within_and_for() {
        let config = valid(&rule_a(
            "rate = \"1/s\"\nban = { after = 20, within = \"1m\", for = \"10m\" }\n",
        ));
        assert_eq!(
            config.rules[0].ban,
            Some(BanConfig {
                after: 20,
                within: Duration::from_secs(60),
                duration: Duration::from_secs(600),
            })
        );
        let config = valid(&rule_a(
            "rate = \"1/s\"\nban.after = 1\nban.within = \"1s\"\nban.for = \"1h\"\n",
        ));
        assert_eq!(config.rules[0].ban.map(|b| b.after), Some(1));
        assert_eq!(
            errors(&rule_a("rate = \"1/s\"\nban = { after = 0, within = \"0s\" }\n")),
            vec![
                "test.toml:6:7: rule[0].ban: needs for: ban = { after = 20, within = \"1m\", for = \"10m\" } bans a key limited 20 times within a minute for 10 minutes",
                "test.toml:6:17: rule[0].ban.after: 0 is out of range: must be at least 1 (how many limited answers within `within` start a ban)",
                "test.toml:6:29: rule[0].ban.within: must be longer than zero",
            ]
        );
        assert_eq!(
            only_error(&rule_a("rate = \"1/s\"\nshadow = true\n[rule.ban]\nafter = 2\nwithin = \"1m\"\nfor = \"5m\"\n")),
            "test.toml:7:1: rule[0].ban: a shadow rule (line 6) never limits anyone, so it would never ban; remove ban, or set shadow = false"
        );
    }

    #[test]
    fn on_change_defaults_to_proportional() {
        assert_eq!(
            valid(&rule_a("rate = \"1/s\"\n")).rules[0].on_change,
            OnChange::Proportional
        );
        for (text, want) in [
            ("keep", OnChange::Keep),
            ("proportional", OnChange::Proportional),
            ("reset", OnChange::Reset),
        ] {
            let config = valid(&rule_a(&format!(
                "rate = \"1/s\"\non_change = \"{text}\"\n"
            )));
            assert_eq!(config.rules[0].on_change, want);
        }
        assert_eq!(
            only_error(&rule_a("rate = \"1/s\"\non_change = \"refill\"\n")),
            "test.toml:6:13: rule[0].on_change: \"refill\" is not allowed; use one of \"keep\", \"proportional\", \"reset\""
        );
    }
}
