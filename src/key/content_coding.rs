//! A request body in a `Content-Encoding`, decoded for reading its keys and
//! cost (never for forwarding: the upstream gets the bytes the client
//! sent); docs/conversation.md, "Compressed bodies".
//!
//! `gzip`, `deflate`, `br` and `zstd` are decoded by their crates, each
//! layer stopping one byte past the bound, so a decompression bomb costs at
//! most `server.max_key_body_bytes` of memory (and the time to inflate
//! that much) however far it would expand. zstd's window is held to the
//! bound too: a frame that asks for a larger one is refused rather than
//! given the memory.

use std::io::Read;

use http::header::CONTENT_ENCODING;
use http::HeaderMap;

/// The most codings applied one over another that are decoded.
const MAX_LAYERS: usize = 4;

/// A body as its `Content-Encoding` says.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// No coding (or only `identity`): the body is read as it came.
    Plain,
    /// The decoded body, within the bound.
    Bytes(Vec<u8>),
    /// It decodes to more than the bound.
    TooLarge,
    /// A coding sluice does not decode, or a body that does not decode.
    Undecodable,
}

/// `body` decoded by the codings `headers` name (in the order they were
/// applied: the last is undone first), within `bound` bytes at every step.
pub fn decode(headers: &HeaderMap, body: &[u8], bound: usize) -> Decoded {
    let mut codings: smallvec::SmallVec<[Coding; 2]> = smallvec::SmallVec::new();
    for value in headers.get_all(CONTENT_ENCODING) {
        let Ok(value) = value.to_str() else {
            return Decoded::Undecodable;
        };
        for name in value.split(',').map(str::trim) {
            if name.is_empty() || name.eq_ignore_ascii_case("identity") {
                continue;
            }
            let Some(coding) = Coding::named(name) else {
                return Decoded::Undecodable;
            };
            if codings.len() == MAX_LAYERS {
                return Decoded::Undecodable;
            }
            codings.push(coding);
        }
    }
    if codings.is_empty() {
        return Decoded::Plain;
    }
    let mut bytes: Option<Vec<u8>> = None;
    for coding in codings.iter().rev() {
        let input = bytes.as_deref().unwrap_or(body);
        match coding.decode(input, bound) {
            Ok(decoded) => bytes = Some(decoded),
            Err(outcome) => return outcome,
        }
    }
    bytes.map_or(Decoded::Plain, Decoded::Bytes)
}

#[derive(Debug, Clone, Copy)]
enum Coding {
    Gzip,
    Deflate,
    Brotli,
    Zstd,
}

impl Coding {
    fn named(name: &str) -> Option<Coding> {
        let is = |known: &str| name.eq_ignore_ascii_case(known);
        if is("gzip") || is("x-gzip") {
            Some(Coding::Gzip)
        } else if is("deflate") {
            Some(Coding::Deflate)
        } else if is("br") {
            Some(Coding::Brotli)
        } else if is("zstd") {
            Some(Coding::Zstd)
        } else {
            None
        }
    }

    /// `input` decoded, at most `bound` bytes of it.
    fn decode(self, input: &[u8], bound: usize) -> Result<Vec<u8>, Decoded> {
        match self {
            // Several gzip members are one body (RFC 1952 §2.2).
            Coding::Gzip => bounded(flate2::read::MultiGzDecoder::new(input), bound),
            // HTTP's deflate is zlib's format (RFC 9110 §8.4.1.2); some
            // clients send the raw stream, which has no zlib header.
            Coding::Deflate => match bounded(flate2::read::ZlibDecoder::new(input), bound) {
                Err(Decoded::Undecodable) => {
                    bounded(flate2::read::DeflateDecoder::new(input), bound)
                }
                other => other,
            },
            Coding::Brotli => bounded(brotli_decompressor::Decompressor::new(input, 4096), bound),
            Coding::Zstd => {
                let mut decoder = zstd::stream::read::Decoder::with_buffer(input)
                    .map_err(|_| Decoded::Undecodable)?;
                decoder
                    .window_log_max(window_log(bound))
                    .map_err(|_| Decoded::Undecodable)?;
                bounded(decoder, bound)
            }
        }
    }
}

/// The smallest zstd window (a power of two, at least zstd's 2^10) that
/// holds `bound` bytes: a body of at most `bound` bytes never needs more.
fn window_log(bound: usize) -> u32 {
    let needed = usize::BITS - bound.saturating_sub(1).leading_zeros();
    needed.clamp(10, 31)
}

/// Reads `decoder` to its end, or one byte past `bound` (then too large).
fn bounded(decoder: impl Read, bound: usize) -> Result<Vec<u8>, Decoded> {
    let mut out = Vec::new();
    let limit = u64::try_from(bound).unwrap_or(u64::MAX).saturating_add(1);
    match decoder.take(limit).read_to_end(&mut out) {
        Ok(_) if out.len() > bound => Err(Decoded::TooLarge),
        Ok(_) => Ok(out),
        Err(_) => Err(Decoded::Undecodable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const BODY: &[u8] = br#"{"tenant":"acme","query":"{ viewer { login } }"}"#;

    fn headers(coding: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_ENCODING, coding.parse().unwrap());
        headers
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn zlib(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn raw_deflate(bytes: &[u8]) -> Vec<u8> {
        let mut encoder =
            flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn zstd(bytes: &[u8]) -> Vec<u8> {
        zstd::encode_all(bytes, 3).unwrap()
    }

    /// A brotli stream of `bytes`, written by hand as uncompressed
    /// meta-blocks (the decoder-only crate has no encoder; RFC 7932 §9.2).
    fn brotli_stored(bytes: &[u8]) -> Vec<u8> {
        let mut bits = BitWriter::default();
        bits.push(0, 1); // WBITS = 16
        for chunk in bytes.chunks(65_536) {
            bits.push(0, 1); // ISLAST = 0
            bits.push(0, 2); // MNIBBLES = 4
            bits.push((chunk.len() - 1) as u64, 16); // MLEN - 1
            bits.push(1, 1); // ISUNCOMPRESSED
            bits.align();
            bits.bytes.extend_from_slice(chunk);
        }
        bits.push(1, 1); // ISLAST
        bits.push(1, 1); // ISLASTEMPTY
        bits.align();
        bits.bytes
    }

    #[derive(Default)]
    struct BitWriter {
        bytes: Vec<u8>,
        used: u32,
    }

    impl BitWriter {
        fn push(&mut self, value: u64, count: u32) {
            for bit in 0..count {
                if self.used == 0 {
                    self.bytes.push(0);
                }
                let last = self.bytes.last_mut().unwrap();
                *last |= (((value >> bit) & 1) as u8) << self.used;
                self.used = (self.used + 1) % 8;
            }
        }

        fn align(&mut self) {
            self.used = 0;
        }
    }

    #[test]
    fn each_coding_is_decoded_for_reading() {
        for (coding, coded) in [
            ("gzip", gzip(BODY)),
            ("x-gzip", gzip(BODY)),
            ("deflate", zlib(BODY)),
            ("deflate", raw_deflate(BODY)),
            ("br", brotli_stored(BODY)),
            ("zstd", zstd(BODY)),
            ("GZIP", gzip(BODY)),
        ] {
            assert_eq!(
                decode(&headers(coding), &coded, 1024),
                Decoded::Bytes(BODY.to_vec()),
                "{coding}"
            );
        }
    }

    #[test]
    fn layers_are_undone_last_first_and_identity_is_plain() {
        let twice = zstd(&gzip(BODY));
        assert_eq!(
            decode(&headers("gzip, zstd"), &twice, 1024),
            Decoded::Bytes(BODY.to_vec())
        );
        let mut lines = HeaderMap::new();
        lines.append(CONTENT_ENCODING, "gzip".parse().unwrap());
        lines.append(CONTENT_ENCODING, "zstd".parse().unwrap());
        assert_eq!(decode(&lines, &twice, 1024), Decoded::Bytes(BODY.to_vec()));
        assert_eq!(decode(&HeaderMap::new(), BODY, 1024), Decoded::Plain);
        assert_eq!(decode(&headers("identity"), BODY, 1024), Decoded::Plain);
        let deep = "gzip, gzip, gzip, gzip, gzip";
        assert_eq!(decode(&headers(deep), BODY, 1024), Decoded::Undecodable);
    }

    #[test]
    fn other_codings_and_broken_bodies_are_undecodable() {
        assert_eq!(
            decode(&headers("compress"), BODY, 1024),
            Decoded::Undecodable
        );
        assert_eq!(decode(&headers("gzip"), BODY, 1024), Decoded::Undecodable);
        assert_eq!(decode(&headers("zstd"), BODY, 1024), Decoded::Undecodable);
        let cut = gzip(BODY);
        assert_eq!(
            decode(&headers("gzip"), &cut[..cut.len() / 2], 1024),
            Decoded::Undecodable
        );
    }

    #[test]
    fn a_bomb_stops_at_the_bound() {
        let zeros = vec![0u8; 16 << 20];
        // zstd within the window the bound allows (a larger one is refused
        // before anything is decoded: below).
        let mut small_window = zstd::stream::write::Encoder::new(Vec::new(), 19).unwrap();
        small_window.window_log(16).unwrap();
        small_window.write_all(&zeros).unwrap();
        for (coding, coded) in [
            ("gzip", gzip(&zeros)),
            ("deflate", zlib(&zeros)),
            ("zstd", small_window.finish().unwrap()),
        ] {
            assert!(coded.len() < 64 << 10, "{coding}: {}", coded.len());
            assert_eq!(
                decode(&headers(coding), &coded, 65_536),
                Decoded::TooLarge,
                "{coding}"
            );
        }
        // Exactly the bound fits.
        let exact = vec![b' '; 65_536];
        assert_eq!(
            decode(&headers("gzip"), &gzip(&exact), 65_536),
            Decoded::Bytes(exact.clone())
        );
        assert_eq!(
            decode(&headers("br"), &brotli_stored(&exact), 65_535),
            Decoded::TooLarge
        );
    }

    #[test]
    fn zstd_s_window_is_held_to_the_bound() {
        assert_eq!(window_log(65_536), 16);
        assert_eq!(window_log(65_537), 17);
        assert_eq!(window_log(1), 10);
        // A frame written with a window of 2^27 (a long-distance match
        // setting) is refused for a small bound, not given the memory.
        let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        encoder.window_log(27).unwrap();
        encoder.long_distance_matching(true).unwrap();
        encoder.include_contentsize(false).unwrap();
        encoder.write_all(&vec![7u8; 4 << 20]).unwrap();
        let coded = encoder.finish().unwrap();
        assert_eq!(
            decode(&headers("zstd"), &coded, 65_536),
            Decoded::Undecodable
        );
    }
}
