//! RFC 6901 JSON pointers as an operator writes them after `json:`, parsed
//! once at config time into the segments the scanner compares keys and
//! array indices against.

use std::fmt;

use smallvec::SmallVec;

use super::json::MAX_DEPTH;

/// A parsed RFC 6901 JSON pointer such as `/usage/total_tokens`: where a
/// number sits in a response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    /// As written, for messages and [`Pointer::as_str`].
    text: Box<str>,
    segments: Box<[Segment]>,
}

/// One reference token of a pointer, unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Segment {
    /// The member name it matches in an object (`~1` → `/`, `~0` → `~`).
    /// Inline up to 24 bytes: field names in usage reports are short.
    pub key: SmallVec<[u8; 24]>,
    /// The element it matches in an array: `0` or digits without a leading
    /// zero that fit a `usize`, as `serde_json::Value::pointer` reads them;
    /// `-` (the element after the last) and anything else match no element.
    pub index: Option<usize>,
}

impl Pointer {
    /// Parses `text`, which must start with `/` (the whole document cannot
    /// be a charge: it is never a number). The error says why, with an
    /// example of a good pointer, for the operator.
    pub fn parse(text: &str) -> Result<Pointer, String> {
        const EXAMPLE: &str = "e.g. \"/usage/total_tokens\" or \"/choices/0/usage/total_tokens\"";
        let Some(rest) = text.strip_prefix('/') else {
            return Err(if text.is_empty() {
                format!(
                    "a JSON pointer names a value inside the body and starts with \"/\", {EXAMPLE}"
                )
            } else {
                format!("JSON pointer {text:?} must start with \"/\", {EXAMPLE}")
            });
        };
        let mut segments = Vec::new();
        for token in rest.split('/') {
            let mut key = SmallVec::new();
            let mut bytes = token.bytes();
            while let Some(byte) = bytes.next() {
                if byte != b'~' {
                    key.push(byte);
                    continue;
                }
                match bytes.next() {
                    Some(b'0') => key.push(b'~'),
                    Some(b'1') => key.push(b'/'),
                    _ => {
                        return Err(format!(
                            "JSON pointer {text:?}: \"~\" must be written \"~0\" (and \"/\" inside a name \"~1\"), \
                             e.g. \"/a~1b\" for the member \"a/b\""
                        ))
                    }
                }
            }
            segments.push(Segment {
                index: array_index(&key),
                key,
            });
        }
        if segments.len() > MAX_DEPTH {
            return Err(format!(
                "JSON pointer {text:?} has {} segments; a body nests at most {MAX_DEPTH} deep, so it could never match",
                segments.len()
            ));
        }
        Ok(Pointer {
            text: text.into(),
            segments: segments.into_boxed_slice(),
        })
    }

    /// Its reference tokens in order, unescaped: each the member name it
    /// matches in an object and the element it matches in an array, if
    /// any (`src/key/body.rs` walks a request body by them).
    pub fn tokens(&self) -> impl Iterator<Item = (&[u8], Option<usize>)> {
        self.segments
            .iter()
            .map(|segment| (&segment.key[..], segment.index))
    }

    /// The pointer as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its reference tokens, unescaped, outermost first (never empty).
    pub(super) fn segments(&self) -> &[Segment] {
        &self.segments
    }
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The array index a token names, as RFC 6901 and `serde_json` read it.
fn array_index(token: &[u8]) -> Option<usize> {
    let leading_zero = token.len() > 1 && token[0] == b'0';
    if token.is_empty() || leading_zero || !token.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(token).ok()?.parse().ok()
}
