//! `jwt:<claim>` key sources: the claims of a request's token, available to
//! key derivation only after the token verified (signature, `exp`, `nbf`,
//! algorithm on the allow-list). A token that does not verify yields no
//! claims, so its `jwt:` sources are missing and the rule's `missing` policy
//! decides: a client can never pick someone else's bucket by forging one.
//!
//! [`JwtVerifier`] does the cheap checks first: the
//! header's shape, the token's size ([`MAX_TOKEN_BYTES`]), three base64url
//! parts, a JSON header whose `alg` is on the configured list (which never
//! holds `none`, and never mixes HMAC with public-key algorithms, so a token
//! "signed" with the public key as an HMAC secret is refused unread). Only
//! then is the signature checked, and only then are `exp` and `nbf`
//! compared with the time, allowing [`LEEWAY_SECS`] of clock skew. The proxy
//! verifies a request's token at most once, and only when a rule that
//! applies to it keys on a claim. Nothing here logs a token or a claim.
//!
//! - `config`: `[identity.jwt]` as validated ([`JwtConfig`]).
//! - `token`: the cheap checks on a token and its time claims ([`Rejected`]).
//! - `keys`: key material turned into verification keys.
//! - `verify`: [`JwtVerifier`].
//! - `claims`: the verified [`Claims`] and the [`ClaimPath`] a source reads.

mod claims;
mod config;
mod keys;
#[cfg(test)]
mod testing;
mod token;
mod verify;

pub use claims::{ClaimPath, ClaimValue, Claims};
pub use config::{JwtAlgorithm, JwtConfig, JwtKey};
pub use keys::{verification_keys, SetKey, VerificationKeys};
pub use token::{Rejected, LEEWAY_SECS, MAX_TOKEN_BYTES};
pub use verify::JwtVerifier;
