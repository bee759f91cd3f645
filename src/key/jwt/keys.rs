//! Key material: the secret, the PEM public key or the JWKS of
//! `[identity.jwt]` turned into the keys signatures are checked with, and
//! refused (with a message for the config error) when a key cannot serve
//! the listed algorithms.

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey};

use super::config::{JwtAlgorithm, JwtKey};

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
    pub(super) kid: Option<String>,
    /// The key's own `alg`, when it names one: then only that algorithm.
    pub(super) alg: Option<Algorithm>,
    pub(super) key: DecodingKey,
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
        let pinned = jwk.common.key_algorithm.map(|alg| {
            let text = alg.to_string();
            let found = algorithms.iter().copied().find(|a| a.name() == text);
            found.ok_or_else(|| {
                format!("{name} is for {text}, which algorithms ({listed}) does not list")
            })
        });
        let pinned = pinned.transpose()?;
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
    memchr::memmem::find(haystack, needle).is_some()
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

pub(super) fn algorithm(alg: JwtAlgorithm) -> Algorithm {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::jwt::testing::*;
    use serde_json::{json, Value};

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
}
