//! An in-memory connection whose ends are completion-based transports, as
//! an io_uring backend's would be (`http1/transport.rs`): a read takes the
//! caller's buffer when it starts and hands it back, filled, when it
//! completes on a later poll; a write takes its bytes and reports them sent
//! when they are delivered, on a later poll too. Every operation is
//! pending at least once, so that an engine that touched its read buffer
//! while a read is in flight, or counted bytes as sent before the
//! transport said so, breaks its tests.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::{BufMut, BytesMut};

use crate::http1::sending::Sending;
use crate::http1::transport::Transport;

/// How many bytes may wait in each direction: a writer beyond it waits
/// for the reader.
const ROOM: usize = 64 * 1024;

/// Both directions of a connection: `toward[i]` holds what is on its way to
/// end `i`.
#[derive(Debug, Default)]
struct Pipe {
    toward: [Direction; 2],
}

#[derive(Debug, Default)]
struct Direction {
    bytes: VecDeque<u8>,
    /// The other end closed its write side.
    closed: bool,
    /// The reader waiting for bytes, and the writer waiting for room.
    reader: Option<Waker>,
    writer: Option<Waker>,
}

/// One end of the connection.
#[derive(Debug)]
pub struct End {
    pipe: Arc<Mutex<Pipe>>,
    side: usize,
    /// The buffer a read took, until the read completes.
    reading: Option<BytesMut>,
    /// The bytes a write took, until they are delivered.
    writing: Option<Sending>,
    /// Reads completed and writes delivered at both ends, for the tests to
    /// see the transport was used.
    completions: Arc<AtomicUsize>,
    /// What a read for hyper's HTTP/2 server landed in (see the tokio
    /// implementations below).
    bridged: BytesMut,
    /// What a write for hyper's HTTP/2 server sends.
    bridged_out: Sending,
}

/// A connection's two ends.
pub fn pair() -> (End, End) {
    let pipe = Arc::new(Mutex::new(Pipe::default()));
    let completions = Arc::new(AtomicUsize::new(0));
    let end = |side| End {
        pipe: Arc::clone(&pipe),
        side,
        reading: None,
        writing: None,
        completions: Arc::clone(&completions),
        bridged: BytesMut::new(),
        bridged_out: Sending::default(),
    };
    (end(0), end(1))
}

impl End {
    /// How many reads and writes completed at both ends so far.
    pub fn completions(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.completions)
    }

    fn pipe(&self) -> std::sync::MutexGuard<'_, Pipe> {
        self.pipe
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Delivers `lent`, once there is room for it.
    fn poll_deliver(
        &mut self,
        cx: &mut Context<'_>,
        lent: &mut Sending,
    ) -> Poll<io::Result<usize>> {
        let bytes = lent.slices().concat();
        let other = 1 - self.side;
        let mut pipe = self.pipe();
        let toward = &mut pipe.toward[other];
        if toward.closed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if toward.bytes.len() + bytes.len() > ROOM && !toward.bytes.is_empty() {
            toward.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        toward.bytes.extend(&bytes);
        if let Some(reader) = toward.reader.take() {
            reader.wake();
        }
        drop(pipe);
        lent.advance(bytes.len());
        self.completions.fetch_add(1, Ordering::Relaxed);
        Poll::Ready(Ok(bytes.len()))
    }
}

impl Transport for End {
    fn poll_fill(&mut self, cx: &mut Context<'_>, buf: &mut BytesMut) -> Poll<io::Result<usize>> {
        let Some(mut held) = self.reading.take() else {
            // The read starts: the buffer is the transport's until it
            // completes, on a later poll.
            self.reading = Some(std::mem::take(buf));
            cx.waker().wake_by_ref();
            return Poll::Pending;
        };
        debug_assert!(buf.is_empty(), "the caller touched a buffer in flight");
        let mut pipe = self.pipe();
        let toward = &mut pipe.toward[self.side];
        let room = held.capacity() - held.len();
        if toward.bytes.is_empty() && !toward.closed {
            toward.reader = Some(cx.waker().clone());
            drop(pipe);
            self.reading = Some(held);
            return Poll::Pending;
        }
        let n = room.min(toward.bytes.len());
        for byte in toward.bytes.drain(..n) {
            held.put_u8(byte);
        }
        if let Some(writer) = toward.writer.take() {
            writer.wake();
        }
        drop(pipe);
        *buf = held;
        self.completions.fetch_add(1, Ordering::Relaxed);
        Poll::Ready(Ok(n))
    }

    fn poll_send(&mut self, cx: &mut Context<'_>, out: &mut Sending) -> Poll<io::Result<usize>> {
        let Some(mut lent) = self.writing.take() else {
            // The write starts: its bytes are the transport's now, sent on
            // a later poll.
            self.writing = Some(out.lend());
            cx.waker().wake_by_ref();
            return Poll::Pending;
        };
        let delivered = self.poll_deliver(cx, &mut lent);
        if delivered.is_pending() {
            self.writing = Some(lent);
        } else {
            out.give_back(lent);
        }
        delivered
    }

    fn poll_push(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        debug_assert!(self.writing.is_none(), "pushed with a write in flight");
        Poll::Ready(Ok(()))
    }

    fn poll_close(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        debug_assert!(self.writing.is_none(), "closed with a write in flight");
        let other = 1 - self.side;
        let mut pipe = self.pipe();
        pipe.toward[other].closed = true;
        if let Some(reader) = pipe.toward[other].reader.take() {
            reader.wake();
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for End {
    /// A dropped end is closed both ways: its peer reads the end, and
    /// writes to it fail.
    fn drop(&mut self) {
        let other = 1 - self.side;
        let mut pipe = self.pipe();
        for side in [self.side, other] {
            pipe.toward[side].closed = true;
            if let Some(reader) = pipe.toward[side].reader.take() {
                reader.wake();
            }
            if let Some(writer) = pipe.toward[side].writer.take() {
                writer.wake();
            }
        }
    }
}

/// For hyper's HTTP/2 server, which reads and writes tokio streams (a
/// connection opening with the HTTP/2 preface): the same operations, a
/// read copied out of a buffer of the end's own.
impl tokio::io::AsyncRead for End {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.bridged.is_empty() {
            let mut bridged = std::mem::take(&mut this.bridged);
            if this.reading.is_none() {
                bridged.reserve(out.remaining().max(1));
            }
            let filled = this.poll_fill(cx, &mut bridged);
            this.bridged = bridged;
            std::task::ready!(filled)?;
        }
        let n = out.remaining().min(this.bridged.len());
        out.put_slice(&this.bridged.split_to(n));
        Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for End {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mut out = std::mem::take(&mut this.bridged_out);
        if out.is_empty() {
            out = Sending::copied(buf.to_vec());
        }
        let sent = this.poll_send(cx, &mut out);
        this.bridged_out = out;
        sent
    }

    fn poll_flush(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_push(cx)
    }

    fn poll_shutdown(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_close(cx)
    }
}
