//! Who is calling: from a request to a bucket key.
//!
//! - [`path`]: path normalisation (what is forwarded).
//! - [`fold`]: the normalised path folded as `server.paths_alike` says (what
//!   rules match and `path` keys are built on).
//! - [`glob`]: `match.path_glob` patterns.
//! - [`client_ip`]: the client address behind trusted proxies.
//! - [`graphql`]: a GraphQL request's operation, its type and its cost.
//! - this module: [`KeySource`], one element of a rule's `key`;
//!   [`RequestFacts`], the borrowed view of a request that rules match and
//!   key on; and [`KeyHasher`], which turns a rule's key sources into a
//!   64-bit [`BucketKey`] without building a string.
//!
//! A bucket key is the rule's source values, in `key` order, hashed with a
//! per-process random seed (so clients cannot aim for collisions). Each value
//! is length-prefixed, so `("ab","c")` and `("a","bc")` differ, and a missing
//! source hashes as a marker distinct from every value (`missing = "shared"`
//! puts all such requests in one bucket). `jwt:<claim>` sources read the
//! claims of a verified token ([`jwt`]). [`KeyHasher::key_text`] writes a
//! key as docs/configuration.md's "Keys" spells it, and [`KeyHasher::key_of_text`] hashes such text
//! back to the same bucket key (overrides, admin calls).

pub mod body;
pub mod client_ip;
pub mod content_coding;
pub mod fold;
pub mod glob;
pub mod graphql;
pub mod jsonrpc;
pub mod jwt;
pub mod label;
pub mod number;
pub mod path;
pub mod read_once;
pub mod unreadable_body;

use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;

use http::{HeaderMap, HeaderValue, Method};

pub use label::{KeyLabels, KeyText, LabelKey};

/// A bucket key: the rule's key sources hashed with a per-process random seed
/// (see [`KeyHasher`]). Two callers share a bucket only on a 64-bit collision.
pub type BucketKey = u64;

/// One element of a rule's `key` (the config parses its text form; its
/// `Display` below writes it back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    Ip,
    Path,
    Method,
    Host,
    /// Lower-cased header name.
    Header(http::HeaderName),
    Query(String),
    Global,
    /// `jwt:<claim>`: a claim of the request's verified token.
    Jwt(jwt::ClaimPath),
    /// `body:<pointer>`: the string, number or boolean at that JSON pointer
    /// of a JSON request body ([`body`]).
    Body(crate::body_scan::Pointer),
    /// `graphql:operation`: the name of the operation a GraphQL request
    /// runs (`anonymous` for an unnamed one).
    GraphqlOperation,
    /// `graphql:type`: `query`, `mutation` or `subscription`.
    GraphqlType,
    /// `jsonrpc:method`: the `method` of a JSON-RPC call ([`jsonrpc`]); in
    /// a batch, of each call.
    JsonrpcMethod,
    /// `mcp:tool`: the tool an MCP `tools/call` calls (`params.name`).
    McpTool,
    /// `descriptor:<entry key>`: the value of that entry of a rate limit
    /// service descriptor (docs/rate-limit-service.md). Only rules with
    /// `match.domain` have it; a proxied request never does.
    Descriptor(String),
}

/// The parts of a request that rules match and key on, borrowed from it.
#[derive(Debug, Clone)]
pub struct RequestFacts<'a> {
    pub method: &'a Method,
    /// The path rules match and `path` keys are built on: normalised, then
    /// folded as `server.paths_alike` says ([`fold`]).
    pub path: &'a str,
    /// The normalised path, not folded: what the upstream receives, and
    /// what logs record (`sluice replay` folds it with its own config).
    pub normalized_path: &'a str,
    /// The raw query string, if any.
    pub query: Option<&'a str>,
    /// Host without port and trailing dot ([`host_name`]), as sent
    /// otherwise (compare case-insensitively).
    pub host: Option<&'a str>,
    pub headers: &'a HeaderMap,
    /// The client IP (already resolved through trusted proxies).
    pub client_ip: IpAddr,
    /// The claims of the request's token, when it verified.
    pub claims: Option<&'a jwt::Claims>,
    /// What `body:` and `graphql:` sources read, once a rule needing them
    /// matched (`None`: every such source is missing).
    pub body: Option<&'a body::BodyFacts<'a>>,
    /// The call of a JSON-RPC batch a rule stands on now
    /// (`proxy/batch.rs`); `None` outside a batch's walk, where a body of
    /// one call is that call.
    pub call: Option<&'a jsonrpc::Call<'a>>,
}

impl<'a> RequestFacts<'a> {
    /// The JSON-RPC call that `jsonrpc:` and `mcp:` sources read: the
    /// batch's call being walked, else the body's one call.
    #[inline]
    pub fn call(&self) -> Option<&'a jsonrpc::Call<'a>> {
        if self.call.is_some() {
            return self.call;
        }
        match self.body?.calls() {
            jsonrpc::Calls::One(call) => Some(call),
            jsonrpc::Calls::None | jsonrpc::Calls::Batch(_) => None,
        }
    }
}

/// Why a key could not be derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MissingSource(pub usize);

/// Hashes key sources into bucket keys with a per-process random seed.
#[derive(Debug, Clone)]
pub struct KeyHasher {
    state: foldhash::fast::SeedableRandomState,
    ipv6_prefix: u8,
    /// How a `path` written as text (an override's key, an admin call's)
    /// is folded, as request paths are ([`fold`]); none until the policy
    /// sets `server.paths_alike` ([`KeyHasher::with_paths_alike`]).
    paths_alike: fold::PathsAlike,
    /// The shared seed it was made with, if any.
    seed: Option<[u64; 2]>,
    /// What keys are labelled with when shown ([`label`]).
    label_key: LabelKey,
}

/// Marks a missing source in the hash; values are prefixed with their length,
/// which is never `u64::MAX`.
const MISSING_MARKER: u64 = u64::MAX;

impl KeyHasher {
    /// A hasher with a fresh random seed. IPv6 clients are keyed by their
    /// `/ipv6_prefix` network.
    pub fn new(ipv6_prefix: u8) -> KeyHasher {
        KeyHasher {
            state: foldhash::fast::SeedableRandomState::random(),
            ipv6_prefix,
            paths_alike: fold::PathsAlike::NONE,
            seed: None,
            label_key: LabelKey::random(),
        }
    }

    /// A hasher with the secret `seed` several instances share (kept in
    /// their shared store), so that they all derive the same bucket key for
    /// a caller; clients still cannot aim for collisions.
    pub fn with_seed(seed: [u64; 2], ipv6_prefix: u8) -> KeyHasher {
        // A shared seed is built once per distinct seed a process is given
        // (once, or twice when the store's seed arrives after start).
        let shared: &'static foldhash::SharedSeed =
            Box::leak(Box::new(foldhash::SharedSeed::from_u64(seed[1])));
        KeyHasher {
            state: foldhash::fast::SeedableRandomState::with_seed(seed[0], shared),
            ipv6_prefix,
            paths_alike: fold::PathsAlike::NONE,
            seed: Some(seed),
            // The instances label keys alike, with a secret they share.
            label_key: LabelKey::from_seed(seed),
        }
    }

    /// The shared seed it was made with (`None`: a seed of its own).
    pub fn seed(&self) -> Option<[u64; 2]> {
        self.seed
    }

    /// A hasher with the same seed (so every key stays the same, as a reload
    /// needs) and possibly another IPv6 prefix.
    pub fn with_ipv6_prefix(&self, ipv6_prefix: u8) -> KeyHasher {
        KeyHasher {
            state: self.state,
            ipv6_prefix,
            paths_alike: self.paths_alike,
            seed: self.seed,
            label_key: self.label_key.clone(),
        }
    }

    /// The same hasher, folding a `path` written as text as `alike` says
    /// (the policy's `server.paths_alike`), so that an override of
    /// `/Login` is the bucket of the requests to `/login`.
    pub fn with_paths_alike(self, paths_alike: fold::PathsAlike) -> KeyHasher {
        KeyHasher {
            paths_alike,
            ..self
        }
    }

    /// The same hasher, labelling keys with `label_key` (a deployment's
    /// key, made from its admin token, before any store seed is known).
    pub fn with_label_key(self, label_key: LabelKey) -> KeyHasher {
        KeyHasher { label_key, ..self }
    }

    /// What shown keys are labelled with.
    pub fn label_key(&self) -> &LabelKey {
        &self.label_key
    }

    /// Derives the bucket key for `sources`. With `allow_missing`, an absent
    /// source hashes as a shared marker; otherwise the first absent source is
    /// returned as the error.
    pub fn derive(
        &self,
        sources: &[KeySource],
        facts: &RequestFacts<'_>,
        allow_missing: bool,
    ) -> Result<BucketKey, MissingSource> {
        let mut hasher = self.state.build_hasher();
        for (index, source) in sources.iter().enumerate() {
            if !self.hash_source(&mut hasher, source, facts) {
                if !allow_missing {
                    return Err(MissingSource(index));
                }
                hasher.write_u64(MISSING_MARKER);
            }
        }
        Ok(hasher.finish())
    }

    /// The bucket key of a rule keyed on `ip` alone for the client `ip`:
    /// what [`KeyHasher::derive`] makes of `[KeySource::Ip]`, with no
    /// request to read it from (a QUIC handshake's, `proxy/handshake.rs`).
    pub fn derive_ip(&self, ip: IpAddr) -> BucketKey {
        let mut hasher = self.state.build_hasher();
        self.hash_ip(&mut hasher, ip);
        hasher.finish()
    }

    /// Hashes the value of one `source` in the request `facts` describe;
    /// whether the request has it (an empty host, header or query value is
    /// missing).
    #[inline]
    fn hash_source(
        &self,
        hasher: &mut impl Hasher,
        source: &KeySource,
        facts: &RequestFacts<'_>,
    ) -> bool {
        match source {
            KeySource::Ip => {
                self.hash_ip(hasher, facts.client_ip);
                true
            }
            KeySource::Global => hash_some(hasher, Some(&[])),
            KeySource::Path => hash_some(hasher, Some(facts.path.as_bytes())),
            KeySource::Method => hash_some(hasher, Some(facts.method.as_str().as_bytes())),
            KeySource::Host => (facts.host.filter(|host| !host.is_empty()))
                .map(|host| hash_lowercase(hasher, host.as_bytes()))
                .is_some(),
            KeySource::Header(name) => {
                let value = facts.headers.get(name).map(HeaderValue::as_bytes);
                hash_some(hasher, value.filter(|value| !value.is_empty()))
            }
            KeySource::Query(name) => (query_value(facts.query, name))
                .filter(|value| !value.is_empty())
                .map(|value| hash_query_value(hasher, value.as_bytes()))
                .is_some(),
            KeySource::Jwt(claim) => (facts.claims.and_then(|c| c.get(claim)))
                .map(|value| hash_claim(hasher, value))
                .is_some(),
            // Validation keeps it out of rules that see requests.
            KeySource::Body(pointer) => {
                let value = facts.body.and_then(|b| b.value_at(pointer));
                hash_some(hasher, value.as_deref().map(str::as_bytes))
            }
            KeySource::GraphqlOperation => {
                let name = facts.body.and_then(|b| b.graphql().operation.as_deref());
                hash_some(hasher, name.map(str::as_bytes))
            }
            KeySource::GraphqlType => {
                let kind = facts.body.and_then(|b| b.graphql().kind);
                hash_some(hasher, kind.map(|kind| kind.as_str().as_bytes()))
            }
            KeySource::JsonrpcMethod => hash_call(hasher, facts, |call| &call.method),
            KeySource::McpTool => hash_call(hasher, facts, |call| &call.tool),
            KeySource::Descriptor(_) => false,
        }
    }

    /// The bucket key as text (docs/operations.md, "Admin endpoints"): the
    /// sources' values in `key` order (an IP in canonical text, an IPv6
    /// client as its network, `global` as the empty string, a missing
    /// source as empty). Built only for admin views and logs, never on the
    /// request path; shown only through [`KeyLabels::show`].
    pub fn key_text(&self, sources: &[KeySource], facts: &RequestFacts<'_>) -> KeyText {
        let mut key = KeyText::new();
        for source in sources {
            key.push_with(|text| {
                self.write_value(source, facts, text);
            });
        }
        key
    }

    /// Appends the value of one `source` in the request `facts` describe,
    /// as [`KeyHasher::key_text`] writes it: whether the request has it,
    /// as [`KeyHasher::derive`] judges (an empty header, host or query
    /// value is missing; `global` is always there, empty).
    pub fn write_value(
        &self,
        source: &KeySource,
        facts: &RequestFacts<'_>,
        text: &mut String,
    ) -> bool {
        let mut push = |value: &str| {
            text.push_str(value);
            !value.is_empty()
        };
        match source {
            KeySource::Ip => {
                client_ip::write_key(facts.client_ip, self.ipv6_prefix, text);
                true
            }
            KeySource::Global => true,
            KeySource::Path => write_some(text, Some(facts.path)),
            KeySource::Method => write_some(text, Some(facts.method.as_str())),
            KeySource::Host => push(&facts.host.unwrap_or("").to_ascii_lowercase()),
            KeySource::Header(name) => match facts.headers.get(name) {
                Some(value) => push(&String::from_utf8_lossy(value.as_bytes())),
                None => false,
            },
            KeySource::Query(name) => {
                let raw = query_value(facts.query, name).unwrap_or("");
                push(&decode_query(raw))
            }
            KeySource::Jwt(claim) => match facts.claims.and_then(|c| c.get(claim)) {
                Some(jwt::ClaimValue::Text(value)) => write_some(text, Some(value)),
                Some(jwt::ClaimValue::Scalar(value)) => write_some(text, Some(&value.to_string())),
                None => false,
            },
            KeySource::Body(pointer) => write_some(
                text,
                facts.body.and_then(|b| b.value_at(pointer)).as_deref(),
            ),
            KeySource::GraphqlOperation => {
                let name = facts.body.and_then(|b| b.graphql().operation.as_deref());
                write_some(text, name)
            }
            KeySource::GraphqlType => {
                let kind = facts.body.and_then(|b| b.graphql().kind);
                write_some(text, kind.map(|kind| kind.as_str()))
            }
            KeySource::JsonrpcMethod | KeySource::McpTool => {
                let call = facts.call();
                let value = match source {
                    KeySource::JsonrpcMethod => call.and_then(|call| call.method.as_deref()),
                    _ => call.and_then(|call| call.tool.as_deref()),
                };
                let value = value.map(String::from_utf8_lossy);
                write_some(text, value.as_deref())
            }
            KeySource::Descriptor(_) => false,
        }
    }

    /// [`KeyHasher::key_text`] of the bucket `key` that `sources` derived
    /// from the request `facts` describe: in a JSON-RPC batch, of the call
    /// whose key it is when the sources read calls (each call has its
    /// own). Built only where a key is shown, never on the request path.
    pub fn key_text_of(
        &self,
        sources: &[KeySource],
        facts: &RequestFacts<'_>,
        key: BucketKey,
    ) -> KeyText {
        let calls = match facts.body.map(body::BodyFacts::calls) {
            Some(jsonrpc::Calls::Batch(batch)) if sources.iter().any(KeySource::reads_call) => {
                &batch.calls[..]
            }
            _ => &[],
        };
        for call in calls {
            let mut one = facts.clone();
            one.call = Some(call);
            if self.derive(sources, &one, true) == Ok(key) {
                return self.key_text(sources, &one);
            }
        }
        self.key_text(sources, facts)
    }

    /// The bucket key of a rate limit service descriptor for `sources`
    /// (each `descriptor:<k>` or `global`), `entry` giving the value of
    /// each entry key: hashed as [`KeyHasher::key_of_text`] hashes the same
    /// values written as text, so `/v1/check` finds the same bucket. The
    /// rule that decides a descriptor has every entry its key names, so a
    /// missing one (never) hashes as the missing marker.
    pub fn derive_entries<'e>(
        &self,
        sources: &[KeySource],
        entry: impl Fn(&str) -> Option<&'e str>,
    ) -> BucketKey {
        let mut hasher = self.state.build_hasher();
        for source in sources {
            match source {
                KeySource::Descriptor(key) => match entry(key) {
                    Some(value) => hash_bytes(&mut hasher, value.as_bytes()),
                    None => hasher.write_u64(MISSING_MARKER),
                },
                KeySource::Global => hash_bytes(&mut hasher, b""),
                // Validation allows no other source in a domain rule.
                _ => hasher.write_u64(MISSING_MARKER),
            }
        }
        hasher.finish()
    }

    /// A descriptor's key as text ([`KeyHasher::key_text`]'s form): each
    /// `descriptor:<k>` source's value, `global` as the empty string.
    pub fn entries_text<'e>(
        &self,
        sources: &[KeySource],
        entry: impl Fn(&str) -> Option<&'e str>,
    ) -> KeyText {
        let mut key = KeyText::new();
        for source in sources {
            key.push_with(|text| {
                if let KeySource::Descriptor(name) = source {
                    text.push_str(entry(name).unwrap_or(""));
                }
            });
        }
        key
    }

    /// The bucket key of a key written as text (an `overrides` entry, an
    /// admin call): the inverse of [`KeyHasher::key_text`], hashing each
    /// part exactly as [`KeyHasher::derive`] hashes the request's value.
    /// The text is split on `|` into as many parts as there are sources
    /// (the last part takes any further `|`).
    pub fn key_of_text(&self, sources: &[KeySource], text: &str) -> Result<BucketKey, String> {
        // Counted, then split again: no list of parts is allocated (the
        // admin API's checks call this once per check).
        let parts = || text.splitn(sources.len().max(1), '|');
        let count = parts().count();
        if count != sources.len() {
            // The text is not repeated: it may hold a caller's credential.
            return Err(format!(
                "the key has {} part(s) but the rule's key has {} source(s) ({}); join the \
                 values with '|'",
                count,
                sources.len(),
                sources
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let mut hasher = self.state.build_hasher();
        // No part is repeated in an error either: a key written in the
        // wrong order may put a credential where the IP goes.
        for (index, (source, part)) in sources.iter().zip(parts()).enumerate() {
            self.hash_text(&mut hasher, source, part)
                .map_err(|what| format!("part {} of the key ({source}) {what}", index + 1))?;
        }
        Ok(hasher.finish())
    }

    /// The bucket key of values recorded as text (`sluice replay`: an
    /// access log line's `keys`), `value(index)` giving each source's,
    /// `None` when the request had none: hashed as [`KeyHasher::key_of_text`]
    /// hashes them, so that `overrides` find their callers. With
    /// `allow_missing`, an absent value hashes as the shared marker, as
    /// [`KeyHasher::derive`] does; otherwise the first is the error, and so
    /// is a value that is not one of its source's (an `ip` that is not an
    /// address). `client`, when given, is the `ip` source's value already
    /// read from its text.
    pub fn key_of_values<'v>(
        &self,
        sources: &[KeySource],
        client: Option<IpAddr>,
        value: impl Fn(usize) -> Option<&'v str>,
        allow_missing: bool,
    ) -> Result<BucketKey, MissingSource> {
        let mut hasher = self.state.build_hasher();
        for (index, source) in sources.iter().enumerate() {
            let hashed = match (source, client) {
                (KeySource::Ip, Some(ip)) => {
                    self.hash_ip(&mut hasher, ip);
                    true
                }
                _ => match value(index) {
                    Some(text) => self.hash_text(&mut hasher, source, text).is_ok(),
                    None => false,
                },
            };
            if !hashed {
                if !allow_missing {
                    return Err(MissingSource(index));
                }
                hasher.write_u64(MISSING_MARKER);
            }
        }
        Ok(hasher.finish())
    }

    /// Hashes one value written as text, as [`KeyHasher::derive`] hashes
    /// the request's value; the error completes "part N of the key …".
    fn hash_text(
        &self,
        hasher: &mut impl Hasher,
        source: &KeySource,
        part: &str,
    ) -> Result<(), &'static str> {
        match source {
            KeySource::Ip => {
                let ip = match part.parse::<IpAddr>() {
                    Ok(ip) => ip,
                    Err(_) => part
                        .parse::<ipnet::IpNet>()
                        .map(|net| net.network())
                        .map_err(|_| {
                            "is not an IP address or network (for example 203.0.113.7 or \
                             2001:db8:1:2::/64)"
                        })?,
                };
                self.hash_ip(hasher, ip);
            }
            KeySource::Global => {
                if !part.is_empty() {
                    return Err("is always the empty string");
                }
                hash_bytes(hasher, b"");
            }
            KeySource::Host => hash_lowercase(hasher, host_name(part).as_bytes()),
            KeySource::Query(_) => hash_query_plain(hasher, part.as_bytes()),
            KeySource::Path => match fold::fold(part, self.paths_alike) {
                Ok(path) => hash_bytes(hasher, path.as_bytes()),
                Err(_) => return Err("climbs above the root '/' through '..;'"),
            },
            KeySource::Method
            | KeySource::Header(_)
            | KeySource::Jwt(_)
            | KeySource::Body(_)
            | KeySource::GraphqlOperation
            | KeySource::GraphqlType
            | KeySource::JsonrpcMethod
            | KeySource::McpTool
            | KeySource::Descriptor(_) => hash_bytes(hasher, part.as_bytes()),
        }
        Ok(())
    }

    fn hash_ip(&self, hasher: &mut impl Hasher, ip: IpAddr) {
        match client_ip::canonical(ip) {
            IpAddr::V4(v4) => hash_bytes(hasher, &v4.octets()),
            IpAddr::V6(v6) => {
                // Key by the client's network: one host usually owns a /64.
                let prefix = u32::from(self.ipv6_prefix.min(128));
                let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
                hash_bytes(hasher, &(u128::from(v6) & mask).to_be_bytes());
            }
        }
    }
}

/// Hashes the value `value_of` reads of the request's JSON-RPC call, if it
/// has one: whether it did.
#[inline]
fn hash_call(
    hasher: &mut impl Hasher,
    facts: &RequestFacts<'_>,
    value_of: impl for<'c> Fn(&'c jsonrpc::Call<'c>) -> &'c Option<std::borrow::Cow<'c, [u8]>>,
) -> bool {
    match facts.call().and_then(|call| value_of(call).as_deref()) {
        Some(value) => {
            hash_bytes(hasher, value);
            true
        }
        None => false,
    }
}

/// Hashes `value` when there is one; whether there is.
#[inline]
fn hash_some(hasher: &mut impl Hasher, value: Option<&[u8]>) -> bool {
    value.map(|value| hash_bytes(hasher, value)).is_some()
}

/// Appends `value` to `text` when there is one; whether there is.
#[inline]
fn write_some(text: &mut String, value: Option<&str>) -> bool {
    value.map(|value| text.push_str(value)).is_some()
}

#[inline]
fn hash_bytes(hasher: &mut impl Hasher, bytes: &[u8]) {
    hasher.write_u64(bytes.len() as u64);
    hasher.write(bytes);
}

/// A claim hashes as its text: a string's characters, a number's JSON
/// spelling (so `42` and `"42"` are one caller).
fn hash_claim(hasher: &mut impl Hasher, value: jwt::ClaimValue<'_>) {
    match value {
        jwt::ClaimValue::Text(text) => hash_bytes(hasher, text.as_bytes()),
        jwt::ClaimValue::Scalar(value) => hash_bytes(hasher, value.to_string().as_bytes()),
    }
}

/// A host (already without its port) as it is matched and keyed: without
/// the trailing dot of a fully qualified name, so `api.example.com.` is
/// `api.example.com` (docs/configuration.md, "Keys"). Every trailing
/// dot goes, so that no spelling of one host is a bucket of its own.
#[inline]
pub fn host_name(host: &str) -> &str {
    // By the last byte first: a host almost never ends in a dot, and this
    // runs on every request (`str`'s pattern search costs more).
    match host.as_bytes().last() {
        Some(b'.') => trailing_dots_stripped(host),
        _ => host,
    }
}

#[cold]
#[inline(never)]
fn trailing_dots_stripped(host: &str) -> &str {
    host.trim_end_matches('.')
}

/// Host names compare case-insensitively, so they hash lower-cased.
fn hash_lowercase(hasher: &mut impl Hasher, bytes: &[u8]) {
    hasher.write_u64(bytes.len() as u64);
    let mut buffer = [0u8; 64];
    for chunk in bytes.chunks(buffer.len()) {
        let lower = &mut buffer[..chunk.len()];
        lower.copy_from_slice(chunk);
        lower.make_ascii_lowercase();
        hasher.write(lower);
    }
}

/// Query values are hashed percent-decoded (`+` as space), so `a%62` and `ab`
/// are one caller; otherwise one API key could rotate encodings to get many
/// buckets. Decodes on the stack in chunks; an invalid escape is kept as is.
fn hash_query_value(hasher: &mut impl Hasher, raw: &[u8]) {
    // Both paths feed the hasher in the same 64-byte chunks of the decoded
    // value: a streaming hash depends on where the writes split.
    if !raw.iter().any(|&b| b == b'%' || b == b'+') {
        hash_query_plain(hasher, raw);
        return;
    }
    let mut decoded = [0u8; QUERY_CHUNK];
    let mut len = 0;
    let mut total = 0u64;
    let mut i = 0;
    // The length prefix must be of the decoded value; count it first.
    let mut counting = 0;
    while counting < raw.len() {
        counting += escape_len(raw, counting);
        total += 1;
    }
    hasher.write_u64(total);
    while i < raw.len() {
        let step = escape_len(raw, i);
        decoded[len] = match (raw[i], step) {
            (b'+', _) => b' ',
            (b'%', 3) => (hex(raw[i + 1]) << 4) | hex(raw[i + 2]),
            (byte, _) => byte,
        };
        len += 1;
        i += step;
        if len == decoded.len() {
            hasher.write(&decoded);
            len = 0;
        }
    }
    if len > 0 {
        hasher.write(&decoded[..len]);
    }
}

const QUERY_CHUNK: usize = 64;

/// An already decoded query value, hashed as [`hash_query_value`] hashes
/// the value it decodes.
fn hash_query_plain(hasher: &mut impl Hasher, decoded: &[u8]) {
    hasher.write_u64(decoded.len() as u64);
    for chunk in decoded.chunks(QUERY_CHUNK) {
        hasher.write(chunk);
    }
}

/// A query value percent-decoded (`+` as space), as text for admin views.
pub(crate) fn decode_query(raw: &str) -> String {
    let raw = raw.as_bytes();
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let step = escape_len(raw, i);
        out.push(match (raw[i], step) {
            (b'+', _) => b' ',
            (b'%', 3) => (hex(raw[i + 1]) << 4) | hex(raw[i + 2]),
            (byte, _) => byte,
        });
        i += step;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Bytes taken by the (possibly escaped) character at `i`.
fn escape_len(raw: &[u8], i: usize) -> usize {
    if raw[i] == b'%'
        && i + 2 < raw.len()
        && raw[i + 1].is_ascii_hexdigit()
        && raw[i + 2].is_ascii_hexdigit()
    {
        3
    } else {
        1
    }
}

fn hex(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        _ => digit - b'A' + 10,
    }
}

/// The raw value of the first `name=` pair in `query` (a name written
/// escaped, `k%65y`, is the name it decodes to, as the upstream reads it).
pub(crate) fn query_value<'q>(query: Option<&'q str>, name: &str) -> Option<&'q str> {
    query?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        query_name_is(key, name).then_some(value)
    })
}

/// Whether the raw query name `raw` decodes (percent escapes, `+` as
/// space) to `name`. Compared byte by byte, without decoding into a buffer.
pub(crate) fn query_name_is(raw: &str, name: &str) -> bool {
    let (raw, name) = (raw.as_bytes(), name.as_bytes());
    if !raw.iter().any(|&b| b == b'%' || b == b'+') {
        return raw == name;
    }
    let mut wanted = name.iter();
    let mut i = 0;
    while i < raw.len() {
        let step = escape_len(raw, i);
        let byte = match (raw[i], step) {
            (b'+', _) => b' ',
            (b'%', 3) => (hex(raw[i + 1]) << 4) | hex(raw[i + 2]),
            (byte, _) => byte,
        };
        if wanted.next() != Some(&byte) {
            return false;
        }
        i += step;
    }
    wanted.next().is_none()
}

impl KeySource {
    /// Whether its value comes from the request's body or GraphQL
    /// operation, which are read only for the rules that need them.
    pub fn reads_body(&self) -> bool {
        matches!(
            self,
            KeySource::Body(_)
                | KeySource::GraphqlOperation
                | KeySource::GraphqlType
                | KeySource::JsonrpcMethod
                | KeySource::McpTool
        )
    }

    /// Whether it reads a JSON-RPC call (`jsonrpc:method`, `mcp:tool`):
    /// a rule keyed on one stands on each call of a batch.
    pub fn reads_call(&self) -> bool {
        matches!(self, KeySource::JsonrpcMethod | KeySource::McpTool)
    }
}

impl std::fmt::Display for KeySource {
    /// The source as written in the config (`ip`, `header:x-api-key`, …).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySource::Ip => f.write_str("ip"),
            KeySource::Path => f.write_str("path"),
            KeySource::Method => f.write_str("method"),
            KeySource::Host => f.write_str("host"),
            KeySource::Global => f.write_str("global"),
            KeySource::Header(name) => write!(f, "header:{name}"),
            KeySource::Query(name) => write!(f, "query:{name}"),
            KeySource::Jwt(claim) => write!(f, "jwt:{}", claim.0.join(".")),
            KeySource::Descriptor(key) => write!(f, "descriptor:{key}"),
            KeySource::Body(pointer) => write!(f, "body:{}", pointer.as_str()),
            KeySource::GraphqlOperation => f.write_str("graphql:operation"),
            KeySource::GraphqlType => f.write_str("graphql:type"),
            KeySource::JsonrpcMethod => f.write_str("jsonrpc:method"),
            KeySource::McpTool => f.write_str("mcp:tool"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn facts<'a>(headers: &'a HeaderMap, query: Option<&'a str>, ip: IpAddr) -> RequestFacts<'a> {
        RequestFacts {
            method: &Method::GET,
            path: "/api/search",
            normalized_path: "/api/search",
            query,
            host: Some("Example.COM"),
            headers,
            client_ip: ip,
            claims: None,
            body: None,
            call: None,
        }
    }

    const IP: IpAddr = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7));

    /// An override or an admin call names a path as written; it is the
    /// bucket of the requests whose folded path it folds to.
    #[test]
    fn a_path_written_as_text_is_folded_as_request_paths_are() {
        let hasher = KeyHasher::new(64).with_paths_alike(fold::PathsAlike::ALL);
        let headers = HeaderMap::new();
        let sources = [KeySource::Path];
        let request = hasher.derive(&sources, &facts(&headers, None, IP), false);
        for written in ["/api/search", "/API/Search/", "/api/search;v=1"] {
            assert_eq!(
                hasher.key_of_text(&sources, written).ok(),
                request.ok(),
                "{written}"
            );
        }
        assert!(hasher.key_of_text(&sources, "/..;/x").is_err());
        // Matched as written: only the very spelling.
        let as_written = KeyHasher::new(64);
        let request = as_written.derive(&sources, &facts(&headers, None, IP), false);
        assert_ne!(
            as_written.key_of_text(&sources, "/API/search").ok(),
            request.ok()
        );
    }

    #[test]
    fn the_same_sources_give_the_same_key_and_different_ones_differ() {
        let hasher = KeyHasher::new(64);
        let headers = HeaderMap::new();
        let sources = [KeySource::Ip, KeySource::Path];
        let a = hasher.derive(&sources, &facts(&headers, None, IP), false);
        let b = hasher.derive(&sources, &facts(&headers, None, IP), false);
        assert_eq!(a, b);
        let other_ip = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 8));
        let c = hasher.derive(&sources, &facts(&headers, None, other_ip), false);
        assert_ne!(a, c);
    }

    /// A QUIC handshake finds a ban by the key a request from its address
    /// would have, IPv6 networks and IPv4-mapped addresses alike.
    #[test]
    fn an_address_alone_has_the_key_its_requests_have() {
        let hasher = KeyHasher::new(64);
        let headers = HeaderMap::new();
        let v6: IpAddr = "2001:db8:1:2::7".parse().unwrap();
        let same_64: IpAddr = "2001:db8:1:2::99".parse().unwrap();
        let mapped: IpAddr = "::ffff:203.0.113.7".parse().unwrap();
        for (ip, of) in [(IP, IP), (v6, v6), (same_64, v6), (mapped, IP)] {
            let request = hasher.derive(&[KeySource::Ip], &facts(&headers, None, of), false);
            assert_eq!(Ok(hasher.derive_ip(ip)), request, "{ip}");
        }
        let other = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 8));
        assert_ne!(hasher.derive_ip(other), hasher.derive_ip(IP));
    }

    #[test]
    fn ipv6_clients_in_one_64_share_a_key() {
        let hasher = KeyHasher::new(64);
        let headers = HeaderMap::new();
        let one: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let two: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other_net: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        let key = |ip| hasher.derive(&[KeySource::Ip], &facts(&headers, None, ip), false);
        assert_eq!(key(one), key(two));
        assert_ne!(key(one), key(other_net));
    }

    #[test]
    fn ipv4_mapped_addresses_key_as_ipv4() {
        let hasher = KeyHasher::new(64);
        let headers = HeaderMap::new();
        let mapped: IpAddr = "::ffff:203.0.113.7".parse().unwrap();
        let key = |ip| hasher.derive(&[KeySource::Ip], &facts(&headers, None, ip), false);
        assert_eq!(key(mapped), key(IP));
    }

    #[test]
    fn a_missing_header_is_reported_or_shared() {
        let hasher = KeyHasher::new(64);
        let name = http::HeaderName::from_static("x-api-key");
        let sources = [KeySource::Header(name.clone())];
        let empty = HeaderMap::new();
        assert_eq!(
            hasher.derive(&sources, &facts(&empty, None, IP), false),
            Err(MissingSource(0))
        );
        let shared = hasher
            .derive(&sources, &facts(&empty, None, IP), true)
            .unwrap();
        let mut with_key = HeaderMap::new();
        with_key.insert(name, "k1".parse().unwrap());
        let keyed = hasher
            .derive(&sources, &facts(&with_key, None, IP), true)
            .unwrap();
        assert_ne!(shared, keyed);
    }

    #[test]
    fn query_values_are_keyed_decoded() {
        let hasher = KeyHasher::new(64);
        let headers = HeaderMap::new();
        let sources = [KeySource::Query("key".into())];
        let key = |q| hasher.derive(&sources, &facts(&headers, Some(q), IP), false);
        assert_eq!(key("a=1&key=ab"), key("key=a%62"));
        assert_eq!(key("key=a+b"), key("key=a%20b"));
        assert_ne!(key("key=ab"), key("key=abc"));
        assert_eq!(key("other=1"), Err(MissingSource(0)));
        // Invalid escapes never panic and stay distinct from valid values.
        assert!(key("key=%").is_ok());
        assert!(key("key=%4").is_ok());
        let long = format!("key={}", "%41".repeat(200));
        assert_eq!(key(&long), key(&format!("key={}", "A".repeat(200))));
    }

    #[test]
    fn values_are_length_prefixed_so_boundaries_matter() {
        let hasher = KeyHasher::new(64);
        let sources = [
            KeySource::Header(http::HeaderName::from_static("a")),
            KeySource::Header(http::HeaderName::from_static("b")),
        ];
        let mut one = HeaderMap::new();
        one.insert("a", "ab".parse().unwrap());
        one.insert("b", "c".parse().unwrap());
        let mut two = HeaderMap::new();
        two.insert("a", "a".parse().unwrap());
        two.insert("b", "bc".parse().unwrap());
        assert_ne!(
            hasher.derive(&sources, &facts(&one, None, IP), false),
            hasher.derive(&sources, &facts(&two, None, IP), false)
        );
    }

    #[test]
    fn a_key_written_as_text_is_the_key_of_the_request_it_names() {
        let hasher = KeyHasher::new(64);
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", "k1".parse().unwrap());
        let sources = [
            KeySource::Ip,
            KeySource::Header(http::HeaderName::from_static("x-api-key")),
            KeySource::Query("q".into()),
            KeySource::Host,
            KeySource::Global,
        ];
        let facts = facts(&headers, Some("q=a%20b+c"), IP);
        let text = hasher.key_text(&sources, &facts);
        assert_eq!(text.clear(), "203.0.113.7|k1|a b c|example.com|");
        let derived = hasher.derive(&sources, &facts, false).unwrap();
        assert_eq!(hasher.key_of_text(&sources, text.clear()), Ok(derived));

        // IPv6 clients are written as their network, which names them all.
        let v6: IpAddr = "2001:db8:1:2::99".parse().unwrap();
        let ip_only = [KeySource::Ip];
        let v6_facts = RequestFacts {
            client_ip: v6,
            ..facts
        };
        let text = hasher.key_text(&ip_only, &v6_facts);
        assert_eq!(text.clear(), "2001:db8:1:2::/64");
        assert_eq!(
            hasher.key_of_text(&ip_only, text.clear()),
            hasher
                .derive(&ip_only, &v6_facts, false)
                .map_err(|_| String::new())
        );
        assert!(hasher.key_of_text(&ip_only, "not-an-ip").is_err());
        assert!(hasher.key_of_text(&sources, "only|three|parts").is_err());
    }

    #[test]
    fn a_query_name_is_compared_as_it_decodes() {
        assert!(query_name_is("key", "key"));
        assert!(query_name_is("k%65y", "key"));
        assert!(query_name_is("a+b", "a b"));
        assert!(!query_name_is("keys", "key"));
        assert!(!query_name_is("ke", "key"));
        assert!(!query_name_is("k%6", "key"));
        assert!(!query_name_is("%", "key"));
        assert_eq!(query_value(Some("a=1&k%65y=v"), "key"), Some("v"));
    }

    #[test]
    fn a_host_written_as_text_keys_as_the_host_it_names() {
        let hasher = KeyHasher::new(64);
        let headers = HeaderMap::new();
        let mut plain = facts(&headers, None, IP);
        plain.host = Some("api.example.com");
        let key = hasher.derive(&[KeySource::Host], &plain, false).unwrap();
        for text in ["api.example.com", "API.example.com.", "api.example.com.."] {
            assert_eq!(
                hasher.key_of_text(&[KeySource::Host], text),
                Ok(key),
                "{text}"
            );
        }
        assert_eq!(host_name("api.example.com."), "api.example.com");
        assert_eq!(host_name("."), "");
    }

    #[test]
    fn hosts_key_case_insensitively() {
        let hasher = KeyHasher::new(64);
        let headers = HeaderMap::new();
        let mut upper = facts(&headers, None, IP);
        let lower_key = {
            let mut lower = facts(&headers, None, IP);
            lower.host = Some("example.com");
            hasher.derive(&[KeySource::Host], &lower, false)
        };
        upper.host = Some("EXAMPLE.com");
        assert_eq!(hasher.derive(&[KeySource::Host], &upper, false), lower_key);
    }
}
