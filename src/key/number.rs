//! A JSON number as a key: by its value, never by how it was written
//! (docs/conversation.md, "Keys from the request body"), so that `42`,
//! `42.0`, `4.2e1` and `420e-1` are one caller.
//!
//! - A whole number of at most 20 digits is that integer in decimal, read
//!   exactly from the text (no float in between, so 20-digit ids keep every
//!   digit); `-0` is `0`.
//! - Any other is the shortest decimal that reads back as the same 64-bit
//!   float, written as ECMAScript's `Number::toString` writes it (`0.1`,
//!   `1.5e-7`, `1e+21`, `Infinity` for a number past the float's range),
//!   the form a JavaScript client's `String(n)` gives.
//!
//! A plain integer already in that form (the usual case) is borrowed as it
//! is.

use std::borrow::Cow;

/// The most digits of a whole number keyed exactly.
const EXACT_DIGITS: usize = 20;

/// The key text of the JSON number `raw`; `None` when `raw` is not one.
pub fn canonical(raw: &str) -> Option<Cow<'_, str>> {
    let number = Parsed::of(raw)?;
    if number.is_plain_integer(raw) {
        return Some(Cow::Borrowed(raw));
    }
    let mut digits = number.significant();
    if digits.is_empty() {
        return Some(Cow::Borrowed("0"));
    }
    // The value is `digits × 10^scale`, with no trailing zero in `digits`.
    let mut scale = number.scale();
    while digits.last() == Some(&b'0') {
        digits.pop();
        scale = scale.saturating_add(1);
    }
    if scale >= 0 && (digits.len() as i64).saturating_add(scale) <= EXACT_DIGITS as i64 {
        let mut text = String::with_capacity(EXACT_DIGITS + 1);
        if number.negative {
            text.push('-');
        }
        text.extend(digits.iter().map(|&d| char::from(d)));
        text.extend(std::iter::repeat_n('0', scale as usize));
        return Some(Cow::Owned(text));
    }
    // Rust's parse rounds correctly, so every spelling of one value gives
    // the same float.
    let float: f64 = raw.parse().ok()?;
    Some(Cow::Owned(ecmascript(float)))
}

/// A JSON number's parts, as written.
struct Parsed<'a> {
    negative: bool,
    integer: &'a [u8],
    fraction: &'a [u8],
    exponent: i64,
}

impl<'a> Parsed<'a> {
    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, whole.
    fn of(raw: &'a str) -> Option<Parsed<'a>> {
        let bytes = raw.as_bytes();
        let (negative, rest) = match bytes.split_first()? {
            (b'-', rest) => (true, rest),
            _ => (false, bytes),
        };
        let digits = |from: &'a [u8]| {
            let end = from
                .iter()
                .position(|b| !b.is_ascii_digit())
                .unwrap_or(from.len());
            from.split_at(end)
        };
        let (integer, rest) = digits(rest);
        if integer.is_empty() || (integer.len() > 1 && integer[0] == b'0') {
            return None;
        }
        let (fraction, rest) = match rest.split_first() {
            Some((b'.', after)) => {
                let (fraction, rest) = digits(after);
                if fraction.is_empty() {
                    return None;
                }
                (fraction, rest)
            }
            _ => (&rest[..0], rest),
        };
        let exponent = match rest.split_first() {
            None => 0,
            Some((b'e' | b'E', after)) => {
                let (sign, after) = match after.split_first()? {
                    (b'-', after) => (-1, after),
                    (b'+', after) => (1, after),
                    _ => (1, after),
                };
                let (written, rest) = digits(after);
                if written.is_empty() || !rest.is_empty() {
                    return None;
                }
                // Saturating: an exponent of a billion digits is as far
                // out of range as one of ten.
                let magnitude = written.iter().fold(0i64, |n, &d| {
                    n.saturating_mul(10).saturating_add(i64::from(d - b'0'))
                });
                sign * magnitude
            }
            Some(_) => return None,
        };
        Some(Parsed {
            negative,
            integer,
            fraction,
            exponent,
        })
    }

    /// Whether `raw` is already its own key: an integer without a fraction
    /// or an exponent, of at most [`EXACT_DIGITS`] digits, and not `-0`.
    fn is_plain_integer(&self, raw: &str) -> bool {
        self.fraction.is_empty()
            && self.integer.len() == raw.len() - usize::from(self.negative)
            && self.integer.len() <= EXACT_DIGITS
            && !(self.negative && self.integer == b"0")
    }

    /// The digits of the integer and the fraction, without leading zeros.
    fn significant(&self) -> Vec<u8> {
        let all = self.integer.iter().chain(self.fraction);
        all.skip_while(|&&d| d == b'0').copied().collect()
    }

    /// The power of ten the significant digits are scaled by.
    fn scale(&self) -> i64 {
        self.exponent
            .saturating_sub(i64::try_from(self.fraction.len()).unwrap_or(i64::MAX))
    }
}

/// `value` as ECMAScript's `Number::toString(value)` writes it
/// (ECMA-262, "Number::toString"), from the shortest digits that read back
/// as `value` (Rust's `{:e}` gives those).
fn ecmascript(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value == 0.0 {
        return "0".to_owned();
    }
    let sign = if value < 0.0 { "-" } else { "" };
    if value.is_infinite() {
        return format!("{sign}Infinity");
    }
    let scientific = format!("{:e}", value.abs());
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("`{:e}` always writes an exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exponent: i64 = exponent.parse().expect("`{:e}` writes a whole exponent");
    // The value is 0.DIGITS × 10^n.
    let (k, n) = (digits.len() as i64, exponent + 1);
    let text = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        let (whole, fraction) = digits.split_at(n as usize);
        format!("{whole}.{fraction}")
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let power = n - 1;
        let power_sign = if power < 0 { '-' } else { '+' };
        let (first, rest) = digits.split_at(1);
        let point = if rest.is_empty() { "" } else { "." };
        format!("{first}{point}{rest}e{power_sign}{}", power.abs())
    };
    format!("{sign}{text}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(raw: &str) -> String {
        canonical(raw).unwrap().into_owned()
    }

    #[test]
    fn whole_numbers_are_their_integer_however_written() {
        for spelling in [
            "42", "42.0", "42.000", "4.2e1", "4.2E+1", "420e-1", "0.42e2", "42e0",
        ] {
            assert_eq!(key(spelling), "42", "{spelling}");
        }
        for spelling in ["0", "-0", "0.0", "-0.0e5", "0e-9"] {
            assert_eq!(key(spelling), "0", "{spelling}");
        }
        assert_eq!(key("-3e2"), "-300");
        // Twenty digits are kept exactly (past a float's 17).
        assert_eq!(key("12345678901234567891"), "12345678901234567891");
        assert_eq!(key("1234567890123456789.1e1"), "12345678901234567891");
        assert_eq!(key("99999999999999999999"), "99999999999999999999");
        assert!(matches!(canonical("42"), Some(Cow::Borrowed("42"))));
    }

    #[test]
    fn other_numbers_are_written_as_ecmascript_writes_them() {
        for (spelling, expected) in [
            ("0.1", "0.1"),
            ("1.50", "1.5"),
            ("1.5e-7", "1.5e-7"),
            ("0.000001", "0.000001"),
            ("0.0000001", "1e-7"),
            ("1e21", "1e+21"),
            ("100000000000000000000", "100000000000000000000"),
            ("1e20", "100000000000000000000"),
            ("123456789012345678901", "123456789012345680000"),
            ("1.2345e25", "1.2345e+25"),
            ("-2.5", "-2.5"),
            ("1e400", "Infinity"),
            ("-1e400", "-Infinity"),
            ("1e-400", "0"),
            ("5e-324", "5e-324"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
        ] {
            assert_eq!(key(spelling), expected, "{spelling}");
        }
    }

    #[test]
    fn what_is_not_a_json_number_is_none() {
        for raw in [
            "", "-", "01", "1.", ".5", "1e", "1e+", "+1", "1x", "1.5.2", "0x10", "--1",
        ] {
            assert_eq!(canonical(raw), None, "{raw}");
        }
        // An exponent past any range saturates instead of overflowing.
        assert_eq!(key("1e99999999999999999999999"), "Infinity");
        assert_eq!(key("1e-99999999999999999999999"), "0");
    }

    /// Spellings of `digits × 10^scale` (digits without sign or leading
    /// zero; not zero itself, whose spellings the unit tests list).
    fn spellings(negative: bool, digits: &str, scale: i64) -> Vec<String> {
        assert!(!digits.starts_with('0'), "{digits}");
        let sign = if negative { "-" } else { "" };
        let mut out = vec![
            format!("{sign}{digits}e{scale}"),
            format!("{sign}{digits}0e{}", scale - 1),
            format!("{sign}{digits}.000E{scale:+}"),
        ];
        // 0.DIGITS × 10^(scale + len).
        out.push(format!("{sign}0.{digits}e{}", scale + digits.len() as i64));
        // D.IGITS × 10^(scale + len - 1).
        let (first, rest) = digits.split_at(1);
        if !rest.is_empty() {
            out.push(format!(
                "{sign}{first}.{rest}e{}",
                scale + rest.len() as i64
            ));
        }
        if (0..30).contains(&scale) {
            out.push(format!("{sign}{digits}{}", "0".repeat(scale as usize)));
            out.push(format!("{sign}{digits}{}.0", "0".repeat(scale as usize)));
        } else if scale < 0 && -scale < 30 {
            let point = digits.len() as i64 + scale;
            let text = if point > 0 {
                let (whole, fraction) = digits.split_at(point as usize);
                format!("{whole}.{fraction}")
            } else {
                format!("0.{}{digits}", "0".repeat((-point) as usize))
            };
            out.push(format!("{sign}{text}"));
            out.push(format!("{sign}{text}00"));
        }
        out
    }

    proptest! {
        #[test]
        fn any_two_spellings_of_one_integer_key_alike(
            value in (-99_999_999_999_999_999_999i128..=99_999_999_999_999_999_999i128)
                .prop_filter("not zero", |v| *v != 0),
        ) {
            let digits = value.unsigned_abs().to_string();
            let expected = value.to_string();
            for spelling in spellings(value < 0, &digits, 0) {
                prop_assert_eq!(key(&spelling), expected.clone(), "{}", spelling);
            }
        }

        #[test]
        fn any_two_spellings_of_one_float_key_alike(value in any::<f64>().prop_filter(
            "finite, not zero", |v| v.is_finite() && *v != 0.0,
        )) {
            // The float's shortest digits and their power of ten, spelled
            // every way.
            let scientific = format!("{:e}", value.abs());
            let (mantissa, exponent) = scientific.split_once('e').unwrap();
            let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
            let exponent: i64 = exponent.parse().unwrap();
            let scale = exponent - (digits.len() as i64 - 1);
            let spelled = spellings(value.is_sign_negative(), &digits, scale);
            let first = key(&spelled[0]);
            for spelling in &spelled {
                prop_assert_eq!(key(spelling), first.clone(), "{}", spelling);
            }
            // And the key reads back as the same value (an exact integer
            // key, or ECMAScript's shortest text).
            let back: f64 = first.parse().unwrap();
            prop_assert_eq!(back, value);
            prop_assert_eq!(key(&value.to_string()), first.clone());
        }
    }
}
