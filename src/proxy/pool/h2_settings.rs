//! What an HTTP/2 server's first `SETTINGS` frame said about extended
//! `CONNECT` (RFC 8441 §3), for the WebSockets sluice opens on its
//! connection (`extended_connect.rs`). hyper's client tells it only
//! through its connection future, which its own task owns, and h2 would
//! send a `:protocol` whatever the server said; so the connection's reads
//! are watched as they pass until the server's preface — its first frame,
//! a `SETTINGS` one (RFC 9113 §3.4) — is whole, then left alone. A server
//! may only ever turn the setting on (RFC 8441 §3); one that does so only
//! in a later `SETTINGS` frame is taken as not advertising it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;

/// A frame header's length (RFC 9113 §4.1).
const HEADER: usize = 9;
const SETTINGS: u8 = 0x4;
const ACK: u8 = 0x1;
/// `SETTINGS_ENABLE_CONNECT_PROTOCOL` (RFC 8441 §3).
const ENABLE_CONNECT_PROTOCOL: u16 = 0x8;
/// The longest preface read: `SETTINGS_MAX_FRAME_SIZE`'s initial value.
const MAX_PREFACE: usize = 16_384;

/// What the server's preface said, once it came: cheap to clone.
#[derive(Debug, Clone)]
pub struct PeerSettings(watch::Receiver<Option<bool>>);

impl PeerSettings {
    /// Whether the server advertised extended `CONNECT`, once its preface
    /// came (the caller bounds the wait); `false` when the connection
    /// ended first or its preface was not a `SETTINGS` frame.
    pub async fn connect_protocol(&self) -> bool {
        let mut said = self.0.clone();
        let waited = said.wait_for(Option::is_some).await;
        matches!(waited.as_deref(), Ok(Some(true)))
    }
}

/// `stream`, its reads watched for the server's preface, and what the
/// preface will say.
pub fn watch<S>(stream: S) -> (Watched<S>, PeerSettings) {
    let (said, settings) = watch::channel(None);
    let preface = Some(Box::new(Preface {
        read: Vec::with_capacity(HEADER),
        said,
    }));
    (Watched { stream, preface }, PeerSettings(settings))
}

/// A server's connection whose reads are watched until its preface is
/// whole (then only a `None` is looked at per read).
#[derive(Debug)]
pub struct Watched<S> {
    stream: S,
    preface: Option<Box<Preface>>,
}

/// The preface read so far, and where to say what it said.
#[derive(Debug)]
struct Preface {
    read: Vec<u8>,
    said: watch::Sender<Option<bool>>,
}

impl Preface {
    /// Takes `bytes` read from the server; what the preface said, once it
    /// is whole.
    fn took(&mut self, bytes: &[u8]) -> Option<bool> {
        self.read.extend_from_slice(bytes);
        preface_says(&self.read)
    }
}

/// What the server's preface, whose first bytes are `read`, says of
/// extended `CONNECT`: `None` until it is whole.
fn preface_says(read: &[u8]) -> Option<bool> {
    let header = read.get(..HEADER)?;
    let length =
        usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
    let (kind, flags) = (header[3], header[4]);
    if kind != SETTINGS || flags & ACK != 0 || length % 6 != 0 || length > MAX_PREFACE {
        return Some(false);
    }
    let payload = read.get(HEADER..HEADER + length)?;
    let mut enabled = false;
    for setting in payload.chunks_exact(6) {
        if u16::from_be_bytes([setting[0], setting[1]]) == ENABLE_CONNECT_PROTOCOL {
            enabled = u32::from_be_bytes([setting[2], setting[3], setting[4], setting[5]]) == 1;
        }
    }
    Some(enabled)
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if let Some(preface) = &mut this.preface {
            let read = &buf.filled()[before..];
            let ended = matches!(polled, Poll::Ready(Ok(()))) && read.is_empty();
            let said = if ended {
                Some(false)
            } else {
                preface.took(read)
            };
            if let Some(said) = said {
                preface.said.send_replace(Some(said));
                this.preface = None;
            }
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(flags: u8, entries: &[(u16, u32)]) -> Vec<u8> {
        let length = entries.len() * 6;
        let mut frame = vec![0, 0, length as u8, SETTINGS, flags, 0, 0, 0, 0];
        for (id, value) in entries {
            frame.extend_from_slice(&id.to_be_bytes());
            frame.extend_from_slice(&value.to_be_bytes());
        }
        frame
    }

    #[test]
    fn the_preface_says_whether_extended_connect_is_advertised() {
        let advertised = settings(
            0,
            &[(0x3, 100), (ENABLE_CONNECT_PROTOCOL, 1), (0x4, 65_535)],
        );
        assert_eq!(preface_says(&advertised), Some(true));
        assert_eq!(preface_says(&settings(0, &[(0x3, 100)])), Some(false));
        assert_eq!(preface_says(&settings(0, &[])), Some(false));
        let off = settings(0, &[(ENABLE_CONNECT_PROTOCOL, 0)]);
        assert_eq!(preface_says(&off), Some(false));
        // Not yet whole.
        assert_eq!(preface_says(&advertised[..5]), None);
        assert_eq!(preface_says(&advertised[..advertised.len() - 1]), None);
        // Not a server's preface: a SETTINGS ACK, another frame.
        let ack = settings(ACK, &[]);
        assert_eq!(preface_says(&ack), Some(false));
        let ping = [0, 0, 8, 0x6, 0, 0, 0, 0, 0];
        assert_eq!(preface_says(&ping), Some(false));
    }

    #[tokio::test]
    async fn reads_are_watched_until_the_preface_is_whole_then_passed_as_they_are() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut server, client) = tokio::io::duplex(1024);
        let (mut watched, said) = watch(client);
        let preface = settings(0, &[(ENABLE_CONNECT_PROTOCOL, 1)]);
        let sent = [&preface[..], b"after"].concat();
        let mut got = Vec::new();
        for piece in sent.chunks(4) {
            server.write_all(piece).await.unwrap();
            let mut buf = [0u8; 64];
            let n = watched.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, sent);
        assert!(said.connect_protocol().await);

        let (server, client) = tokio::io::duplex(64);
        let (mut watched, said) = watch(client);
        drop(server);
        assert_eq!(watched.read(&mut [0u8; 8]).await.unwrap(), 0);
        assert!(!said.connect_protocol().await);
    }
}
