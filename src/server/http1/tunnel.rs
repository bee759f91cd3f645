//! A WebSocket tunnel on the client's connection, once the upstream
//! answered the handshake `101` and sluice passed it on: bytes are copied
//! both ways until both sides closed (`websocket/pump.rs`). What each side
//! sent behind its head goes first: the client's bytes read after the
//! handshake's head, and the upstream's after its `101`. The request's
//! settlement (its concurrency permits) is held until the tunnel ends.
//!
//! A tunnel a `unit = "message"` rule counts reads the client's frames as
//! they pass, each message admitted by the rule before it reaches the
//! upstream; one refused, too big or breaking RFC 6455 closes the tunnel
//! with a Close frame to each side, the client's written here, lingering
//! so that the client reads it before the connection closes.

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::proxy::pool::Tunnel;
use crate::proxy::upgrade::{Metering, Upgraded};
use crate::server::deadline_io::DeadlineIo;
use crate::websocket::pump::{self, Ended};

/// Runs the tunnel between `client` (with `early_read`, read from it past the
/// handshake's head) and the upstream until it ends.
pub async fn run<S>(mut client: DeadlineIo<S>, early_read: BytesMut, upgraded: Upgraded)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Upgraded {
        upstream,
        settlement,
        open,
        messages,
    } = upgraded;
    let _held = (settlement, open);
    let Tunnel {
        mut stream,
        early: upstream_early,
    } = upstream;
    // Copied to their size, freeing the read buffers they came in: a
    // tunnel holds no buffer while it is idle.
    let early = (early_read[..].to_vec(), upstream_early[..].to_vec());
    drop((early_read, upstream_early));
    let ended = match &messages {
        None => pump::plain(&mut client, &mut stream, early.0, early.1).await,
        Some(Metering {
            gate,
            max_message_bytes,
            rsv_allowed,
        }) => {
            let limits = (*max_message_bytes, *rsv_allowed);
            pump::metered(&mut client, &mut stream, early, &**gate, limits).await
        }
    };
    match ended {
        Ok(Ended::Closed {
            from_client,
            from_server,
        }) => {
            tracing::debug!(from_client, from_server, "websocket tunnel closed");
        }
        Ok(Ended::Closing(closing)) => {
            tracing::debug!(
                code = closing.code,
                reason = %closing.reason,
                "websocket tunnel closed by sluice"
            );
            drop(stream);
            client.answer_and_close(closing.frame).await;
        }
        Err(error) => tracing::debug!(%error, "websocket tunnel ended with an error"),
    }
}
