//! RFC 6455 §5 frames, read as they stream: a client's, to count its
//! messages and refuse what breaks the protocol or the size limit
//! ([`Reader`]), and either side's, only to know where its frames end
//! ([`FrameEnds`]), so that sluice's own Close frame never lands inside
//! one. Both note the first Close frame that went by whole, so that a
//! tunnel ends once one passed each way (docs/conversation.md,
//! "WebSocket messages"). Neither keeps a frame: they keep a few counters, and [`Reader`]
//! looks at a frame's header only while its caller holds it (at most
//! [`MAX_HEADER`] bytes). Payloads are never unmasked or copied: they pass
//! as the client sent them. What is refused, with which close code, and
//! what is left to the server (UTF-8 in text, the shortest length form,
//! which frame of a compressed message sets RSV1) is listed in
//! docs/conversation.md, "WebSocket messages".

/// The longest frame header: 2 bytes, a 64-bit length, a masking key.
pub const MAX_HEADER: usize = 14;

/// The longest payload of a control frame (RFC 6455 §5.5).
pub const MAX_CONTROL_PAYLOAD: u64 = 125;

const FIN: u8 = 0x80;
const RSV: u8 = 0x70;
const MASKED: u8 = 0x80;

const CONTINUATION: u8 = 0x0;
const TEXT: u8 = 0x1;
const BINARY: u8 = 0x2;
const CLOSE: u8 = 0x8;
const PING: u8 = 0x9;
const PONG: u8 = 0xA;

/// What the bytes a [`Reader`] is shown start with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The next this many bytes are decided (a header, or payload): pass
    /// them on.
    Pass(usize),
    /// The next this many bytes are the header of a data message's first
    /// frame: the message counts now, and may pass once it is admitted.
    Message(usize),
    /// What is left is the start of a frame header (or nothing): read more.
    More,
    /// The client broke RFC 6455 or sent a message over the limit: close,
    /// passing nothing more.
    Close(Violation),
}

/// Why a client's connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Violation {
    /// A client frame without a masking key (§5.1).
    Unmasked,
    /// An opcode RFC 6455 reserves (3–7, 11–15).
    ReservedOpcode,
    /// A reserved bit no negotiated extension defined (§5.2).
    ReservedBits,
    /// A control frame with more than 125 bytes of payload (§5.5).
    ControlTooLong,
    /// A control frame without FIN (§5.5: control frames are never
    /// fragmented).
    ControlFragmented,
    /// A continuation frame with no fragmented message to continue (§5.4).
    StrayContinuation,
    /// A text or binary frame while a fragmented message is unfinished
    /// (§5.4).
    Interleaved,
    /// A 64-bit payload length with its most significant bit set (§5.2).
    LengthTooLarge,
    /// A data message larger than the limit, across its fragments.
    TooBig,
}

impl Violation {
    /// The Close frame's status code: 1009 for a message too big to
    /// process, 1002 for a protocol error (RFC 6455 §7.4.1).
    pub fn code(self) -> u16 {
        match self {
            Violation::TooBig => 1009,
            _ => 1002,
        }
    }

    /// The Close frame's reason.
    pub fn reason(self) -> &'static str {
        match self {
            Violation::Unmasked => "protocol error: unmasked client frame",
            Violation::ReservedOpcode => "protocol error: reserved opcode",
            Violation::ReservedBits => "protocol error: reserved bits set",
            Violation::ControlTooLong => "protocol error: control frame over 125 bytes",
            Violation::ControlFragmented => "protocol error: fragmented control frame",
            Violation::StrayContinuation => "protocol error: continuation without a message",
            Violation::Interleaved => "protocol error: new message inside a fragmented one",
            Violation::LengthTooLarge => "protocol error: payload length over 2^63",
            Violation::TooBig => "message too big",
        }
    }
}

/// A client's frames as they stream (RFC 6455 §5): each data message
/// counted once, when its first frame's header is read, so that one over
/// its budget never reaches the server; control frames never counted.
///
/// [`Reader::step`] is shown the bytes not yet decided and says what the
/// first of them are; the caller keeps what it was told to read more for
/// (at most [`MAX_HEADER`] − 1 bytes of a header) in front of what it
/// reads next. Only complete headers are judged, each the same whatever
/// pieces it came in.
#[derive(Debug, Clone)]
pub struct Reader {
    /// The largest data message, in payload bytes across its fragments.
    max_message: u64,
    /// Reserved bits the connection's extensions use (RSV1 for
    /// permessage-deflate): allowed on any frame.
    rsv_allowed: u8,
    /// Payload bytes of the current frame still to pass; 0 at a header.
    payload_left: u64,
    /// Payload bytes of the fragmented message under way, `None` between
    /// messages.
    message: Option<u64>,
    /// The violation that ended the connection: every step repeats it.
    closed: Option<Violation>,
    /// Whether a Close frame went by.
    close: CloseSeen,
}

/// Whether a side's Close frame (RFC 6455 §5.5.1) went by whole: the
/// first one counts, what follows it changes nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum CloseSeen {
    #[default]
    No,
    /// Its header, and its payload is passing.
    Payload,
    Whole,
}

impl CloseSeen {
    /// A frame header with `opcode` and `payload` bytes went by.
    #[inline]
    fn header(&mut self, opcode: u8, payload: u64) {
        if opcode == CLOSE && *self == CloseSeen::No {
            *self = if payload == 0 {
                CloseSeen::Whole
            } else {
                CloseSeen::Payload
            };
        }
    }

    /// The current frame's payload ended.
    #[inline]
    fn payload_ended(&mut self) {
        if *self == CloseSeen::Payload {
            *self = CloseSeen::Whole;
        }
    }
}

/// A frame header read whole.
#[derive(Debug, Clone, Copy)]
struct Header {
    fin: bool,
    rsv: u8,
    opcode: u8,
    masked: bool,
    /// Its length, masking key included.
    len: usize,
    /// A 64-bit length with its top bit set.
    oversized: bool,
    payload: u64,
}

impl Header {
    /// The header `bytes` start with; `None` until it is all there.
    #[inline]
    fn read(bytes: &[u8]) -> Option<Header> {
        let len = Header::needs(bytes);
        let header = bytes.get(..len)?;
        let (first, second) = (header[0], header[1]);
        let payload = match second & 0x7F {
            126 => u64::from(u16::from_be_bytes([header[2], header[3]])),
            127 => header[2..10]
                .iter()
                .fold(0u64, |n, &byte| (n << 8) | u64::from(byte)),
            short => u64::from(short),
        };
        Some(Header {
            fin: first & FIN != 0,
            rsv: first & RSV,
            opcode: first & 0x0F,
            masked: second & MASKED != 0,
            len,
            oversized: payload >> 63 != 0,
            payload,
        })
    }

    /// How many bytes the header `bytes` start has: its length once the
    /// length's bytes are there, else what is needed to know it.
    fn needs(bytes: &[u8]) -> usize {
        match bytes.get(1) {
            None => 2,
            Some(&second) => {
                let extended = match second & 0x7F {
                    126 => 2,
                    127 => 8,
                    _ => 0,
                };
                2 + extended + if second & MASKED != 0 { 4 } else { 0 }
            }
        }
    }
}

impl Reader {
    /// A reader of a client's frames: messages up to `max_message` payload
    /// bytes, `rsv_allowed` the reserved bits its extensions define
    /// ([`rsv_for_extensions`]).
    pub fn new(max_message: u64, rsv_allowed: u8) -> Reader {
        Reader {
            max_message,
            rsv_allowed: rsv_allowed & RSV,
            payload_left: 0,
            message: None,
            closed: None,
            close: CloseSeen::No,
        }
    }

    /// What `input`, the bytes not yet decided, starts with. After
    /// [`Step::Pass`] or [`Step::Message`] the caller shows the bytes after
    /// those; after [`Step::More`] the same bytes with more behind them.
    #[inline]
    pub fn step(&mut self, input: &[u8]) -> Step {
        if let Some(violation) = self.closed {
            return Step::Close(violation);
        }
        if input.is_empty() {
            return Step::More;
        }
        if self.payload_left > 0 {
            let n = usize::try_from(self.payload_left)
                .map_or(input.len(), |left| left.min(input.len()));
            self.payload_left -= n as u64;
            if self.payload_left == 0 {
                self.close.payload_ended();
            }
            return Step::Pass(n);
        }
        let Some(header) = Header::read(input) else {
            return Step::More;
        };
        match self.judge(&header) {
            Ok(step) => {
                self.payload_left = header.payload;
                self.close.header(header.opcode, header.payload);
                step
            }
            Err(violation) => {
                self.closed = Some(violation);
                Step::Close(violation)
            }
        }
    }

    /// Whether `header` may pass, and whether it starts a message; keeps
    /// track of the fragmented message under way.
    fn judge(&mut self, header: &Header) -> Result<Step, Violation> {
        if header.rsv & !self.rsv_allowed != 0 {
            return Err(Violation::ReservedBits);
        }
        if !matches!(
            header.opcode,
            CONTINUATION | TEXT | BINARY | CLOSE | PING | PONG
        ) {
            return Err(Violation::ReservedOpcode);
        }
        if !header.masked {
            return Err(Violation::Unmasked);
        }
        if header.oversized {
            return Err(Violation::LengthTooLarge);
        }
        match header.opcode {
            CLOSE | PING | PONG => {
                if !header.fin {
                    return Err(Violation::ControlFragmented);
                }
                if header.payload > MAX_CONTROL_PAYLOAD {
                    return Err(Violation::ControlTooLong);
                }
                Ok(Step::Pass(header.len))
            }
            CONTINUATION => {
                let so_far = self.message.ok_or(Violation::StrayContinuation)?;
                let total = so_far.saturating_add(header.payload);
                if total > self.max_message {
                    return Err(Violation::TooBig);
                }
                self.message = (!header.fin).then_some(total);
                Ok(Step::Pass(header.len))
            }
            _ => {
                if self.message.is_some() {
                    return Err(Violation::Interleaved);
                }
                if header.payload > self.max_message {
                    return Err(Violation::TooBig);
                }
                self.message = (!header.fin).then_some(header.payload);
                Ok(Step::Message(header.len))
            }
        }
    }

    /// Whether the reader stands between frames (nothing of a frame is
    /// pending), which is where sluice may send the server a frame of its
    /// own.
    pub fn at_frame_start(&self) -> bool {
        self.payload_left == 0
    }

    /// Whether the client's Close frame was read whole.
    pub fn saw_close(&self) -> bool {
        self.close == CloseSeen::Whole
    }
}

/// The reserved bits the extensions a server's `101` accepted
/// (`Sec-WebSocket-Extensions`, RFC 6455 §9.1) may set: RSV1 for
/// permessage-deflate (RFC 7692 §6), all three for an extension sluice
/// does not know (it cannot tell which it uses), none without extensions.
pub fn rsv_for_extensions<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> u8 {
    let mut bits = 0;
    for value in values {
        for extension in value.split(|&b| b == b',') {
            let name = extension
                .split(|&b| b == b';')
                .next()
                .unwrap_or_default()
                .trim_ascii();
            if name.is_empty() {
                continue;
            }
            bits |= if name.eq_ignore_ascii_case(b"permessage-deflate") {
                0x40
            } else {
                RSV
            };
        }
    }
    bits
}

/// Where one side's frames end, as they stream: only their lengths and
/// opcodes are read, so that sluice's own Close frame goes between two of
/// them, and so that a Close frame is seen passing. Keeps a header's
/// bytes while it arrives (at most [`MAX_HEADER`], inline: no
/// allocation). Masked or not, it reads either side's frames.
#[derive(Debug, Clone, Default)]
pub struct FrameEnds {
    head: [u8; MAX_HEADER],
    /// Bytes of the current header seen so far.
    have: u8,
    /// Payload bytes of the current frame still to come.
    payload_left: u64,
    /// Whether a Close frame went by.
    close: CloseSeen,
}

impl FrameEnds {
    /// Follows `bytes`, the next the server sent.
    #[inline]
    pub fn saw(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.payload_left > 0 {
                let n = usize::try_from(self.payload_left)
                    .map_or(bytes.len(), |left| left.min(bytes.len()));
                self.payload_left -= n as u64;
                if self.payload_left == 0 {
                    self.close.payload_ended();
                }
                bytes = &bytes[n..];
                continue;
            }
            let have = usize::from(self.have);
            if have == 0 {
                // The whole header in this piece, as it almost always is.
                if let Some(header) = Header::read(bytes) {
                    self.payload_left = header.payload;
                    self.close.header(header.opcode, header.payload);
                    bytes = &bytes[header.len..];
                    continue;
                }
            }
            // A header cut across pieces: gathered until it is whole.
            let needs = Header::needs(&self.head[..have]);
            let take = (needs - have).min(bytes.len());
            self.head[have..have + take].copy_from_slice(&bytes[..take]);
            self.have += take as u8;
            bytes = &bytes[take..];
            if let Some(header) = Header::read(&self.head[..usize::from(self.have)]) {
                self.payload_left = header.payload;
                self.close.header(header.opcode, header.payload);
                self.have = 0;
            }
        }
    }

    /// Whether the bytes so far end with a whole frame.
    pub fn at_boundary(&self) -> bool {
        self.have == 0 && self.payload_left == 0
    }

    /// Whether a Close frame went by whole.
    pub fn saw_close(&self) -> bool {
        self.close == CloseSeen::Whole
    }

    /// How many bytes may be read from the server without going past the
    /// end of its current frame (a header's next bytes, or the payload's
    /// rest); 0 at a boundary.
    pub fn to_boundary(&self) -> usize {
        if self.payload_left > 0 {
            return usize::try_from(self.payload_left).unwrap_or(usize::MAX);
        }
        let have = usize::from(self.have);
        if have == 0 {
            return 0;
        }
        Header::needs(&self.head[..have]) - have
    }
}

/// A Close frame (RFC 6455 §5.5.1) with `code` and `reason` (cut to fit
/// the 125 bytes of a control frame, at a character boundary): unmasked
/// from sluice as the client's server, masked with `mask` as the server's
/// client (§5.3).
pub fn close_frame(code: u16, reason: &str, mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut cut = reason.len().min(MAX_CONTROL_PAYLOAD as usize - 2);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    let reason = &reason.as_bytes()[..cut];
    let len = 2 + reason.len();
    let mut frame = Vec::with_capacity(2 + 4 + len);
    frame.push(FIN | CLOSE);
    match mask {
        None => {
            frame.push(len as u8);
            frame.extend_from_slice(&code.to_be_bytes());
            frame.extend_from_slice(reason);
        }
        Some(key) => {
            frame.push(MASKED | len as u8);
            frame.extend_from_slice(&key);
            let payload = code.to_be_bytes().into_iter().chain(reason.iter().copied());
            frame.extend(payload.enumerate().map(|(i, byte)| byte ^ key[i % 4]));
        }
    }
    frame
}

#[cfg(test)]
mod tests;
