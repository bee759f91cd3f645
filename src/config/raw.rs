//! The config file exactly as the operator wrote it: serde structs mirroring
//! the TOML, one per table, every one `deny_unknown_fields` so a typo is an
//! error that lists the allowed keys.
//!
//! These types hold no defaults and check no meaning; `config::validate`
//! turns them into the domain types of [`super`]. Every leaf value is wrapped
//! in [`Spanned`] so validation can point at its line and column. Tables are
//! deliberately *not* wrapped: toml 0.8 cannot give a span to a table written
//! with dotted keys (`match.path = "/x"`) or created implicitly
//! (`[identity.jwt]` without `[identity]`) and would fail to parse it.
//! Tables whose position validation needs (`ban`, `sunset`, `tiers`, ...)
//! are wrapped in [`Located`], which has the span when toml gives one and
//! still parses the dotted form without it.
//!
//! Keys of the product contract that this release does not implement are still
//! listed here, so they are answered "not supported yet" instead of "unknown".

use std::fmt;
use std::ops::Range;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

/// `impl Deserialize for $ty` by a visitor that expects `$expecting` and
/// has the `visit_*` methods given, handed to the deserializer's `$how`
/// (`deserialize_any`, `deserialize_map`, ...) after `$arg`s.
macro_rules! visited {
    ($ty:ident, $how:ident($($arg:expr),*), $expecting:expr; $($visit:tt)*) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct TheVisitor;

                impl<'de> Visitor<'de> for TheVisitor {
                    type Value = $ty;

                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str($expecting)
                    }

                    $($visit)*
                }

                deserializer.$how($($arg,)* TheVisitor)
            }
        }
    };
}

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawConfig {
    pub server: Option<RawServer>,
    pub admin: Option<RawAdmin>,
    pub store: Option<RawStore>,
    pub response: Option<RawResponse>,
    pub identity: Option<RawIdentity>,
    pub access: Option<RawAccess>,
    /// `[[rule]]` tables in file order.
    pub rule: Vec<RawRule>,
    /// `[[upstream]]` pools in file order.
    pub upstream: Vec<RawUpstream>,
    /// `[[route]]` tables in file order.
    pub route: Vec<RawRoute>,
    pub rls: Option<RawRls>,
    pub tracing: Option<RawTracing>,
}

/// `[tracing]`: OpenTelemetry traces.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTracing {
    pub otlp: Option<Spanned<String>>,
    pub sample: Option<Spanned<f64>>,
    pub parent: Option<Spanned<String>>,
    pub propagators: Option<Spanned<OneOrMany>>,
}

/// `[rls]`: the rate limit service's listener.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRls {
    pub listen: Option<Spanned<String>>,
}

/// `[server]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub listen: Option<Spanned<String>>,
    pub upstream: Option<Spanned<String>>,
    pub workers: Option<Spanned<i64>>,
    /// CIDRs or bare addresses; a single string is accepted too.
    pub trusted_proxies: Option<Spanned<OneOrMany>>,
    pub connect_timeout: Option<Spanned<String>>,
    pub upstream_timeout: Option<Spanned<String>>,
    pub header_read_timeout: Option<Spanned<String>>,
    pub max_connections: Option<Spanned<i64>>,
    pub shutdown_grace: Option<Spanned<String>>,
    pub shutdown_delay: Option<Spanned<String>>,
    pub normalize_path: Option<Spanned<bool>>,
    /// What the upstream serves alike: any of "case", "trailing_slash",
    /// "params"; a single string is accepted too.
    pub paths_alike: Option<Spanned<OneOrMany>>,
    pub max_header_bytes: Option<Spanned<i64>>,
    pub max_headers: Option<Spanned<i64>>,
    pub max_uri_bytes: Option<Spanned<i64>>,
    pub max_body_bytes: Option<Spanned<i64>>,
    pub max_key_body_bytes: Option<Spanned<i64>>,
    pub body_timeout: Option<Spanned<String>>,
    pub idle_timeout: Option<Spanned<String>>,
    pub send_timeout: Option<Spanned<String>>,
    pub tunnel_idle_timeout: Option<Spanned<String>>,
    pub max_requests_per_connection: Option<Spanned<i64>>,
    pub max_message_bytes: Option<Spanned<i64>>,
    pub max_persisted_queries: Option<Spanned<i64>>,
    pub persisted_queries: Option<Spanned<String>>,
    pub forwarded_header: Option<Spanned<String>>,
    pub ipv6_prefix: Option<Spanned<i64>>,
    pub proxy_protocol: Option<Spanned<bool>>,
    pub upstream_ca: Option<Spanned<String>>,
    pub access_log: Option<Spanned<String>>,
    /// More key sources each access log line records in `keys`.
    pub access_log_keys: Option<Spanned<OneOrMany>>,
    pub tls: Option<Spanned<RawTls>>,
}

/// `[server.tls]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    pub certs: Option<Spanned<Vec<Spanned<RawCertPair>>>>,
    pub http3: Option<Spanned<bool>>,
    /// `"always"`, `"never"` or a number of handshakes.
    pub quic_retry: Option<Spanned<toml::Value>>,
}

/// One entry of `server.tls.certs`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCertPair {
    pub cert: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
}

/// `[admin]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub listen: Option<Spanned<String>>,
    pub token_env: Option<Spanned<String>>,
    pub reveal_keys: Option<Spanned<bool>>,
}

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    pub backend: Option<Spanned<String>>,
    pub max_keys: Option<Spanned<i64>>,
    pub redis: Option<RawRedis>,
}

/// `[store.redis]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedis {
    pub url: Option<Spanned<String>>,
    pub urls: Option<Spanned<OneOrMany>>,
    pub cluster: Option<Spanned<bool>>,
    pub mode: Option<Spanned<String>>,
    pub sync_interval: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
    pub settle_retry_for: Option<Spanned<String>>,
    pub on_error: Option<Spanned<String>>,
    pub instances: Option<Spanned<i64>>,
    pub password_env: Option<Spanned<String>>,
    pub ca: Option<Spanned<String>>,
}

/// `[response]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawResponse {
    pub status: Option<Spanned<i64>>,
    pub headers: Option<Spanned<String>>,
    pub on_success: Option<Spanned<bool>>,
}

/// `[identity]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIdentity {
    pub jwt: Option<RawJwt>,
}

/// `[identity.jwt]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJwt {
    pub header: Option<Spanned<String>>,
    pub algorithms: Option<Spanned<OneOrMany>>,
    pub secret_env: Option<Spanned<String>>,
    pub public_key_file: Option<Spanned<String>>,
    pub jwks_file: Option<Spanned<String>>,
    pub verify: Option<Spanned<bool>>,
}

/// `[access]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccess {
    pub allow: Option<Spanned<OneOrMany>>,
    pub deny: Option<Spanned<OneOrMany>>,
}

/// One `[[rule]]`: every rule field of the product contract, implemented or not.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    pub name: Option<Spanned<String>>,
    #[serde(rename = "match")]
    pub matcher: Option<RawMatch>,
    pub key: Option<Spanned<OneOrMany>>,
    pub missing: Option<Spanned<String>>,
    pub algorithm: Option<Spanned<String>>,
    pub rate: Option<Spanned<String>>,
    /// Must be a list; a single string is accepted here only so validation
    /// can say so at its position.
    pub limits: Option<Spanned<OneOrMany>>,
    pub burst: Option<Spanned<i64>>,
    pub on_limit: Option<Spanned<String>>,
    pub cost: Option<Spanned<RawCost>>,
    pub unreadable: Option<Spanned<RawCost>>,
    pub shadow: Option<Spanned<bool>>,
    pub max_in_flight: Option<Spanned<i64>>,
    pub min_in_flight: Option<Spanned<i64>>,
    pub max_delay: Option<Spanned<String>>,
    pub max_queue: Option<Spanned<i64>>,
    pub charge: Option<Located<RawCharge>>,
    pub charge_missing: Option<Spanned<i64>>,
    pub reserve: Option<Located<RawReserve>>,
    pub reserve_missing: Option<Spanned<i64>>,
    pub refund_on: Option<Spanned<OneOrMany>>,
    /// An IANA time zone whose calendar aligns a fixed window's windows.
    pub calendar: Option<Spanned<String>>,
    pub tiers: Option<Located<RawTiers>>,
    pub overrides: Option<Located<RawOverrides>>,
    pub ban: Option<Located<RawBan>>,
    pub on_change: Option<Spanned<String>>,
    pub sunset: Option<Located<RawSunset>>,
    /// `"request"` or `"message"` (WebSocket messages).
    pub unit: Option<Spanned<String>>,
}

/// A tier's or an override's table: what it sets instead of the rule's own
/// `rate` / `limits` / `burst`.
#[derive(Debug, Default)]
pub struct RawVariant {
    pub rate: Option<Spanned<String>>,
    /// As for the rule: a list; a single string only so validation can say so.
    pub limits: Option<Spanned<OneOrMany>>,
    pub burst: Option<Spanned<i64>>,
    /// An `adaptive` rule's tier: its share of the learned limit (a number
    /// from 0 to 1; validated where its rule is known).
    pub share: Option<Spanned<toml::Value>>,
    /// Keys that are none of these. Collected rather than refused here:
    /// serde's refusal would make the whole `tiers = { ... }` line vanish
    /// (see `validate::from_toml`) and hide the other tiers' errors.
    pub unknown: Vec<Key>,
}

visited! {
    RawVariant, deserialize_map(),
    "a table such as { rate = \"100/s\" } (allowed keys: rate, limits, burst)";
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawVariant, A::Error> {
        let mut variant = RawVariant::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key.text.as_str() {
                "rate" => variant.rate = Some(map.next_value()?),
                "limits" => variant.limits = Some(map.next_value()?),
                "burst" => variant.burst = Some(map.next_value()?),
                "share" => variant.share = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    variant.unknown.push(key);
                }
            }
        }
        Ok(variant)
    }
}

/// `tiers = { by = "header:x-plan", premium = { rate = "100/s" }, ... }`:
/// `by`, and every other key is a tier value with its table.
#[derive(Debug, Default)]
pub struct RawTiers {
    pub by: Option<Spanned<String>>,
    /// Tier values in file order.
    pub tiers: Vec<(Key, Located<RawVariant>)>,
}

/// `overrides = { "seller-42" = { rate = "1000/s" } }`: bucket key → table,
/// in file order.
#[derive(Debug, Default)]
pub struct RawOverrides(pub Vec<(Key, Located<RawVariant>)>);

/// `sunset = { start, end, to, step, link }`.
#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table such as { start = 2026-12-01T00:00:00Z, end = 2027-01-01T00:00:00Z, to = \"0/d\" }"
)]
pub struct RawSunset {
    /// An RFC 3339 string or a TOML datetime; anything else is refused by
    /// validation at its position.
    pub start: Option<Spanned<toml::Value>>,
    pub end: Option<Spanned<toml::Value>>,
    pub to: Option<Spanned<String>>,
    pub step: Option<Spanned<String>>,
    pub link: Option<Spanned<String>>,
}

/// `ban = { after = 20, within = "1m", for = "10m" }`.
#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table such as { after = 20, within = \"1m\", for = \"10m\" }"
)]
pub struct RawBan {
    pub after: Option<Spanned<i64>>,
    pub within: Option<Spanned<String>>,
    #[serde(rename = "for")]
    pub duration: Option<Spanned<String>>,
}

/// One `[[upstream]]`: a named pool of servers.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    pub name: Option<Spanned<String>>,
    pub servers: Option<Spanned<Vec<Spanned<RawServerUrl>>>>,
    pub protocol: Option<Spanned<String>>,
    pub balance: Option<Spanned<String>>,
    pub resolve_every: Option<Spanned<String>>,
    pub retries: Option<Spanned<i64>>,
    pub health: Option<Located<RawHealth>>,
    pub eject: Option<Located<RawEject>>,
    pub connect_timeout: Option<Spanned<String>>,
    pub upstream_timeout: Option<Spanned<String>>,
    pub upstream_ca: Option<Spanned<String>>,
}

/// One entry of an upstream's `servers`: `"http://10.0.0.1:3000"` or
/// `{ url = "http://10.0.0.1:3000", weight = 2 }`.
#[derive(Debug, Default)]
pub struct RawServerUrl {
    pub url: Option<Spanned<String>>,
    pub weight: Option<Spanned<i64>>,
    /// Keys that are neither, collected for validation to name.
    pub unknown: Vec<Key>,
}

visited! {
    RawServerUrl, deserialize_any(),
    "a URL such as \"http://10.0.0.1:3000\" or a table such as \
     { url = \"http://10.0.0.1:3000\", weight = 2 }";
    fn visit_str<E: de::Error>(self, value: &str) -> Result<RawServerUrl, E> {
        // The span is the enclosing `Spanned`'s; validation puts it back.
        Ok(RawServerUrl {
            url: Some(Spanned::new(0..0, value.to_owned())),
            ..RawServerUrl::default()
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawServerUrl, A::Error> {
        let mut server = RawServerUrl::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key.text.as_str() {
                "url" => server.url = Some(map.next_value()?),
                "weight" => server.weight = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    server.unknown.push(key);
                }
            }
        }
        Ok(server)
    }
}

/// An upstream's `health = { path, interval, timeout, fails, passes, host }`.
#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table such as { path = \"/healthz\", interval = \"5s\" }"
)]
pub struct RawHealth {
    pub path: Option<Spanned<String>>,
    pub interval: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
    pub fails: Option<Spanned<i64>>,
    pub passes: Option<Spanned<i64>>,
    pub host: Option<Spanned<String>>,
}

/// An upstream's `eject`: `false`, or `{ after, for, max_share }`.
#[derive(Debug, Default)]
pub struct RawEject {
    /// `eject = false` (or `true`, the default written out).
    pub enabled: Option<bool>,
    pub after: Option<Spanned<i64>>,
    pub duration: Option<Spanned<String>>,
    pub max_share: Option<Spanned<f64>>,
    /// Keys that are none of these, collected for validation to name.
    pub unknown: Vec<Key>,
}

visited! {
    RawEject, deserialize_any(),
    "false, or a table such as { after = 5, for = \"30s\", max_share = 0.5 }";
    fn visit_bool<E: de::Error>(self, value: bool) -> Result<RawEject, E> {
        Ok(RawEject {
            enabled: Some(value),
            ..RawEject::default()
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawEject, A::Error> {
        let mut eject = RawEject::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key.text.as_str() {
                "after" => eject.after = Some(map.next_value()?),
                "for" => eject.duration = Some(map.next_value()?),
                "max_share" => eject.max_share = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    eject.unknown.push(key);
                }
            }
        }
        Ok(eject)
    }
}

/// One `[[route]]`: which pool serves the requests its `match` fits.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    #[serde(rename = "match")]
    pub matcher: Option<RawMatch>,
    pub upstream: Option<Spanned<String>>,
}

/// A rule's `match` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMatch {
    pub path: Option<Spanned<OneOrMany>>,
    pub path_prefix: Option<Spanned<OneOrMany>>,
    pub path_glob: Option<Spanned<OneOrMany>>,
    pub method: Option<Spanned<OneOrMany>>,
    pub host: Option<Spanned<OneOrMany>>,
    /// Header name → the value (or values) it must equal.
    pub header: Option<Located<std::collections::BTreeMap<String, Spanned<OneOrMany>>>>,
    /// CIDRs the client IP must be in.
    pub client: Option<Spanned<OneOrMany>>,
    /// A rule for rate limit service calls of this domain.
    pub domain: Option<Spanned<String>>,
    /// With `domain`: entry keys a descriptor must carry, with their values.
    pub descriptor: Option<Spanned<std::collections::BTreeMap<String, Spanned<String>>>>,
}

/// A rule's `cost`: a whole number of units, or the name of a computed
/// cost (`"graphql"`). Checked by the validator, which knows the names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawCost {
    Units(i64),
    Named(String),
}

visited! {
    RawCost, deserialize_any(), "a whole number of units or \"graphql\"";
    fn visit_i64<E: de::Error>(self, value: i64) -> Result<RawCost, E> {
        Ok(RawCost::Units(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<RawCost, E> {
        Ok(RawCost::Units(i64::try_from(value).unwrap_or(i64::MAX)))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<RawCost, E> {
        Ok(RawCost::Named(value.to_owned()))
    }
}

/// A string or a list of strings (`path = "/a"` or `path = ["/a", "/b"]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OneOrMany {
    /// A single string; its span is the enclosing `Spanned`'s.
    One(String),
    /// A list, each element with its own span.
    Many(Vec<Spanned<String>>),
}

impl OneOrMany {
    /// Every string with its byte span in the file. `outer` is the span of the
    /// whole value, used for the single-string form.
    pub fn items(&self, outer: Range<usize>) -> Vec<(&str, Range<usize>)> {
        match self {
            OneOrMany::One(text) => vec![(text.as_str(), outer)],
            OneOrMany::Many(items) => items
                .iter()
                .map(|item| (item.get_ref().as_str(), item.span()))
                .collect(),
        }
    }

    /// [`Self::items`], each with its path: `path[i]` in a list, else `path`.
    pub fn items_at(&self, outer: Range<usize>, path: &str) -> Vec<(&str, Range<usize>, String)> {
        let many = matches!(self, OneOrMany::Many(_));
        let at = |i| {
            if many {
                format!("{path}[{i}]")
            } else {
                path.to_owned()
            }
        };
        let items = self.items(outer).into_iter().enumerate();
        items.map(|(i, (text, span))| (text, span, at(i))).collect()
    }
}

visited! {
    OneOrMany, deserialize_any(), "a string or a list of strings";
    fn visit_str<E: de::Error>(self, value: &str) -> Result<OneOrMany, E> {
        Ok(OneOrMany::One(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<OneOrMany, E> {
        Ok(OneOrMany::One(value))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<OneOrMany, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<String>>()? {
            items.push(item);
        }
        Ok(OneOrMany::Many(items))
    }
}

// The private protocol between `toml::Spanned` and the toml deserializer
// (serde_spanned 0.6, used by toml 0.8). Speaking it ourselves lets
// `Located` accept tables that have no span, where `Spanned` would fail.
const SPANNED_NAME: &str = "$__serde_spanned_private_Spanned";
const SPANNED_START: &str = "$__serde_spanned_private_start";
const SPANNED_END: &str = "$__serde_spanned_private_end";
const SPANNED_VALUE: &str = "$__serde_spanned_private_value";
const SPANNED_FIELDS: &[&str] = &[SPANNED_START, SPANNED_END, SPANNED_VALUE];

/// A table kept with where it was written, when toml knows: inline tables
/// (`ban = { ... }`) and `[header]` tables have a span, tables written with
/// dotted keys (`ban.after = 3`) do not. Unlike [`Spanned`], which fails to
/// parse the latter, `Located` then simply has no span.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Located<T> {
    /// Byte span of the table in the file, if toml gave one.
    pub span: Option<Range<usize>>,
    pub value: T,
}

/// The `visit_*` methods of [`Located`]'s visitor for a value that is not a
/// table: `T` reads it, without a span.
macro_rules! unplaced {
    ($($visit:ident: $ty:ty),*) => {$(
        fn $visit<E: de::Error>(self, v: $ty) -> Result<Located<T>, E> {
            T::deserialize(de::IntoDeserializer::into_deserializer(v)).map(Located::unplaced)
        }
    )*};
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Located<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LocatedVisitor<T>(std::marker::PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for LocatedVisitor<T> {
            type Value = Located<T>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a table")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Located<T>, A::Error> {
                let Some(first) = map.next_key::<Key>()? else {
                    let empty = de::value::MapDeserializer::<
                        std::iter::Empty<(String, String)>,
                        A::Error,
                    >::new(std::iter::empty());
                    return Ok(Located {
                        span: None,
                        value: T::deserialize(empty)?,
                    });
                };
                if first.text != SPANNED_START {
                    // A table without a span: `first` is its first key.
                    let replay = Replay {
                        first: Some(first),
                        map,
                    };
                    let value = T::deserialize(de::value::MapAccessDeserializer::new(replay))?;
                    return Ok(Located { span: None, value });
                }
                let start: usize = map.next_value()?;
                let mut end = start;
                let mut value = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == SPANNED_END {
                        end = map.next_value()?;
                    } else if key == SPANNED_VALUE {
                        value = Some(map.next_value::<T>()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                let value = value.ok_or_else(|| de::Error::missing_field(SPANNED_VALUE))?;
                Ok(Located {
                    span: Some(start..end),
                    value,
                })
            }

            // Anything but a table: say so in `T`'s own words.
            unplaced!(visit_bool: bool, visit_i64: i64, visit_u64: u64);
            unplaced!(visit_f64: f64, visit_str: &str);

            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Located<T>, A::Error> {
                T::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(Located::unplaced)
            }
        }

        deserializer.deserialize_struct(
            SPANNED_NAME,
            SPANNED_FIELDS,
            LocatedVisitor(std::marker::PhantomData),
        )
    }
}

impl<T> Located<T> {
    fn unplaced(value: T) -> Located<T> {
        Located { span: None, value }
    }
}

/// `charge`: one source (`"elapsed_ms"`), or a table of sources to
/// weights (`{ "json:/usage/prompt_tokens" = 1, ... }`), each weight with
/// its span (validated where the rule is known).
#[derive(Debug, Clone, PartialEq)]
pub enum RawCharge {
    One(String),
    Table(Vec<(Key, Spanned<toml::Value>)>),
}

visited! {
    RawCharge, deserialize_any(),
    "a source such as \"elapsed_ms\" or a table of sources to weights";
    fn visit_str<E: de::Error>(self, value: &str) -> Result<RawCharge, E> {
        Ok(RawCharge::One(value.to_owned()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawCharge, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Key>()? {
            entries.push((key, map.next_value()?));
        }
        Ok(RawCharge::Table(entries))
    }
}

/// `reserve`: a number of units (`4000`), or a table of request sources to
/// weights (`{ "body:/max_tokens" = 4 }`), each weight with its span
/// (validated where the rule is known). Any other value is kept so that
/// validation can say what to write instead.
#[derive(Debug, Clone, PartialEq)]
pub enum RawReserve {
    Units(i64),
    Other(String),
    Table(Vec<(Key, Spanned<toml::Value>)>),
}

visited! {
    RawReserve, deserialize_any(),
    "a whole number of units or a table of sources to weights";
    fn visit_i64<E: de::Error>(self, value: i64) -> Result<RawReserve, E> {
        Ok(RawReserve::Units(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<RawReserve, E> {
        Ok(RawReserve::Units(i64::try_from(value).unwrap_or(i64::MAX)))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<RawReserve, E> {
        Ok(RawReserve::Other(value.to_string()))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<RawReserve, E> {
        Ok(RawReserve::Other(format!("\"{value}\"")))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawReserve, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Key>()? {
            entries.push((key, map.next_value()?));
        }
        Ok(RawReserve::Table(entries))
    }
}

/// Where something was written: the byte offset of its start, when toml
/// gave a span (always for a value, not for every table or key).
pub trait Start {
    fn start(&self) -> Option<usize>;

    /// The start, else `at` (where the enclosing table or rule starts).
    fn start_or(&self, at: usize) -> usize {
        self.start().unwrap_or(at)
    }
}

impl<T> Start for Spanned<T> {
    fn start(&self) -> Option<usize> {
        Some(self.span().start)
    }
}

impl<T> Start for Located<T> {
    fn start(&self) -> Option<usize> {
        self.span.as_ref().map(|span| span.start)
    }
}

impl Start for Key {
    fn start(&self) -> Option<usize> {
        self.span.as_ref().map(|span| span.start)
    }
}

impl<S: Start> Start for Option<S> {
    fn start(&self) -> Option<usize> {
        self.as_ref().and_then(Start::start)
    }
}

/// A table key with its span in the file, when toml knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Key {
    pub text: String,
    pub span: Option<Range<usize>>,
}

visited! {
    Key, deserialize_struct(SPANNED_NAME, SPANNED_FIELDS), "a key";
    fn visit_str<E: de::Error>(self, text: &str) -> Result<Key, E> {
        Ok(Key {
            text: text.to_owned(),
            span: None,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Key, A::Error> {
        let (mut start, mut end, mut text) = (0, 0, String::new());
        while let Some(field) = map.next_key::<String>()? {
            match field.as_str() {
                SPANNED_START => start = map.next_value()?,
                SPANNED_END => end = map.next_value()?,
                _ => text = map.next_value()?,
            }
        }
        Ok(Key {
            text,
            span: Some(start..end),
        })
    }
}

/// A table's entries with the first key, already read, put back in front.
struct Replay<A> {
    first: Option<Key>,
    map: A,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Replay<A> {
    type Error = A::Error;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        match self.first.take() {
            Some(key) => seed
                .deserialize(KeyReplay {
                    key,
                    error: std::marker::PhantomData,
                })
                .map(Some),
            None => self.map.next_key_seed(seed),
        }
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// Hands a [`Key`] to whoever reads it: as a plain string, or, to a
/// `Spanned`/[`Key`] reader, with its span.
struct KeyReplay<E> {
    key: Key,
    error: std::marker::PhantomData<E>,
}

impl<'de, E: de::Error> Deserializer<'de> for KeyReplay<E> {
    type Error = E;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, E> {
        visitor.visit_string(self.key.text)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, E> {
        match self.key.span {
            Some(span) if name == SPANNED_NAME && fields == SPANNED_FIELDS => {
                let entries = [
                    (SPANNED_START, SpanPart::Offset(span.start)),
                    (SPANNED_END, SpanPart::Offset(span.end)),
                    (SPANNED_VALUE, SpanPart::Text(self.key.text)),
                ];
                visitor.visit_map(de::value::MapDeserializer::new(entries.into_iter()))
            }
            _ => visitor.visit_string(self.key.text),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// One value of a replayed key's span map.
enum SpanPart {
    Offset(usize),
    Text(String),
}

impl<'de, E: de::Error> de::IntoDeserializer<'de, E> for SpanPart {
    type Deserializer = SpanPartDeserializer<E>;

    fn into_deserializer(self) -> SpanPartDeserializer<E> {
        SpanPartDeserializer {
            part: self,
            error: std::marker::PhantomData,
        }
    }
}

struct SpanPartDeserializer<E> {
    part: SpanPart,
    error: std::marker::PhantomData<E>,
}

impl<'de, E: de::Error> Deserializer<'de> for SpanPartDeserializer<E> {
    type Error = E;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, E> {
        match self.part {
            SpanPart::Offset(offset) => visitor.visit_u64(offset as u64),
            SpanPart::Text(text) => visitor.visit_string(text),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

/// Reads a table of `Key → Located<RawVariant>` entries; `by` goes to
/// `by` when `with_by` (tiers), everything else is a variant.
fn variant_entries<'de, A: MapAccess<'de>>(
    mut map: A,
    mut by: Option<&mut Option<Spanned<String>>>,
) -> Result<Vec<(Key, Located<RawVariant>)>, A::Error> {
    let mut entries = Vec::new();
    while let Some(key) = map.next_key::<Key>()? {
        match by.as_deref_mut() {
            Some(by) if key.text == "by" => *by = Some(map.next_value()?),
            _ => {
                let value = map.next_value::<Located<RawVariant>>()?;
                entries.push((key, value));
            }
        }
    }
    Ok(entries)
}

visited! {
    RawTiers, deserialize_map(),
    "a table such as { by = \"header:x-plan\", premium = { rate = \"100/s\" } }";
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawTiers, A::Error> {
        let mut by = None;
        let tiers = variant_entries(map, Some(&mut by))?;
        Ok(RawTiers { by, tiers })
    }
}

visited! {
    RawOverrides, deserialize_map(), "a table such as { \"seller-42\" = { rate = \"1000/s\" } }";
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawOverrides, A::Error> {
        variant_entries(map, None).map(RawOverrides)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Doc {
        list: Option<Spanned<OneOrMany>>,
    }

    fn doc(text: &str) -> Doc {
        toml::from_str(text).expect("valid test TOML")
    }

    #[test]
    fn a_list_field_takes_a_single_string() {
        let d = doc("list = \"/a\"\n");
        let list = d.list.expect("list");
        assert_eq!(list.get_ref().items(list.span()), vec![("/a", 7..11)]);
    }

    #[test]
    fn a_list_field_keeps_each_element_position() {
        let d = doc("list = [\"/a\", \"/b\"]\n");
        let list = d.list.expect("list");
        assert_eq!(
            list.get_ref().items(list.span()),
            vec![("/a", 8..12), ("/b", 14..18)]
        );
    }

    #[test]
    fn a_list_field_refuses_other_types() {
        let err = toml::from_str::<Doc>("list = 3\n").unwrap_err();
        assert!(
            err.message().contains("a string or a list of strings"),
            "{err}"
        );
    }

    #[derive(Debug, Deserialize)]
    struct Rules {
        ban: Option<Located<RawBan>>,
        tiers: Option<Located<RawTiers>>,
    }

    fn rules(text: &str) -> Rules {
        toml::from_str(text).expect("valid test TOML")
    }

    #[test]
    fn located_tables_have_a_span_when_toml_knows_one() {
        let inline = rules("ban = { after = 3 }\n").ban.expect("ban");
        assert_eq!(inline.span.map(|s| s.start), Some(6));
        assert_eq!(inline.value.after.map(|a| *a.get_ref()), Some(3));
        let header = rules("[ban]\nafter = 3\n").ban.expect("ban");
        assert_eq!(header.span.map(|s| s.start), Some(0));
        // Dotted keys: no span, but the values and their spans are kept.
        let dotted = rules("ban.after = 3\nban.within = \"1m\"\n")
            .ban
            .expect("ban");
        assert_eq!(dotted.span, None);
        assert_eq!(dotted.value.after.map(|a| a.span()), Some(12..13));
        assert_eq!(dotted.value.within.map(|w| w.span()), Some(27..31));
    }

    #[test]
    fn located_tables_still_refuse_unknown_keys_and_other_types() {
        let err = toml::from_str::<Rules>("ban = { afterr = 3 }\n").unwrap_err();
        assert!(err.message().contains("unknown field `afterr`"), "{err}");
        let err = toml::from_str::<Rules>("ban.afterr = 3\n").unwrap_err();
        assert!(err.message().contains("unknown field `afterr`"), "{err}");
        let err = toml::from_str::<Rules>("ban = 3\n").unwrap_err();
        assert!(
            err.message()
                .contains("expected a table such as { after = 20"),
            "{err}"
        );
    }

    #[test]
    fn tier_keys_keep_their_positions_however_they_are_written() {
        for text in [
            "tiers = { by = \"ip\", gold = { rate = \"1/s\", x = 1 } }\n",
            "[tiers]\nby = \"ip\"\ngold = { rate = \"1/s\", x = 1 }\n",
            "tiers.by = \"ip\"\ntiers.gold.rate = \"1/s\"\ntiers.gold.x = 1\n",
        ] {
            let tiers = rules(text).tiers.expect(text).value;
            assert_eq!(tiers.by.as_ref().map(|b| b.get_ref().as_str()), Some("ip"));
            assert_eq!(tiers.tiers.len(), 1, "{text}");
            let (name, table) = &tiers.tiers[0];
            assert_eq!(name.text, "gold");
            let at = name.span.clone().expect("a key span");
            assert_eq!(&text[at], "gold", "{text}");
            let rate = table.value.rate.as_ref().expect("rate");
            assert_eq!(&text[rate.span()], "\"1/s\"", "{text}");
            let unknown = &table.value.unknown;
            assert_eq!(unknown.len(), 1, "{text}");
            assert_eq!(&text[unknown[0].span.clone().unwrap()], "x", "{text}");
        }
    }
}
