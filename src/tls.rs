//! What every side of sluice that speaks TLS shares: one crypto provider
//! (aws-lc-rs), installed as the process default before anything builds a
//! TLS config, and the PEM files certificates, keys and authorities come in
//! (docs/edge.md).
//!
//! The listener (`server/tls.rs`), the https upstream pool
//! (`proxy/pool`) and Redis over TLS (`store/redis`) build their configs
//! from here. The `redis` crate builds its own `ClientConfig` with
//! `ClientConfig::builder()`, which panics unless a process default
//! provider is installed: hence [`install_provider`] at every entry point.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

mod key_schedule;

/// The provider every TLS config in sluice is built with: aws-lc-rs', its
/// TLS 1.3 key schedule on HMAC keys set up once per secret
/// (`tls/key_schedule.rs`).
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| {
            Arc::new(key_schedule::with_prepared_hmac_keys(
                rustls::crypto::aws_lc_rs::default_provider(),
            ))
        })
        .clone()
}

/// Installs [`provider`] as the process default, once; harmless when
/// another is already installed (a library that embeds sluice chose its
/// own).
pub fn install_provider() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let _ = CryptoProvider::install_default((*provider()).clone());
    });
}

/// Largest PEM file read. Chains and CA bundles are a few hundred KiB at
/// most; the bound keeps `/dev/zero` or a mistyped path to a huge file
/// from taking all memory (fuzz/config writes such paths).
const MAX_PEM_FILE_BYTES: u64 = 4 * 1024 * 1024;

fn read_pem_file(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_PEM_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    if bytes.len() as u64 > MAX_PEM_FILE_BYTES {
        return Err(format!(
            "{} is larger than {} MiB, which no PEM file is",
            path.display(),
            MAX_PEM_FILE_BYTES / (1024 * 1024)
        ));
    }
    Ok(bytes)
}

/// The certificate chain in the PEM file at `path`, leaf first.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read_pem_file(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("{} is not a PEM certificate file: {error}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// The private key in the PEM file at `path` (PKCS#8, PKCS#1 or SEC1).
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = read_pem_file(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|error| {
        format!(
            "{} holds no usable PEM private key: {error}",
            path.display()
        )
    })
}

/// The authorities a client verifies its server against: those in the PEM
/// file at `ca`, or the system's roots when there is none.
pub fn read_roots(ca: Option<&Path>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(path) => {
            for cert in read_certs(path)? {
                roots
                    .add(cert)
                    .map_err(|error| format!("{}: {error}", path.display()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(
                    "the system has no root certificates (install ca-certificates, or name a CA file)"
                        .to_string(),
                );
            }
        }
    }
    Ok(roots)
}

/// The certificate chain at `cert` with the private key at `key`, checked
/// to belong together, ready to serve.
pub fn certified_key(cert: &Path, key: &Path) -> Result<Arc<rustls::sign::CertifiedKey>, String> {
    let chain = read_certs(cert)?;
    let key_der = read_key(key)?;
    let certified =
        rustls::sign::CertifiedKey::from_der(chain, key_der, &provider()).map_err(|error| {
            match error {
                rustls::Error::InconsistentKeys(_) => format!(
                    "the key in {} does not belong to the certificate in {}",
                    key.display(),
                    cert.display()
                ),
                error => format!("{}: {error}", key.display()),
            }
        })?;
    Ok(Arc::new(certified))
}

/// The DNS names (subject alternative names, wildcards included) the leaf
/// certificate of `key` is for, lower case: what SNI picks it by.
pub fn dns_names(key: &rustls::sign::CertifiedKey) -> Vec<String> {
    let leaf = key.cert.first();
    let cert = leaf.and_then(|leaf| webpki::EndEntityCert::try_from(leaf).ok());
    cert.map_or_else(Vec::new, |cert| {
        cert.valid_dns_names()
            .map(str::to_ascii_lowercase)
            .collect()
    })
}

/// The name a server's certificate is verified against, as a URL writes
/// its host (an IPv6 address in brackets): a DNS name, also sent as SNI,
/// or an IP address, sent as no SNI and matched against the certificate's
/// IP addresses.
pub fn server_name(
    host: &str,
) -> Result<rustls::pki_types::ServerName<'static>, rustls::pki_types::InvalidDnsNameError> {
    let bare = host
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(host);
    rustls::pki_types::ServerName::try_from(bare.to_owned())
}
