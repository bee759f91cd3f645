//! OTLP's protobuf wire format, as far as sluice writes it: the field
//! numbers of the messages it sends and the writers of their fields,
//! exactly as prost encodes opentelemetry-proto's generated messages (the
//! tests hold them to it, byte for byte) without building those messages.
//! A span's attributes are written with these as they are set, on the
//! request path (`trace/span.rs`); the rest of a span and the body around
//! the spans by the exporter (`trace/export.rs`).
//!
//! As prost does, a singular field equal to its default (empty string or
//! bytes, 0) is left out; a message field that is present, even empty, and
//! a oneof's value are always written.

use prost::encoding::{
    encode_key, encode_varint, encoded_len_varint, fixed32, fixed64, int32, int64, key_len,
    WireType,
};

/// OTLP's field numbers (opentelemetry-proto's generated code).
pub mod field {
    /// `opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest`.
    pub mod request {
        pub const RESOURCE_SPANS: u32 = 1;
    }
    /// `opentelemetry.proto.trace.v1.ResourceSpans`.
    pub mod resource_spans {
        pub const RESOURCE: u32 = 1;
        pub const SCOPE_SPANS: u32 = 2;
    }
    /// `opentelemetry.proto.resource.v1.Resource`.
    pub mod resource {
        pub const ATTRIBUTES: u32 = 1;
    }
    /// `opentelemetry.proto.trace.v1.ScopeSpans`.
    pub mod scope_spans {
        pub const SCOPE: u32 = 1;
        pub const SPANS: u32 = 2;
    }
    /// `opentelemetry.proto.common.v1.InstrumentationScope`.
    pub mod scope {
        pub const NAME: u32 = 1;
        pub const VERSION: u32 = 2;
    }
    /// `opentelemetry.proto.trace.v1.Span`.
    pub mod span {
        pub const TRACE_ID: u32 = 1;
        pub const SPAN_ID: u32 = 2;
        pub const TRACE_STATE: u32 = 3;
        pub const PARENT_SPAN_ID: u32 = 4;
        pub const NAME: u32 = 5;
        pub const KIND: u32 = 6;
        pub const START_TIME_UNIX_NANO: u32 = 7;
        pub const END_TIME_UNIX_NANO: u32 = 8;
        pub const ATTRIBUTES: u32 = 9;
        pub const STATUS: u32 = 15;
        pub const FLAGS: u32 = 16;
    }
    /// `opentelemetry.proto.trace.v1.Status`.
    pub mod status {
        pub const CODE: u32 = 3;
    }
    /// `opentelemetry.proto.common.v1.KeyValue`.
    pub mod key_value {
        pub const KEY: u32 = 1;
        pub const VALUE: u32 = 2;
    }
    /// `opentelemetry.proto.common.v1.AnyValue` (its `value` oneof).
    pub mod any_value {
        pub const STRING_VALUE: u32 = 1;
        pub const INT_VALUE: u32 = 3;
    }
}

/// `opentelemetry.proto.trace.v1.Span.SpanKind`: the values sluice writes,
/// numbered as OTLP numbers them (the exporter's tests read them back with
/// opentelemetry-proto's generated code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    Server = 2,
    Client = 3,
}

/// `opentelemetry.proto.trace.v1.Status.StatusCode`: the values sluice
/// writes, numbered as OTLP numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusCode {
    Unset = 0,
    Error = 2,
}

/// An attribute's value as OTLP's `AnyValue` holds it, borrowed.
#[derive(Clone, Copy)]
pub enum Any<'a> {
    /// A `string_value`: UTF-8, a `&str`'s bytes or ASCII by construction.
    Text(&'a [u8]),
    Int(i64),
}

/// A `KeyValue` message's length (its value always present).
pub fn key_value_len(key: &str, value: Any) -> usize {
    string_len(field::key_value::KEY, key)
        + delimited_len(field::key_value::VALUE, any_value_len(value))
}

/// An `AnyValue` message's length: a oneof's value is written even when
/// it is its type's default ("" or 0).
pub fn any_value_len(value: Any) -> usize {
    match value {
        Any::Text(text) => delimited_len(field::any_value::STRING_VALUE, text.len()),
        Any::Int(number) => int64::encoded_len(field::any_value::INT_VALUE, &number),
    }
}

/// Writes a `KeyValue` as field `tag` of the message around it.
#[inline]
pub fn put_key_value(tag: u32, key: &str, value: Any, out: &mut Vec<u8>) {
    match value {
        Any::Text(text) if tag < 16 && key.len() + text.len() < SHORT => {
            put_short_string(tag, key, text, out)
        }
        Any::Int(number) if tag < 16 && key.len() < SHORT_INT_KEY => {
            put_short_int(tag, key, number, out)
        }
        _ => put_any_key_value(tag, key, value, out),
    }
}

/// `KeyValue.key`'s and `KeyValue.value`'s keys (field and wire type).
const KEY: u8 = ((field::key_value::KEY << 3) | WireType::LengthDelimited as u32) as u8;
const VALUE: u8 = ((field::key_value::VALUE << 3) | WireType::LengthDelimited as u32) as u8;

/// A key and a text shorter than this together make a `KeyValue` whose
/// every length is one byte: the text's (below 128), the `AnyValue`'s (2
/// more) and the `KeyValue`'s (2 + 2 more, and 2 for a key).
const SHORT: usize = 120;

/// [`put_key_value`] for a text attribute shorter than [`SHORT`] with
/// its key (most of them: a method, a path, an address, a rule's name),
/// written in one go into room made once: eight bytes of keys and lengths
/// around the two texts.
fn put_short_string(tag: u32, key: &str, text: &[u8], out: &mut Vec<u8>) {
    const STRING: u8 =
        ((field::any_value::STRING_VALUE << 3) | WireType::LengthDelimited as u32) as u8;
    let key = key.as_bytes();
    // An empty key is left out, as prost leaves out an empty string.
    let key_field = if key.is_empty() { 0 } else { 2 + key.len() };
    let any_value = 2 + text.len();
    let key_value = key_field + 2 + any_value;
    let mut head = [0u8; 4];
    head[0] = ((tag << 3) | WireType::LengthDelimited as u32) as u8;
    head[1] = key_value as u8;
    head[2] = KEY;
    head[3] = key.len() as u8;
    out.reserve(2 + key_value);
    out.extend_from_slice(&head[..2 + key_field.min(2)]);
    out.extend_from_slice(key);
    out.extend_from_slice(&[VALUE, any_value as u8, STRING, text.len() as u8]);
    out.extend_from_slice(text);
}

/// A key shorter than this makes an integer's `KeyValue` whose every
/// length is one byte: its value's varint takes 10 bytes at most, and 2 +
/// 2 + 1 more.
const SHORT_INT_KEY: usize = 110;

/// [`put_key_value`] for an integer attribute whose key is shorter than
/// [`SHORT_INT_KEY`].
fn put_short_int(tag: u32, key: &str, number: i64, out: &mut Vec<u8>) {
    const INT: u8 = ((field::any_value::INT_VALUE << 3) | WireType::Varint as u32) as u8;
    let key = key.as_bytes();
    let key_field = if key.is_empty() { 0 } else { 2 + key.len() };
    // int64: a negative number as its two's complement, 10 bytes.
    let any_value = 1 + encoded_len_varint(number as u64);
    let key_value = key_field + 2 + any_value;
    out.reserve(2 + key_value);
    out.push(((tag << 3) | WireType::LengthDelimited as u32) as u8);
    out.push(key_value as u8);
    if !key.is_empty() {
        out.push(KEY);
        out.push(key.len() as u8);
        out.extend_from_slice(key);
    }
    out.extend_from_slice(&[VALUE, any_value as u8, INT]);
    put_varint(number as u64, out);
}

/// [`put_key_value`], any value and any length.
fn put_any_key_value(tag: u32, key: &str, value: Any, out: &mut Vec<u8>) {
    let any_value = any_value_len(value);
    let key_value =
        string_len(field::key_value::KEY, key) + delimited_len(field::key_value::VALUE, any_value);
    // Room for it all at once: each push below then only writes.
    out.reserve(delimited_len(tag, key_value));
    put_delimited(tag, key_value, out);
    put_string(field::key_value::KEY, key, out);
    put_delimited(field::key_value::VALUE, any_value, out);
    match value {
        Any::Text(text) => {
            put_delimited(field::any_value::STRING_VALUE, text.len(), out);
            out.extend_from_slice(text);
        }
        Any::Int(number) => {
            put_key(field::any_value::INT_VALUE, WireType::Varint, out);
            // int64: a negative number as its two's complement, 10 bytes.
            put_varint(number as u64, out);
        }
    }
}

/// A length-delimited field's size: key, length and `len` bytes.
pub fn delimited_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

/// A length-delimited field's key and length (its `len` bytes follow).
#[inline]
pub fn put_delimited(tag: u32, len: usize, out: &mut Vec<u8>) {
    put_key(tag, WireType::LengthDelimited, out);
    put_varint(len as u64, out);
}

/// A field's key ([`encode_key`]): one byte for the field numbers below 16
/// (all but `Span.flags`), known when inlined.
#[inline(always)]
pub fn put_key(tag: u32, wire_type: WireType, out: &mut Vec<u8>) {
    if tag < 16 {
        out.push(((tag << 3) | wire_type as u32) as u8);
    } else {
        encode_key(tag, wire_type, out);
    }
}

/// A varint ([`encode_varint`]), a value below 128 (most lengths here)
/// written without its loop.
#[inline(always)]
pub fn put_varint(value: u64, out: &mut Vec<u8>) {
    if value < 0x80 {
        out.push(value as u8);
    } else {
        encode_varint(value, out);
    }
}

/// A singular `string` field's size: nothing when empty.
pub fn string_len(tag: u32, text: &str) -> usize {
    bytes_len(tag, text.as_bytes())
}

pub fn put_string(tag: u32, text: &str, out: &mut Vec<u8>) {
    put_bytes(tag, text.as_bytes(), out);
}

/// A singular `bytes` field's size: nothing when empty.
pub fn bytes_len(tag: u32, bytes: &[u8]) -> usize {
    if bytes.is_empty() {
        0
    } else {
        delimited_len(tag, bytes.len())
    }
}

pub fn put_bytes(tag: u32, bytes: &[u8], out: &mut Vec<u8>) {
    if !bytes.is_empty() {
        put_delimited(tag, bytes.len(), out);
        out.extend_from_slice(bytes);
    }
}

/// A singular `int32` or enum field's size: nothing when 0.
pub fn int32_len(tag: u32, value: i32) -> usize {
    if value == 0 {
        0
    } else {
        int32::encoded_len(tag, &value)
    }
}

pub fn put_int32(tag: u32, value: i32, out: &mut Vec<u8>) {
    if value != 0 {
        put_key(tag, WireType::Varint, out);
        // int32 as prost writes it: sign-extended to 64 bits.
        put_varint(i64::from(value) as u64, out);
    }
}

/// A singular `fixed64` field's size: nothing when 0.
pub fn fixed64_len(tag: u32, value: u64) -> usize {
    if value == 0 {
        0
    } else {
        fixed64::encoded_len(tag, &value)
    }
}

pub fn put_fixed64(tag: u32, value: u64, out: &mut Vec<u8>) {
    if value != 0 {
        put_key(tag, WireType::SixtyFourBit, out);
        out.extend_from_slice(&value.to_le_bytes());
    }
}

/// A singular `fixed32` field's size: nothing when 0.
pub fn fixed32_len(tag: u32, value: u32) -> usize {
    if value == 0 {
        0
    } else {
        fixed32::encoded_len(tag, &value)
    }
}

pub fn put_fixed32(tag: u32, value: u32, out: &mut Vec<u8>) {
    if value != 0 {
        put_key(tag, WireType::ThirtyTwoBit, out);
        out.extend_from_slice(&value.to_le_bytes());
    }
}
