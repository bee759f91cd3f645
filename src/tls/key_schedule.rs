//! TLS 1.3's key schedule on HMAC keys set up once per secret
//! (docs/benchmarks-history.md, "A handshake's cost").
//!
//! rustls' aws-lc-rs provider derives TLS 1.3's secrets with aws-lc-rs'
//! `hkdf`, which keeps an extracted key as the salt and the secret and runs
//! HKDF-Extract again, then sets the HMAC key up (its inner and outer pads
//! hashed), at every expansion. A full TLS_AES_256_GCM_SHA384 handshake
//! expands 20 times (8 of them extracting again), and SHA-384's block
//! function was the first symbol of a handshake's profile (aws-lc runs its
//! scalar version on AMD processors). rustls' own [`HkdfUsingHmac`] computes
//! the same HKDF (RFC 5869) over an HMAC [`Key`] made once per secret:
//! aws-lc-rs hashes the pads when the key is made and copies that state for
//! each HMAC, so an expansion costs two block operations instead of four (or
//! eight with the extraction).

use rustls::crypto::hmac::{Hmac, Key, Tag};
use rustls::crypto::tls13::HkdfUsingHmac;
use rustls::crypto::CryptoProvider;
use rustls::{CipherSuiteCommon, SupportedCipherSuite, Tls13CipherSuite};

/// `provider` with each TLS 1.3 suite's HKDF computed by [`HkdfUsingHmac`]
/// on aws-lc-rs' HMAC of the suite's hash; everything else as it was.
pub fn with_prepared_hmac_keys(mut provider: CryptoProvider) -> CryptoProvider {
    for suite in &mut provider.cipher_suites {
        let SupportedCipherSuite::Tls13(tls13) = *suite else {
            continue;
        };
        let Some(hmac) = hmac_of(tls13.common.suite) else {
            continue;
        };
        // Made once per process (`crate::tls::provider`).
        let hkdf: &'static HkdfUsingHmac<'static> = Box::leak(Box::new(HkdfUsingHmac(hmac)));
        *suite = SupportedCipherSuite::Tls13(Box::leak(Box::new(Tls13CipherSuite {
            common: CipherSuiteCommon {
                suite: tls13.common.suite,
                hash_provider: tls13.common.hash_provider,
                confidentiality_limit: tls13.common.confidentiality_limit,
            },
            hkdf_provider: hkdf,
            aead_alg: tls13.aead_alg,
            quic: tls13.quic,
        })));
    }
    provider
}

/// The HMAC of a TLS 1.3 suite's hash.
fn hmac_of(suite: rustls::CipherSuite) -> Option<&'static AwsLcHmac> {
    use rustls::CipherSuite::*;
    static SHA256: AwsLcHmac = AwsLcHmac(aws_lc_rs::hmac::HMAC_SHA256);
    static SHA384: AwsLcHmac = AwsLcHmac(aws_lc_rs::hmac::HMAC_SHA384);
    match suite {
        TLS13_AES_128_GCM_SHA256 | TLS13_CHACHA20_POLY1305_SHA256 => Some(&SHA256),
        TLS13_AES_256_GCM_SHA384 => Some(&SHA384),
        _ => None,
    }
}

/// aws-lc-rs' HMAC, as rustls' [`Hmac`].
struct AwsLcHmac(aws_lc_rs::hmac::Algorithm);

impl Hmac for AwsLcHmac {
    fn with_key(&self, key: &[u8]) -> Box<dyn Key> {
        Box::new(AwsLcKey(aws_lc_rs::hmac::Key::new(self.0, key)))
    }

    fn hash_output_len(&self) -> usize {
        self.0.digest_algorithm().output_len()
    }
}

/// A key with its pads already hashed: each signature starts from a copy.
struct AwsLcKey(aws_lc_rs::hmac::Key);

impl Key for AwsLcKey {
    fn sign_concat(&self, first: &[u8], middle: &[&[u8]], last: &[u8]) -> Tag {
        let mut context = aws_lc_rs::hmac::Context::with_key(&self.0);
        context.update(first);
        for part in middle {
            context.update(part);
        }
        context.update(last);
        Tag::new(context.sign().as_ref())
    }

    fn tag_len(&self) -> usize {
        self.0.algorithm().digest_algorithm().output_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::crypto::tls13::Hkdf;

    /// aws-lc-rs' HKDF, as the stock provider computes it.
    fn stock(
        hmac: aws_lc_rs::hkdf::Algorithm,
        salt: &[u8],
        secret: &[u8],
        info: &[u8],
        out: &mut [u8],
    ) {
        struct Len(usize);
        impl aws_lc_rs::hkdf::KeyType for Len {
            fn len(&self) -> usize {
                self.0
            }
        }
        aws_lc_rs::hkdf::Salt::new(hmac, salt)
            .extract(secret)
            .expand(&[info], Len(out.len()))
            .unwrap()
            .fill(out)
            .unwrap();
    }

    #[test]
    fn every_tls13_suite_of_the_provider_is_covered() {
        let stock = rustls::crypto::aws_lc_rs::default_provider();
        for suite in &stock.cipher_suites {
            if let SupportedCipherSuite::Tls13(tls13) = suite {
                assert!(hmac_of(tls13.common.suite).is_some(), "{suite:?}");
            }
        }
    }

    #[test]
    fn derives_what_aws_lc_rs_hkdf_derives() {
        for (ours, theirs, length) in [
            (
                hmac_of(rustls::CipherSuite::TLS13_AES_256_GCM_SHA384).unwrap(),
                aws_lc_rs::hkdf::HKDF_SHA384,
                48,
            ),
            (
                hmac_of(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256).unwrap(),
                aws_lc_rs::hkdf::HKDF_SHA256,
                32,
            ),
        ] {
            let hkdf = HkdfUsingHmac(ours);
            for (salt, secret, info) in [
                (
                    &b"salt"[..],
                    &b"input keying material"[..],
                    &b"tls13 c hs traffic"[..],
                ),
                (&[0u8; 48][..length], &[7u8; 32][..], &b""[..]),
                (&[1u8; 200][..], &[9u8; 100][..], &[3u8; 300][..]),
            ] {
                // Lengths within one block of output, over one, and odd ones.
                for out_length in [12, 16, length, length + 1, 3 * length + 5] {
                    let mut expected = vec![0u8; out_length];
                    stock(theirs, salt, secret, info, &mut expected);
                    let mut got = vec![0u8; out_length];
                    hkdf.extract_from_secret(Some(salt), secret)
                        .expand_slice(&[info], &mut got)
                        .unwrap();
                    assert_eq!(got, expected, "{length}: {out_length}");
                }
            }
        }
    }
}
