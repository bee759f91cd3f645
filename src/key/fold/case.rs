//! Lowering the case of a path segment's letters: ASCII letters, and
//! letters outside ASCII written as text or as percent-escaped UTF-8 (a
//! lowered letter keeps the form it was written in). Escapes of anything
//! else are kept as written; a `%` without two hex digits is a character.

/// What the `%` at `b[i]` starts: the non-ASCII character its escapes
/// spell as UTF-8, if they spell one, and how many bytes to step over
/// (that character's escapes; else 3 for one escape, 1 for a `%` without
/// two hex digits).
pub(super) fn escaped_char(b: &[u8], i: usize) -> (Option<char>, usize) {
    let Some(lead) = escaped_byte(b, i) else {
        return (None, 1);
    };
    let width = match lead {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        // ASCII, or not the start of a UTF-8 character.
        _ => return (None, 3),
    };
    let mut bytes = [lead, 0, 0, 0];
    for (k, byte) in bytes.iter_mut().enumerate().take(width).skip(1) {
        match escaped_byte(b, i + 3 * k) {
            Some(next) => *byte = next,
            None => return (None, 3),
        }
    }
    match std::str::from_utf8(&bytes[..width]) {
        Ok(text) => (text.chars().next(), 3 * width),
        Err(_) => (None, 3),
    }
}

/// The byte the escape `%XX` at `b[i]` stands for.
fn escaped_byte(b: &[u8], i: usize) -> Option<u8> {
    match (b.get(i), b.get(i + 1), b.get(i + 2)) {
        (Some(b'%'), Some(&hi), Some(&lo)) if hi.is_ascii_hexdigit() && lo.is_ascii_hexdigit() => {
            Some((hex_value(hi) << 4) | hex_value(lo))
        }
        _ => None,
    }
}

fn hex_value(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        _ => (digit | 0x20) - b'a' + 10,
    }
}

/// Whether lowering `c` changes it.
#[inline]
pub(super) fn lowers(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_uppercase();
    }
    let mut lower = c.to_lowercase();
    !(lower.len() == 1 && lower.next() == Some(c))
}

/// Appends `segment` to `out` with its letters lowered.
pub(super) fn push_lowered(segment: &str, out: &mut String) {
    let b = segment.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let byte = b[i];
        if byte == b'%' {
            let (c, len) = escaped_char(b, i);
            match c {
                Some(c) if lowers(c) => c.to_lowercase().for_each(|lower| push_escaped(lower, out)),
                _ => out.push_str(&segment[i..i + len]),
            }
            i += len;
        } else if byte.is_ascii() {
            out.push(char::from(byte.to_ascii_lowercase()));
            i += 1;
        } else {
            let c = segment[i..].chars().next().unwrap_or_default();
            out.extend(c.to_lowercase());
            i += c.len_utf8();
        }
    }
}

/// Appends `c`, lowered from an escaped letter, escaped as a normalised
/// path writes it: an unreserved ASCII character as itself, anything else
/// as `%XX` with upper-case hex.
fn push_escaped(c: char, out: &mut String) {
    if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~') {
        out.push(c);
        return;
    }
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut utf8 = [0; 4];
    for &byte in c.encode_utf8(&mut utf8).as_bytes() {
        out.push('%');
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0xF)]));
    }
}
