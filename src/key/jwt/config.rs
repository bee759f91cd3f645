//! `[identity.jwt]` as validated: the header tokens come in, the algorithms
//! accepted and the key material signatures are checked with. The config
//! builds it (and re-exports these types); the verifier reads it.

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
