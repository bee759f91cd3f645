//! A WebSocket's server side opened on a server's HTTP/2 connection
//! (RFC 8441; docs/conversation.md, "WebSockets over HTTP/2"): the
//! handshake goes as an extended `CONNECT` with `:protocol = websocket`,
//! once the server's first `SETTINGS` advertised it (`h2_settings.rs`;
//! else no request is sent and the answer is a 502 that says why). A
//! success opens the stream, which is given to the rest of the proxy as
//! the `101` an HTTP/1.1 server would have answered (with the accept of
//! the handshake's key), so that the tunnel and the client's answer are
//! made as for any switch; any other answer is passed on as it is.

use bytes::BytesMut;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use super::super::upgrade::over_h2::{SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY};
use super::super::upgrade::restore_handshake_fields;
use super::{blame, ForwardError, H2Sender, Inner, PooledBody, Tunnel};
use crate::proxy::deadline::GuardedBody;
use crate::websocket::handshake;

/// Sends the handshake `request` (made for HTTP/2 by `for_h2`) on
/// `sender`'s connection as an extended `CONNECT`: the server's answer,
/// a success made a `101` whose body holds the stream.
pub async fn open(
    sender: &mut H2Sender,
    mut request: Request<GuardedBody>,
) -> Result<Response<PooledBody>, ForwardError> {
    if !sender.settings.connect_protocol().await {
        return Err(ForwardError::NoExtendedConnect);
    }
    let accept = as_extended_connect(&mut request);
    let mut response = sender
        .send
        .send_request(request)
        .await
        .map_err(|error| blame(&error))?;
    if !response.status().is_success() {
        return Ok(response.map(|body| PooledBody::new(Inner::H2(body))));
    }
    let stream = hyper::upgrade::on(&mut response)
        .await
        .map_err(|_| ForwardError::Other)?;
    let tunnel = Tunnel {
        stream: Box::new(TokioIo::new(stream)),
        early: BytesMut::new(),
    };
    let mut switched = response.map(|_| PooledBody::new(Inner::Switched(Some(tunnel))));
    as_switch(&mut switched, accept);
    Ok(switched)
}

/// Makes the handshake `request` the extended `CONNECT` it stands for
/// (RFC 8441 §5): the method, `:protocol`, and without the HTTP/1.1
/// handshake's `Connection`, `Upgrade` and key (hyper leaves out the
/// first two anyway); `Sec-WebSocket-Version`, `-Protocol` and
/// `-Extensions` stay. The accept its key asks for, when it had one.
fn as_extended_connect<B>(request: &mut Request<B>) -> Option<HeaderValue> {
    *request.method_mut() = Method::CONNECT;
    request
        .extensions_mut()
        .insert(hyper::ext::Protocol::from_static("websocket"));
    let headers = request.headers_mut();
    headers.remove(header::CONNECTION);
    headers.remove(header::UPGRADE);
    let key = headers.remove(SEC_WEBSOCKET_KEY)?;
    Some(handshake::accept_for(key.as_bytes()))
}

/// The server's success made the `101` an HTTP/1.1 server would have
/// answered the handshake with: its fields (`Sec-WebSocket-Protocol`,
/// `-Extensions`…) stay.
fn as_switch<B>(response: &mut Response<B>, accept: Option<HeaderValue>) {
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.remove(header::CONTENT_LENGTH);
    restore_handshake_fields(headers);
    if let Some(accept) = accept {
        headers.insert(SEC_WEBSOCKET_ACCEPT, accept);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handshake_goes_as_an_extended_connect_and_its_success_comes_back_a_101() {
        let mut request = Request::get("http://chat.example/rooms/7")
            .header("connection", "upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-protocol", "chat")
            .body(())
            .unwrap();
        let accept = as_extended_connect(&mut request);
        assert_eq!(request.method(), Method::CONNECT);
        let protocol = request.extensions().get::<hyper::ext::Protocol>().unwrap();
        assert_eq!(protocol.as_str(), "websocket");
        let mut names: Vec<_> = request.headers().keys().map(|n| n.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["sec-websocket-protocol", "sec-websocket-version"]);

        let mut response = Response::new(());
        response
            .headers_mut()
            .insert("sec-websocket-protocol", HeaderValue::from_static("chat"));
        as_switch(&mut response, accept);
        assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
        assert!(crate::proxy::upgrade::is_switching_to_websocket(&response));
        let headers = response.headers();
        assert_eq!(
            headers[SEC_WEBSOCKET_ACCEPT],
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(headers["sec-websocket-protocol"], "chat");
    }
}
