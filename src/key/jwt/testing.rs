//! Helpers shared by the JWT unit tests: keys, signed and hand-made
//! tokens, and verifiers for them.

use http::HeaderName;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use super::{ClaimPath, Claims, JwtAlgorithm, JwtConfig, JwtKey, JwtVerifier, Rejected};

pub const SECRET: &[u8] = b"a test secret of at least thirty-two bytes";
pub const RSA_PUBLIC: &[u8] = include_bytes!("../../../tests/fixtures/jwt/rsa-public.pem");
pub const RSA_PRIVATE: &[u8] = include_bytes!("../../../tests/fixtures/jwt/rsa-private.pem");
pub const RSA_FORGER: &[u8] = include_bytes!("../../../tests/fixtures/jwt/rsa-other-private.pem");
pub const EC_PUBLIC: &[u8] = include_bytes!("../../../tests/fixtures/jwt/ec256-public.pem");
pub const EC_PRIVATE: &[u8] = include_bytes!("../../../tests/fixtures/jwt/ec256-private.pem");
pub const NOW: u64 = 1_700_000_000;

pub fn config(algorithms: &[JwtAlgorithm], key: Option<JwtKey>, verify: bool) -> JwtConfig {
    JwtConfig {
        header: HeaderName::from_static("authorization"),
        algorithms: algorithms.to_vec(),
        key,
        verify,
    }
}

pub fn hs256() -> JwtVerifier {
    JwtVerifier::new(&config(
        &[JwtAlgorithm::HS256],
        Some(JwtKey::Secret(SECRET.to_vec())),
        true,
    ))
    .unwrap()
}

pub fn rs256() -> JwtVerifier {
    JwtVerifier::new(&config(
        &[JwtAlgorithm::RS256],
        Some(JwtKey::PublicKeyPem(RSA_PUBLIC.to_vec())),
        true,
    ))
    .unwrap()
}

pub fn sign(alg: Algorithm, key: &EncodingKey, claims: &Value) -> String {
    jsonwebtoken::encode(&Header::new(alg), claims, key).unwrap()
}

pub fn hs(claims: &Value) -> String {
    sign(Algorithm::HS256, &EncodingKey::from_secret(SECRET), claims)
}

pub fn b64(bytes: &[u8]) -> String {
    // Unpadded base64url, enough for hand-made tokens.
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, &b| acc << 8 | u32::from(b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// A token with a hand-written header and payload, and `signature`.
pub fn raw_token(header: &Value, claims: &Value, signature: &str) -> String {
    format!(
        "{}.{}.{signature}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    )
}

pub fn check(verifier: &JwtVerifier, token: &str, now: u64) -> Result<Claims, Rejected> {
    verifier.verify_token(token.as_bytes(), now)
}

pub fn valid_for_an_hour() -> Value {
    json!({"sub": "seller-1", "exp": NOW + 3600})
}

pub fn path(text: &str) -> ClaimPath {
    ClaimPath(text.split('.').map(str::to_owned).collect())
}

pub const JWKS: &[u8] = include_bytes!("../../../tests/fixtures/jwt/jwks.json");
