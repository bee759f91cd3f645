//! WebSockets on a client's HTTP/2 connection (RFC 8441;
//! docs/conversation.md, "WebSockets over HTTP/2"). The server advertises
//! `SETTINGS_ENABLE_CONNECT_PROTOCOL` (`server.rs`), so a client opens
//! WebSockets with an extended `CONNECT`:
//!
//! - `:protocol = websocket`: the request is rewritten into the `GET`
//!   handshake it stands for (`proxy/upgrade/over_h2.rs`) and goes through
//!   the request path as one; when the server's side switched, the stream
//!   is answered `200` (with the server's `Sec-WebSocket-Protocol` and
//!   `-Extensions`, without the HTTP/1.1 handshake's fields) and becomes
//!   the tunnel (`tunnel.rs`); any other answer (a 429, the server's
//!   refusal) is given as it is.
//! - another `:protocol`: answered 501 here, before any rule: sluice
//!   opens nothing else.
//! - no `:protocol`: a plain `CONNECT`, served as any request is.

use std::time::Duration;

use http::header;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;

use super::super::connection::Handler;
use super::super::deadline_io::InFlight;
use super::{tunnel, StreamExecutor};
use crate::proxy::respond::{self, ProxyBody};
use crate::proxy::upgrade::over_h2::{self, Connect, SEC_WEBSOCKET_ACCEPT};
use crate::proxy::{ClientBody, ClientRequest, Refusal};
use crate::request_id::{MadeId, RequestId};

/// `http2` advertising `SETTINGS_ENABLE_CONNECT_PROTOCOL`: every HTTP/2
/// listener's (prior knowledge and TLS ALPN `h2` alike), since this module
/// serves what it invites.
pub fn advertised(
    mut http2: hyper::server::conn::http2::Builder<StreamExecutor>,
) -> hyper::server::conn::http2::Builder<StreamExecutor> {
    http2.enable_connect_protocol();
    http2
}

/// What a WebSocket's stream needs once it is a tunnel.
pub struct TunnelSettings {
    /// `server.tunnel_idle_timeout`.
    pub idle_timeout: Duration,
    /// Holds the connection busy while the tunnel lives, so that its idle
    /// clock (`server/deadline_io.rs`) leaves a quiet WebSocket to the
    /// tunnel's own.
    pub in_flight: InFlight,
}

/// Serves the `CONNECT` `request` into the vacant `response` (see the
/// module docs); `tunnel`: what its stream gets if it becomes a tunnel.
pub async fn serve_connect<H: Handler>(
    handler: &H,
    mut request: Request<Incoming>,
    response: &mut Response<ProxyBody>,
    tunnel: impl FnOnce() -> TunnelSettings,
) {
    let on_upgrade = match over_h2::connect_kind(&request) {
        Connect::Plain => None,
        Connect::OtherProtocol => {
            respond::refusal(response, Refusal::UnknownProtocol, None);
            response
                .body_mut()
                .identify(&RequestId::Made(MadeId::next()));
            return;
        }
        Connect::WebSocket => {
            let on_upgrade = hyper::upgrade::on(&mut request);
            over_h2::as_handshake(&mut request);
            Some(on_upgrade)
        }
    };
    let mut request = ClientRequest::new(request.map(ClientBody::Hyper));
    handler.handle(&mut request, response).await;
    if let Some(on_upgrade) = on_upgrade {
        open_tunnel(response, on_upgrade, tunnel());
    }
}

/// When the request path's answer is the tunnel a `101` opened: the
/// client's answer becomes the `200` that opens its stream's tunnel
/// (RFC 8441 §5), run once hyper has sent it.
fn open_tunnel(response: &mut Response<ProxyBody>, on_upgrade: OnUpgrade, tunnel: TunnelSettings) {
    let Some(upgraded) = response.body_mut().take_tunnel() else {
        return;
    };
    as_connect_answer(response);
    let TunnelSettings {
        idle_timeout,
        in_flight,
    } = tunnel;
    tokio::spawn(tunnel::run(on_upgrade, upgraded, idle_timeout, in_flight));
}

/// A `101`'s head made the `200` an extended `CONNECT` is answered with:
/// the HTTP/1.1 handshake's own fields go (`Sec-WebSocket-Accept`
/// answered sluice's key, not the client's), the rest stays
/// (`Sec-WebSocket-Protocol`, `-Extensions`, sluice's rate-limit fields).
fn as_connect_answer<B>(response: &mut Response<B>) {
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    for name in [header::CONNECTION, header::UPGRADE, SEC_WEBSOCKET_ACCEPT] {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn value(text: &'static str) -> HeaderValue {
        HeaderValue::from_static(text)
    }

    #[test]
    fn a_switch_is_answered_200_without_the_http1_handshakes_fields() {
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let headers = response.headers_mut();
        headers.insert(header::CONNECTION, value("upgrade"));
        headers.insert(header::UPGRADE, value("websocket"));
        headers.insert(SEC_WEBSOCKET_ACCEPT, value("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="));
        headers.insert("sec-websocket-protocol", value("chat"));
        headers.insert("sec-websocket-extensions", value("permessage-deflate"));
        headers.insert("ratelimit", value("\"handshakes\";r=9;t=60"));
        as_connect_answer(&mut response);
        assert_eq!(response.status(), StatusCode::OK);
        let mut names: Vec<_> = response.headers().keys().map(|n| n.as_str()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "ratelimit",
                "sec-websocket-extensions",
                "sec-websocket-protocol"
            ]
        );
    }
}
