//! Where an HTTP/2 client's header blocks begin and end, read off the
//! bytes of the connection as they arrive, for the head clock
//! (`server/deadline_io.rs`).
//!
//! A request's header block is a `HEADERS` frame and the `CONTINUATION`
//! frames after it, the last with `END_HEADERS` (RFC 9113 §6.2, §6.10).
//! Until that last frame no other frame may come on the connection, and h2
//! holds what it has of the block with no clock of its own: a client that
//! never sends it holds the connection, and every stream on it, for as long
//! as it likes. The scan sees only frame headers (9 bytes each) and skips
//! their payloads, so it costs a few instructions per frame however large.

/// The connection preface's length (RFC 9113 §3.4), skipped first.
const PREFACE_LEN: usize = 24;
/// An HTTP/2 frame header's length (RFC 9113 §4.1).
const FRAME_HEADER_LEN: usize = 9;
/// Frame types that carry a header block (RFC 9113 §6.2, §6.10).
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
/// The flag that ends a header block (RFC 9113 §6.2).
const END_HEADERS: u8 = 0x4;

/// The client's frames, as far as they have arrived.
#[derive(Debug, Clone)]
pub struct FrameScan {
    at: At,
    /// A header block has begun and its last frame has not arrived.
    open_block: bool,
}

#[derive(Debug, Clone, Copy)]
enum At {
    /// In the connection preface, with this many bytes of it still to come.
    Preface(usize),
    /// In a frame header, with its first `have` bytes in `header`.
    Header {
        header: [u8; FRAME_HEADER_LEN],
        have: usize,
    },
    /// In a frame's payload, with this many bytes of it still to come.
    Payload(usize),
}

impl Default for FrameScan {
    fn default() -> FrameScan {
        FrameScan::new()
    }
}

impl FrameScan {
    /// A connection from its first byte, the preface's.
    pub const fn new() -> FrameScan {
        FrameScan {
            at: At::Preface(PREFACE_LEN),
            open_block: false,
        }
    }

    /// Whether a header block is open: begun, and its last frame not here.
    pub fn block_open(&self) -> bool {
        self.open_block
    }

    /// Reads `bytes`, the next to arrive on the connection.
    pub fn read(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match &mut self.at {
                At::Preface(left) | At::Payload(left) => {
                    let skipped = (*left).min(bytes.len());
                    *left -= skipped;
                    bytes = &bytes[skipped..];
                    if *left == 0 {
                        self.at = At::Header {
                            header: [0; FRAME_HEADER_LEN],
                            have: 0,
                        };
                    }
                }
                At::Header { header, have } => {
                    let taken = (FRAME_HEADER_LEN - *have).min(bytes.len());
                    header[*have..*have + taken].copy_from_slice(&bytes[..taken]);
                    *have += taken;
                    bytes = &bytes[taken..];
                    if *have == FRAME_HEADER_LEN {
                        let header = *header;
                        self.frame(&header);
                    }
                }
            }
        }
    }

    /// A whole frame header: whether it opens or ends a header block, then
    /// its payload.
    fn frame(&mut self, header: &[u8; FRAME_HEADER_LEN]) {
        let length =
            usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let (kind, flags) = (header[3], header[4]);
        if kind == HEADERS || kind == CONTINUATION {
            self.open_block = flags & END_HEADERS == 0;
        }
        self.at = if length == 0 {
            At::Header {
                header: [0; FRAME_HEADER_LEN],
                have: 0,
            }
        } else {
            At::Payload(length)
        };
    }
}

/// An HTTP/2 frame, its header and payload, on stream 1: what the
/// server's tests write.
#[cfg(test)]
pub(crate) fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&1u32.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    /// Whether a block is open after each of `pieces` is read in turn.
    fn open_after(pieces: &[&[u8]]) -> Vec<bool> {
        let mut scan = FrameScan::new();
        pieces
            .iter()
            .map(|piece| {
                scan.read(piece);
                scan.block_open()
            })
            .collect()
    }

    #[test]
    fn a_block_is_open_from_its_headers_frame_until_its_end_headers() {
        let settings = frame(0x4, 0, &[0, 3, 0, 0, 0, 100]);
        let headers = frame(HEADERS, 0x1, b"\x82\x86\x84");
        let continuation = frame(CONTINUATION, 0, b"\x41\x01a");
        let last = frame(CONTINUATION, END_HEADERS, b"");
        assert_eq!(
            open_after(&[PREFACE, &settings, &headers, &continuation, &last]),
            [false, false, true, true, false]
        );
        // A block in one frame is never open.
        let whole = frame(HEADERS, END_HEADERS | 0x1, b"\x82\x86\x84");
        assert_eq!(open_after(&[PREFACE, &whole]), [false, false]);
    }

    #[test]
    fn any_split_of_the_bytes_reads_alike() {
        let mut bytes = PREFACE.to_vec();
        // A payload that looks like frame headers must be skipped.
        bytes.extend(frame(0x0, 0, &[0, 0, 0, HEADERS, 0, 0, 0, 0, 1, 7]));
        bytes.extend(frame(HEADERS, 0, b"\x82"));
        bytes.extend(frame(0x8, 0, &[0, 0, 0, 1]));
        let whole = open_after(&[&bytes]);
        assert_eq!(whole, [true]);
        for size in 1..bytes.len() {
            let pieces: Vec<&[u8]> = bytes.chunks(size).collect();
            assert_eq!(open_after(&pieces).last(), whole.last(), "pieces of {size}");
        }
    }
}
