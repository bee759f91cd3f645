//! [`JwtVerifier`]: a request's token checked against `[identity.jwt]`,
//! cheapest checks first, the signature only for a token that passed them.

use http::{HeaderMap, HeaderName};
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};

use super::claims::Claims;
use super::config::JwtConfig;
use super::keys::{algorithm, verification_keys, VerificationKeys};
use super::token::{bearer_token, check_shape, check_times, Rejected};

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
        check_shape(token)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    use crate::key::jwt::testing::*;
    use crate::key::jwt::{ClaimValue, JwtAlgorithm, JwtKey, MAX_TOKEN_BYTES};

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
    fn debug_output_shows_no_key_material() {
        let text = format!("{:?}", hs256());
        assert!(!text.contains("secret"), "{text}");
        let key = format!("{:?}", JwtKey::Secret(SECRET.to_vec()));
        assert_eq!(key, format!("Secret(<{} bytes>)", SECRET.len()));
    }
}
