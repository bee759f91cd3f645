//! Reading a request's body before it is decided, for the rules whose key
//! or cost is in it (`body:<pointer>`, `graphql:operation`, `graphql:type`,
//! `cost = "graphql"`: docs/conversation.md).
//!
//! Only a request such a rule's `match` fits is looked at, so a policy
//! without one reads no body, and a request no such rule matches is
//! streamed as ever (never buffered). The body is read up to
//! `server.max_key_body_bytes`:
//!
//! - one that arrived whole with its head is only looked at (no copy);
//! - one whose `Content-Length` is over the bound is not read at all (its
//!   keys are missing);
//! - otherwise it is read as it arrives, within `server.body_timeout`
//!   (408 past it; a body that breaks off is answered 400), and put back
//!   for the upstream: whole when it ended within the bound, or as the
//!   part read followed by the rest when it went past it (its keys are
//!   then missing). Either way the upstream gets the same bytes.

use std::cell::OnceCell;
use std::future::Future;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Request};
use http_body_util::BodyExt;

use super::client_request::{ClientBody, ClientRequest, Prefixed};
use super::out_of_line::OutOfLine;
use super::refusal::Refusal;
use super::standing::Unidentified;
use super::{admit, identify};
use super::{AnswerWritten, Context};
use crate::key::body::{declared_length, BodyFacts, KeyBody};
use crate::key::content_coding::{self, Decoded};
use crate::key::graphql::persisted::Persisted;
use crate::key::jwt::Claims;
use crate::key::RequestFacts;
use crate::policy::Policy;
use crate::proxy::deadline::CutOff;

/// What identification reads of the body the body-keys phase read
/// ([`phase`]), at most once and only when a rule needs it: decoded and
/// parsed for the rules that key on it.
/// Held by the request's phases, so that its facts can borrow it.
pub struct Readings<'r> {
    /// The body-keys phase read the body: a rule that keys on it matches.
    body_read: bool,
    /// The body as read, out of the request until the forward phase.
    sent: &'r ClientBody,
    readable: OnceCell<Readable<'r>>,
    body: OnceCell<BodyFacts<'r>>,
}

impl<'r> Readings<'r> {
    /// Nothing read yet; the body `sent` will be when `body_read`.
    pub fn new(body_read: bool, sent: &'r ClientBody) -> Readings<'r> {
        Readings {
            body_read,
            sent,
            readable: OnceCell::new(),
            body: OnceCell::new(),
        }
    }

    /// Whether the body-keys phase read the body.
    pub fn body_read(&self) -> bool {
        self.body_read
    }

    /// The body of `request` as `policy`'s rules read it, decoded and
    /// parsed once, with persisted queries from `persisted`.
    pub fn body(
        &'r self,
        request: &'r Request<ClientBody>,
        policy: &Policy,
        persisted: Persisted<'r>,
    ) -> &'r BodyFacts<'r> {
        let readable =
            (self.readable).get_or_init(|| readable(request.headers(), self.sent, policy));
        self.body.get_or_init(|| {
            let bound = policy.config.server.max_key_body_bytes;
            let length = sent_length(request.headers(), self.sent, bound);
            BodyFacts::of(request, readable.view(), persisted).with_length(length)
        })
    }
}

/// The body of the request in `client`, taken out of it when a rule of
/// `policy` reads bodies (else left there: empty here), so that the body
/// can be read while its head is lent to the phases.
#[inline(always)]
pub fn take(policy: &Policy, client: &mut ClientRequest) -> ClientBody {
    match policy.reads_body {
        true => std::mem::replace(client.get_mut().body_mut(), ClientBody::Empty),
        false => ClientBody::Empty,
    }
}

/// Puts the body [`take`] took back into the request, for the upstream.
#[inline(always)]
pub fn put_back(policy: &Policy, client: &mut ClientRequest, body: ClientBody) {
    if policy.reads_body {
        *client.get_mut().body_mut() = body;
    }
}

/// What the head alone says, when the policy has a rule that keys on the
/// body ([`first_look`]; docs/operations.md, "Cheap refusals come
/// first"): a `deny`ed client or a banned key is answered (`Err`) before
/// any of the body is read, and told no `100 Continue`. Whether the body is to be read: such a rule matches.
/// Claims a ban's key needs are verified into `token_claims`, once.
#[inline(always)]
pub fn look<'r>(
    cx: &mut Context<'_, '_>,
    facts: &mut RequestFacts<'r>,
    token_claims: &'r OnceCell<Option<Claims>>,
) -> Result<bool, AnswerWritten> {
    if !cx.policy.reads_body {
        return Ok(false);
    }
    match first_look(cx, facts, token_claims) {
        FirstLook::Answered => Err(AnswerWritten),
        FirstLook::Unread => Ok(false),
        FirstLook::Read => Ok(true),
    }
}

/// Body keys, the request path's phase after the checks: `body` (the
/// request's, [`take`]n out of it) is read ([`read`]) when [`look`] said
/// so, and what identification reads of the request starts there. A body
/// that did not arrive is answered (408, 400) and recorded.
#[inline(always)]
pub async fn phase<'r>(
    cx: &mut Context<'_, '_>,
    request: &'r Request<ClientBody>,
    to_read: bool,
    body: &'r mut ClientBody,
) -> Result<Readings<'r>, AnswerWritten> {
    if to_read {
        if let Err(refusal) = read(request, body, cx.policy).await {
            return Err(cx.refuse_unchecked(request, refusal));
        }
    }
    Ok(Readings::new(to_read, body))
}

/// What the head of a request says before its body is read.
enum FirstLook {
    /// No rule that reads the body matches (nor does the access log
    /// record a body source): the body is not read.
    Unread,
    /// Refused for what the head says: answered.
    Answered,
    /// Read the body.
    Read,
}

/// Cheap refusals first (docs/operations.md, "Cheap refusals come
/// first"): after the request's checks, the `deny` list and the bans the
/// head of the request `facts` describe shows are looked at before its
/// body is read, so a refused client costs no more for the body it sends
/// than for its head.
#[inline(never)]
fn first_look<'r>(
    cx: &mut Context<'_, '_>,
    facts: &mut RequestFacts<'r>,
    token_claims: &'r OnceCell<Option<Claims>>,
) -> FirstLook {
    let policy = cx.policy;
    if policy.deny.iter().any(|net| net.contains(&facts.client_ip)) {
        identify::refuse(cx, Unidentified::Denied, facts);
        return FirstLook::Answered;
    }
    let wanted = policy.logs_body
        || (policy.rules.iter()).any(|rule| rule.reads_body && rule.matcher.matches(facts));
    if !wanted {
        return FirstLook::Unread;
    }
    if admit::banned_before_body(cx, facts, token_claims) {
        return FirstLook::Answered;
    }
    FirstLook::Read
}

/// Reads `body`, which a rule reads, of `request`; see the module docs.
/// The body is then as [`readable`] finds it. A refusal (408, 400) when
/// the body did not arrive.
///
/// Polled out of line: the request's own future keeps only a call to it
/// (`proxy/out_of_line.rs`).
pub fn read<'a>(
    request: &'a Request<ClientBody>,
    body: &'a mut ClientBody,
    policy: &'a Policy,
) -> impl Future<Output = Result<(), Refusal>> + Send + 'a {
    OutOfLine::new(reading(request, body, policy))
}

async fn reading(
    request: &Request<ClientBody>,
    body: &mut ClientBody,
    policy: &Policy,
) -> Result<(), Refusal> {
    let server = &policy.config.server;
    let bound = server.max_key_body_bytes;
    let version = request.version();
    if declared_length(request.headers()).is_some_and(|length| length > bound as u64) {
        return Ok(());
    }
    match body {
        ClientBody::Empty | ClientBody::Read(_) => return Ok(()),
        ClientBody::Piped(_)
        | ClientBody::Hyper(_)
        | ClientBody::Prefixed(_)
        | ClientBody::Metered(_)
        | ClientBody::Streamed(_) => {}
    }
    match tokio::time::timeout(server.body_timeout, gather(body, bound)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(())) => Err(Refusal::BadFraming("the request body is malformed")),
        Err(_) => Err(Refusal::BodyCutOff(CutOff::Timeout, version)),
    }
}

/// A request's body as its rules read it: as sent, or decoded from its
/// `Content-Encoding` into a buffer of its own.
#[derive(Debug)]
pub enum Readable<'r> {
    Sent(KeyBody<'r>),
    Decoded(Vec<u8>),
}

impl Readable<'_> {
    pub fn view(&self) -> KeyBody<'_> {
        match self {
            Readable::Sent(body) => *body,
            Readable::Decoded(bytes) if bytes.is_empty() => KeyBody::Empty,
            Readable::Decoded(bytes) => KeyBody::Whole(bytes),
        }
    }
}

/// The `body` sent with `headers` as its rules read it, once [`read`] read it: the
/// whole body when it ended within `server.max_key_body_bytes` (before
/// its trailer fields, if any), decoded within that bound when it is in a
/// `Content-Encoding` (`key/content_coding.rs`); or none, or why it cannot
/// be read (longer, or undecodable). Out of line: only requests a rule
/// reads the body of get here.
#[inline(never)]
pub fn readable<'r>(headers: &HeaderMap, body: &'r ClientBody, policy: &Policy) -> Readable<'r> {
    let bound = policy.config.server.max_key_body_bytes;
    let Some(sent) = whole_within(body, bound) else {
        let empty = match body {
            ClientBody::Empty => true,
            ClientBody::Read(bytes) => bytes.is_empty(),
            // Trailer fields alone.
            ClientBody::Prefixed(prefixed) => {
                prefixed.read.is_empty() && matches!(prefixed.rest, ClientBody::Empty)
            }
            ClientBody::Piped(_)
            | ClientBody::Hyper(_)
            | ClientBody::Metered(_)
            | ClientBody::Streamed(_) => false,
        };
        return Readable::Sent(if empty {
            KeyBody::Empty
        } else {
            KeyBody::TooLarge
        });
    };
    match content_coding::decode(headers, sent, bound) {
        Decoded::Plain => Readable::Sent(KeyBody::Whole(sent)),
        Decoded::Bytes(bytes) => Readable::Decoded(bytes),
        Decoded::TooLarge => Readable::Sent(KeyBody::TooLarge),
        Decoded::Undecodable => Readable::Sent(KeyBody::Undecodable),
    }
}

/// The length of `body` as sent with `headers`: the bytes [`gather`] read
/// when the body ended within `bound` (what a `Content-Length` declared,
/// or a chunked body's), else its `Content-Length`; `None` for a chunked
/// body past the bound.
fn sent_length(headers: &HeaderMap, body: &ClientBody, bound: usize) -> Option<u64> {
    match body {
        ClientBody::Empty => Some(0),
        body => whole_within(body, bound)
            .map(|whole| whole.len() as u64)
            .or_else(|| declared_length(headers)),
    }
}

/// `body`, as [`gather`] put it back, when it is whole, not empty and no
/// longer than `bound` bytes.
fn whole_within(body: &ClientBody, bound: usize) -> Option<&[u8]> {
    let whole = match body {
        ClientBody::Read(bytes) => bytes,
        // Its trailer fields came within the bound.
        ClientBody::Prefixed(prefixed) if matches!(prefixed.rest, ClientBody::Empty) => {
            &prefixed.read
        }
        _ => return None,
    };
    (!whole.is_empty() && whole.len() <= bound).then_some(&whole[..])
}

/// Reads `body` up to `bound` bytes and puts it back as the upstream will
/// get it: the whole body, when it ended within the bound (returned too),
/// or what was read, then its trailer fields or the rest. `Err` when the
/// client's body failed.
async fn gather(body: &mut ClientBody, bound: usize) -> Result<Option<Bytes>, ()> {
    let mut streamed = std::mem::replace(body, ClientBody::Empty);
    // The first frame is often the whole body: kept as it is, copied only
    // when a second one follows.
    let mut first: Option<Bytes> = None;
    let mut joined = BytesMut::new();
    let mut read = 0usize;
    let mut trailers = None;
    let mut ended = false;
    while read <= bound {
        let Some(frame) = streamed.frame().await else {
            ended = true;
            break;
        };
        let frame = frame.map_err(|_| ())?;
        match frame.into_data() {
            Ok(data) => {
                read += data.len();
                match first.take() {
                    None if joined.is_empty() => first = Some(data),
                    earlier => {
                        if let Some(earlier) = earlier {
                            joined.extend_from_slice(&earlier);
                        }
                        joined.extend_from_slice(&data);
                    }
                }
            }
            Err(frame) => {
                // Trailer fields end the body; a body with them is sent as
                // it came, frame by frame.
                trailers = frame.into_trailers().ok();
                ended = true;
                break;
            }
        }
    }
    let bytes = first.unwrap_or_else(|| joined.freeze());
    let whole = (ended && read <= bound).then(|| bytes.clone());
    *body = match trailers {
        None if whole.is_some() && bytes.is_empty() => ClientBody::Empty,
        None if whole.is_some() => ClientBody::Read(bytes),
        trailers => ClientBody::Prefixed(Box::new(Prefixed {
            read: bytes,
            trailers,
            rest: if ended { ClientBody::Empty } else { streamed },
        })),
    };
    Ok(whole)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A body arriving as `pieces`, frame by frame (each piece a frame
    /// before the rest), then `trailers` if any.
    fn arriving(pieces: &[Vec<u8>], trailers: bool) -> ClientBody {
        let mut body = if trailers {
            let mut fields = http::HeaderMap::new();
            fields.insert("x-checksum", http::HeaderValue::from_static("1"));
            ClientBody::Prefixed(Box::new(Prefixed {
                read: Bytes::new(),
                trailers: Some(fields),
                rest: ClientBody::Empty,
            }))
        } else {
            ClientBody::Empty
        };
        for piece in pieces.iter().rev() {
            body = ClientBody::Prefixed(Box::new(Prefixed {
                read: Bytes::from(piece.clone()),
                trailers: None,
                rest: body,
            }));
        }
        body
    }

    /// Every frame of `body`: its bytes joined, and whether trailers came.
    async fn sent(body: ClientBody) -> (Vec<u8>, bool) {
        let collected = body.collect().await.expect("the test body never fails");
        let trailers = collected.trailers().is_some();
        (collected.to_bytes().to_vec(), trailers)
    }

    proptest! {
        /// Whatever the pieces and the bound, the upstream is sent the
        /// same bytes (and trailers) the client sent; the key reads the
        /// whole body exactly when it ended within the bound.
        #[test]
        fn reading_for_a_key_never_changes_the_bytes_sent_on(
            pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8),
            bound in 0usize..300,
            trailers in any::<bool>(),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let whole: Vec<u8> = pieces.concat();
            let (read, forwarded) = runtime.block_on(async {
                let mut body = arriving(&pieces, trailers);
                let read = gather(&mut body, bound).await.unwrap();
                // What the request's rules then find in it (an empty body
                // is none).
                let found = whole_within(&body, bound).map(<[u8]>::to_vec);
                assert_eq!(found.as_deref(), read.as_deref().filter(|read| !read.is_empty()));
                (read, sent(body).await)
            });
            prop_assert_eq!(&forwarded.0, &whole);
            prop_assert_eq!(forwarded.1, trailers);
            match read {
                Some(bytes) => {
                    prop_assert!(whole.len() <= bound);
                    prop_assert_eq!(&bytes[..], &whole[..]);
                }
                None => prop_assert!(whole.len() > bound),
            }
        }
    }

    #[tokio::test]
    async fn a_body_within_the_bound_is_put_back_whole_for_the_upstream() {
        let mut body = arriving(&[b"{\"a\":".to_vec(), b"1}".to_vec()], false);
        let read = gather(&mut body, 16).await.unwrap();
        assert_eq!(read.as_deref(), Some(&b"{\"a\":1}"[..]));
        assert!(matches!(&body, ClientBody::Read(bytes) if bytes == &b"{\"a\":1}"[..]));
        // Past the bound: what was read, then the rest, still to come.
        let mut body = arriving(
            &[b"0123456789".to_vec(), b"abcdef".to_vec(), b"xyz".to_vec()],
            false,
        );
        assert_eq!(gather(&mut body, 12).await.unwrap(), None);
        assert!(matches!(&body, ClientBody::Prefixed(prefixed) if prefixed.read.len() == 16));
        assert_eq!(sent(body).await.0, b"0123456789abcdefxyz");
    }
}
