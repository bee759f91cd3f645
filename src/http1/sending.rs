//! Bytes on their way out, owned: what a write hands a transport
//! ([`Transport::poll_send`]). Short pieces are copied into one buffer; one
//! longer frame follows from where it is (a shared `Bytes`, not copied).
//! Nothing is lent to the transport: one that sends later
//! (completion-based, io_uring) takes the bytes for as long as its write is
//! in flight ([`Sending::lend`]) and gives them back after
//! ([`Sending::give_back`]), so that the buffer's memory is reused.
//!
//! [`Transport::poll_send`]: super::transport::Transport::poll_send

use bytes::{Buf, Bytes};

/// See the module docs.
#[derive(Debug, Default)]
pub struct Sending {
    /// Copied bytes, sent first; `buf[sent..]` is what is left of them.
    buf: Vec<u8>,
    sent: usize,
    /// A frame sent from where it is, after `buf`.
    long: Bytes,
    /// What follows `long` (a chunk's CRLF).
    after_long: &'static [u8],
    /// A transport holds the bytes: a write is in flight.
    lent: bool,
}

impl Sending {
    /// `bytes`, sent from where they are.
    pub fn of(bytes: Bytes) -> Sending {
        Sending {
            long: bytes,
            ..Sending::default()
        }
    }

    /// `bytes`, owned as they are.
    pub fn copied(bytes: Vec<u8>) -> Sending {
        Sending {
            buf: bytes,
            ..Sending::default()
        }
    }

    /// Whether everything was sent (and no write is in flight).
    pub fn is_empty(&self) -> bool {
        !self.lent && self.left() == 0
    }

    /// How many bytes are still to send (none while they are lent).
    pub fn left(&self) -> usize {
        self.buf.len() - self.sent + self.long.len() + self.after_long.len()
    }

    /// What is left to send, in order: the copied bytes, the long frame
    /// and what follows it (each may be empty).
    pub fn slices(&self) -> [&[u8]; 3] {
        [&self.buf[self.sent..], &self.long, self.after_long]
    }

    /// Counts `n` more bytes as sent.
    pub fn advance(&mut self, mut n: usize) {
        let from_buf = n.min(self.buf.len() - self.sent);
        self.sent += from_buf;
        n -= from_buf;
        let from_long = n.min(self.long.len());
        self.long.advance(from_long);
        n -= from_long;
        self.after_long = &self.after_long[n.min(self.after_long.len())..];
    }

    /// Takes the bytes for a write that completes later; until
    /// [`give_back`](Sending::give_back), `self` holds nothing and is not
    /// empty.
    pub fn lend(&mut self) -> Sending {
        let lent = std::mem::take(self);
        self.lent = true;
        lent
    }

    /// Puts back what [`lend`](Sending::lend) took, advanced past what the
    /// write sent.
    pub fn give_back(&mut self, lent: Sending) {
        debug_assert!(self.lent, "given back without being lent");
        *self = lent;
    }

    /// Starts over with nothing to send; the copied bytes' buffer, kept
    /// for its capacity, to write into.
    pub fn restart(&mut self) -> &mut Vec<u8> {
        debug_assert!(!self.lent, "restarted while lent");
        self.buf.clear();
        self.sent = 0;
        self.long = Bytes::new();
        self.after_long = b"";
        &mut self.buf
    }

    /// The copied bytes' buffer, to append to: the long frame, if any, is
    /// copied into it first, so that what is appended follows it.
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        debug_assert!(!self.lent, "appended to while lent");
        if !self.long.is_empty() || !self.after_long.is_empty() {
            self.buf.extend_from_slice(&self.long);
            self.buf.extend_from_slice(self.after_long);
            self.long = Bytes::new();
            self.after_long = b"";
        }
        &mut self.buf
    }

    /// Whether a long frame is waiting (one at a time).
    pub fn has_long(&self) -> bool {
        !self.long.is_empty()
    }

    /// Sends `frame` from where it is, then `after` (a frame already
    /// waiting is copied into the buffer first).
    pub fn push_long(&mut self, frame: Bytes, after: &'static [u8]) {
        self.buffer();
        self.long = frame;
        self.after_long = after;
    }

    /// Copied bytes not yet sent.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn left(sending: &Sending) -> Vec<u8> {
        sending.slices().concat()
    }

    #[test]
    fn advancing_crosses_the_parts_in_order() {
        let mut sending = Sending::copied(b"head".to_vec());
        sending.push_long(Bytes::from_static(b"frame"), b"\r\n");
        assert_eq!(left(&sending), b"headframe\r\n");
        sending.advance(6);
        assert_eq!(left(&sending), b"ame\r\n");
        sending.advance(4);
        assert_eq!(left(&sending), b"\n");
        sending.advance(1);
        assert!(sending.is_empty());
    }

    #[test]
    fn lent_bytes_are_not_empty_until_given_back() {
        let mut sending = Sending::of(Bytes::from_static(b"abc"));
        let mut lent = sending.lend();
        assert!(!sending.is_empty());
        assert_eq!(sending.left(), 0);
        assert_eq!(left(&lent), b"abc");
        lent.advance(3);
        sending.give_back(lent);
        assert!(sending.is_empty());
    }

    #[test]
    fn appending_copies_the_long_frame_first() {
        let mut sending = Sending::default();
        sending.restart().extend_from_slice(b"1\r\n");
        sending.push_long(Bytes::from_static(b"x"), b"\r\n");
        sending.buffer().extend_from_slice(b"0\r\n\r\n");
        assert_eq!(left(&sending), b"1\r\nx\r\n0\r\n\r\n");
        assert!(!sending.has_long());
    }
}
