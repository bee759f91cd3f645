//! A real HTTP/3 client for the tests: quinn and h3, verifying sluice's
//! certificate against a test CA; and the first packet of a QUIC client
//! that never goes on (a spoofed source address's), made by quinn-proto.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use http::Request;
use quinn::crypto::rustls::QuicClientConfig;
use rustls::RootCertStore;

use super::Got;

/// One HTTP/3 connection to sluice.
pub struct H3Client {
    send: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    pub connection: quinn::Connection,
    _endpoint: Option<quinn::Endpoint>,
}

/// A QUIC client config that verifies the server against `ca_pem`, ALPN
/// `h3`.
pub fn config(ca_pem: &str) -> quinn::ClientConfig {
    quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(tls(ca_pem)).unwrap()))
}

/// [`config`], offering 0-RTT early data whenever a ticket allows it.
pub fn early_data(ca_pem: &str) -> quinn::ClientConfig {
    let mut tls = tls(ca_pem);
    tls.enable_early_data = true;
    quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(tls).unwrap()))
}

fn tls(ca_pem: &str) -> rustls::ClientConfig {
    let mut roots = RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(sluice::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    tls
}

impl H3Client {
    /// Connects to `addr` over UDP from 127.0.0.1, as `name`.
    pub async fn connect(ca_pem: &str, addr: SocketAddr, name: &str) -> H3Client {
        H3Client::try_connect(ca_pem, addr, name)
            .await
            .unwrap_or_else(|error| panic!("HTTP/3 connection to {addr} failed: {error}"))
    }

    /// [`H3Client::connect`], the failure returned.
    pub async fn try_connect(
        ca_pem: &str,
        addr: SocketAddr,
        name: &str,
    ) -> Result<H3Client, quinn::ConnectionError> {
        let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        endpoint.set_default_client_config(config(ca_pem));
        let connection = endpoint.connect(addr, name).unwrap().await?;
        let mut client = H3Client::on(connection).await;
        client._endpoint = Some(endpoint);
        Ok(client)
    }

    /// HTTP/3 on a QUIC connection made elsewhere.
    pub async fn on(connection: quinn::Connection) -> H3Client {
        let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(connection.clone()))
            .await
            .expect("HTTP/3 starts");
        tokio::spawn(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        });
        H3Client {
            send,
            connection,
            _endpoint: None,
        }
    }

    /// `GET path`, its answer's head read and its body left to the caller.
    pub async fn open(
        &mut self,
        path: &str,
    ) -> h3::client::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes> {
        let request = Request::get(format!("https://localhost{path}"))
            .body(())
            .unwrap();
        let mut stream = self.send.send_request(request).await.expect("request sent");
        stream.finish().await.expect("request finished");
        stream.recv_response().await.expect("an answer");
        stream
    }

    /// `GET path` with `headers`.
    pub async fn get(&mut self, path: &str, headers: &[(&str, &str)]) -> Got {
        self.request("GET", path, headers, None).await
    }

    /// `method path` with `headers` and, if any, `body`.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Got {
        self.exchange(method, path, headers, body).await.0
    }

    /// [`H3Client::request`], with the answer's trailer fields, if any.
    pub async fn exchange(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> (Got, Option<http::HeaderMap>) {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("https://localhost{path}"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut stream = self
            .send
            .send_request(request.body(()).unwrap())
            .await
            .expect("request sent");
        if let Some(body) = body {
            stream
                .send_data(Bytes::copy_from_slice(body))
                .await
                .unwrap();
        }
        stream.finish().await.expect("request finished");
        let response = stream.recv_response().await.expect("an answer");
        let mut body = BytesMut::new();
        while let Some(mut data) = stream.recv_data().await.expect("the answer's body") {
            body.extend_from_slice(&data.copy_to_bytes(data.remaining()));
        }
        let trailers = stream.recv_trailers().await.expect("the answer's end");
        let got = Got {
            status: response.status(),
            headers: response.headers().clone(),
            body: String::from_utf8_lossy(&body).into_owned(),
        };
        (got, trailers)
    }
}

/// The first datagram of a QUIC client to `server` that will never answer
/// what comes back (an attacker's, sent from a spoofed address): a genuine
/// Initial, made by quinn-proto's client side.
pub fn spoofed_initial(server: SocketAddr) -> Vec<u8> {
    let mut endpoint = quinn_proto::Endpoint::new(
        Arc::new(quinn_proto::EndpointConfig::default()),
        None,
        true,
        None,
    );
    let config = config_any_server();
    let (_, mut connection) = endpoint
        .connect(Instant::now(), config, server, "localhost")
        .unwrap();
    let mut datagram = Vec::new();
    let transmit = connection
        .poll_transmit(Instant::now(), 1, &mut datagram)
        .expect("an Initial to send");
    datagram.truncate(transmit.size);
    datagram
}

/// A client config whose certificate check never runs (the spoofed
/// client never gets that far).
fn config_any_server() -> quinn_proto::ClientConfig {
    config(super::certs::TestCa::new("unused").pem())
}

/// Whether `datagram` is a QUIC Retry packet (RFC 9000 §17.2.5: a long
/// header of type 3, version 1).
pub fn is_retry(datagram: &[u8]) -> bool {
    datagram.len() > 5
        && datagram[0] & 0x80 != 0
        && (datagram[0] >> 4) & 0x03 == 0x03
        && datagram[1..5] == [0, 0, 0, 1]
}
