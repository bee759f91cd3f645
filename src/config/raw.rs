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
//!
//! Keys that SPEC.md defines but this release does not implement are still
//! listed here (as [`Present`] when only their position matters), so they are
//! answered "not supported yet" instead of "unknown".

use std::fmt;
use std::ops::Range;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub server: Option<RawServer>,
    pub admin: Option<RawAdmin>,
    pub store: Option<RawStore>,
    pub response: Option<RawResponse>,
    pub identity: Option<RawIdentity>,
    pub access: Option<RawAccess>,
    /// `[[rule]]` tables in file order.
    #[serde(default)]
    pub rule: Vec<RawRule>,
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
    pub normalize_path: Option<Spanned<bool>>,
    pub max_header_bytes: Option<Spanned<i64>>,
    pub max_headers: Option<Spanned<i64>>,
    pub max_uri_bytes: Option<Spanned<i64>>,
    pub max_body_bytes: Option<Spanned<i64>>,
    pub body_timeout: Option<Spanned<String>>,
    pub idle_timeout: Option<Spanned<String>>,
    pub send_timeout: Option<Spanned<String>>,
    pub forwarded_header: Option<Spanned<String>>,
    pub ipv6_prefix: Option<Spanned<i64>>,
}

/// `[admin]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub listen: Option<Spanned<String>>,
    pub token_env: Option<Spanned<String>>,
}

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    pub backend: Option<Spanned<String>>,
    pub max_keys: Option<Spanned<i64>>,
    /// Not supported yet; parsed so its keys are known.
    pub redis: Option<RawRedis>,
}

/// `[store.redis]` (not supported by this release).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedis {
    pub url: Option<Spanned<String>>,
    pub urls: Option<Spanned<OneOrMany>>,
    pub cluster: Option<Spanned<bool>>,
    pub mode: Option<Spanned<String>>,
    pub sync_interval: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
    pub on_error: Option<Spanned<String>>,
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

/// One `[[rule]]`. Every field of SPEC.md's Rules table is here.
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
    pub cost: Option<Spanned<i64>>,
    pub shadow: Option<Spanned<bool>>,
    pub max_in_flight: Option<Spanned<i64>>,
    pub max_delay: Option<Spanned<String>>,
    pub max_queue: Option<Spanned<i64>>,
    // Not supported yet: only where they were written matters.
    pub charge: Option<Present>,
    pub refund_on: Option<Present>,
    pub tiers: Option<Present>,
    pub overrides: Option<Present>,
    pub ban: Option<Present>,
    pub on_change: Option<Present>,
    pub sunset: Option<Present>,
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
}

impl<'de> Deserialize<'de> for OneOrMany {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OneOrManyVisitor;

        impl<'de> Visitor<'de> for OneOrManyVisitor {
            type Value = OneOrMany;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or a list of strings")
            }

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

        deserializer.deserialize_any(OneOrManyVisitor)
    }
}

/// A key whose value is not read, only noted: where it was written, when toml
/// knows (it does not for tables written with dotted keys).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Present {
    /// Byte span of the value in the file.
    pub span: Option<Range<usize>>,
}

// The private protocol between `toml::Spanned` and the toml deserializer
// (serde_spanned 0.6, used by toml 0.8). Speaking it ourselves lets `Present`
// accept tables that have no span, where `Spanned` would fail.
const SPANNED_NAME: &str = "$__serde_spanned_private_Spanned";
const SPANNED_START: &str = "$__serde_spanned_private_start";
const SPANNED_END: &str = "$__serde_spanned_private_end";
const SPANNED_VALUE: &str = "$__serde_spanned_private_value";
const SPANNED_FIELDS: &[&str] = &[SPANNED_START, SPANNED_END, SPANNED_VALUE];

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PresentVisitor;

        impl<'de> Visitor<'de> for PresentVisitor {
            type Value = Present;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Present, A::Error> {
                let Some(first) = map.next_key::<String>()? else {
                    return Ok(Present { span: None });
                };
                if first != SPANNED_START {
                    // A plain table without a span: skip its contents.
                    map.next_value::<IgnoredAny>()?;
                    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    return Ok(Present { span: None });
                }
                let start: usize = map.next_value()?;
                let mut end = start;
                while let Some(key) = map.next_key::<String>()? {
                    if key == SPANNED_END {
                        end = map.next_value()?;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Present {
                    span: Some(start..end),
                })
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Present, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Present { span: None })
            }

            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Present, E> {
                Ok(Present { span: None })
            }

            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Present, E> {
                Ok(Present { span: None })
            }

            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Present, E> {
                Ok(Present { span: None })
            }

            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Present, E> {
                Ok(Present { span: None })
            }

            fn visit_str<E: de::Error>(self, _: &str) -> Result<Present, E> {
                Ok(Present { span: None })
            }
        }

        deserializer.deserialize_struct(SPANNED_NAME, SPANNED_FIELDS, PresentVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Doc {
        list: Option<Spanned<OneOrMany>>,
        present: Option<Present>,
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

    #[test]
    fn present_notes_where_any_value_was_written() {
        assert_eq!(
            doc("present = 3\n").present,
            Some(Present { span: Some(10..11) })
        );
        assert_eq!(
            doc("present = { a = [1, 2] }\n")
                .present
                .and_then(|p| p.span)
                .map(|s| s.start),
            Some(10)
        );
        assert_eq!(
            doc("[present]\na = 1\n")
                .present
                .and_then(|p| p.span)
                .map(|s| s.start),
            Some(0)
        );
        // Dotted keys give a table without a span: still present, not an error.
        assert_eq!(doc("present.a = 1\n").present, Some(Present { span: None }));
    }
}
