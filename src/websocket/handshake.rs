//! The opening handshake's key and answer (RFC 6455 §4.2.2): what sluice
//! sends and checks when it opens the server's side of a WebSocket that a
//! client opened over HTTP/2 (RFC 8441 §5 has no key; the HTTP/1.1
//! server still needs one, docs/conversation.md, "WebSockets over
//! HTTP/2").

use aws_lc_rs::digest::{digest, SHA1_FOR_LEGACY_USE_ONLY};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use http::HeaderValue;
use rand::RngCore;

/// The GUID RFC 6455 §1.3 appends to the key before hashing it.
const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// A new `Sec-WebSocket-Key`: 16 random bytes in base64 (§4.1).
pub fn new_key() -> HeaderValue {
    let mut nonce = [0u8; 16];
    rand::rng().fill_bytes(&mut nonce);
    HeaderValue::from_str(&STANDARD.encode(nonce)).expect("base64 is a valid field value")
}

/// The `Sec-WebSocket-Accept` a server answers `key` with: the base64 of
/// the SHA-1 of the key and the GUID.
pub fn accept_for(key: &[u8]) -> HeaderValue {
    let hashed = digest(&SHA1_FOR_LEGACY_USE_ONLY, &[key, GUID].concat());
    HeaderValue::from_str(&STANDARD.encode(hashed.as_ref())).expect("base64 is a valid field value")
}

/// Whether `accept` is the server's right answer to `key`.
pub fn accepts(key: &HeaderValue, accept: Option<&HeaderValue>) -> bool {
    accept.is_some_and(|accept| accept.as_bytes() == accept_for(key.as_bytes()).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_is_rfc_6455s_own_example() {
        // RFC 6455 §1.3.
        let key = HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ==");
        assert_eq!(accept_for(key.as_bytes()), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        let right = HeaderValue::from_static("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert!(accepts(&key, Some(&right)));
        let wrong = HeaderValue::from_static("s3pPLMBiTxaQ9kYGzzhZRbK+xOx=");
        assert!(!accepts(&key, Some(&wrong)));
        assert!(!accepts(&key, None));
    }

    #[test]
    fn each_key_is_sixteen_fresh_random_bytes() {
        let (one, two) = (new_key(), new_key());
        assert_ne!(one, two);
        let decoded = STANDARD.decode(one.as_bytes()).unwrap();
        assert_eq!(decoded.len(), 16);
        assert!(accepts(&one, Some(&accept_for(one.as_bytes()))));
        assert!(!accepts(&two, Some(&accept_for(one.as_bytes()))));
    }
}
