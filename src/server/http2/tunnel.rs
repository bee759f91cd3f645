//! A WebSocket tunnel on one stream of a client's HTTP/2 connection: the
//! stream (hyper's upgraded `CONNECT` stream, once its `200` was sent) and
//! the server's side, copied by the same pump as an HTTP/1.1 client's
//! tunnel (`server/http1/tunnel.rs`, `websocket/pump.rs`): message limits,
//! the idle timeout, Close frames. Over HTTP/2 a WebSocket's "both sides"
//! are its stream and the server's connection (docs/conversation.md,
//! "WebSockets over HTTP/2"): the stream ending (`END_STREAM` or
//! `RST_STREAM`) ends the tunnel, the tunnel ending ends the stream
//! (`END_STREAM`, or a reset when the client had not ended its side), and
//! the client's connection goes on with its other streams.

use std::future::poll_fn;
use std::time::Duration;

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use super::super::deadline_io::InFlight;
use crate::http1::transport::{self, Transport};
use crate::proxy::pool::Tunnel;
use crate::proxy::upgrade::{Metering, Upgraded};
use crate::websocket::pump::{self, Ended};

/// Runs the tunnel between the client's stream (once `on_upgrade` gives
/// it) and the server's side until it ends. What the request holds (its
/// settlement, its count in `sluice_websocket_connections`, the
/// connection's `in_flight`) is let go as soon as the tunnel is over.
pub async fn run(
    on_upgrade: OnUpgrade,
    upgraded: Upgraded,
    idle_timeout: Duration,
    in_flight: InFlight,
) {
    let Upgraded {
        upstream,
        settlement,
        open,
        messages,
    } = upgraded;
    let held = (settlement, open, in_flight);
    let mut client = match on_upgrade.await {
        Ok(stream) => TokioIo::new(stream),
        Err(error) => {
            tracing::debug!(%error, "the client's HTTP/2 stream never opened its tunnel");
            return;
        }
    };
    let Tunnel {
        mut stream,
        early: upstream_early,
    } = upstream;
    // The client sends nothing before its `200`; the server may have. Only
    // those bytes are kept: the read buffer they came in (8 KiB) is freed
    // rather than held for the tunnel's life.
    let early = (Vec::new(), upstream_early[..].to_vec());
    drop(upstream_early);
    let ended = copy(&mut client, &mut *stream, early, &messages, idle_timeout).await;
    drop(held);
    drop(stream);
    match ended {
        Ok(Ended::Closed {
            from_client,
            from_server,
            by,
        }) => tracing::debug!(from_client, from_server, ?by, "websocket tunnel closed"),
        Ok(Ended::Closing(closing)) => {
            tracing::debug!(
                code = closing.code,
                reason = %closing.reason,
                "websocket tunnel closed by sluice"
            );
            if !closing.frame.is_empty() {
                let _ = transport::send_all(&mut client, closing.frame.into()).await;
            }
            let _ = poll_fn(|cx| client.poll_close(cx)).await;
        }
        Err(error) => tracing::debug!(%error, "websocket tunnel ended with an error"),
    }
}

/// The pump a tunnel runs: plain, or metered when message rules matched
/// its handshake.
async fn copy<C, S>(
    client: &mut C,
    server: &mut S,
    early: (Vec<u8>, Vec<u8>),
    messages: &Option<Metering>,
    idle_timeout: Duration,
) -> std::io::Result<Ended>
where
    C: Transport + ?Sized,
    S: Transport + ?Sized,
{
    match messages {
        None => pump::plain(client, server, early, idle_timeout).await,
        Some(Metering {
            gate,
            max_message_bytes,
            rsv_allowed,
        }) => {
            let limits = (*max_message_bytes, *rsv_allowed);
            pump::metered(client, server, early, &**gate, limits, idle_timeout).await
        }
    }
}
