//! The token itself, before and after its signature: the cheap checks that
//! come first (the `Bearer` header, the size, three base64url parts) and
//! the time claims (`exp`, `nbf`) checked last, and every reason a token
//! gives no claims ([`Rejected`]).

use serde_json::{Map, Value};

/// Longest token read; a longer one is refused before it is decoded. Real
/// tokens are well under 2 KiB; this bounds the work a client can ask for.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// Clock skew tolerated on `exp` and `nbf`, in seconds: a token is still
/// accepted this long after it expired, and this long before its `nbf`.
pub const LEEWAY_SECS: u64 = 30;

/// Why a request's token gave no claims. Every reason means the same to the
/// rules (the `jwt:` sources are missing); the distinction is for tests
/// and debugging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// The header is absent or empty.
    NoToken,
    /// Not `Bearer <token>`, or the header is sent more than once.
    NotBearer,
    /// Longer than [`MAX_TOKEN_BYTES`].
    TooLarge,
    /// Not three base64url parts with a JSON header and a JSON object as
    /// payload, or a header `alg` that is not a known algorithm (`none`).
    Malformed,
    /// `alg` is not on the configured list (or not the JWKS key's own).
    Algorithm,
    /// With a JWKS: no key has the token's `kid`, or the token names none
    /// and the set holds several.
    UnknownKey,
    /// The header lists `crit` extensions, none of which sluice knows
    /// (RFC 7515 §4.1.11: such a token must be refused).
    Critical,
    /// The signature does not verify with the configured key.
    Signature,
    /// No numeric `exp`: a token must expire.
    NoExpiry,
    /// `exp` has passed (beyond the leeway).
    Expired,
    /// `nbf` is still ahead (beyond the leeway), or not a number.
    NotYetValid,
}

/// `Bearer <token>` (RFC 6750 §2.1; the scheme is case-insensitive).
pub(super) fn bearer_token(value: &[u8]) -> Result<&[u8], Rejected> {
    const SCHEME: &[u8] = b"bearer ";
    if value.len() < SCHEME.len() || !value[..SCHEME.len()].eq_ignore_ascii_case(SCHEME) {
        return Err(Rejected::NotBearer);
    }
    let token = value[SCHEME.len()..].trim_ascii();
    if token.is_empty() {
        return Err(Rejected::NoToken);
    }
    Ok(token)
}

/// The cheap checks on a compact-serialised token (without `Bearer `),
/// before anything is decoded: at most [`MAX_TOKEN_BYTES`], and three parts
/// of base64url characters.
pub(super) fn check_shape(token: &[u8]) -> Result<(), Rejected> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(Rejected::TooLarge);
    }
    if token.iter().filter(|&&b| b == b'.').count() != 2
        || !token
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(Rejected::Malformed);
    }
    Ok(())
}

/// `exp` must be there and ahead of `now` (RFC 7519 §4.1.4: the token is
/// refused "on or after" it), `nbf` when present must not be ahead (§4.1.5),
/// each with [`LEEWAY_SECS`] of tolerance. Fractional times are rounded the
/// strict way.
pub(super) fn check_times(claims: &Map<String, Value>, now: u64) -> Result<(), Rejected> {
    let exp = claims
        .get("exp")
        .and_then(numeric_date)
        .ok_or(Rejected::NoExpiry)?;
    if now >= exp.floor_secs.saturating_add(LEEWAY_SECS) {
        return Err(Rejected::Expired);
    }
    if let Some(nbf) = claims.get("nbf") {
        let nbf = numeric_date(nbf).ok_or(Rejected::NotYetValid)?;
        if now.saturating_add(LEEWAY_SECS) < nbf.ceil_secs {
            return Err(Rejected::NotYetValid);
        }
    }
    Ok(())
}

/// A JSON NumericDate (seconds since the epoch, possibly fractional).
struct NumericDate {
    floor_secs: u64,
    ceil_secs: u64,
}

fn numeric_date(value: &Value) -> Option<NumericDate> {
    if let Some(secs) = value.as_u64() {
        return Some(NumericDate {
            floor_secs: secs,
            ceil_secs: secs,
        });
    }
    let secs = value.as_f64().filter(|s| s.is_finite() && *s >= 0.0)?;
    // `as` saturates at u64::MAX for huge values.
    Some(NumericDate {
        floor_secs: secs.floor() as u64,
        ceil_secs: secs.ceil() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::jwt::testing::*;
    use serde_json::json;

    #[test]
    fn expiry_and_not_before_allow_exactly_the_leeway() {
        let v = hs256();
        let exp = hs(&json!({"sub": "s", "exp": NOW}));
        assert!(check(&v, &exp, NOW - 1).is_ok());
        assert!(check(&v, &exp, NOW + LEEWAY_SECS - 1).is_ok());
        assert_eq!(
            check(&v, &exp, NOW + LEEWAY_SECS).unwrap_err(),
            Rejected::Expired
        );

        let nbf = hs(&json!({"sub": "s", "exp": NOW + 3600, "nbf": NOW}));
        assert!(check(&v, &nbf, NOW).is_ok());
        assert!(check(&v, &nbf, NOW - LEEWAY_SECS).is_ok());
        assert_eq!(
            check(&v, &nbf, NOW - LEEWAY_SECS - 1).unwrap_err(),
            Rejected::NotYetValid
        );
    }

    #[test]
    fn fractional_times_round_the_strict_way() {
        let v = hs256();
        let exp = hs(&json!({"sub": "s", "exp": NOW as f64 + 0.9}));
        assert_eq!(
            check(&v, &exp, NOW + LEEWAY_SECS).unwrap_err(),
            Rejected::Expired
        );
        let nbf = hs(&json!({"sub": "s", "exp": NOW + 3600, "nbf": NOW as f64 + 0.1}));
        assert_eq!(
            check(&v, &nbf, NOW - LEEWAY_SECS).unwrap_err(),
            Rejected::NotYetValid
        );
    }

    #[test]
    fn a_token_must_carry_a_numeric_expiry_and_nbf() {
        let v = hs256();
        for claims in [
            json!({"sub": "s"}),
            json!({"sub": "s", "exp": "tomorrow"}),
            json!({"sub": "s", "exp": -5}),
            json!({"sub": "s", "exp": null}),
        ] {
            assert_eq!(
                check(&v, &hs(&claims), NOW).unwrap_err(),
                Rejected::NoExpiry,
                "{claims}"
            );
        }
        let nbf = hs(&json!({"sub": "s", "exp": NOW + 60, "nbf": "now"}));
        assert_eq!(check(&v, &nbf, NOW).unwrap_err(), Rejected::NotYetValid);
    }

    #[test]
    fn garbage_is_malformed() {
        let v = hs256();
        for token in [
            "x",
            "a.b",
            "a.b.c.d",
            "..",
            "not base64!.e30.sig",
            "e30.e30.",
            &raw_token(&json!({"alg": "HS256"}), &json!(["an", "array"]), "sig"),
        ] {
            assert!(
                matches!(
                    check(&v, token, NOW).unwrap_err(),
                    Rejected::Malformed | Rejected::Signature
                ),
                "{token}"
            );
        }
    }
}
