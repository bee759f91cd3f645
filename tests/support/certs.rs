//! Certificates the tests make: a certificate authority of their own and
//! leaf certificates it signs (ECDSA P-256, as the benchmarks use), written
//! as PEM files where sluice, nginx or redis-server read them.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

/// A test certificate authority.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

/// A leaf certificate and its key, as PEM.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
}

impl TestCa {
    /// A new authority named `name`.
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let pem = params.self_signed(&key).expect("CA certificate").pem();
        TestCa {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// The authority's certificate, PEM.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// Writes the authority's certificate to `dir/<stem>.pem`.
    pub fn write(&self, dir: &Path, stem: &str) -> PathBuf {
        let path = dir.join(format!("{stem}.pem"));
        std::fs::write(&path, &self.pem).expect("write CA");
        path
    }

    /// A leaf for `names` (DNS names, `*.` wildcards, or IP addresses).
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        self.signed(names, |_| {})
    }

    /// A leaf for `names` that expired on 1 January 2020.
    pub fn expired_leaf(&self, names: &[&str]) -> Leaf {
        self.signed(names, |params| {
            params.not_before = rcgen::date_time_ymd(2019, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        })
    }

    /// A leaf for `names` (the first is also its common name), its
    /// parameters adjusted by `adjust`, signed by this authority.
    fn signed(&self, names: &[&str], adjust: impl FnOnce(&mut CertificateParams)) -> Leaf {
        let key = KeyPair::generate().expect("leaf key");
        let names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("leaf params");
        if let Some(first) = names.first() {
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, first.as_str());
        }
        adjust(&mut params);
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A leaf for `names` written as `dir/<stem>.pem` and `dir/<stem>.key`.
    pub fn write_leaf(&self, dir: &Path, stem: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        self.leaf(names).write(dir, stem)
    }
}

impl Leaf {
    /// Writes `dir/<stem>.pem` and `dir/<stem>.key`.
    pub fn write(&self, dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{stem}.pem"));
        let key = dir.join(format!("{stem}.key"));
        std::fs::write(&cert, &self.cert_pem).expect("write certificate");
        std::fs::write(&key, &self.key_pem).expect("write key");
        (cert, key)
    }
}
