//! What one side of a connection writes: a head, then a body framed as the
//! head said, gathered so that a message goes out in as few writes (and
//! TCP segments) as it can.
//!
//! Short pieces — the head, chunk-size lines, frames under [`COPY_BELOW`] —
//! are copied into one buffer; a longer frame is written from where it is,
//! behind the buffer, in the same vectored write. A writer takes frames
//! while the body has them ready and the outflow [`has_room`], and writes
//! when the body has nothing more for now: a head and a short body, or a
//! run of small chunks, leave in one write (nginx sends a 1 KiB `POST`'s
//! head and body, and four chunks that arrived together, as one segment
//! each way; a write per chunk sent 10 segments where nginx sent 4,
//! docs/benchmarks-history.md).
//!
//! [`has_room`]: Outflow::has_room

use std::io;
use std::task::{ready, Context, Poll};

use bytes::Bytes;

use super::framing::{chunk_size_line, Framing};
use super::sending::Sending;
use super::transport::Transport;

/// Frames shorter than this are copied behind what is buffered; longer
/// ones are written from where they are.
pub const COPY_BELOW: usize = 8 * 1024;

/// Gathered bytes worth a write without waiting for more frames.
const GATHER: usize = 64 * 1024;

/// A body being written, and what is left of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyOut {
    /// This many bytes still to write.
    Length(u64),
    /// Chunked: each frame a chunk, then the last chunk.
    Chunked,
    /// Delimited by closing the connection after it.
    UntilClose,
}

impl BodyOut {
    /// The body of a message framed as `framing`; `None` for no body.
    pub fn of(framing: Framing) -> Option<BodyOut> {
        match framing {
            Framing::Empty => None,
            Framing::Length(length) => Some(BodyOut::Length(length)),
            Framing::Chunked => Some(BodyOut::Chunked),
            Framing::UntilClose => Some(BodyOut::UntilClose),
        }
    }
}

/// The body's frames do not add up to what its head declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    #[error("the body is longer than its head declared")]
    TooLong,
    #[error("the body is shorter than its head declared")]
    TooShort,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct Outflow {
    out: Sending,
}

impl Outflow {
    /// The buffer a head is written into (nothing may be pending).
    pub fn head(&mut self) -> &mut Vec<u8> {
        debug_assert!(self.is_empty());
        self.out.restart()
    }

    /// The buffer, to append bytes to as they are (a body written whole
    /// behind its head).
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        self.out.buffer()
    }

    /// Appends bytes as they are (a head's last part, a body held whole).
    pub fn extend(&mut self, bytes: &[u8]) {
        self.out.buffer().extend_from_slice(bytes);
    }

    /// Whether everything pushed has been written.
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// Whether another frame may be gathered before writing.
    pub fn has_room(&self) -> bool {
        !self.out.has_long() && self.out.buffered() < GATHER
    }

    /// Adds `data`, framed as `body` says (which counts it); only when
    /// [`has_room`](Outflow::has_room).
    pub fn push(&mut self, body: &mut BodyOut, data: Bytes) -> Result<(), Mismatch> {
        if data.is_empty() {
            return Ok(());
        }
        let chunked = match body {
            BodyOut::Length(left) => {
                *left = left
                    .checked_sub(data.len() as u64)
                    .ok_or(Mismatch::TooLong)?;
                false
            }
            BodyOut::Chunked => {
                chunk_size_line(self.out.buffer(), data.len());
                true
            }
            BodyOut::UntilClose => false,
        };
        if data.len() < COPY_BELOW {
            let buf = self.out.buffer();
            buf.extend_from_slice(&data);
            if chunked {
                buf.extend_from_slice(b"\r\n");
            }
        } else {
            debug_assert!(!self.out.has_long(), "pushed without room");
            self.out
                .push_long(data, if chunked { b"\r\n" } else { b"" });
        }
        Ok(())
    }

    /// Ends the body: the last chunk, or a check that the declared length
    /// was written. Trailer fields are never written: an HTTP/1.1 peer
    /// gets none from sluice (hyper's client sent only those its request
    /// declared in `Trailer`, a hop-by-hop field sluice strips; trailers
    /// reach HTTP/2 peers only: docs/edge-behaviour.md, "Reading the
    /// upstream's answer" and "Request framing").
    pub fn finish(&mut self, body: BodyOut) -> Result<(), Mismatch> {
        match body {
            BodyOut::Length(0) | BodyOut::UntilClose => Ok(()),
            BodyOut::Length(_) => Err(Mismatch::TooShort),
            BodyOut::Chunked => {
                // Behind the long frame, if any: it is all one write
                // either way.
                self.out.buffer().extend_from_slice(b"0\r\n\r\n");
                Ok(())
            }
        }
    }

    /// Writes everything pending to `io` (and pushes it on); ready once
    /// all of it went.
    pub fn poll_write<T: Transport + ?Sized>(
        &mut self,
        io: &mut T,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        while !self.out.is_empty() {
            if ready!(io.poll_send(cx, &mut self.out))? == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
        }
        self.out.restart();
        io.poll_push(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn written(outflow: &mut Outflow) -> Vec<u8> {
        let (mut near, mut far) = tokio::io::duplex(1 << 20);
        std::future::poll_fn(|cx| outflow.poll_write(&mut near, cx))
            .await
            .unwrap();
        drop(near);
        let mut out = Vec::new();
        far.read_to_end(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn short_chunks_are_gathered_behind_the_head_and_long_ones_follow() {
        let mut outflow = Outflow::default();
        outflow.head().extend_from_slice(b"HEAD\r\n\r\n");
        let mut body = BodyOut::Chunked;
        outflow.push(&mut body, Bytes::from_static(b"abc")).unwrap();
        assert!(outflow.has_room());
        let long = Bytes::from(vec![b'x'; COPY_BELOW]);
        outflow.push(&mut body, long.clone()).unwrap();
        assert!(!outflow.has_room(), "one long frame at a time");
        outflow.finish(body).unwrap();
        let mut expected = b"HEAD\r\n\r\n3\r\nabc\r\n2000\r\n".to_vec();
        expected.extend_from_slice(&long);
        expected.extend_from_slice(b"\r\n0\r\n\r\n");
        assert_eq!(written(&mut outflow).await, expected);
        assert!(outflow.is_empty());
    }

    #[tokio::test]
    async fn a_length_is_held_to() {
        let mut outflow = Outflow::default();
        let mut body = BodyOut::Length(5);
        outflow.push(&mut body, Bytes::from_static(b"abc")).unwrap();
        assert_eq!(outflow.finish(body), Err(Mismatch::TooShort));
        assert_eq!(
            outflow.push(&mut body, Bytes::from_static(b"def")),
            Err(Mismatch::TooLong)
        );
        outflow.push(&mut body, Bytes::from_static(b"de")).unwrap();
        outflow.finish(body).unwrap();
        assert_eq!(written(&mut outflow).await, b"abcde");
    }
}
