//! A WebSocket a client opens over HTTP/2 (RFC 8441's extended `CONNECT`
//! with `:protocol = websocket`) is, to the proxy, the HTTP/1.1 handshake
//! it stands for (docs/conversation.md, "WebSockets over HTTP/2"): the
//! HTTP/2 server rewrites it into that `GET` ([`as_handshake`]) before the
//! request path sees it, so rules, admission, message rules and the
//! tunnel treat both alike. What differs is checked here, once the
//! upstream answered ([`confirm`], in the forward phase): sluice made the handshake's key, so
//! sluice checks the server's answer to it, and the client takes any 2xx
//! for the tunnel's opening, so a 2xx that is not a switch is a failed
//! exchange.

use http::header::{HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};

use super::super::refusal::Refusal;
use super::super::respond::{self, ProxyBody};
use super::{restore_handshake_fields, upgrade_is_websocket};
use crate::websocket::handshake;

pub const SEC_WEBSOCKET_KEY: HeaderName = HeaderName::from_static("sec-websocket-key");
pub const SEC_WEBSOCKET_ACCEPT: HeaderName = HeaderName::from_static("sec-websocket-accept");
const SEC_WEBSOCKET_VERSION: HeaderName = HeaderName::from_static("sec-websocket-version");
/// The only version of RFC 6455 (§4.1), which RFC 8441 §5 keeps.
static VERSION_13: HeaderValue = HeaderValue::from_static("13");

/// Marks a request the HTTP/2 server rewrote from an extended `CONNECT`
/// into its handshake, with the key sluice gave it: HTTP/2 carries no
/// `Upgrade`, so this is how [`super::is_websocket_handshake`] knows it.
#[derive(Debug, Clone)]
pub struct ExtendedConnect {
    pub key: HeaderValue,
}

/// What an HTTP/2 `CONNECT` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connect {
    /// `:protocol = websocket`: a WebSocket's opening.
    WebSocket,
    /// Another `:protocol`, which sluice does not open: 501.
    OtherProtocol,
    /// No `:protocol`: a plain `CONNECT`, proxied as any method is.
    Plain,
}

/// What the HTTP/2 `CONNECT` `request` asks for.
pub fn connect_kind<B>(request: &Request<B>) -> Connect {
    match request.extensions().get::<hyper::ext::Protocol>() {
        None => Connect::Plain,
        // An upgrade token: compared without regard to case (RFC 9110 §7.8).
        Some(protocol) if protocol.as_ref().eq_ignore_ascii_case(b"websocket") => {
            Connect::WebSocket
        }
        Some(_) => Connect::OtherProtocol,
    }
}

/// Rewrites an extended `CONNECT` for a WebSocket into the `GET` with
/// `Upgrade: websocket` it stands for, in place: its path, authority and
/// fields stay as sent; `Connection` and `Upgrade` are the handshake's;
/// `Sec-WebSocket-Key` is a new one of sluice's (RFC 8441 §5: the client
/// sends none, an HTTP/1.1 server needs one; one the client sent anyway
/// is replaced), and `Sec-WebSocket-Version` is 13 unless the client
/// said. The request stays an HTTP/2 one, marked [`ExtendedConnect`].
pub fn as_handshake<B>(request: &mut Request<B>) {
    *request.method_mut() = Method::GET;
    let key = handshake::new_key();
    let headers = request.headers_mut();
    restore_handshake_fields(headers);
    headers.insert(SEC_WEBSOCKET_KEY, key.clone());
    headers
        .entry(SEC_WEBSOCKET_VERSION)
        .or_insert_with(|| VERSION_13.clone());
    let extensions = request.extensions_mut();
    extensions.remove::<hyper::ext::Protocol>();
    extensions.insert(ExtendedConnect { key });
}

/// The key sluice gave `request`, when it is an extended `CONNECT`'s
/// handshake.
pub fn key_of<B>(request: &Request<B>) -> Option<&HeaderValue> {
    Some(&request.extensions().get::<ExtendedConnect>()?.key)
}

/// Whether the upstream's answer in `response` to the handshake `request`
/// may go to the client (`Forwarder::forward` asks, for handshakes only).
/// When the handshake was an extended `CONNECT`'s, the answer must be a
/// `101` that switched to WebSocket with the accept of sluice's key, or
/// not a success at all (a refusal passes on as over HTTP/1.1); anything
/// else is answered 502 here, and what the exchange held (the upstream's
/// connection, the request's permits) goes with the answer dropped.
pub fn confirm<B>(request: &Request<B>, response: &mut Response<ProxyBody>) -> bool {
    let Some(key) = key_of(request) else {
        return true;
    };
    match failed_switch(key, response) {
        None => true,
        Some(why) => {
            // The upstream's answer goes, with what its body held.
            respond::vacate(response);
            respond::refusal(response, Refusal::WebSocketUpstream(why), None);
            false
        }
    }
}

/// Why the upstream's `response` to a handshake keyed `key` does not open
/// the client's WebSocket; `None` when it does, or when it refused it.
fn failed_switch(key: &HeaderValue, response: &Response<ProxyBody>) -> Option<&'static str> {
    let status = response.status();
    if status == StatusCode::SWITCHING_PROTOCOLS {
        if !upgrade_is_websocket(response.headers()) {
            return Some("the upstream switched to a protocol other than WebSocket");
        }
        let accept = response.headers().get(SEC_WEBSOCKET_ACCEPT);
        if !handshake::accepts(key, accept) {
            return Some("the upstream's Sec-WebSocket-Accept does not answer sluice's key");
        }
        return None;
    }
    // RFC 8441 §5: a 2xx opens the client's tunnel.
    status
        .is_success()
        .then_some("the upstream answered the WebSocket opening without switching protocols")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::upgrade::is_websocket_handshake;
    use http::Version;

    fn extended_connect(protocol: Option<&'static str>) -> Request<()> {
        let mut request = Request::builder()
            .method(Method::CONNECT)
            .version(Version::HTTP_2)
            .uri("https://chat.example/rooms/7?x=1")
            .header("sec-websocket-protocol", "chat")
            .header("origin", "https://chat.example")
            .body(())
            .unwrap();
        if let Some(protocol) = protocol {
            request
                .extensions_mut()
                .insert(hyper::ext::Protocol::from_static(protocol));
        }
        request
    }

    #[test]
    fn an_extended_connect_for_websocket_is_the_get_handshake_it_stands_for() {
        let mut request = extended_connect(Some("websocket"));
        assert_eq!(connect_kind(&request), Connect::WebSocket);
        assert!(!is_websocket_handshake(&request));
        as_handshake(&mut request);
        assert_eq!(request.method(), Method::GET);
        assert_eq!(request.version(), Version::HTTP_2);
        assert_eq!(request.uri(), "https://chat.example/rooms/7?x=1");
        assert!(is_websocket_handshake(&request));
        let headers = request.headers();
        assert_eq!(headers["upgrade"], "websocket");
        assert_eq!(headers["connection"], "upgrade");
        assert_eq!(headers["sec-websocket-version"], "13");
        assert_eq!(headers["sec-websocket-protocol"], "chat");
        assert_eq!(headers["origin"], "https://chat.example");
        assert_eq!(Some(&headers[SEC_WEBSOCKET_KEY]), key_of(&request));
        assert!(request.extensions().get::<hyper::ext::Protocol>().is_none());
    }

    #[test]
    fn other_protocols_and_plain_connects_are_not_websockets() {
        assert_eq!(connect_kind(&extended_connect(None)), Connect::Plain);
        let other = extended_connect(Some("connect-udp"));
        assert_eq!(connect_kind(&other), Connect::OtherProtocol);
        assert!(!is_websocket_handshake(&other));
        assert_eq!(
            connect_kind(&extended_connect(Some("WebSocket"))),
            Connect::WebSocket
        );
        // An HTTP/2 GET that names Upgrade itself is no handshake: only
        // the server's rewrite makes one.
        let mut get = Request::get("https://chat.example/")
            .version(Version::HTTP_2)
            .header("connection", "upgrade")
            .header("upgrade", "websocket")
            .body(())
            .unwrap();
        assert!(!is_websocket_handshake(&get));
        *get.version_mut() = Version::HTTP_11;
        assert!(is_websocket_handshake(&get));
    }

    fn answer(status: u16, fields: &[(&str, &str)]) -> Response<ProxyBody> {
        let mut response = Response::new(ProxyBody::written(bytes::Bytes::new()));
        *response.status_mut() = StatusCode::from_u16(status).unwrap();
        for (name, value) in fields {
            response.headers_mut().append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        response
    }

    #[test]
    fn only_a_switch_with_the_keys_accept_or_a_refusal_passes() {
        let key = HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ==");
        let right = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";
        let switched = [("upgrade", "websocket"), ("sec-websocket-accept", right)];
        assert_eq!(failed_switch(&key, &answer(101, &switched)), None);
        let wrong = [("upgrade", "websocket"), ("sec-websocket-accept", "x")];
        assert!(failed_switch(&key, &answer(101, &wrong)).is_some());
        assert!(failed_switch(&key, &answer(101, &[("upgrade", "websocket")])).is_some());
        let h2c = [("upgrade", "h2c"), ("sec-websocket-accept", right)];
        assert!(failed_switch(&key, &answer(101, &h2c)).is_some());
        assert!(failed_switch(&key, &answer(200, &[])).is_some());
        assert!(failed_switch(&key, &answer(204, &[])).is_some());
        for refused in [403, 404, 426, 429, 502] {
            assert_eq!(failed_switch(&key, &answer(refused, &[])), None);
        }
    }
}
