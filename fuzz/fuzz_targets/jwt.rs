//! Arbitrary `Authorization` headers against `JwtVerifier`: it never panics,
//! and it accepts exactly what it should.
//!
//! The fuzzer either sends raw header bytes or builds a token: a `Bearer`
//! spelling, a JOSE header (well-formed with any `alg`/`kid`/`crit`, or any
//! text), a claims object with `exp`/`nbf` of any type and value, and a
//! signature that is HMAC with the right secret, a wrong one or the public
//! key's PEM as the secret (algorithm confusion), ES256 with the fixture key,
//! or junk; then maybe one byte flipped. Four verifiers: HMAC, EC public key,
//! a JWKS, and `verify = false`.
//!
//! Checked: a verifying config accepts only a token signed with its own key
//! (HMAC with the secret; ES256 for the EC key and the JWKS's `ec-1`), and
//! then returns exactly the claims that were signed; anything accepted has a
//! numeric `exp` not yet past and no `nbf` ahead (both with the leeway); a
//! well-formed HS256/384/512 token with a future `exp` is accepted whatever
//! else its claims hold. Accepted claims then key a bucket deterministically.
#![no_main]

use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use sluice::config::{ClaimPath, JwtAlgorithm, JwtConfig, JwtKey, KeySource};
use sluice::key::jwt::{Claims, JwtVerifier, LEEWAY_SECS};
use sluice::key::{KeyHasher, RequestFacts};
use sluice_fuzz::{json_object, json_value};

const SECRET: &[u8] = b"fuzz-secret-0123456789abcdef0123456789";
const EC_PUBLIC: &[u8] = include_bytes!("../../tests/fixtures/jwt/ec256-public.pem");
const EC_PRIVATE: &[u8] = include_bytes!("../../tests/fixtures/jwt/ec256-private.pem");
/// Holds `rsa-1` (RS256) and `ec-1` (ES256, the key of `EC_PRIVATE`).
const JWKS: &[u8] = include_bytes!("../../tests/fixtures/jwt/jwks.json");

#[derive(Debug, Arbitrary, Clone, Copy, PartialEq)]
enum Verifier {
    Hmac,
    EcPem,
    Jwks,
    Unverified,
}

struct Verifiers {
    hmac: JwtVerifier,
    ec_pem: JwtVerifier,
    jwks: JwtVerifier,
    unverified: JwtVerifier,
    ec_signing_key: EncodingKey,
}

fn verifiers() -> &'static Verifiers {
    static VERIFIERS: OnceLock<Verifiers> = OnceLock::new();
    VERIFIERS.get_or_init(|| {
        let build = |algorithms: Vec<JwtAlgorithm>, key: Option<JwtKey>| {
            JwtVerifier::new(&JwtConfig {
                header: HeaderName::from_static("authorization"),
                algorithms,
                verify: key.is_some(),
                key,
            })
            .expect("fixture keys serve their algorithms")
        };
        use JwtAlgorithm::*;
        Verifiers {
            hmac: build(
                vec![HS256, HS384, HS512],
                Some(JwtKey::Secret(SECRET.to_vec())),
            ),
            ec_pem: build(vec![ES256], Some(JwtKey::PublicKeyPem(EC_PUBLIC.to_vec()))),
            jwks: build(vec![RS256, ES256], Some(JwtKey::Jwks(JWKS.to_vec()))),
            unverified: build(vec![HS256], None),
            ec_signing_key: EncodingKey::from_ec_pem(EC_PRIVATE).expect("fixture EC key"),
        }
    })
}

#[derive(Debug, Arbitrary)]
enum Request<'a> {
    /// The header value as sent.
    Raw(&'a [u8]),
    Token(Box<Token>),
}

#[derive(Debug, Arbitrary)]
struct Token {
    scheme: Scheme,
    header: JoseHeader,
    claims: ClaimsSpec,
    signature: Signature,
    /// Flip the byte at this position (modulo the length) after signing.
    flip: Option<(u16, u8)>,
    /// Send the header twice.
    twice: bool,
}

#[derive(Debug, Arbitrary)]
enum Scheme {
    Bearer,
    Lower,
    Upper,
    Spaces,
    Tab,
    Other(String),
}

#[derive(Debug, Arbitrary)]
enum JoseHeader {
    Standard {
        alg: Alg,
        typ: Option<String>,
        kid: Option<Kid>,
        crit: bool,
    },
    Text(String),
}

#[derive(Debug, Arbitrary, Clone, Copy, PartialEq)]
enum Alg {
    HS256,
    HS384,
    HS512,
    RS256,
    ES256,
    ES384,
    PS256,
    EdDSA,
    None,
    Lowercase,
    Empty,
}

impl Alg {
    fn name(self) -> &'static str {
        match self {
            Alg::HS256 => "HS256",
            Alg::HS384 => "HS384",
            Alg::HS512 => "HS512",
            Alg::RS256 => "RS256",
            Alg::ES256 => "ES256",
            Alg::ES384 => "ES384",
            Alg::PS256 => "PS256",
            Alg::EdDSA => "EdDSA",
            Alg::None => "none",
            Alg::Lowercase => "hs256",
            Alg::Empty => "",
        }
    }
}

#[derive(Debug, Arbitrary)]
enum Kid {
    Rsa,
    Ec,
    Other(String),
}

#[derive(Debug)]
struct ClaimsSpec {
    /// Everything but `exp` and `nbf`.
    rest: Map<String, Value>,
    exp: Time,
    nbf: Time,
    now: u64,
}

#[derive(Debug)]
enum Time {
    Absent,
    /// `now` plus this many seconds, as an integer.
    Relative(i32),
    /// Any JSON value at all (a float, a string, an object...).
    Any(Value),
}

impl<'a> Arbitrary<'a> for ClaimsSpec {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<ClaimsSpec> {
        let mut rest = json_object(u, 2)?;
        rest.remove("exp");
        rest.remove("nbf");
        let time = |u: &mut Unstructured<'a>| -> arbitrary::Result<Time> {
            Ok(match u.int_in_range(0..=3)? {
                0 => Time::Absent,
                1 => Time::Any(json_value(u, 1)?),
                _ => Time::Relative(i32::arbitrary(u)?),
            })
        };
        let exp = time(u)?;
        let nbf = time(u)?;
        // Near the present most of the time; any u64 sometimes.
        let now = if bool::arbitrary(u)? {
            u64::arbitrary(u)?
        } else {
            1_700_000_000 + u64::from(u16::arbitrary(u)?)
        };
        Ok(ClaimsSpec {
            rest,
            exp,
            nbf,
            now,
        })
    }
}

impl ClaimsSpec {
    fn object(&self) -> Map<String, Value> {
        let mut claims = self.rest.clone();
        for (name, time) in [("exp", &self.exp), ("nbf", &self.nbf)] {
            let value = match time {
                Time::Absent => continue,
                Time::Relative(secs) => match self.now.checked_add_signed(i64::from(*secs)) {
                    Some(at) => Value::from(at),
                    None => continue,
                },
                Time::Any(value) => value.clone(),
            };
            claims.insert(name.to_owned(), value);
        }
        claims
    }
}

#[derive(Debug, Arbitrary, Clone, Copy, PartialEq)]
enum HmacKey {
    Secret,
    WrongSecret,
    /// The EC public key's PEM as an HMAC secret: the classic confusion.
    PublicPem,
}

#[derive(Debug, Arbitrary)]
enum Signature {
    Hmac(HmacAlg, HmacKey),
    Es256,
    Junk(Vec<u8>),
}

#[derive(Debug, Arbitrary, Clone, Copy, PartialEq)]
enum HmacAlg {
    HS256,
    HS384,
    HS512,
}

impl HmacAlg {
    fn algorithm(self) -> Algorithm {
        match self {
            HmacAlg::HS256 => Algorithm::HS256,
            HmacAlg::HS384 => Algorithm::HS384,
            HmacAlg::HS512 => Algorithm::HS512,
        }
    }

    fn alg(self) -> Alg {
        match self {
            HmacAlg::HS256 => Alg::HS256,
            HmacAlg::HS384 => Alg::HS384,
            HmacAlg::HS512 => Alg::HS512,
        }
    }
}

#[derive(Debug, Arbitrary)]
struct Input<'a> {
    verifier: Verifier,
    /// The time when the header is raw.
    now: u64,
    request: Request<'a>,
}

fuzz_target!(|input: Input<'_>| {
    let all = verifiers();
    let verifier = match input.verifier {
        Verifier::Hmac => &all.hmac,
        Verifier::EcPem => &all.ec_pem,
        Verifier::Jwks => &all.jwks,
        Verifier::Unverified => &all.unverified,
    };
    let name = HeaderName::from_static("authorization");
    let mut headers = HeaderMap::new();
    let (now, token) = match &input.request {
        Request::Raw(bytes) => {
            let Ok(value) = HeaderValue::from_bytes(bytes) else {
                return;
            };
            headers.insert(name, value);
            (input.now, None)
        }
        Request::Token(token) => {
            let (text, signed) = build(token);
            let mut value = match &token.scheme {
                Scheme::Bearer => "Bearer ".to_owned(),
                Scheme::Lower => "bearer ".to_owned(),
                Scheme::Upper => "BEARER ".to_owned(),
                Scheme::Spaces => "Bearer   ".to_owned(),
                Scheme::Tab => "Bearer\t".to_owned(),
                Scheme::Other(other) => other.clone(),
            }
            .into_bytes();
            value.extend_from_slice(&text);
            let Ok(value) = HeaderValue::from_bytes(&value) else {
                return;
            };
            headers.append(name.clone(), value.clone());
            if token.twice {
                headers.append(name, value);
            }
            (token.claims.now, Some((token, signed)))
        }
    };

    let result = verifier.verify(&headers, now);
    assert_eq!(
        result.as_ref().err(),
        verifier.verify(&headers, now).as_ref().err()
    );

    let expect_accepted = token.as_ref().is_some_and(|(token, signed)| {
        input.verifier == Verifier::Hmac && *signed && well_formed_hmac_token(token)
    });
    let claims = match result {
        Ok(claims) => claims,
        Err(reason) => {
            assert!(
                !expect_accepted,
                "a valid HMAC token was refused ({reason:?}): {:?}",
                input.request
            );
            return;
        }
    };

    assert_times(&claims.0, now);
    let sent = headers.get("authorization").expect("sent").as_bytes();
    let (message, payload, signature, header) = split_token(sent);
    assert_eq!(claims.0, payload, "the claims are not the token's payload");
    if input.verifier == Verifier::Unverified {
        // docs/identity-and-policy.md: `verify = false` checks neither signature nor algorithm,
        // so the JOSE header may be anything.
        key_on(&claims);
        return;
    }
    let header: Map<String, Value> = URL_SAFE_NO_PAD
        .decode(header)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .expect("verified a token whose header is not a JSON object");
    // Checked again here, with jsonwebtoken's primitives and the key the
    // verifier should have used: the allow-list, the key and its family.
    let alg = header.get("alg").and_then(Value::as_str);
    let signature = std::str::from_utf8(signature).expect("accepted a non-ASCII signature");
    let verified = match (input.verifier, alg) {
        (Verifier::Hmac, Some(alg @ ("HS256" | "HS384" | "HS512"))) => {
            let alg = alg.parse::<Algorithm>().unwrap();
            let key = DecodingKey::from_secret(SECRET);
            jsonwebtoken::crypto::verify(signature, message, &key, alg).unwrap_or(false)
        }
        (Verifier::EcPem | Verifier::Jwks, Some("ES256")) => {
            let key = DecodingKey::from_ec_pem(EC_PUBLIC).unwrap();
            jsonwebtoken::crypto::verify(signature, message, &key, Algorithm::ES256)
                .unwrap_or(false)
        }
        _ => false,
    };
    assert!(
        verified,
        "{:?} accepted a token not signed with its key: {:?}",
        input.verifier, input.request
    );
    if input.verifier == Verifier::Jwks {
        assert_eq!(
            header.get("kid"),
            Some(&Value::from("ec-1")),
            "JWKS picked a key by another kid"
        );
    }
    if let Some((token, _)) = &token {
        let by_own_key = matches!(
            (&token.signature, input.verifier),
            (Signature::Hmac(_, HmacKey::Secret), Verifier::Hmac)
                | (Signature::Es256, Verifier::EcPem | Verifier::Jwks)
        );
        assert!(by_own_key, "{:?} accepted {token:?}", input.verifier);
    }

    key_on(&claims);
});

/// An accepted header's token: the signed message, the payload as JSON,
/// the signature and the JOSE header's text. Panics if what was accepted is
/// not `Bearer <three base64url parts>` with a JSON object as payload.
fn split_token(sent: &[u8]) -> (&[u8], Map<String, Value>, &[u8], &[u8]) {
    assert!(
        sent.len() > 7 && sent[..7].eq_ignore_ascii_case(b"bearer "),
        "accepted {sent:?}"
    );
    let token = sent[7..].trim_ascii();
    let parts: Vec<&[u8]> = token.split(|&b| b == b'.').collect();
    assert_eq!(parts.len(), 3, "accepted {sent:?}");
    let json = |part: &[u8]| -> Map<String, Value> {
        let bytes = URL_SAFE_NO_PAD
            .decode(part)
            .expect("accepted a part that is not base64url");
        serde_json::from_slice(&bytes).expect("accepted a part that is not a JSON object")
    };
    let message = &token[..parts[0].len() + 1 + parts[1].len()];
    (message, json(parts[1]), parts[2], parts[0])
}

/// The token text, and whether its signature is still the one computed
/// (no byte was flipped).
fn build(token: &Token) -> (Vec<u8>, bool) {
    let header = match &token.header {
        JoseHeader::Standard {
            alg,
            typ,
            kid,
            crit,
        } => {
            let mut header = json!({ "alg": alg.name() });
            if let Some(typ) = typ {
                header["typ"] = Value::from(typ.clone());
            }
            match kid {
                Some(Kid::Rsa) => header["kid"] = Value::from("rsa-1"),
                Some(Kid::Ec) => header["kid"] = Value::from("ec-1"),
                Some(Kid::Other(other)) => header["kid"] = Value::from(other.clone()),
                None => {}
            }
            if *crit {
                header["crit"] = json!(["exp"]);
            }
            header.to_string()
        }
        JoseHeader::Text(text) => text.clone(),
    };
    let payload = Value::Object(token.claims.object()).to_string();
    let message = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(payload)
    );
    let signature = match &token.signature {
        Signature::Hmac(alg, key) => {
            let secret: &[u8] = match key {
                HmacKey::Secret => SECRET,
                HmacKey::WrongSecret => b"not-the-secret",
                HmacKey::PublicPem => EC_PUBLIC,
            };
            jsonwebtoken::crypto::sign(
                message.as_bytes(),
                &EncodingKey::from_secret(secret),
                alg.algorithm(),
            )
            .expect("HMAC signs anything")
        }
        Signature::Es256 => jsonwebtoken::crypto::sign(
            message.as_bytes(),
            &verifiers().ec_signing_key,
            Algorithm::ES256,
        )
        .expect("ES256 signs anything"),
        Signature::Junk(bytes) => URL_SAFE_NO_PAD.encode(bytes),
    };
    let mut text = format!("{message}.{signature}").into_bytes();
    let mut intact = !matches!(token.signature, Signature::Junk(_));
    if let Some((at, xor)) = token.flip {
        let at = usize::from(at) % text.len();
        if xor != 0 {
            text[at] ^= xor;
            intact = false;
        }
    }
    (text, intact)
}

/// A token the HMAC verifier must accept: sent once as `Bearer <token>`, a
/// header that is exactly `{"alg": <the HMAC algorithm signed with>}` plus
/// an optional `typ`/`kid`, signed with the secret, an integer `exp` not yet
/// past and no `nbf`. The other claims can be anything.
fn well_formed_hmac_token(token: &Token) -> bool {
    let Signature::Hmac(alg, HmacKey::Secret) = token.signature else {
        return false;
    };
    let JoseHeader::Standard {
        alg: header_alg,
        crit: false,
        ..
    } = token.header
    else {
        return false;
    };
    let bearer = matches!(
        token.scheme,
        Scheme::Bearer | Scheme::Lower | Scheme::Upper | Scheme::Spaces
    );
    // `exp` at or after now, and still within the leeway once that is added:
    // at the very end of time (now = u64::MAX) the leeway saturates, and a
    // token expiring at that instant is expired, as RFC 7519 §4.1.4 says.
    let now = token.claims.now;
    let exp_ahead = match token.claims.exp {
        Time::Relative(secs) if secs >= 0 => now
            .checked_add_signed(i64::from(secs))
            .is_some_and(|exp| now < exp.saturating_add(LEEWAY_SECS)),
        _ => false,
    };
    header_alg == alg.alg()
        && bearer
        && !token.twice
        && exp_ahead
        && matches!(token.claims.nbf, Time::Absent)
}

/// What the verifier must have checked of an accepted token's times, in
/// whole seconds: `exp` rounded down, `nbf` rounded up.
fn assert_times(claims: &Map<String, Value>, now: u64) {
    let seconds = |value: &Value, round: fn(f64) -> f64| -> Option<u64> {
        value.as_u64().or_else(|| {
            let secs = value.as_f64().filter(|s| s.is_finite() && *s >= 0.0)?;
            Some(round(secs) as u64)
        })
    };
    let exp = claims.get("exp").expect("accepted without exp");
    let exp = seconds(exp, f64::floor).unwrap_or_else(|| panic!("accepted with exp {exp}"));
    assert!(
        now < exp.saturating_add(LEEWAY_SECS),
        "accepted with exp {exp} at {now}"
    );
    if let Some(nbf) = claims.get("nbf") {
        let nbf = seconds(nbf, f64::ceil).unwrap_or_else(|| panic!("accepted with nbf {nbf}"));
        assert!(
            nbf <= now.saturating_add(LEEWAY_SECS),
            "accepted with nbf {nbf} at {now}"
        );
    }
}

/// Keys a bucket on every top-level claim: never panics, deterministic.
fn key_on(claims: &Claims) {
    let sources: Vec<KeySource> = claims
        .0
        .keys()
        .filter(|name| !name.is_empty())
        .map(|name| KeySource::Jwt(ClaimPath(vec![name.clone()])))
        .collect();
    let headers = HeaderMap::new();
    let facts = RequestFacts {
        method: &Method::GET,
        path: "/",
        normalized_path: "/",
        query: None,
        host: None,
        headers: &headers,
        client_ip: [127, 0, 0, 1].into(),
        claims: Some(claims),
        body: None,
        call: None,
    };
    let hasher = KeyHasher::new(64);
    let key = hasher.derive(&sources, &facts, true);
    assert_eq!(key, hasher.derive(&sources, &facts, true));
}
