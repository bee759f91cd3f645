//! What a `first` or `last` argument counts as ([`Count`]): an integer
//! written in the document, or a variable's value from the request's
//! `variables`, else the variable's default in the operation.
//!
//! The `variables` object and the defaults are each read once, on the first
//! variable a cost meets, into a list sorted by name: a request whose cost
//! needs no variable never reads them, and a document that names a variable
//! many times looks each one up in logarithmic time.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::request::Text;

/// A non-negative integer (saturated at `u64::MAX`), or `None` for anything
/// else: a negative number, a fraction, a string, `null`, an absent value.
/// The cost counts `None` as [`UNKNOWN_COUNT`].
pub(super) type Count = Option<u64>;

/// What a `first`/`last` counts as when its value is not a non-negative
/// integer or not given: GitHub's largest page.
pub(super) const UNKNOWN_COUNT: u64 = 100;

/// The values of an operation's variables.
pub(super) struct Values<'v, 's> {
    /// The text of the request's `variables` object.
    text: Option<&'v str>,
    /// `text` read, sorted by name (a name given twice: the last one counts,
    /// as in JSON parsers that keep the last member).
    given: Option<Vec<(Cow<'v, str>, Count)>>,
    /// The operation's defaults, in the order written.
    written: &'s [(&'s str, Count)],
    /// `written` sorted by name (stably: the last of a name counts).
    defaults: Option<Vec<(&'s str, Count)>>,
}

impl<'v, 's> Values<'v, 's> {
    /// The variables of an operation whose variables' defaults are
    /// `defaults`, with the request's `variables` object `text`.
    pub fn new(text: Option<&'v str>, defaults: &'s [(&'s str, Count)]) -> Values<'v, 's> {
        Values {
            text,
            given: None,
            written: defaults,
            defaults: None,
        }
    }

    /// The count of the variable `name` (without its `$`).
    pub fn get(&mut self, name: &str) -> Count {
        let text = self.text;
        // One allocation per request that uses a variable for a count.
        let given = self.given.get_or_insert_with(|| read_object(text));
        if let Some(count) = last_of(given, name, |entry| &entry.0) {
            return count;
        }
        let written = self.written;
        let defaults = self.defaults.get_or_insert_with(|| {
            let mut defaults = written.to_vec();
            defaults.sort_by(|a, b| a.0.cmp(b.0));
            defaults
        });
        last_of(defaults, name, |entry| entry.0).flatten()
    }
}

/// The count of the last entry named `name` in `sorted` (sorted stably by
/// name, so the last of equal names is the last written).
fn last_of<T, S: AsRef<str> + ?Sized>(
    sorted: &[(T, Count)],
    name: &str,
    key: impl Fn(&(T, Count)) -> &S,
) -> Option<Count> {
    let end = sorted.partition_point(|entry| key(entry).as_ref() <= name);
    let entry = sorted.get(end.checked_sub(1)?)?;
    (key(entry).as_ref() == name).then_some(entry.1)
}

/// The members of a `variables` object and their counts, sorted by name.
fn read_object(text: Option<&str>) -> Vec<(Cow<'_, str>, Count)> {
    let mut entries = text
        .and_then(|text| serde_json::from_str::<Entries<'_>>(text).ok())
        .map_or_else(Vec::new, |entries| entries.0);
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries
}

/// A GraphQL `IntValue` token (`-?(0|[1-9][0-9]*)`), saturated at
/// `u64::MAX`; `None` when negative (`-0` is 0).
pub(super) fn int_count(text: &str) -> Count {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value = digits.bytes().fold(0u64, |value, digit| {
        value
            .saturating_mul(10)
            .saturating_add(u64::from(digit - b'0'))
    });
    (!negative || value == 0).then_some(value)
}

/// A JSON object's members as (name, count) pairs, every value read only as
/// far as a count needs (nested objects and arrays are skipped).
struct Entries<'a>(Vec<(Cow<'a, str>, Count)>);

impl<'de> Deserialize<'de> for Entries<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;

        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = Entries<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::new();
                while let Some(Text(name)) = map.next_key::<Text<'de>>()? {
                    let JsonCount(count) = map.next_value()?;
                    entries.push((name, count));
                }
                Ok(Entries(entries))
            }
        }

        deserializer.deserialize_map(EntriesVisitor)
    }
}

/// A JSON value read as a [`Count`]. A number is an integer when it has no
/// fraction (`10.0` and `1e2` count, as GraphQL servers reading JSON
/// variables accept them for an `Int`); one beyond `u64` saturates.
struct JsonCount(Count);

impl<'de> Deserialize<'de> for JsonCount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountVisitor;

        impl<'de> Visitor<'de> for CountVisitor {
            type Value = JsonCount;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }

            fn visit_u64<E>(self, value: u64) -> Result<JsonCount, E> {
                Ok(JsonCount(Some(value)))
            }

            fn visit_i64<E>(self, value: i64) -> Result<JsonCount, E> {
                Ok(JsonCount(u64::try_from(value).ok()))
            }

            fn visit_f64<E>(self, value: f64) -> Result<JsonCount, E> {
                // `as` saturates a float beyond u64 at u64::MAX.
                let integer = value.is_finite() && value >= 0.0 && value.fract() == 0.0;
                Ok(JsonCount(integer.then_some(value as u64)))
            }

            fn visit_bool<E>(self, _: bool) -> Result<JsonCount, E> {
                Ok(JsonCount(None))
            }

            fn visit_str<E>(self, _: &str) -> Result<JsonCount, E> {
                Ok(JsonCount(None))
            }

            fn visit_unit<E>(self) -> Result<JsonCount, E> {
                Ok(JsonCount(None))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<JsonCount, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(JsonCount(None))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JsonCount, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(JsonCount(None))
            }
        }

        deserializer.deserialize_any(CountVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_tokens_count_when_not_negative() {
        assert_eq!(int_count("0"), Some(0));
        assert_eq!(int_count("-0"), Some(0));
        assert_eq!(int_count("60"), Some(60));
        assert_eq!(int_count("-1"), None);
        assert_eq!(int_count("99999999999999999999999"), Some(u64::MAX));
    }

    #[test]
    fn json_values_count_when_non_negative_integers() {
        let entries = read_object(Some(
            r#"{"a":10,"b":-1,"c":2.5,"d":"10","e":null,"f":[1],"g":{"x":1},"h":1e2,"i":10.0,"j":1e30,"k":true}"#,
        ));
        let count = |name| last_of(&entries, name, |e| &e.0).flatten();
        assert_eq!(count("a"), Some(10));
        assert_eq!(count("b"), None);
        assert_eq!(count("c"), None);
        assert_eq!(count("d"), None);
        assert_eq!(count("e"), None);
        assert_eq!(count("f"), None);
        assert_eq!(count("g"), None);
        assert_eq!(count("h"), Some(100));
        assert_eq!(count("i"), Some(10));
        assert_eq!(count("j"), Some(u64::MAX));
        assert_eq!(count("k"), None);
        assert_eq!(last_of(&entries, "z", |e| &e.0), None);
    }

    #[test]
    fn a_name_given_twice_counts_its_last_value() {
        let entries = read_object(Some(r#"{"n":1,"m":5,"n":2}"#));
        assert_eq!(last_of(&entries, "n", |e| &e.0), Some(Some(2)));
    }
}
