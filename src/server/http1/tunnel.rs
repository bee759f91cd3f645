//! A WebSocket tunnel on the client's connection, once the upstream
//! answered the handshake `101` and sluice passed it on: bytes are copied
//! both ways until either side closes. What each side sent behind its
//! head goes first: the client's bytes read after the handshake's head,
//! and the upstream's after its `101`. The request's settlement (its
//! concurrency permits) is held until the tunnel ends.

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::proxy::upgrade::Upgraded;

/// Copies between `client` (with `early`, read from it past the
/// handshake's head) and the upstream until either closes.
pub async fn run<S>(mut client: S, early: BytesMut, upgraded: Upgraded)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Upgraded {
        upstream,
        settlement,
    } = upgraded;
    let _held = settlement;
    let mut stream = upstream.stream;
    if !upstream.early.is_empty() && client.write_all(&upstream.early).await.is_err() {
        return;
    }
    if !early.is_empty() && stream.write_all(&early).await.is_err() {
        return;
    }
    match tokio::io::copy_bidirectional(&mut client, &mut stream).await {
        Ok((from_client, from_upstream)) => {
            tracing::debug!(from_client, from_upstream, "websocket tunnel closed");
        }
        Err(error) => tracing::debug!(%error, "websocket tunnel ended with an error"),
    }
}
