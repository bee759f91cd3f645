//! The admin token (`[admin] token_env`): when one is set, every admin
//! endpoint but `/metrics`, `/healthz` and `/readyz` needs it, as
//! `Authorization: Bearer <token>` (scripts) or as the password of Basic
//! auth (a person at a browser, whose login prompt the 401 brings up; the
//! user name is not read). Otherwise the answer is 401 with a
//! `WWW-Authenticate` challenge for each scheme.

use base64::Engine as _;
use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use http::{HeaderValue, Request, StatusCode};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{problem, Answer};

/// Paths that answer without the token: probes and the Prometheus scrape.
pub(super) fn is_open(path: &str) -> bool {
    matches!(path, "/metrics" | "/healthz" | "/readyz")
}

/// A 401 when `token` is set and the request does not carry it.
pub(super) fn unauthorized<B>(token: Option<&str>, request: &Request<B>) -> Option<Answer> {
    let token = token?;
    let presented = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(presented_token);
    if presented.is_some_and(|presented| same_token(presented.as_bytes(), token.as_bytes())) {
        return None;
    }
    let mut response = problem(
        StatusCode::UNAUTHORIZED,
        "this admin endpoint needs the admin token (from the variable admin.token_env names): \
         \"Authorization: Bearer <token>\", or Basic auth with the token as the password",
    );
    let headers = response.headers_mut();
    headers.append(
        WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"sluice admin\""),
    );
    headers.append(
        WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"sluice admin\", charset=\"UTF-8\""),
    );
    Some(response)
}

/// The token an `Authorization` value carries: a Bearer token, or the
/// password of Basic credentials. Scheme names are case-insensitive
/// (RFC 9110, 11.1).
fn presented_token(authorization: &str) -> Option<String> {
    let (scheme, rest) = authorization.trim().split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(rest.to_owned());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        let credentials = String::from_utf8(decoded).ok()?;
        let (_user, password) = credentials.split_once(':')?;
        return Some(password.to_owned());
    }
    None
}

/// Compares digests in constant time, so that neither the time taken nor
/// an early exit on length tells how much of a guessed token was right.
fn same_token(presented: &[u8], token: &[u8]) -> bool {
    let (presented, token) = (Sha256::digest(presented), Sha256::digest(token));
    presented.ct_eq(&token).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(authorization: Option<&str>) -> Option<u16> {
        let mut request = Request::new(());
        if let Some(value) = authorization {
            request
                .headers_mut()
                .insert(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        }
        unauthorized(Some("s3cret"), &request).map(|response| response.status().as_u16())
    }

    fn basic(credentials: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(credentials)
        )
    }

    #[test]
    fn bearer_and_basic_carry_the_token() {
        assert_eq!(asked(Some("Bearer s3cret")), None);
        assert_eq!(asked(Some("bearer  s3cret ")), None);
        assert_eq!(asked(Some(&basic("admin:s3cret"))), None);
        assert_eq!(asked(Some(&basic(":s3cret"))), None);
        assert_eq!(asked(Some(&basic("anyone:s3cret:more"))), Some(401));
        assert_eq!(asked(Some("Bearer s3cre")), Some(401));
        assert_eq!(asked(Some("Bearer s3cretx")), Some(401));
        assert_eq!(asked(Some(&basic("s3cret"))), Some(401));
        assert_eq!(asked(Some("Basic not-base64!")), Some(401));
        assert_eq!(asked(Some("Token s3cret")), Some(401));
        assert_eq!(asked(None), Some(401));
    }

    #[test]
    fn the_refusal_offers_both_schemes() {
        let response = unauthorized(Some("t"), &Request::new(())).unwrap();
        let offered: Vec<&str> = response
            .headers()
            .get_all(WWW_AUTHENTICATE)
            .iter()
            .map(|value| value.to_str().unwrap())
            .collect();
        assert!(offered[0].starts_with("Bearer "), "{offered:?}");
        assert!(offered[1].starts_with("Basic "), "{offered:?}");
        assert!(unauthorized(None, &Request::new(())).is_none());
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token(b"secret", b"secret"));
        assert!(!same_token(b"secret", b"secreT"));
        assert!(!same_token(b"secret", b"secret2"));
        assert!(!same_token(b"", b"x"));
    }
}
