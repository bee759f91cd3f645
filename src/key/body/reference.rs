//! The serde_json walk `lookup` replaced, kept as its oracle: the same
//! answer for any text (`super::tests`' proptest).

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::body_scan::Pointer;

/// The key text at `pointer` in `body`, as serde_json reads it.
pub fn reference_value_at<'b>(body: &'b [u8], pointer: &Pointer) -> Option<Cow<'b, str>> {
    let tokens: smallvec::SmallVec<[(&[u8], Option<usize>); 4]> = pointer.tokens().collect();
    let mut reader = serde_json::Deserializer::from_slice(body);
    let found = Seek { tokens: &tokens }.deserialize(&mut reader).ok()?;
    reader.end().ok()?;
    found
}

/// Looks for the rest of a pointer (`tokens`) in one JSON value.
struct Seek<'t> {
    tokens: &'t [(&'t [u8], Option<usize>)],
}

impl<'de> DeserializeSeed<'de> for Seek<'_> {
    type Value = Option<Cow<'de, str>>;

    fn deserialize<D: Deserializer<'de>>(self, value: D) -> Result<Self::Value, D::Error> {
        if self.tokens.is_empty() {
            let raw = <&'de RawValue as serde::Deserialize>::deserialize(value)?;
            return Ok(leaf(raw.get()));
        }
        value.deserialize_any(self)
    }
}

/// The key text of the JSON value `raw` (its text as written), if it is a
/// string, a number or a boolean.
fn leaf(raw: &str) -> Option<Cow<'_, str>> {
    match raw.as_bytes().first()? {
        // Borrowed unless it has escapes (then `&str` fails, and it is
        // unescaped into a copy).
        b'"' => match serde_json::from_str::<&str>(raw) {
            Ok(text) => Some(Cow::Borrowed(text)),
            Err(_) => serde_json::from_str::<String>(raw).ok().map(Cow::Owned),
        },
        b't' | b'f' | b'-' | b'0'..=b'9' => Some(Cow::Borrowed(raw)),
        _ => None,
    }
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = Option<Cow<'de, str>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut members: M) -> Result<Self::Value, M::Error> {
        let (name, rest) = (self.tokens[0].0, &self.tokens[1..]);
        let mut found = None;
        while let Some(matches) = members.next_key_seed(NameIs(name))? {
            if matches {
                // A repeated member: the last one counts, as in serde_json's
                // own `Value::pointer`.
                found = members.next_value_seed(Seek { tokens: rest })?;
            } else {
                members.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut elements: S) -> Result<Self::Value, S::Error> {
        let (index, rest) = (self.tokens[0].1, &self.tokens[1..]);
        let mut found = None;
        let mut at = 0;
        loop {
            if Some(at) == index {
                match elements.next_element_seed(Seek { tokens: rest })? {
                    Some(value) => found = value,
                    None => break,
                }
            } else if elements.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            at += 1;
        }
        Ok(found)
    }

    // Any other value cannot hold the pointer's next token.
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// Whether an object member's name is `.0` (compared unescaped, without
/// copying it when it has no escapes).
struct NameIs<'n>(&'n [u8]);

impl<'de> DeserializeSeed<'de> for NameIs<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, name: D) -> Result<bool, D::Error> {
        name.deserialize_str(self)
    }
}

impl Visitor<'_> for NameIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, name: &str) -> Result<bool, E> {
        Ok(name.as_bytes() == self.0)
    }
}
