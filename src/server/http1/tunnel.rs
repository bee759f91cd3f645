//! A WebSocket tunnel on the client's connection, once the upstream
//! answered the handshake `101` and sluice passed it on: bytes are copied
//! both ways until the conversation is over (`websocket/pump.rs`): a Close
//! frame passed each way, either side ended, or neither sent a byte for
//! `server.tunnel_idle_timeout` (then each side gets a Close frame 1001).
//! What each side sent behind its head goes first: the client's bytes
//! read after the handshake's head, and the upstream's after its `101`.
//! The request's settlement (its concurrency permits) and the tunnel's
//! count in `sluice_websocket_connections` are held until the tunnel ends,
//! and let go before its sockets are closed (docs/conversation.md,
//! "WebSocket messages").
//!
//! A tunnel a `unit = "message"` rule counts reads the client's frames as
//! they pass, each message admitted by the rule before it reaches the
//! upstream; one refused, too big or breaking RFC 6455 closes the tunnel
//! with a Close frame to each side, the client's written here, lingering
//! so that the client reads it before the connection closes.

use crate::http1::transport::Transport;
use bytes::BytesMut;

use crate::proxy::pool::Tunnel;
use crate::proxy::upgrade::{Metering, Upgraded};
use crate::server::deadline_io::DeadlineIo;
use crate::websocket::pump::{self, Ended, EndedBy};

/// Runs the tunnel between `client` (with `early_read`, read from it past the
/// handshake's head) and the upstream until it ends.
pub async fn run<S>(mut client: DeadlineIo<S>, early_read: BytesMut, upgraded: Upgraded)
where
    S: Transport,
{
    let Upgraded {
        upstream,
        settlement,
        open,
        messages,
    } = upgraded;
    let held = (settlement, open);
    let Tunnel {
        mut stream,
        early: upstream_early,
    } = upstream;
    let idle_timeout = client.tunnel_idle_timeout();
    // Copied to their size, freeing the read buffers they came in: a
    // tunnel holds no buffer while it is idle.
    let early = (early_read[..].to_vec(), upstream_early[..].to_vec());
    drop((early_read, upstream_early));
    let ended = match &messages {
        None => pump::plain(&mut client, &mut *stream, early, idle_timeout).await,
        Some(Metering {
            gate,
            max_message_bytes,
            rsv_allowed,
        }) => {
            let limits = (*max_message_bytes, *rsv_allowed);
            pump::metered(
                &mut client,
                &mut *stream,
                early,
                &**gate,
                limits,
                idle_timeout,
            )
            .await
        }
    };
    // The tunnel is over: counted so at once, whatever closing still takes.
    drop(held);
    drop(stream);
    match ended {
        Ok(Ended::Closed {
            from_client,
            from_server,
            by,
        }) => {
            tracing::debug!(from_client, from_server, ?by, "websocket tunnel closed");
            if by == EndedBy::Server {
                // The client may still be sending: closing with its bytes
                // unread would reset the connection before it read the
                // last of the server's.
                client.close_lingering().await;
            }
        }
        Ok(Ended::Closing(closing)) => {
            tracing::debug!(
                code = closing.code,
                reason = %closing.reason,
                "websocket tunnel closed by sluice"
            );
            client.answer_and_close(closing.frame).await;
        }
        Err(error) => tracing::debug!(%error, "websocket tunnel ended with an error"),
    }
}
