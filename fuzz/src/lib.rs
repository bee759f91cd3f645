//! Helpers shared by the fuzz targets.

use arbitrary::{Arbitrary, Unstructured};
use serde_json::{Map, Number, Value};

/// A JSON object, built structurally so that fuzz inputs give objects every
/// time instead of rarely-valid text: up to 6 members per object, nested up
/// to `depth` levels, with every kind of JSON value.
pub fn json_object(u: &mut Unstructured<'_>, depth: u32) -> arbitrary::Result<Map<String, Value>> {
    let mut map = Map::new();
    for _ in 0..u.int_in_range(0..=6)? {
        map.insert(String::arbitrary(u)?, json_value(u, depth)?);
    }
    Ok(map)
}

/// Any JSON value, objects and arrays only while `depth` lasts.
pub fn json_value(u: &mut Unstructured<'_>, depth: u32) -> arbitrary::Result<Value> {
    Ok(match u.int_in_range(0..=7)? {
        0 => Value::Null,
        1 => Value::Bool(bool::arbitrary(u)?),
        2 => Value::from(i64::arbitrary(u)?),
        3 => Value::from(u64::arbitrary(u)?),
        4 => Number::from_f64(f64::arbitrary(u)?).map_or(Value::Null, Value::Number),
        5 if depth > 0 => Value::Object(json_object(u, depth - 1)?),
        6 if depth > 0 => Value::Array(vec![json_value(u, depth - 1)?]),
        _ => Value::String(String::arbitrary(u)?),
    })
}
