//! `jwt:<claim>` key sources: the claims of a request's token, available to
//! key derivation only after the token verified (signature, `exp`, `nbf`,
//! algorithm on the allow-list). A token that does not verify yields no
//! claims, so its `jwt:` sources are missing and the rule's `missing` policy
//! decides: a client can never pick someone else's bucket by forging one.
//!
//! [`JwtVerifier`] does the cheap checks first (RELIABILITY.md D7): the
//! header's shape, the token's size ([`MAX_TOKEN_BYTES`]), three base64url
//! parts, a JSON header whose `alg` is on the configured list (which never
//! holds `none`, and never mixes HMAC with public-key algorithms, so a token
//! "signed" with the public key as an HMAC secret is refused unread). Only
//! then is the signature checked, and only then are `exp` and `nbf`
//! compared with the time, allowing [`LEEWAY_SECS`] of clock skew. The proxy
//! verifies a request's token at most once, and only when a rule that
//! applies to it keys on a claim. Nothing here logs a token or a claim.

use http::{HeaderMap, HeaderName};
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

/// `[identity.jwt]`.
#[derive(Debug, Clone)]
pub struct JwtConfig {
    /// Header carrying `Bearer <token>` (default `authorization`).
    pub header: http::HeaderName,
    /// The only algorithms accepted (RFC 8725 §3.1); never empty, never `none`.
    pub algorithms: Vec<JwtAlgorithm>,
    /// What signatures are checked with; `None` only when `verify = false`.
    pub key: Option<JwtKey>,
    /// `false`: claims are read without checking the signature (a gateway
    /// in front already did); `check` warns.
    pub verify: bool,
}

/// A JWS algorithm sluice verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwtAlgorithm {
    HS256,
    HS384,
    HS512,
    RS256,
    RS384,
    RS512,
    ES256,
    ES384,
}

impl JwtAlgorithm {
    /// Every algorithm sluice verifies, in the order messages list them.
    pub const ALL: [JwtAlgorithm; 8] = [
        JwtAlgorithm::HS256,
        JwtAlgorithm::HS384,
        JwtAlgorithm::HS512,
        JwtAlgorithm::RS256,
        JwtAlgorithm::RS384,
        JwtAlgorithm::RS512,
        JwtAlgorithm::ES256,
        JwtAlgorithm::ES384,
    ];

    /// The JWS `alg` spelling (`"HS256"`), as in the config and in tokens.
    pub fn name(self) -> &'static str {
        match self {
            JwtAlgorithm::HS256 => "HS256",
            JwtAlgorithm::HS384 => "HS384",
            JwtAlgorithm::HS512 => "HS512",
            JwtAlgorithm::RS256 => "RS256",
            JwtAlgorithm::RS384 => "RS384",
            JwtAlgorithm::RS512 => "RS512",
            JwtAlgorithm::ES256 => "ES256",
            JwtAlgorithm::ES384 => "ES384",
        }
    }

    /// HMAC (a shared secret) rather than a public-key signature.
    pub fn is_hmac(self) -> bool {
        matches!(
            self,
            JwtAlgorithm::HS256 | JwtAlgorithm::HS384 | JwtAlgorithm::HS512
        )
    }
}

/// The verification key material, read when the config is loaded.
#[derive(Clone)]
pub enum JwtKey {
    /// HMAC secret bytes (from the `secret_env` variable).
    Secret(Vec<u8>),
    /// A PEM public key (RSA or EC) from `public_key_file`.
    PublicKeyPem(Vec<u8>),
    /// A JSON Web Key Set (RFC 7517 §5) from `jwks_file`.
    Jwks(Vec<u8>),
}

/// Never prints the secret: configs are debug-printed in logs and panics.
impl std::fmt::Debug for JwtKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JwtKey::Secret(secret) => write!(f, "Secret(<{} bytes>)", secret.len()),
            JwtKey::PublicKeyPem(pem) => write!(f, "PublicKeyPem(<{} bytes>)", pem.len()),
            JwtKey::Jwks(json) => write!(f, "Jwks(<{} bytes>)", json.len()),
        }
    }
}

/// A claim name as written after `jwt:`, split on `.` for nested claims
/// (`jwt:org.id` reads `{"org": {"id": ...}}`). Never empty; no segment is
/// empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimPath(pub Vec<String>);

/// Longest token read; a longer one is refused before it is decoded. Real
/// tokens are well under 2 KiB; this bounds the work a client can ask for.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// Clock skew tolerated on `exp` and `nbf`, in seconds: a token is still
/// accepted this long after it expired, and this long before its `nbf`.
pub const LEEWAY_SECS: u64 = 30;

/// Checks request tokens against `[identity.jwt]`.
pub struct JwtVerifier {
    header: HeaderName,
    /// One entry per allowed algorithm, each with a `Validation` that allows
    /// only that algorithm: jsonwebtoken refuses a list whose algorithms are
    /// not all of the key's family. Empty when `verify = false`.
    allowed: Vec<(Algorithm, Validation)>,
    /// `None` when `verify = false`: claims are read unverified.
    key: Option<VerificationKeys>,
}

/// What signatures are checked with.
pub enum VerificationKeys {
    /// A secret, or one PEM public key, for every listed algorithm.
    One(DecodingKey),
    /// A JWKS (`jwks_file`): the token's `kid` picks the key; a token
    /// without one is accepted only when the set holds a single key.
    Set(Vec<SetKey>),
}

/// Prints the JWKS ids, never key material.
impl std::fmt::Debug for VerificationKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VerificationKeys::One(_) => f.write_str("One(<key>)"),
            VerificationKeys::Set(keys) => {
                f.debug_list().entries(keys.iter().map(|k| &k.kid)).finish()
            }
        }
    }
}

/// One key of a JWKS.
pub struct SetKey {
    kid: Option<String>,
    /// The key's own `alg`, when it names one: then only that algorithm.
    alg: Option<Algorithm>,
    key: DecodingKey,
}

/// Prints no key material.
impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("header", &self.header)
            .field(
                "algorithms",
                &self.allowed.iter().map(|(alg, _)| alg).collect::<Vec<_>>(),
            )
            .field("verify", &self.key.is_some())
            .finish()
    }
}

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

impl JwtVerifier {
    /// Builds the verifier for a validated `[identity.jwt]`. Fails only when
    /// the key cannot serve one of the algorithms, which validation already
    /// reports; the message says which.
    pub fn new(config: &JwtConfig) -> Result<JwtVerifier, String> {
        let key = match (&config.key, config.verify) {
            (_, false) => None,
            (None, true) => return Err("no key to verify tokens with".to_owned()),
            (Some(key), true) => Some(verification_keys(key, &config.algorithms)?),
        };
        let allowed = match key {
            None => Vec::new(),
            Some(_) => config
                .algorithms
                .iter()
                .map(|&alg| {
                    let alg = algorithm(alg);
                    let mut validation = Validation::new(alg);
                    // `exp` and `nbf` are checked here against the caller's
                    // clock (see `check_times`), `aud` is not configured.
                    validation.required_spec_claims.clear();
                    validation.validate_exp = false;
                    validation.validate_nbf = false;
                    validation.validate_aud = false;
                    (alg, validation)
                })
                .collect(),
        };
        Ok(JwtVerifier {
            header: config.header.clone(),
            allowed,
            key,
        })
    }

    /// The verified claims of the request's token, or why there are none.
    /// `now` is Unix time in seconds.
    pub fn verify(&self, headers: &HeaderMap, now: u64) -> Result<Claims, Rejected> {
        let mut values = headers.get_all(&self.header).iter();
        let value = values.next().ok_or(Rejected::NoToken)?;
        if values.next().is_some() {
            // Two tokens: which one speaks for the caller is ambiguous.
            return Err(Rejected::NotBearer);
        }
        if value.is_empty() {
            return Err(Rejected::NoToken);
        }
        let token = bearer_token(value.as_bytes())?;
        self.verify_token(token, now)
    }

    /// Verifies one compact-serialised token (without `Bearer `).
    pub fn verify_token(&self, token: &[u8], now: u64) -> Result<Claims, Rejected> {
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
        let claims = match &self.key {
            Some(key) => self.verify_signed(token, key)?,
            // verify = false: a gateway in front checked the signature.
            None => jsonwebtoken::dangerous::insecure_decode_claims::<Map<String, Value>>(token)
                .map_err(|_| Rejected::Malformed)?,
        };
        check_times(&claims, now)?;
        Ok(Claims(claims))
    }

    fn verify_signed(
        &self,
        token: &[u8],
        keys: &VerificationKeys,
    ) -> Result<Map<String, Value>, Rejected> {
        // The header alone first: no signature work for a token whose
        // algorithm is not allowed (or is `none`, which does not parse).
        let header = jsonwebtoken::decode_header(token).map_err(|_| Rejected::Malformed)?;
        let (_, validation) = self
            .allowed
            .iter()
            .find(|(alg, _)| *alg == header.alg)
            .ok_or(Rejected::Algorithm)?;
        if header.crit.is_some() {
            return Err(Rejected::Critical);
        }
        let key = match keys {
            VerificationKeys::One(key) => key,
            VerificationKeys::Set(set) => {
                // `kid` is only ever compared with the set's own ids.
                let chosen = match header.kid.as_deref() {
                    Some(kid) => set.iter().find(|k| k.kid.as_deref() == Some(kid)),
                    None if set.len() == 1 => set.first(),
                    None => None,
                }
                .ok_or(Rejected::UnknownKey)?;
                if chosen.alg.is_some_and(|alg| alg != header.alg) {
                    return Err(Rejected::Algorithm);
                }
                &chosen.key
            }
        };
        match jsonwebtoken::decode::<Map<String, Value>>(token, key, validation) {
            Ok(data) => Ok(data.claims),
            Err(error) => Err(match error.kind() {
                jsonwebtoken::errors::ErrorKind::InvalidSignature => Rejected::Signature,
                jsonwebtoken::errors::ErrorKind::InvalidAlgorithm => Rejected::Algorithm,
                _ => Rejected::Malformed,
            }),
        }
    }
}

/// `Bearer <token>` (RFC 6750 §2.1; the scheme is case-insensitive).
fn bearer_token(value: &[u8]) -> Result<&[u8], Rejected> {
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

/// `exp` must be there and ahead of `now` (RFC 7519 §4.1.4: the token is
/// refused "on or after" it), `nbf` when present must not be ahead (§4.1.5),
/// each with [`LEEWAY_SECS`] of tolerance. Fractional times are rounded the
/// strict way.
fn check_times(claims: &Map<String, Value>, now: u64) -> Result<(), Rejected> {
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

/// The keys for `algorithms` (all HMAC, or all public-key: validation
/// guarantees it). A PEM key is tried as RSA and as EC, and must serve every
/// listed algorithm; each key of a JWKS must serve one (its own `alg`, when
/// it names one).
pub fn verification_keys(
    key: &JwtKey,
    algorithms: &[JwtAlgorithm],
) -> Result<VerificationKeys, String> {
    let key = match key {
        JwtKey::Secret(secret) => DecodingKey::from_secret(secret),
        JwtKey::PublicKeyPem(pem) if contains(pem, b"PRIVATE KEY-----") => {
            // An easy slip, and a private key must not sit where the proxy
            // reads it: ask for the public half.
            return Err("holds a private key; give the public key instead \
                        (openssl pkey -in private.pem -pubout)"
                .to_owned());
        }
        JwtKey::PublicKeyPem(pem) => DecodingKey::from_rsa_pem(pem)
            .or_else(|_| DecodingKey::from_ec_pem(pem))
            .map_err(|_| {
                "is not a PEM public key (\"-----BEGIN PUBLIC KEY-----\", an RSA or EC key)"
                    .to_owned()
            })?,
        JwtKey::Jwks(json) => return key_set(json, algorithms).map(VerificationKeys::Set),
    };
    if let Some(&alg) = algorithms.iter().find(|&&alg| !serves(&key, alg)) {
        return Err(format!("holds no key usable for {}", key_needed(alg)));
    }
    Ok(VerificationKeys::One(key))
}

/// Whether `key` can verify `alg` signatures. Verifying an empty signature
/// builds the algorithm's verifier from the key (the part that fails for a
/// key of the wrong kind or curve) and then, as it must, answers false.
fn serves(key: &DecodingKey, alg: JwtAlgorithm) -> bool {
    jsonwebtoken::crypto::verify("", b"", key, algorithm(alg)).is_ok()
}

/// A JWKS file's keys: public keys only, each with a unique `kid` when
/// there are several, each usable for a listed algorithm.
fn key_set(json: &[u8], algorithms: &[JwtAlgorithm]) -> Result<Vec<SetKey>, String> {
    let set: JwkSet = serde_json::from_slice(json)
        .map_err(|e| format!("is not a JWKS (a JSON object with a \"keys\" list): {e}"))?;
    if set.keys.is_empty() {
        return Err("holds no keys".to_owned());
    }
    let listed = jwt_names(algorithms);
    let mut keys: Vec<SetKey> = Vec::with_capacity(set.keys.len());
    for (i, jwk) in set.keys.iter().enumerate() {
        let kid = jwk.common.key_id.clone();
        let name = match &kid {
            Some(kid) => format!("key \"{kid}\""),
            None => format!("key #{i}"),
        };
        if kid.is_none() && set.keys.len() > 1 {
            return Err(format!(
                "{name} has no \"kid\"; with several keys each needs one, so tokens can name it"
            ));
        }
        if kid.is_some() && keys.iter().any(|k| k.kid == kid) {
            return Err(format!("{name} appears twice; each \"kid\" must be unique"));
        }
        if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_)) {
            return Err(format!(
                "{name} is a shared secret (kty \"oct\"); a JWKS here holds public keys only"
            ));
        }
        let key = DecodingKey::from_jwk(jwk)
            .map_err(|_| format!("{name} is not an RSA or EC public key sluice can use"))?;
        let pinned = match jwk.common.key_algorithm {
            None => None,
            Some(alg) => {
                let text = alg.to_string();
                let Some(alg) = algorithms.iter().copied().find(|a| a.name() == text) else {
                    return Err(format!(
                        "{name} is for {text}, which algorithms ({listed}) does not list"
                    ));
                };
                Some(alg)
            }
        };
        let usable = match pinned {
            Some(alg) => serves(&key, alg),
            None => algorithms.iter().any(|&alg| serves(&key, alg)),
        };
        if !usable {
            return Err(format!(
                "{name} fits none of the listed algorithms ({listed})"
            ));
        }
        keys.push(SetKey {
            kid,
            alg: pinned.map(algorithm),
            key,
        });
    }
    Ok(keys)
}

fn jwt_names(algorithms: &[JwtAlgorithm]) -> String {
    algorithms
        .iter()
        .map(|alg| alg.name())
        .collect::<Vec<_>>()
        .join(", ")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// What a key for `alg` looks like, for messages.
fn key_needed(alg: JwtAlgorithm) -> String {
    let kind = match alg {
        JwtAlgorithm::HS256 | JwtAlgorithm::HS384 | JwtAlgorithm::HS512 => "a secret",
        JwtAlgorithm::RS256 | JwtAlgorithm::RS384 | JwtAlgorithm::RS512 => "an RSA public key",
        JwtAlgorithm::ES256 => "an EC P-256 public key",
        JwtAlgorithm::ES384 => "an EC P-384 public key",
    };
    format!("{} ({kind})", alg.name())
}

fn algorithm(alg: JwtAlgorithm) -> Algorithm {
    match alg {
        JwtAlgorithm::HS256 => Algorithm::HS256,
        JwtAlgorithm::HS384 => Algorithm::HS384,
        JwtAlgorithm::HS512 => Algorithm::HS512,
        JwtAlgorithm::RS256 => Algorithm::RS256,
        JwtAlgorithm::RS384 => Algorithm::RS384,
        JwtAlgorithm::RS512 => Algorithm::RS512,
        JwtAlgorithm::ES256 => Algorithm::ES256,
        JwtAlgorithm::ES384 => Algorithm::ES384,
    }
}

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
    use http::HeaderValue;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    const SECRET: &[u8] = b"a test secret of at least thirty-two bytes";
    const RSA_PUBLIC: &[u8] = include_bytes!("../../tests/fixtures/jwt/rsa-public.pem");
    const RSA_PRIVATE: &[u8] = include_bytes!("../../tests/fixtures/jwt/rsa-private.pem");
    const RSA_FORGER: &[u8] = include_bytes!("../../tests/fixtures/jwt/rsa-other-private.pem");
    const EC_PUBLIC: &[u8] = include_bytes!("../../tests/fixtures/jwt/ec256-public.pem");
    const EC_PRIVATE: &[u8] = include_bytes!("../../tests/fixtures/jwt/ec256-private.pem");
    const NOW: u64 = 1_700_000_000;

    fn config(algorithms: &[JwtAlgorithm], key: Option<JwtKey>, verify: bool) -> JwtConfig {
        JwtConfig {
            header: HeaderName::from_static("authorization"),
            algorithms: algorithms.to_vec(),
            key,
            verify,
        }
    }

    fn hs256() -> JwtVerifier {
        JwtVerifier::new(&config(
            &[JwtAlgorithm::HS256],
            Some(JwtKey::Secret(SECRET.to_vec())),
            true,
        ))
        .unwrap()
    }

    fn rs256() -> JwtVerifier {
        JwtVerifier::new(&config(
            &[JwtAlgorithm::RS256],
            Some(JwtKey::PublicKeyPem(RSA_PUBLIC.to_vec())),
            true,
        ))
        .unwrap()
    }

    fn sign(alg: Algorithm, key: &EncodingKey, claims: &Value) -> String {
        jsonwebtoken::encode(&Header::new(alg), claims, key).unwrap()
    }

    fn hs(claims: &Value) -> String {
        sign(Algorithm::HS256, &EncodingKey::from_secret(SECRET), claims)
    }

    fn b64(bytes: &[u8]) -> String {
        // Unpadded base64url, enough for hand-made tokens.
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().fold(0u32, |acc, &b| acc << 8 | u32::from(b))
                << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    }

    /// A token with a hand-written header and payload, and `signature`.
    fn raw_token(header: &Value, claims: &Value, signature: &str) -> String {
        format!(
            "{}.{}.{signature}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        )
    }

    fn check(verifier: &JwtVerifier, token: &str, now: u64) -> Result<Claims, Rejected> {
        verifier.verify_token(token.as_bytes(), now)
    }

    fn valid_for_an_hour() -> Value {
        json!({"sub": "seller-1", "exp": NOW + 3600})
    }

    #[test]
    fn an_hs256_token_gives_its_claims() {
        let token = hs(&json!({"sub": "s1", "org": {"id": 42}, "exp": NOW + 60}));
        let claims = check(&hs256(), &token, NOW).unwrap();
        assert_eq!(claims.get(&path("sub")), Some(ClaimValue::Text("s1")));
        assert!(matches!(claims.get(&path("org.id")), Some(ClaimValue::Scalar(v)) if v == 42));
    }

    #[test]
    fn rs256_and_es256_tokens_verify_with_the_public_key() {
        let token = sign(
            Algorithm::RS256,
            &EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap(),
            &valid_for_an_hour(),
        );
        assert!(check(&rs256(), &token, NOW).is_ok());

        let es256 = JwtVerifier::new(&config(
            &[JwtAlgorithm::ES256],
            Some(JwtKey::PublicKeyPem(EC_PUBLIC.to_vec())),
            true,
        ))
        .unwrap();
        let token = sign(
            Algorithm::ES256,
            &EncodingKey::from_ec_pem(EC_PRIVATE).unwrap(),
            &valid_for_an_hour(),
        );
        assert!(check(&es256, &token, NOW).is_ok());
    }

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
    fn forged_signatures_are_refused() {
        let forged = sign(
            Algorithm::HS256,
            &EncodingKey::from_secret(b"the attacker's guess at the secret"),
            &valid_for_an_hour(),
        );
        assert_eq!(
            check(&hs256(), &forged, NOW).unwrap_err(),
            Rejected::Signature
        );

        let forged = sign(
            Algorithm::RS256,
            &EncodingKey::from_rsa_pem(RSA_FORGER).unwrap(),
            &valid_for_an_hour(),
        );
        assert_eq!(
            check(&rs256(), &forged, NOW).unwrap_err(),
            Rejected::Signature
        );

        // A genuine token whose payload was swapped for another caller's.
        let genuine = hs(&valid_for_an_hour());
        let parts: Vec<&str> = genuine.split('.').collect();
        let victim = b64(json!({"sub": "victim", "exp": NOW + 3600})
            .to_string()
            .as_bytes());
        let spliced = format!("{}.{victim}.{}", parts[0], parts[2]);
        assert_eq!(
            check(&hs256(), &spliced, NOW).unwrap_err(),
            Rejected::Signature
        );
    }

    #[test]
    fn alg_none_and_algorithms_off_the_list_are_refused() {
        let claims = valid_for_an_hour();
        for alg in ["none", "None", "NONE", ""] {
            let token = raw_token(&json!({"alg": alg, "typ": "JWT"}), &claims, "");
            assert_eq!(
                check(&hs256(), &token, NOW).unwrap_err(),
                Rejected::Malformed,
                "{alg}"
            );
        }
        let hs384 = sign(Algorithm::HS384, &EncodingKey::from_secret(SECRET), &claims);
        assert_eq!(
            check(&hs256(), &hs384, NOW).unwrap_err(),
            Rejected::Algorithm
        );
        // Algorithm confusion: HMAC "signed" with the RSA public key, which
        // a verifier trusting the token's alg would use as the secret.
        let confused = sign(
            Algorithm::HS256,
            &EncodingKey::from_secret(RSA_PUBLIC),
            &claims,
        );
        assert_eq!(
            check(&rs256(), &confused, NOW).unwrap_err(),
            Rejected::Algorithm
        );
    }

    #[test]
    fn cheap_checks_come_before_signature_work() {
        // Oversized: refused on its length, whatever it holds.
        let huge = format!(
            "{}.{}.{}",
            "a".repeat(4000),
            "b".repeat(4000),
            "c".repeat(200)
        );
        assert_eq!(check(&rs256(), &huge, NOW).unwrap_err(), Rejected::TooLarge);
        let just_fits = hs(&json!({"sub": "s", "exp": NOW + 60, "pad": "x".repeat(5000)}));
        assert!(just_fits.len() <= MAX_TOKEN_BYTES);
        assert!(check(&hs256(), &just_fits, NOW).is_ok());
        // A disallowed alg with a garbage signature is refused for its alg:
        // the signature was never looked at.
        let token = raw_token(&json!({"alg": "RS512"}), &valid_for_an_hour(), "AAAA");
        assert_eq!(
            check(&rs256(), &token, NOW).unwrap_err(),
            Rejected::Algorithm
        );
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

    #[test]
    fn critical_extensions_are_refused() {
        let mut header = Header::new(Algorithm::HS256);
        header.crit = Some(vec!["exp-x".to_owned()]);
        let token = jsonwebtoken::encode(
            &header,
            &valid_for_an_hour(),
            &EncodingKey::from_secret(SECRET),
        )
        .unwrap();
        assert_eq!(
            check(&hs256(), &token, NOW).unwrap_err(),
            Rejected::Critical
        );
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn reads_a_bearer_token_from_the_configured_header() {
        let v = hs256();
        let token = hs(&valid_for_an_hour());
        for scheme in ["Bearer", "bearer", "BEARER"] {
            let h = headers(&[("authorization", &format!("{scheme} {token}"))]);
            assert!(v.verify(&h, NOW).is_ok(), "{scheme}");
        }
        assert_eq!(v.verify(&headers(&[]), NOW).unwrap_err(), Rejected::NoToken);
        assert_eq!(
            v.verify(&headers(&[("authorization", "")]), NOW)
                .unwrap_err(),
            Rejected::NoToken
        );
        assert_eq!(
            v.verify(&headers(&[("authorization", "Bearer ")]), NOW)
                .unwrap_err(),
            Rejected::NoToken
        );
        for value in [
            token.as_str(),
            &format!("Basic {token}"),
            &format!("Bearer{token}"),
        ] {
            assert_eq!(
                v.verify(&headers(&[("authorization", value)]), NOW)
                    .unwrap_err(),
                Rejected::NotBearer,
                "{value}"
            );
        }
        let bearer = format!("Bearer {token}");
        let twice = headers(&[("authorization", &bearer), ("authorization", &bearer)]);
        assert_eq!(v.verify(&twice, NOW).unwrap_err(), Rejected::NotBearer);

        let mut custom = config(
            &[JwtAlgorithm::HS256],
            Some(JwtKey::Secret(SECRET.to_vec())),
            true,
        );
        custom.header = HeaderName::from_static("x-token");
        let v = JwtVerifier::new(&custom).unwrap();
        assert!(v.verify(&headers(&[("x-token", &bearer)]), NOW).is_ok());
        assert_eq!(
            v.verify(&headers(&[("authorization", &bearer)]), NOW)
                .unwrap_err(),
            Rejected::NoToken
        );
    }

    #[test]
    fn without_verification_claims_are_read_but_times_still_count() {
        let v = JwtVerifier::new(&config(&[JwtAlgorithm::HS256], None, false)).unwrap();
        let unsigned = raw_token(&json!({"alg": "none"}), &valid_for_an_hour(), "");
        let claims = check(&v, &unsigned, NOW).unwrap();
        assert_eq!(claims.get(&path("sub")), Some(ClaimValue::Text("seller-1")));
        let expired = raw_token(&json!({"alg": "none"}), &json!({"sub": "s", "exp": 1}), "");
        assert_eq!(check(&v, &expired, NOW).unwrap_err(), Rejected::Expired);
        assert_eq!(check(&v, "a.b", NOW).unwrap_err(), Rejected::Malformed);
    }

    #[test]
    fn a_key_must_serve_every_listed_algorithm() {
        let rsa = JwtKey::PublicKeyPem(RSA_PUBLIC.to_vec());
        let ec = JwtKey::PublicKeyPem(EC_PUBLIC.to_vec());
        assert!(verification_keys(&rsa, &[JwtAlgorithm::RS256, JwtAlgorithm::RS512]).is_ok());
        assert!(verification_keys(&ec, &[JwtAlgorithm::ES256]).is_ok());
        let err = verification_keys(&rsa, &[JwtAlgorithm::ES256]).unwrap_err();
        assert_eq!(
            err,
            "holds no key usable for ES256 (an EC P-256 public key)"
        );
        let err = verification_keys(&ec, &[JwtAlgorithm::ES256, JwtAlgorithm::ES384]).unwrap_err();
        assert_eq!(
            err,
            "holds no key usable for ES384 (an EC P-384 public key)"
        );
        let err = verification_keys(&ec, &[JwtAlgorithm::RS256]).unwrap_err();
        assert_eq!(err, "holds no key usable for RS256 (an RSA public key)");
        let err = verification_keys(
            &JwtKey::PublicKeyPem(RSA_PRIVATE.to_vec()),
            &[JwtAlgorithm::RS256],
        )
        .unwrap_err();
        assert!(err.starts_with("holds a private key"), "{err}");
        let err = verification_keys(
            &JwtKey::PublicKeyPem(b"hello".to_vec()),
            &[JwtAlgorithm::RS256],
        )
        .unwrap_err();
        assert!(err.starts_with("is not a PEM public key"), "{err}");
    }

    const JWKS: &[u8] = include_bytes!("../../tests/fixtures/jwt/jwks.json");

    fn with_kid(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &Value) -> String {
        let mut header = Header::new(alg);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, claims, key).unwrap()
    }

    #[test]
    fn a_jwks_picks_the_key_by_kid() {
        let v = JwtVerifier::new(&config(
            &[JwtAlgorithm::RS256, JwtAlgorithm::ES256],
            Some(JwtKey::Jwks(JWKS.to_vec())),
            true,
        ))
        .unwrap();
        let rsa = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
        let ec = EncodingKey::from_ec_pem(EC_PRIVATE).unwrap();
        let claims = valid_for_an_hour();
        let token = with_kid(Algorithm::RS256, Some("rsa-1"), &rsa, &claims);
        assert!(check(&v, &token, NOW).is_ok());
        let token = with_kid(Algorithm::ES256, Some("ec-1"), &ec, &claims);
        assert!(check(&v, &token, NOW).is_ok());

        for kid in [None, Some("rsa-2"), Some("../../etc/passwd"), Some("")] {
            let token = with_kid(Algorithm::RS256, kid, &rsa, &claims);
            assert_eq!(
                check(&v, &token, NOW).unwrap_err(),
                Rejected::UnknownKey,
                "{kid:?}"
            );
        }
        // A key pinned to ES256 does not take an RS256 token.
        let token = with_kid(Algorithm::RS256, Some("ec-1"), &rsa, &claims);
        assert_eq!(check(&v, &token, NOW).unwrap_err(), Rejected::Algorithm);
        let forger = EncodingKey::from_rsa_pem(RSA_FORGER).unwrap();
        let token = with_kid(Algorithm::RS256, Some("rsa-1"), &forger, &claims);
        assert_eq!(check(&v, &token, NOW).unwrap_err(), Rejected::Signature);
    }

    #[test]
    fn a_single_key_jwks_takes_tokens_without_kid() {
        let set: Value = serde_json::from_slice(JWKS).unwrap();
        let mut only = set["keys"][0].clone();
        only.as_object_mut().unwrap().remove("kid");
        let json = json!({"keys": [only]}).to_string().into_bytes();
        let v = JwtVerifier::new(&config(
            &[JwtAlgorithm::RS256],
            Some(JwtKey::Jwks(json)),
            true,
        ))
        .unwrap();
        let rsa = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
        let token = with_kid(Algorithm::RS256, None, &rsa, &valid_for_an_hour());
        assert!(check(&v, &token, NOW).is_ok());
    }

    #[test]
    fn a_jwks_holds_usable_public_keys_with_unique_kids() {
        let set: Value = serde_json::from_slice(JWKS).unwrap();
        let rsa_key = set["keys"][0].clone();
        let both = [JwtAlgorithm::RS256, JwtAlgorithm::ES256];
        let keys = |keys: Value| JwtKey::Jwks(json!({ "keys": keys }).to_string().into_bytes());
        let error =
            |key: JwtKey, algorithms: &[JwtAlgorithm]| match verification_keys(&key, algorithms) {
                Ok(_) => panic!("accepted"),
                Err(message) => message,
            };
        assert_eq!(error(keys(json!([])), &both), "holds no keys");
        assert!(error(JwtKey::Jwks(b"[1]".to_vec()), &both).starts_with("is not a JWKS"));
        let mut unnamed = rsa_key.clone();
        unnamed.as_object_mut().unwrap().remove("kid");
        assert_eq!(
            error(keys(json!([rsa_key, unnamed])), &both),
            "key #1 has no \"kid\"; with several keys each needs one, so tokens can name it"
        );
        assert_eq!(
            error(keys(json!([rsa_key, rsa_key])), &both),
            "key \"rsa-1\" appears twice; each \"kid\" must be unique"
        );
        assert_eq!(
            error(
                keys(json!([{"kty": "oct", "kid": "s", "k": "c2VjcmV0"}])),
                &both
            ),
            "key \"s\" is a shared secret (kty \"oct\"); a JWKS here holds public keys only"
        );
        assert_eq!(
            error(JwtKey::Jwks(JWKS.to_vec()), &[JwtAlgorithm::RS256]),
            "key \"ec-1\" is for ES256, which algorithms (RS256) does not list"
        );
        let mut unpinned = rsa_key.clone();
        unpinned.as_object_mut().unwrap().remove("alg");
        assert_eq!(
            error(keys(json!([unpinned])), &[JwtAlgorithm::ES256]),
            "key \"rsa-1\" fits none of the listed algorithms (ES256)"
        );
    }

    #[test]
    fn debug_output_shows_no_key_material() {
        let text = format!("{:?}", hs256());
        assert!(!text.contains("secret"), "{text}");
        let key = format!("{:?}", JwtKey::Secret(SECRET.to_vec()));
        assert_eq!(key, format!("Secret(<{} bytes>)", SECRET.len()));
    }

    fn claims(json: &str) -> Claims {
        match serde_json::from_str(json).unwrap() {
            Value::Object(map) => Claims(map),
            other => panic!("not an object: {other}"),
        }
    }

    fn path(text: &str) -> ClaimPath {
        ClaimPath(text.split('.').map(str::to_owned).collect())
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
