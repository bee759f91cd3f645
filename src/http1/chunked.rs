//! The chunked transfer coding (RFC 9112 §7.1) of a body sluice reads — a
//! client's request or an upstream's answer — decoded exactly as hyper
//! decodes it, state for state (hyper is the oracle of the differential
//! checks, `server/differential.rs` and `proxy/upstream_differential.rs`):
//!
//! - a chunk-size line is at least one hex digit (an empty line, or one
//!   holding only an extension, is an error: RFC 9112 §7.1, where
//!   `httparse::parse_chunk_size` reads it as the last chunk and a body cut
//!   short would pass for a whole one), then optional spaces or tabs, an
//!   extension after `;`, and CRLF; a size that overflows 64 bits is an
//!   error;
//! - extensions are skipped, at most 16 KiB of them in a body, and a bare
//!   LF in one is an error;
//! - each chunk's data ends in CRLF;
//! - trailer lines end in CRLF, at most 16 KiB in all and at most as many
//!   as a head may have fields (`server.max_headers` for a client's body,
//!   100 for an upstream's, as hyper counts them: every line, a field or
//!   not), and must parse as fields; they are handed on as a header map (an
//!   HTTP/1.1 peer then drops them, as nginx does:
//!   docs/edge-behaviour.md).
//!
//! Bytes are taken from the connection's buffer as they come, so a line
//! split across reads is never scanned twice, and data is handed on as
//! slices of the buffer (no copy).

use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};

/// Extension bytes a body may carry, at most (hyper's limit).
const EXTENSIONS_LIMIT: u16 = 16 * 1024;

/// Bytes of trailer section, at most (hyper's default).
const TRAILERS_LIMIT: usize = 16 * 1024;

/// Trailer lines, at most, unless told otherwise (hyper's default field
/// count).
const TRAILERS_MAX: u32 = 100;

/// The coding is broken: the body cannot be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadChunk;

/// What the decoder made of the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Data of a chunk.
    Data(Bytes),
    /// The buffer is used up: more bytes are needed.
    More,
    /// The trailer fields, once the last chunk and its trailer section
    /// have been read (only when there are some; [`Decoded::End`] follows).
    Trailers(HeaderMap),
    /// The last chunk and the trailer section have been read.
    End,
}

/// Where the decoder stands, in hyper's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Start,
    Size,
    SizeLws,
    Extension,
    SizeLf,
    Body,
    BodyCr,
    BodyLf,
    Trailer,
    TrailerLf,
    EndCr,
    EndLf,
    End,
}

/// A chunked body's decoder.
#[derive(Debug)]
pub struct Chunked {
    step: Step,
    /// The size being read, then what is left of the chunk's data.
    size: u64,
    /// Extension bytes so far.
    extensions: u16,
    /// Trailer lines so far.
    trailer_lines: u32,
    /// Trailer lines allowed.
    trailers_max: u32,
    /// The trailer section as read, to be checked at its end; boxed (and
    /// only made for a body that has trailers) so the body stays small.
    trailers: Option<Box<BytesMut>>,
}

impl Default for Chunked {
    fn default() -> Chunked {
        Chunked::new()
    }
}

impl Chunked {
    pub const fn new() -> Chunked {
        Chunked::with_trailers_max(TRAILERS_MAX)
    }

    /// A decoder that fails a body with more than `lines` trailer lines.
    pub const fn with_trailers_max(lines: u32) -> Chunked {
        Chunked {
            step: Step::Start,
            size: 0,
            extensions: 0,
            trailer_lines: 0,
            trailers_max: lines,
            trailers: None,
        }
    }

    /// What is left of the current chunk's data, while it is being read:
    /// how much a read may ask for.
    pub fn remaining(&self) -> Option<u64> {
        (self.step == Step::Body).then_some(self.size)
    }

    /// Decodes from the front of `read`, taking what it uses.
    pub fn decode(&mut self, read: &mut BytesMut) -> Result<Decoded, BadChunk> {
        loop {
            match self.step {
                Step::End => return Ok(Decoded::End),
                Step::Body => {
                    if read.is_empty() {
                        return Ok(Decoded::More);
                    }
                    let take = usize::try_from(self.size)
                        .unwrap_or(usize::MAX)
                        .min(read.len());
                    self.size -= take as u64;
                    if self.size == 0 {
                        self.step = Step::BodyCr;
                    }
                    return Ok(Decoded::Data(read.split_to(take).freeze()));
                }
                _ => {
                    let Some(&byte) = read.first() else {
                        return Ok(Decoded::More);
                    };
                    read.advance(1);
                    self.step = self.next(byte)?;
                    if self.step == Step::End {
                        if let Some(trailers) = self.trailer_fields()? {
                            return Ok(Decoded::Trailers(trailers));
                        }
                    }
                }
            }
        }
    }

    /// The step after `byte`, outside a chunk's data.
    fn next(&mut self, byte: u8) -> Result<Step, BadChunk> {
        Ok(match self.step {
            Step::Start => {
                self.size = u64::from(hex(byte).ok_or(BadChunk)?);
                Step::Size
            }
            Step::Size => match byte {
                b'\t' | b' ' => Step::SizeLws,
                b';' => Step::Extension,
                b'\r' => Step::SizeLf,
                _ => {
                    let digit = hex(byte).ok_or(BadChunk)?;
                    self.size = self
                        .size
                        .checked_mul(16)
                        .and_then(|size| size.checked_add(u64::from(digit)))
                        .ok_or(BadChunk)?;
                    Step::Size
                }
            },
            // Spaces may follow the size; more digits may not.
            Step::SizeLws => match byte {
                b'\t' | b' ' => Step::SizeLws,
                b';' => Step::Extension,
                b'\r' => Step::SizeLf,
                _ => return Err(BadChunk),
            },
            Step::Extension => match byte {
                b'\r' => Step::SizeLf,
                // A bare LF would end the line for a lax reader downstream.
                b'\n' => return Err(BadChunk),
                _ => {
                    self.extensions += 1;
                    if self.extensions >= EXTENSIONS_LIMIT {
                        return Err(BadChunk);
                    }
                    Step::Extension
                }
            },
            Step::SizeLf => match byte {
                b'\n' if self.size == 0 => Step::EndCr,
                b'\n' => Step::Body,
                _ => return Err(BadChunk),
            },
            Step::BodyCr => match byte {
                b'\r' => Step::BodyLf,
                _ => return Err(BadChunk),
            },
            Step::BodyLf => match byte {
                b'\n' => Step::Start,
                _ => return Err(BadChunk),
            },
            Step::EndCr | Step::Trailer | Step::TrailerLf | Step::EndLf => {
                return self.next_after_last_chunk(byte)
            }
            Step::Body | Step::End => unreachable!("no byte is read here"),
        })
    }

    /// [`Self::next`] after the last chunk's size line: the trailer section
    /// and the final CRLF.
    fn next_after_last_chunk(&mut self, byte: u8) -> Result<Step, BadChunk> {
        Ok(match self.step {
            Step::EndCr => match byte {
                b'\r' => {
                    self.keep_trailer_byte(byte)?;
                    Step::EndLf
                }
                // A trailer line (the first one starts the section).
                _ => {
                    match &mut self.trailers {
                        None => self.trailers = Some(Box::new(BytesMut::from(&[byte][..]))),
                        Some(_) => self.keep_trailer_byte(byte)?,
                    }
                    Step::Trailer
                }
            },
            Step::Trailer => {
                self.keep_trailer_byte(byte)?;
                if byte == b'\r' {
                    Step::TrailerLf
                } else {
                    Step::Trailer
                }
            }
            Step::TrailerLf => match byte {
                b'\n' => {
                    if self.trailer_lines >= self.trailers_max {
                        return Err(BadChunk);
                    }
                    self.trailer_lines += 1;
                    self.keep_trailer_byte(byte)?;
                    Step::EndCr
                }
                _ => return Err(BadChunk),
            },
            Step::EndLf => match byte {
                b'\n' => {
                    self.keep_trailer_byte(byte)?;
                    Step::End
                }
                _ => return Err(BadChunk),
            },
            _ => unreachable!("a step of the chunks, not of the end"),
        })
    }

    /// Adds a byte to the trailer section, if there is one, within its
    /// limit.
    fn keep_trailer_byte(&mut self, byte: u8) -> Result<(), BadChunk> {
        if let Some(trailers) = &mut self.trailers {
            trailers.extend_from_slice(&[byte]);
            if trailers.len() >= TRAILERS_LIMIT {
                return Err(BadChunk);
            }
        }
        Ok(())
    }

    /// The trailer section, if any, which must be fields.
    fn trailer_fields(&mut self) -> Result<Option<HeaderMap>, BadChunk> {
        let Some(section) = self.trailers.take() else {
            return Ok(None);
        };
        let mut slots = vec![httparse::EMPTY_HEADER; self.trailer_lines as usize];
        match httparse::parse_headers(&section, &mut slots) {
            Ok(httparse::Status::Complete((_, fields))) => {
                let mut map = HeaderMap::with_capacity(fields.len());
                for field in fields {
                    let name =
                        HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| BadChunk)?;
                    let value = HeaderValue::from_bytes(field.value).map_err(|_| BadChunk)?;
                    map.append(name, value);
                }
                Ok(Some(map))
            }
            _ => Err(BadChunk),
        }
    }
}

fn hex(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole body of `coded`, fed in pieces of `piece` bytes.
    fn decode(coded: &[u8], piece: usize) -> Result<Option<Vec<u8>>, BadChunk> {
        let mut decoder = Chunked::new();
        let mut read = BytesMut::new();
        let mut body = Vec::new();
        for part in coded.chunks(piece.max(1)) {
            read.extend_from_slice(part);
            loop {
                match decoder.decode(&mut read)? {
                    Decoded::Data(data) => body.extend_from_slice(&data),
                    Decoded::More => break,
                    Decoded::Trailers(_) => {}
                    Decoded::End => return Ok(Some(body)),
                }
            }
        }
        Ok(None)
    }

    #[test]
    fn well_formed_bodies_decode_in_any_pieces() {
        let cases: [(&[u8], &[u8]); 5] = [
            (b"5\r\nhello\r\n0\r\n\r\n", b"hello"),
            (
                b"5;ext=1\r\nhello\r\n6 ; a=\"b\"\r\n world\r\n0\r\n\r\n",
                b"hello world",
            ),
            (
                b"A\r\n0123456789\r\n0\r\nx-t: 1\r\ny: 2\r\n\r\n",
                b"0123456789",
            ),
            (b"0000000000000000001\r\nx\r\n0;z\r\n\r\n", b"x"),
            (b"0\r\n\r\n", b""),
        ];
        for (coded, body) in cases {
            for piece in [1, 2, 3, 7, coded.len()] {
                assert_eq!(decode(coded, piece), Ok(Some(body.to_vec())), "{coded:?}");
            }
        }
    }

    #[test]
    fn trailer_fields_come_once_before_the_end() {
        let mut decoder = Chunked::new();
        let mut read = BytesMut::from(&b"1\r\nx\r\n0\r\nX-T: 1\r\ny: 2\r\n\r\nNEXT"[..]);
        assert_eq!(
            decoder.decode(&mut read),
            Ok(Decoded::Data(Bytes::from("x")))
        );
        let Ok(Decoded::Trailers(fields)) = decoder.decode(&mut read) else {
            panic!("no trailers");
        };
        assert_eq!(fields["x-t"], "1");
        assert_eq!(fields["y"], "2");
        assert_eq!(decoder.decode(&mut read), Ok(Decoded::End));
        assert_eq!(decoder.decode(&mut read), Ok(Decoded::End));
        assert_eq!(&read[..], b"NEXT", "what follows the body is left");
    }

    #[test]
    fn a_size_line_without_a_digit_is_an_error() {
        for coded in [
            &b"5\r\nhello\r\n\r\n\r\n"[..],
            b"5\r\nhello\r\n;ext=1\r\n\r\n",
            b"\r\n",
            b" 5\r\nhello\r\n0\r\n\r\n",
        ] {
            assert_eq!(decode(coded, coded.len()), Err(BadChunk), "{coded:?}");
        }
    }

    #[test]
    fn broken_framing_is_an_error() {
        for coded in [
            &b"5 5\r\nhello\r\n0\r\n\r\n"[..],
            b"5\nhello\r\n0\r\n\r\n",
            b"5;a\nb\r\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloX\r\n0\r\n\r\n",
            b"10000000000000000\r\n",
            b"0\r\nbad trailer\r\n\r\n",
            b"0\r\nx: 1\rX\r\n\r\n",
            b"0\r\n\rX",
        ] {
            assert_eq!(decode(coded, coded.len()), Err(BadChunk), "{coded:?}");
        }
    }

    #[test]
    fn extensions_and_trailers_are_bounded() {
        let mut coded = b"1;".to_vec();
        coded.extend(std::iter::repeat_n(b'e', usize::from(EXTENSIONS_LIMIT)));
        assert_eq!(decode(&coded, 4096), Err(BadChunk));
        let mut coded = b"0\r\n".to_vec();
        for line in 0..=TRAILERS_MAX {
            coded.extend_from_slice(format!("x-{line}: v\r\n").as_bytes());
        }
        assert_eq!(decode(&coded, 4096), Err(BadChunk));
        let mut coded = b"0\r\nx: ".to_vec();
        coded.extend(std::iter::repeat_n(b'v', TRAILERS_LIMIT));
        assert_eq!(decode(&coded, 4096), Err(BadChunk));
    }

    #[test]
    fn trailer_lines_count_against_the_limit_given_fields_or_not() {
        // Found by the `http1_server` fuzz target: with `max_headers = 8`,
        // hyper fails a section of nine lines, though httparse would stop
        // reading fields at the bare LF after the third; this decoder took
        // 100 lines whatever `max_headers` said, and passed the body.
        let coded = b"0\r\nt:\r\nn: x\r\nt:\r\n\n\r\np\r\nC\r\nC\r\ns\r\n\n\r\n\r\n";
        let with = |lines: u32| {
            let mut decoder = Chunked::with_trailers_max(lines);
            let mut read = BytesMut::from(&coded[..]);
            loop {
                match decoder.decode(&mut read) {
                    Ok(Decoded::End) => return Ok(()),
                    Ok(Decoded::More) => panic!("the body is all there"),
                    Ok(_) => {}
                    Err(bad) => return Err(bad),
                }
            }
        };
        assert_eq!(with(8), Err(BadChunk));
        assert_eq!(with(9), Ok(()));
    }
}
