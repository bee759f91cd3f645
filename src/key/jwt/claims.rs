//! The claims of a verified token, and the path a `jwt:<claim>` key source
//! reads in them.

use serde_json::{Map, Value};

/// A claim name as written after `jwt:`, split on `.` for nested claims
/// (`jwt:org.id` reads `{"org": {"id": ...}}`). Never empty; no segment is
/// empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimPath(pub Vec<String>);

/// The verified claims of one request's token.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Claims(pub Map<String, Value>);

/// A claim's value as it keys a bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ClaimValue<'a> {
    /// A JSON string, keyed by its text.
    Text(&'a str),
    /// A JSON number, boolean or other scalar: keyed by its JSON text, so
    /// `42` and `"42"` are the same caller.
    Scalar(&'a Value),
}

impl Claims {
    /// The claim at `path` (nested objects followed segment by segment), if
    /// it is a string, number or boolean. Objects, arrays, null and empty
    /// strings count as absent.
    pub fn get(&self, path: &ClaimPath) -> Option<ClaimValue<'_>> {
        let (first, rest) = path.0.split_first()?;
        let mut value = self.0.get(first)?;
        for segment in rest {
            value = value.as_object()?.get(segment)?;
        }
        match value {
            Value::String(text) if !text.is_empty() => Some(ClaimValue::Text(text)),
            Value::Number(_) | Value::Bool(_) => Some(ClaimValue::Scalar(value)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::jwt::testing::*;

    fn claims(json: &str) -> Claims {
        match serde_json::from_str(json).unwrap() {
            Value::Object(map) => Claims(map),
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn reads_top_level_nested_and_scalar_claims() {
        let c = claims(
            r#"{"sub":"s1","org":{"id":7,"tier":{"name":"gold"}},"ok":true,"e":"","n":null,"a":[1]}"#,
        );
        assert_eq!(c.get(&path("sub")), Some(ClaimValue::Text("s1")));
        assert_eq!(
            c.get(&path("org.tier.name")),
            Some(ClaimValue::Text("gold"))
        );
        assert!(matches!(c.get(&path("org.id")), Some(ClaimValue::Scalar(v)) if v == 7));
        assert!(matches!(c.get(&path("ok")), Some(ClaimValue::Scalar(_))));
        for absent in ["e", "n", "a", "org", "missing", "sub.x", "org.id.x"] {
            assert_eq!(c.get(&path(absent)), None, "{absent}");
        }
    }
}
