//! The fields sluice adds to a response head itself, kept as the HTTP/1
//! lines they are written as (`name: value\r\n`) instead of in the
//! response's header map.
//!
//! Inserting a field whose name is not one of the standard ones hashes the
//! name: the five rate-limit fields cost more that way than writing the
//! whole response head (docs/benchmarks-history.md).
//! sluice's own HTTP/1.1 server (`server/http1.rs`) writes these lines as
//! they are, after the map's fields, and leaves out any field of the map
//! they replace. hyper's HTTP/2 server, which writes an HTTP/2 answer from
//! its map, gets them in the map first ([`OwnFields::into_map`]), so they
//! replace the upstream's fields of those names there too; the rate limit
//! service's answer takes them as its header pairs ([`OwnFields::pairs`]).
//! Both read them as typed pairs: each field's name and where its line lies
//! are noted as it is pushed, so nothing parses the lines back.
//!
//! A refusal keeps every field it has here (its map stays empty), so the
//! refusal each worker sends again (`last_refusal.rs`) is one shared buffer.

use std::cell::Cell;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};

use crate::request_id::{self, RequestId};

/// The names sluice writes as own fields, by index. A `static`, not a
/// `const`: each use of a `const` array makes (and drops) a copy of all
/// nine names, on every forwarded request.
static NAMES: [HeaderName; 9] = [
    HeaderName::from_static("x-ratelimit-limit"),
    HeaderName::from_static("x-ratelimit-remaining"),
    HeaderName::from_static("x-ratelimit-reset"),
    HeaderName::from_static("ratelimit-policy"),
    HeaderName::from_static("ratelimit"),
    CONTENT_TYPE,
    RETRY_AFTER,
    HeaderName::from_static("x-ratelimit-cost"),
    request_id::HEADER,
];

/// The lengths of [`NAMES`], one bit each (all are under 64 bytes).
const NAME_LENGTHS: u64 = {
    let lengths = [17, 21, 17, 16, 9, 12, 11, 16, 12];
    let mut mask = 0;
    let mut index = 0;
    while index < lengths.len() {
        mask |= 1 << lengths[index];
        index += 1;
    }
    mask
};

/// One of the names an own field may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnName {
    XRateLimitLimit = 0,
    XRateLimitRemaining = 1,
    XRateLimitReset = 2,
    RateLimitPolicy = 3,
    RateLimit = 4,
    ContentType = 5,
    RetryAfter = 6,
    /// What a request's own cost (a GraphQL query's, a reservation) took.
    XRateLimitCost = 7,
    /// The request's id: on every response, replacing an upstream's.
    XRequestId = 8,
}

/// Each [`OwnName`], by its index in [`NAMES`].
const OWN_NAMES: [OwnName; 9] = [
    OwnName::XRateLimitLimit,
    OwnName::XRateLimitRemaining,
    OwnName::XRateLimitReset,
    OwnName::RateLimitPolicy,
    OwnName::RateLimit,
    OwnName::ContentType,
    OwnName::RetryAfter,
    OwnName::XRateLimitCost,
    OwnName::XRequestId,
];

/// Room for the five rate-limit fields of a typical response.
const TYPICAL_LINES: usize = 256;
/// A buffer larger than this is not kept for reuse.
const MOST_KEPT: usize = 4096;

thread_local! {
    /// The buffer of the last fields dropped on this thread (once written),
    /// for the next response's: a forwarded response's fields then
    /// allocate nothing.
    static SPARE: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// The names whose lines are kept in [`OwnFields::lines`] (all but the
/// request id's).
const LINE_NAMES: usize = 8;

/// See the module docs.
#[derive(Debug, Clone, Default)]
pub struct OwnFields {
    lines: Lines,
    /// Which of [`NAMES`] the fields hold, one bit each.
    names: u16,
    /// Where each name's line ends in `lines` (after its CRLF), by
    /// [`OwnName`]; it starts where the line before it ends. A name has one
    /// line at most. Offsets are 16 bits, which bounds the lines to 64 KiB
    /// (a field that would end beyond is left out).
    ends: [u16; LINE_NAMES],
    /// `x-request-id`, written after the lines: kept apart, as it differs
    /// on every response, so that a refusal sent again shares its lines.
    request_id: Option<RequestId>,
}

#[derive(Debug, Clone)]
enum Lines {
    Owned(Vec<u8>),
    /// A remembered refusal's, shared by reference count.
    Shared(Bytes),
}

impl Default for Lines {
    fn default() -> Lines {
        Lines::Owned(Vec::new())
    }
}

impl Drop for OwnFields {
    fn drop(&mut self) {
        if let Lines::Owned(lines) = &mut self.lines {
            if lines.capacity() != 0 && lines.capacity() <= MOST_KEPT {
                lines.clear();
                SPARE.set(std::mem::take(lines));
            }
        }
    }
}

impl OwnFields {
    /// Adds the field `name: value` (a header value is valid by
    /// construction).
    pub fn push(&mut self, name: OwnName, value: &HeaderValue) {
        self.push_valid(name, value.as_bytes());
    }

    /// Adds `x-request-id: <id>` (an id is visible ASCII by construction).
    #[inline]
    pub fn push_request_id(&mut self, id: &RequestId) {
        self.request_id = Some(id.clone());
        self.names |= 1 << OwnName::XRequestId as u16;
    }

    /// Writes the fields as HTTP/1 lines, each ending in CRLF.
    #[inline]
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.lines());
        if let Some(id) = &self.request_id {
            out.extend_from_slice(b"x-request-id: ");
            out.extend_from_slice(id.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }

    /// Adds the decimal `n` as the value of `name`.
    pub fn push_number(&mut self, name: OwnName, n: u64) {
        self.push_valid(name, itoa::Buffer::new().format(n).as_bytes());
    }

    /// Adds a field whose value `write` appends. A value that is not a
    /// valid field value (a limit named with a control character) is left
    /// out, as `HeaderValue::from_bytes` would refuse it: it could end the
    /// line early.
    pub fn push_with(&mut self, name: OwnName, write: impl FnOnce(&mut Vec<u8>)) {
        let lines = self.owned();
        let line_start = lines.len();
        Self::start_line(lines, name);
        let value_start = lines.len();
        write(lines);
        if !lines[value_start..].iter().all(|&b| is_value_byte(b)) {
            lines.truncate(line_start);
            return;
        }
        lines.extend_from_slice(b"\r\n");
        self.mark(name, line_start);
    }

    /// Adds whole lines that `write` appends (each `name: value\r\n` with
    /// a valid value: prebuilt, or digits), naming each as it ends it
    /// ([`LineWriter::ended`]). Lines past the last one named within 64 KiB
    /// are taken back.
    #[inline]
    pub fn push_lines(&mut self, write: impl FnOnce(&mut LineWriter<'_>)) {
        let kept = self.owned().len();
        let Lines::Owned(lines) = &mut self.lines else {
            unreachable!("made owned above")
        };
        let mut writer = LineWriter {
            out: lines,
            kept,
            ends: &mut self.ends,
            names: &mut self.names,
        };
        write(&mut writer);
        if writer.out.len() > usize::from(u16::MAX) {
            writer.out.truncate(writer.kept);
        }
    }

    /// Adds `name: value` for a `value` known to be a valid field value.
    fn push_valid(&mut self, name: OwnName, value: &[u8]) {
        let lines = self.owned();
        let line_start = lines.len();
        Self::start_line(lines, name);
        lines.extend_from_slice(value);
        lines.extend_from_slice(b"\r\n");
        self.mark(name, line_start);
    }

    /// Notes that the line of `name` starts at `start` and ends where the
    /// lines do now; a line ending beyond 64 KiB is taken back.
    #[inline]
    fn mark(&mut self, name: OwnName, start: usize) {
        let Lines::Owned(lines) = &mut self.lines else {
            return;
        };
        mark(lines, &mut self.ends, &mut self.names, name, start);
    }

    fn start_line(lines: &mut Vec<u8>, name: OwnName) {
        lines.extend_from_slice(NAMES[name as usize].as_str().as_bytes());
        lines.extend_from_slice(b": ");
    }

    fn owned(&mut self) -> &mut Vec<u8> {
        if let Lines::Shared(bytes) = &self.lines {
            self.lines = Lines::Owned(bytes.to_vec());
        }
        match &mut self.lines {
            Lines::Owned(lines) => {
                if lines.capacity() == 0 {
                    *lines = SPARE.take();
                    lines.reserve(TYPICAL_LINES);
                }
                lines
            }
            Lines::Shared(_) => unreachable!("made owned above"),
        }
    }

    /// The lines, each ending in CRLF (the request id's apart:
    /// [`OwnFields::write_to`] writes both).
    pub fn lines(&self) -> &[u8] {
        match &self.lines {
            Lines::Owned(lines) => lines,
            Lines::Shared(bytes) => bytes,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.names == 0
    }

    /// Drops these fields, skipping the drop's work when they hold
    /// nothing to free or keep (a vacant answer's, replaced by a
    /// refusal's): the drop is a call, on every refusal.
    #[inline]
    pub fn discard(self) {
        match &self.lines {
            Lines::Owned(lines) if lines.capacity() == 0 && self.request_id.is_none() => {
                std::mem::forget(self)
            }
            _ => drop(self),
        }
    }

    /// Whether a field of the map named `name` is replaced by one of these.
    /// Asked of every field of every forwarded response: a name of no own
    /// name's length (most of an upstream's) is answered by its length.
    #[inline]
    pub fn replaces(&self, name: &HeaderName) -> bool {
        let length = name.as_str().len();
        self.names != 0
            && length < 64
            && NAME_LENGTHS & (1 << length) != 0
            && NAMES
                .iter()
                .enumerate()
                .any(|(index, own)| self.names & (1 << index) != 0 && own == name)
    }

    /// The same fields in a buffer that clones by reference count.
    pub fn shared(&mut self) -> OwnFields {
        if let Lines::Owned(lines) = &mut self.lines {
            self.lines = Lines::Shared(Bytes::from(std::mem::take(lines)));
        }
        self.clone()
    }

    /// The fields as typed pairs, in the order they were pushed (the
    /// request id's apart: [`OwnFields::request_id`]).
    pub fn pairs(&self) -> impl Iterator<Item = (&'static HeaderName, &[u8])> + '_ {
        let mut held: [(u16, usize); LINE_NAMES] = [(u16::MAX, 0); LINE_NAMES];
        for (index, held) in held.iter_mut().enumerate() {
            if self.names & (1 << index) != 0 {
                *held = (self.ends[index], index);
            }
        }
        held.sort_unstable();
        let lines = self.lines();
        let mut start = 0;
        held.into_iter()
            .take_while(|&(end, _)| end != u16::MAX)
            .map(move |(end, index)| {
                let name = &NAMES[index];
                let value_start = start + name.as_str().len() + 2;
                start = usize::from(end);
                (name, &lines[value_start..start - 2])
            })
    }

    /// The same fields with `Content-Type: value` (a refusal written again
    /// in another protocol's body: `respond/jsonrpc.rs`).
    pub fn with_content_type(&self, value: &HeaderValue) -> OwnFields {
        let mut fields = OwnFields::default();
        for (name, line) in self.pairs() {
            let own = OWN_NAMES[NAMES.iter().position(|own| own == name).unwrap_or(0)];
            if own == OwnName::ContentType {
                fields.push(own, value);
            } else {
                fields.push_valid(own, line);
            }
        }
        if self.names & (1 << OwnName::ContentType as u16) == 0 {
            fields.push(OwnName::ContentType, value);
        }
        fields.request_id.clone_from(&self.request_id);
        fields.names |= self.names & (1 << OwnName::XRequestId as u16);
        fields
    }

    /// The request id this answer carries, if any.
    pub fn request_id(&self) -> Option<&RequestId> {
        self.request_id.as_ref()
    }

    /// Inserts the fields into `headers`, replacing fields of the same
    /// names, for a writer that only reads the map.
    pub fn into_map(self, headers: &mut HeaderMap) {
        if self.is_empty() {
            return;
        }
        headers.reserve(self.names.count_ones() as usize);
        for (name, value) in self.pairs() {
            // Valid by construction: each was a header value, digits, or
            // checked by `push_with`.
            if let Ok(value) = HeaderValue::from_bytes(value) {
                headers.insert(name.clone(), value);
            }
        }
        // Last, as sluice's own server writes it.
        if let Some(id) = &self.request_id {
            let value = match id {
                RequestId::Made(made) => made.header_value(),
                RequestId::Kept(value) => value.clone(),
            };
            headers.insert(request_id::HEADER, value);
        }
    }
}

/// What [`OwnFields::push_lines`] writes with: the lines, and where each
/// one it ends lies.
pub struct LineWriter<'f> {
    out: &'f mut Vec<u8>,
    /// Where the last line named ends.
    kept: usize,
    ends: &'f mut [u16; LINE_NAMES],
    names: &'f mut u16,
}

impl LineWriter<'_> {
    /// The lines, to append to.
    #[inline]
    pub fn out(&mut self) -> &mut Vec<u8> {
        self.out
    }

    /// Notes that the line of `name`, the next one, ends at `end` in
    /// [`LineWriter::out`] (after its CRLF), which is written by then or
    /// written next.
    #[inline]
    pub fn ended(&mut self, name: OwnName, end: usize) {
        if let Ok(short) = u16::try_from(end) {
            self.kept = end;
            self.ends[name as usize] = short;
            *self.names |= 1 << name as u16;
        }
    }

    /// Where the lines end now.
    #[inline]
    pub fn len(&self) -> usize {
        self.out.len()
    }
}

/// Notes the line of `name` from `start` to the end of `lines`, or takes it
/// back when it ends beyond 64 KiB.
#[inline]
fn mark(
    lines: &mut Vec<u8>,
    ends: &mut [u16; LINE_NAMES],
    names: &mut u16,
    name: OwnName,
    start: usize,
) {
    match u16::try_from(lines.len()) {
        Ok(end) => {
            ends[name as usize] = end;
            *names |= 1 << name as u16;
        }
        Err(_) => lines.truncate(start),
    }
}

/// What `HeaderValue::from_bytes` accepts: visible ASCII, space, tab and
/// obs-text.
fn is_value_byte(b: u8) -> bool {
    b == b'\t' || (b >= 0x20 && b != 0x7f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_length_mask_holds_every_own_name_s_length() {
        let mask = NAMES
            .iter()
            .fold(0u64, |mask, name| mask | 1 << name.as_str().len());
        assert_eq!(NAME_LENGTHS, mask);
        let mut every = OwnFields::default();
        every.names = (1 << NAMES.len()) - 1;
        for name in &NAMES {
            assert!(every.replaces(name), "{name}");
        }
        assert!(!every.replaces(&http::header::CONTENT_LENGTH));
        assert!(!every.replaces(&HeaderName::from_static("x-request-ix")));
    }

    #[test]
    fn lines_are_written_as_pushed_and_name_what_they_replace() {
        let mut fields = OwnFields::default();
        assert!(fields.is_empty());
        fields.push_number(OwnName::XRateLimitRemaining, 42);
        fields.push(
            OwnName::RateLimitPolicy,
            &HeaderValue::from_static("\"a\";q=10;w=60"),
        );
        assert_eq!(
            fields.lines(),
            b"x-ratelimit-remaining: 42\r\nratelimit-policy: \"a\";q=10;w=60\r\n"
        );
        assert!(fields.replaces(&HeaderName::from_static("x-ratelimit-remaining")));
        assert!(fields.replaces(&HeaderName::from_static("ratelimit-policy")));
        assert!(!fields.replaces(&HeaderName::from_static("ratelimit")));
        assert!(!fields.replaces(&CONTENT_TYPE));
    }

    #[test]
    fn into_map_replaces_the_map_s_fields_of_those_names() {
        let mut headers = HeaderMap::new();
        headers.insert("x-ratelimit-remaining", HeaderValue::from_static("999"));
        headers.insert("server", HeaderValue::from_static("up"));
        let mut fields = OwnFields::default();
        fields.push_number(OwnName::XRateLimitRemaining, 7);
        fields.push(
            OwnName::ContentType,
            &HeaderValue::from_static("application/problem+json"),
        );
        fields.push_number(OwnName::RetryAfter, 30);
        fields.into_map(&mut headers);
        assert_eq!(headers["x-ratelimit-remaining"], "7");
        assert_eq!(headers.get_all("x-ratelimit-remaining").iter().count(), 1);
        assert_eq!(headers["content-type"], "application/problem+json");
        assert_eq!(headers["retry-after"], "30");
        assert_eq!(headers["server"], "up");
    }

    #[test]
    fn a_value_that_could_end_the_line_is_left_out() {
        let mut fields = OwnFields::default();
        fields.push_with(OwnName::RateLimitPolicy, |value| {
            value.extend_from_slice(b"\"a\r\nx-injected: 1\";q=1")
        });
        fields.push_number(OwnName::XRateLimitLimit, 1);
        assert_eq!(fields.lines(), b"x-ratelimit-limit: 1\r\n");
        assert!(!fields.replaces(&HeaderName::from_static("ratelimit-policy")));
    }

    #[test]
    fn the_request_id_is_written_last_and_replaces_the_map_s() {
        let id = RequestId::Kept(HeaderValue::from_static("abc-1"));
        let mut fields = OwnFields::default();
        fields.push_number(OwnName::RetryAfter, 5);
        let mut replayed = fields.shared();
        replayed.push_request_id(&id);
        let mut out = Vec::new();
        replayed.write_to(&mut out);
        assert_eq!(out, b"retry-after: 5\r\nx-request-id: abc-1\r\n");
        assert!(replayed.replaces(&request_id::HEADER));
        assert!(!fields.replaces(&request_id::HEADER));
        let mut headers = HeaderMap::new();
        headers.insert("x-request-id", HeaderValue::from_static("upstream's"));
        replayed.into_map(&mut headers);
        assert_eq!(headers["x-request-id"], "abc-1");
        assert_eq!(headers.get_all("x-request-id").iter().count(), 1);
        assert_eq!(headers["retry-after"], "5");
    }

    #[test]
    fn a_shared_copy_is_the_same_and_grows_apart() {
        let mut fields = OwnFields::default();
        fields.push_number(OwnName::RetryAfter, 5);
        let shared = fields.shared();
        let mut again = shared.clone();
        assert_eq!(again.lines(), fields.lines());
        again.push_number(OwnName::XRateLimitLimit, 1);
        assert_eq!(shared.lines(), b"retry-after: 5\r\n");
        assert_eq!(again.lines(), b"retry-after: 5\r\nx-ratelimit-limit: 1\r\n");
    }

    #[test]
    fn pairs_are_the_fields_as_pushed_named_and_unparsed() {
        let mut fields = OwnFields::default();
        fields.push_number(OwnName::RetryAfter, 5);
        fields.push_with(OwnName::RateLimit, |value| {
            value.extend_from_slice(b"\"a\";r=0")
        });
        fields.push_lines(|lines| {
            let start = lines.len();
            lines
                .out()
                .extend_from_slice(b"x-ratelimit-limit: 10\r\nx-ratelimit-remaining: 0\r\n");
            lines.ended(OwnName::XRateLimitLimit, start + 23);
            let end = lines.len();
            lines.ended(OwnName::XRateLimitRemaining, end);
        });
        fields.push_request_id(&RequestId::Kept(HeaderValue::from_static("id-1")));
        let pairs: Vec<_> = fields
            .pairs()
            .map(|(name, value)| (name.as_str(), std::str::from_utf8(value).unwrap()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("retry-after", "5"),
                ("ratelimit", "\"a\";r=0"),
                ("x-ratelimit-limit", "10"),
                ("x-ratelimit-remaining", "0"),
            ]
        );
        // A shared copy's pairs are the same.
        assert_eq!(fields.shared().pairs().count(), 4);
        assert!(fields.request_id().is_some());
    }

    #[test]
    fn a_line_ending_beyond_64_kib_is_left_out() {
        let mut fields = OwnFields::default();
        fields.push_number(OwnName::RetryAfter, 5);
        fields.push_with(OwnName::RateLimitPolicy, |value| {
            value.resize(value.len() + 70_000, b'a')
        });
        fields.push_number(OwnName::XRateLimitLimit, 1);
        assert_eq!(
            fields.lines(),
            b"retry-after: 5\r\nx-ratelimit-limit: 1\r\n"
        );
        assert!(!fields.replaces(&HeaderName::from_static("ratelimit-policy")));
        assert_eq!(fields.pairs().count(), 2);
    }
}
