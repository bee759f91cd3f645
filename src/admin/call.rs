//! The JSON body of a budget call: `{"rule", "key", "tier", <units>}` for
//! `POST /admin/spend` (units named `amount`) and `POST /v1/check` (named
//! `cost`, and an array of such objects for a batch).
//!
//! Read with serde's visitors straight from the bytes: strings are borrowed
//! from the body (copied only when they hold escapes), nothing nested is
//! kept, and no `serde_json::Value` is built. A member of the wrong type is
//! recorded rather than fatal, so that one bad check of a batch fails only
//! its own slot; only a body that is not JSON at all fails as a whole.
//! Validation then says, in a sentence, what is wrong with a call.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{bad, RefusedCall};

/// What a call's units member is named: `amount` (a spend) or `cost` (a
/// check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Units(pub &'static str);

/// `POST /admin/spend`'s units.
pub(super) const AMOUNT: Units = Units("amount");
/// `POST /v1/check`'s units.
pub(super) const COST: Units = Units("cost");

/// A request body: one call, or (`[...]`) a batch of them.
#[derive(Debug)]
pub(super) enum Body<'a> {
    One(Call<'a>),
    Many(Vec<Call<'a>>),
}

impl<'a> Body<'a> {
    /// Reads `body`; an error only when it is not JSON.
    pub(super) fn parse(body: &'a [u8], units: Units) -> Result<Body<'a>, RefusedCall> {
        // UTF-8 checked once for the whole body: read from bytes, serde_json
        // would check each string again (a third of a check's parsing).
        let body = std::str::from_utf8(body).map_err(|error| {
            bad(format!(
                "the request body is not valid JSON: it is not UTF-8 ({error})"
            ))
        })?;
        let mut deserializer = serde_json::Deserializer::from_str(body);
        let seed = BodySeed {
            units,
            capacity: (body.len() / 20 + 1).min(MOST_CALLS),
        };
        let parsed = seed
            .deserialize(&mut deserializer)
            .and_then(|body| deserializer.end().map(|()| body));
        parsed.map_err(|error| bad(format!("the request body is not valid JSON: {error}")))
    }
}

/// One call as it came: each member as the JSON held it.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Call<'a> {
    pub rule: Option<Member<'a>>,
    pub key: Option<Member<'a>>,
    pub tier: Option<Member<'a>>,
    pub units: Option<Member<'a>>,
    /// The first member a call does not have.
    pub unknown: Option<Cow<'a, str>>,
    /// What the call was when it was not an object (`"an array"`).
    pub not_an_object: Option<&'static str>,
}

/// A member's value. Strings are borrowed from the body where they can be;
/// anything nested is skipped, only its kind kept.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Member<'a> {
    Text(Cow<'a, str>),
    /// A non-negative integer.
    Whole(u64),
    Negative(i64),
    /// A number with a fraction or an exponent, or beyond 2^64.
    Fraction(f64),
    /// Anything else: `true`, `null`, an array, an object.
    Other(&'static str),
}

/// A call that makes sense: a rule and a key, named as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Valid<'c> {
    pub rule: &'c str,
    pub key: &'c str,
    /// The `tiers.by` value that picks the caller's tier.
    pub tier: Option<&'c str>,
    /// `amount` or `cost`, when given.
    pub units: Option<u64>,
}

impl Call<'_> {
    /// The call's rule, key, tier and units, or why it makes no sense.
    /// `units` names the units member for the messages.
    pub(super) fn validate(&self, units: Units) -> Result<Valid<'_>, RefusedCall> {
        let example = match units {
            AMOUNT => r#"{"rule": "per-seller", "key": "seller-42", "amount": 5}"#,
            _ => r#"{"rule": "per-seller", "key": "seller-42", "cost": 1}"#,
        };
        if let Some(kind) = self.not_an_object {
            return Err(bad(format!(
                "a call is a JSON object such as {example}, not {kind}"
            )));
        }
        if let Some(unknown) = &self.unknown {
            return Err(bad(format!(
                "unknown member \"{unknown}\": a call has \"rule\", \"key\", \"{}\" and \
                 \"tier\", as in {example}",
                units.0
            )));
        }
        let rule = text("rule", &self.rule, "the rule's name", example)?;
        let key = text("key", &self.key, "the caller's key as text", example)?;
        let tier = match &self.tier {
            None => Ok(None),
            Some(Member::Text(tier)) => Ok(Some(tier.as_ref())),
            Some(other) => Err(format!(
                "\"tier\" must be a string (the value of the rule's tiers.by, e.g. \"premium\"), \
                 not {}",
                other.describe()
            )),
        };
        let tier = tier.map_err(bad)?;
        let name = units.0;
        let units = match &self.units {
            None => Ok(None),
            Some(Member::Whole(units)) => Ok(Some(*units)),
            Some(Member::Negative(n)) => Err(format!(
                "\"{name}\" must not be negative ({n}): it counts units taken"
            )),
            Some(Member::Fraction(n)) => Err(format!(
                "\"{name}\" must be a whole number of units from 0 to {}, not {n}",
                u64::MAX
            )),
            Some(other) => Err(format!(
                "\"{name}\" must be a JSON number (a whole number of units, 0 or more), not {}",
                other.describe()
            )),
        };
        let units = units.map_err(bad)?;
        Ok(Valid {
            rule,
            key,
            tier,
            units,
        })
    }
}

impl Member<'_> {
    /// The value as a message shows it.
    fn describe(&self) -> String {
        match self {
            Member::Text(text) => format!("the string \"{text}\""),
            Member::Whole(n) => format!("the number {n}"),
            Member::Negative(n) => format!("the number {n}"),
            Member::Fraction(n) => format!("the number {n}"),
            Member::Other(kind) => (*kind).to_owned(),
        }
    }
}

/// The string member `name`, `what` it names, or why it is not one.
fn text<'c>(
    name: &str,
    value: &'c Option<Member<'_>>,
    what: &str,
    example: &str,
) -> Result<&'c str, RefusedCall> {
    match value {
        None => Err(bad(format!(
            "\"{name}\" is missing: {what}, as in {example}"
        ))),
        Some(Member::Text(text)) => Ok(text),
        Some(other) => Err(bad(format!(
            "\"{name}\" must be a string ({what}), not {}",
            other.describe()
        ))),
    }
}

/// The visits of a scalar, which is not a call: a call saying what it was,
/// wrapped by `$wrap`.
macro_rules! not_an_object_visits {
    ($wrap:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($wrap(not_an_object("a boolean")))
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($wrap(not_an_object("a number")))
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($wrap(not_an_object("a number")))
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($wrap(not_an_object("a number")))
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($wrap(not_an_object("a string")))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($wrap(not_an_object("null")))
        }
    };
}

/// Reads a [`Body`]: an object is one call, an array a batch.
struct BodySeed {
    units: Units,
    /// Room for the calls of a batch.
    capacity: usize,
}

/// The most calls room is made for at once (a batch of checks holds at
/// most 1,000).
const MOST_CALLS: usize = 1024;

impl<'de> DeserializeSeed<'de> for BodySeed {
    type Value = Body<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Body<'de>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for BodySeed {
    type Value = Body<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a call object or an array of them")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Body<'de>, A::Error> {
        CallSeed(self.units).visit_map(map).map(Body::One)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Body<'de>, A::Error> {
        // Sized once for the whole batch: a call takes at least 20 bytes
        // (`{"rule":"","key":""}`), and a batch is refused beyond its cap.
        let mut calls = Vec::with_capacity(self.capacity);
        while let Some(call) = seq.next_element_seed(CallSeed(self.units))? {
            calls.push(call);
        }
        Ok(Body::Many(calls))
    }

    not_an_object_visits!(Body::One);
}

fn not_an_object(kind: &'static str) -> Call<'static> {
    Call {
        not_an_object: Some(kind),
        ..Call::default()
    }
}

/// Reads one [`Call`]; any JSON value is accepted (and judged later).
struct CallSeed(Units);

impl<'de> DeserializeSeed<'de> for CallSeed {
    type Value = Call<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Call<'de>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for CallSeed {
    type Value = Call<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a call object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Call<'de>, A::Error> {
        let mut call = Call::default();
        while let Some(Text(name)) = map.next_key::<Text<'de>>()? {
            let slot = match &*name {
                "rule" => &mut call.rule,
                "key" => &mut call.key,
                "tier" => &mut call.tier,
                units if units == self.0 .0 => &mut call.units,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    call.unknown.get_or_insert(name);
                    continue;
                }
            };
            *slot = Some(map.next_value::<Member<'de>>()?);
        }
        Ok(call)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Call<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(not_an_object("an array"))
    }

    not_an_object_visits!(std::convert::identity);
}

/// A string borrowed from the body, or copied when it held escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de> de::Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Text<'de>, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(text)))
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text.to_owned())))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

impl<'de> de::Deserialize<'de> for Member<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Member<'de>, D::Error> {
        struct MemberVisitor;
        impl<'de> Visitor<'de> for MemberVisitor {
            type Value = Member<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }

            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Member<'de>, E> {
                Ok(Member::Text(Cow::Borrowed(text)))
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Member<'de>, E> {
                Ok(Member::Text(Cow::Owned(text.to_owned())))
            }

            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Member<'de>, E> {
                Ok(Member::Whole(n))
            }

            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Member<'de>, E> {
                Ok(match u64::try_from(n) {
                    Ok(n) => Member::Whole(n),
                    Err(_) => Member::Negative(n),
                })
            }

            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Member<'de>, E> {
                Ok(Member::Fraction(n))
            }

            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Member<'de>, E> {
                Ok(Member::Other(if b { "true" } else { "false" }))
            }

            fn visit_unit<E: de::Error>(self) -> Result<Member<'de>, E> {
                Ok(Member::Other("null"))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Member<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Member::Other("an array"))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Member<'de>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Member::Other("an object"))
            }
        }
        deserializer.deserialize_any(MemberVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(
        json: &str,
        units: Units,
    ) -> Result<(String, String, Option<String>, Option<u64>), String> {
        let Body::One(call) =
            Body::parse(json.as_bytes(), units).map_err(|r| r.detail.into_owned())?
        else {
            panic!("one call expected from {json}");
        };
        let valid = call.validate(units).map_err(|r| r.detail.into_owned())?;
        Ok((
            valid.rule.to_owned(),
            valid.key.to_owned(),
            valid.tier.map(str::to_owned),
            valid.units,
        ))
    }

    #[test]
    fn a_call_reads_its_members_borrowed_from_the_body() {
        let body = br#"{"rule":"per-seller","key":"s1","amount":5,"tier":"premium"}"#;
        let Ok(Body::One(call)) = Body::parse(body, AMOUNT) else {
            panic!("one call");
        };
        assert!(matches!(
            call.rule,
            Some(Member::Text(Cow::Borrowed("per-seller")))
        ));
        let valid = call.validate(AMOUNT).unwrap();
        assert_eq!(
            valid,
            Valid {
                rule: "per-seller",
                key: "s1",
                tier: Some("premium"),
                units: Some(5)
            }
        );
        // Escapes are decoded (into a copy).
        assert_eq!(
            one(r#"{"rule":"a\"b","key":"x\u0041"}"#, COST).unwrap(),
            ("a\"b".into(), "xA".into(), None, None)
        );
        // 0 and the largest count are units; whitespace is JSON's.
        assert_eq!(
            one(r#" { "rule" : "r", "key" : "", "cost" : 0 } "#, COST)
                .unwrap()
                .3,
            Some(0)
        );
        assert_eq!(
            one(
                r#"{"rule":"r","key":"k","cost":18446744073709551615}"#,
                COST
            )
            .unwrap()
            .3,
            Some(u64::MAX)
        );
    }

    #[test]
    fn bad_units_are_refused_with_the_reason() {
        let refused = |json: &str| one(json, AMOUNT).unwrap_err();
        let negative = refused(r#"{"rule":"r","key":"k","amount":-3}"#);
        assert!(negative.contains("must not be negative (-3)"), "{negative}");
        let fraction = refused(r#"{"rule":"r","key":"k","amount":1.5}"#);
        assert!(fraction.contains("whole number"), "{fraction}");
        assert!(fraction.contains("1.5"), "{fraction}");
        // 1.0 is a JSON number with a fraction: refused too, as is 1e3.
        assert!(refused(r#"{"rule":"r","key":"k","amount":1.0}"#).contains("whole number"));
        assert!(refused(r#"{"rule":"r","key":"k","amount":1e3}"#).contains("whole number"));
        // Beyond u64: refused, not wrapped.
        assert!(
            refused(r#"{"rule":"r","key":"k","amount":18446744073709551616}"#)
                .contains("whole number")
        );
        let string = refused(r#"{"rule":"r","key":"k","amount":"5"}"#);
        assert!(string.contains("must be a JSON number"), "{string}");
        assert!(string.contains("the string \"5\""), "{string}");
        assert!(refused(r#"{"rule":"r","key":"k","amount":null}"#).contains("not null"));
        assert!(refused(r#"{"rule":"r","key":"k","amount":[1]}"#).contains("not an array"));
        // A check's units are "cost": "amount" is unknown there.
        let unknown = one(r#"{"rule":"r","key":"k","amount":1}"#, COST).unwrap_err();
        assert!(unknown.contains("unknown member \"amount\""), "{unknown}");
    }

    #[test]
    fn missing_or_mistyped_names_are_refused() {
        let refused = |json: &str| one(json, COST).unwrap_err();
        assert!(refused(r#"{"key":"k"}"#).contains("\"rule\" is missing"));
        assert!(refused(r#"{"rule":"r"}"#).contains("\"key\" is missing"));
        assert!(refused(r#"{"rule":7,"key":"k"}"#).contains("\"rule\" must be a string"));
        assert!(refused(r#"{"rule":"r","key":{"a":1}}"#).contains("not an object"));
        assert!(refused(r#"{"rule":"r","key":"k","tier":1}"#).contains("\"tier\" must be a string"));
        assert!(refused("42").contains("a call is a JSON object"));
        assert!(refused("\"x\"").contains("not a string"));
        // Not JSON: the whole body is refused.
        assert!(refused("{\"rule\":").contains("not valid JSON"));
        assert!(refused("{} {}").contains("not valid JSON"));
        assert!(refused("").contains("not valid JSON"));
    }

    #[test]
    fn a_batch_keeps_each_call_and_its_own_faults() {
        let body = br#"[{"rule":"a","key":"1"},7,{"rule":"b","key":"2","cost":-1},{"rule":"c","key":"3","cost":2}]"#;
        let Ok(Body::Many(calls)) = Body::parse(body, COST) else {
            panic!("a batch");
        };
        assert_eq!(calls.len(), 4);
        assert_eq!(calls[0].validate(COST).unwrap().rule, "a");
        assert!(calls[1].validate(COST).is_err());
        assert!(calls[2].validate(COST).is_err());
        assert_eq!(calls[3].validate(COST).unwrap().units, Some(2));
        // Syntax errors anywhere fail the batch.
        assert!(Body::parse(br#"[{"rule":"a","key":"1"},"#, COST).is_err());
        let Ok(Body::Many(none)) = Body::parse(b"[]", COST) else {
            panic!("an empty batch");
        };
        assert!(none.is_empty());
    }
}
