//! A real TLS client for the tests: rustls through tokio-rustls, verifying
//! against a test CA, or accepting any certificate while recording which
//! one the server presented (to see which certificate SNI picked).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Version};
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::{collect, Got};

/// ALPN a browser offers.
pub const H2_AND_H1: &[&[u8]] = &[b"h2", b"http/1.1"];
/// ALPN of an HTTP/1.1-only client.
pub const H1: &[&[u8]] = &[b"http/1.1"];

/// A client that verifies the server against `ca_pem`, offering `alpn`.
pub fn verifying(ca_pem: &str, alpn: &[&[u8]]) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = ClientConfig::builder_with_provider(sluice::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

/// A client that accepts any certificate and records the leaf it was shown.
pub fn recording(seen: Arc<Mutex<Vec<CertificateDer<'static>>>>) -> TlsConnector {
    let provider = sluice::tls::provider();
    let config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Recorder { seen, provider }))
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// A TLS connection to `addr`, asking for `name` by SNI (an IP address
/// sends no SNI).
pub async fn connect(
    connector: &TlsConnector,
    addr: SocketAddr,
    name: &str,
) -> TlsStream<TcpStream> {
    connect_over(connector, TcpStream::connect(addr).await.unwrap(), name).await
}

/// [`connect`] on a connection already open (after a PROXY header, say).
pub async fn connect_over(
    connector: &TlsConnector,
    tcp: TcpStream,
    name: &str,
) -> TlsStream<TcpStream> {
    let addr = tcp.peer_addr().unwrap();
    let name = ServerName::try_from(name.to_string()).unwrap();
    connector
        .connect(name, tcp)
        .await
        .unwrap_or_else(|error| panic!("TLS handshake with {addr} failed: {error}"))
}

/// The protocol ALPN agreed on.
pub fn alpn(stream: &TlsStream<TcpStream>) -> Option<Vec<u8>> {
    stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec)
}

/// Sends requests on one TLS connection, over HTTP/1.1 or HTTP/2 as ALPN
/// agreed.
pub struct HttpsConnection {
    send: Sender,
    pub version: Version,
}

enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl HttpsConnection {
    /// Starts HTTP on `stream`.
    pub async fn over(stream: TlsStream<TcpStream>) -> HttpsConnection {
        let h2 = alpn(&stream).as_deref() == Some(b"h2");
        let io = TokioIo::new(stream);
        if h2 {
            let (send, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .unwrap();
            tokio::spawn(connection);
            HttpsConnection {
                send: Sender::H2(send),
                version: Version::HTTP_2,
            }
        } else {
            let (send, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(connection);
            HttpsConnection {
                send: Sender::H1(send),
                version: Version::HTTP_11,
            }
        }
    }

    /// `GET path` with `headers`, for host `host`.
    pub async fn get(&mut self, host: &str, path: &str, headers: &[(&str, &str)]) -> Got {
        let mut request = match self.send {
            Sender::H1(_) => Request::get(path).header("host", host),
            Sender::H2(_) => Request::get(format!("https://{host}{path}")).version(Version::HTTP_2),
        };
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(Bytes::new())).unwrap();
        let response = match &mut self.send {
            Sender::H1(send) => {
                send.ready().await.expect("connection usable");
                send.send_request(request).await
            }
            Sender::H2(send) => {
                send.ready().await.expect("connection usable");
                send.send_request(request).await
            }
        };
        collect(response.expect("an answer")).await
    }
}

/// One `GET` on a new connection verified against `ca_pem`.
pub async fn get(ca_pem: &str, addr: SocketAddr, host: &str, path: &str) -> Got {
    let stream = connect(&verifying(ca_pem, H1), addr, host).await;
    HttpsConnection::over(stream)
        .await
        .get(host, path, &[])
        .await
}

#[derive(Debug)]
struct Recorder {
    seen: Arc<Mutex<Vec<CertificateDer<'static>>>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.seen
            .lock()
            .unwrap()
            .push(end_entity.clone().into_owned());
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
