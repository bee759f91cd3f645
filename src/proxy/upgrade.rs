//! WebSocket tunnels (RFC 6455 §4): the opening handshake is an ordinary
//! request — identified, limited and forwarded like any other — that keeps
//! its `Connection: upgrade` and `Upgrade: websocket`. It becomes a tunnel
//! only once the upstream answers `101 Switching Protocols`; any other answer
//! is an ordinary response, after which the client connection keeps being
//! parsed as HTTP (bytes the client sent after the handshake are a next
//! request, never tunnelled: Pingora CVE-2026-2833, hostile-input row A6 in docs/edge-behaviour.md).
//!
//! Only WebSocket is tunnelled: any other `Upgrade` (h2c, TLS/1.0, …) is a
//! hop-by-hop field like the rest and is stripped, so the upstream sees a
//! plain request.
//!
//! Once both sides switched, the client's connection carries the tunnel
//! (`server/http1/tunnel.rs`), which copies bytes both ways until either
//! side closes; the request's concurrency permits are held for the tunnel's
//! life ([`Upgraded`]). A tunnel whose handshake a `unit = "message"` rule
//! matched counts its client's messages ([`Metering`], `proxy/messages.rs`).
//!
//! Over HTTP/2 a WebSocket opens with an extended `CONNECT` (RFC 8441),
//! which the HTTP/2 server rewrites into the handshake it stands for
//! ([`over_h2`]).

pub mod over_h2;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};

use super::pool::Tunnel;
use super::settle::Settlement;
use crate::metrics::Counted;
use crate::websocket::pump::Gate;

static UPGRADE: HeaderValue = HeaderValue::from_static("upgrade");
static WEBSOCKET: HeaderValue = HeaderValue::from_static("websocket");

/// The upstream's side of a tunnel its `101` opened, with what the request
/// holds while the tunnel lives.
#[derive(Debug)]
pub struct Upgraded {
    pub upstream: Tunnel,
    /// The request's admission (its permits): settled when the tunnel ends.
    pub settlement: Option<Box<Settlement>>,
    /// Counted in `sluice_websocket_connections` while the tunnel lives.
    pub open: Option<Counted>,
    /// What the client's messages are held to; `None`: no message rule
    /// matched the handshake, and bytes are copied as they come.
    pub messages: Option<Metering>,
}

/// A tunnel's message limits: the gate each message of the client passes
/// (`proxy/messages.rs`), the largest message, and the reserved bits the
/// extensions the `101` accepted may set
/// ([`crate::websocket::frames::rsv_for_extensions`]).
pub struct Metering {
    pub gate: Box<dyn Gate>,
    pub max_message_bytes: u64,
    pub rsv_allowed: u8,
}

impl std::fmt::Debug for Metering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metering")
            .field("max_message_bytes", &self.max_message_bytes)
            .field("rsv_allowed", &self.rsv_allowed)
            .finish_non_exhaustive()
    }
}

/// Whether `request` is a WebSocket opening handshake: an HTTP/1.1 `GET`
/// whose `Connection` lists `upgrade` and whose `Upgrade` is `websocket`,
/// without a body; or the one the HTTP/2 server made of an extended
/// `CONNECT` ([`over_h2::ExtendedConnect`]).
pub fn is_websocket_handshake<B>(request: &Request<B>) -> bool {
    match request.version() {
        Version::HTTP_11 => is_http1_handshake(request),
        // No extension at all on an HTTP/2 request but that mark: the
        // usual answer is one pointer found empty, not a lookup.
        Version::HTTP_2 => request
            .extensions()
            .get::<over_h2::ExtendedConnect>()
            .is_some(),
        _ => false,
    }
}

#[inline]
fn is_http1_handshake<B>(request: &Request<B>) -> bool {
    let headers = request.headers();
    // Runs on every request: `Upgrade` first, which almost no request
    // carries, so the usual answer costs one header lookup instead of four.
    request.method() == Method::GET
        && upgrade_is_websocket(headers)
        && !headers.contains_key(header::CONTENT_LENGTH)
        && !headers.contains_key(header::TRANSFER_ENCODING)
        && lists_token(headers, header::CONNECTION, "upgrade")
}

/// Puts back the two fields a handshake needs after hop-by-hop stripping
/// removed them (sluice's own `Connection` option, not the client's).
pub fn restore_handshake_fields(headers: &mut HeaderMap) {
    headers.insert(header::CONNECTION, UPGRADE.clone());
    headers.insert(header::UPGRADE, WEBSOCKET.clone());
}

/// Whether `response` is the upstream accepting a WebSocket handshake.
pub fn is_switching_to_websocket<B>(response: &Response<B>) -> bool {
    response.status() == StatusCode::SWITCHING_PROTOCOLS && upgrade_is_websocket(response.headers())
}

fn upgrade_is_websocket(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(header::UPGRADE).iter();
    matches!(
        (values.next(), values.next()),
        (Some(value), None) if value.as_bytes().eq_ignore_ascii_case(b"websocket")
    )
}

fn lists_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|item| item.trim().eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(pairs: &[(&str, &str)]) -> Request<()> {
        let mut builder = Request::get("/ws");
        for (name, value) in pairs {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn only_websocket_get_handshakes_are_upgrades() {
        let handshake = [
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "WebSocket"),
        ];
        assert!(is_websocket_handshake(&request(&handshake)));

        for (what, pairs) in [
            ("h2c", &[("connection", "upgrade"), ("upgrade", "h2c")][..]),
            ("no Connection option", &[("upgrade", "websocket")][..]),
            (
                "two protocols",
                &[("connection", "upgrade"), ("upgrade", "websocket, h2c")][..],
            ),
            (
                "a body",
                &[
                    ("connection", "upgrade"),
                    ("upgrade", "websocket"),
                    ("content-length", "5"),
                ][..],
            ),
        ] {
            assert!(!is_websocket_handshake(&request(pairs)), "{what}");
        }
        let mut post = request(&handshake);
        *post.method_mut() = Method::POST;
        assert!(!is_websocket_handshake(&post));
        let mut http10 = request(&handshake);
        *http10.version_mut() = Version::HTTP_10;
        assert!(!is_websocket_handshake(&http10));
    }
}
