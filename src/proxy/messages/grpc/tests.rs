//! A metered call's body against the real gate, on the proxy's clock
//! (paused tokio time under a [`crate::clock::RuntimeClock`]): what
//! passes, byte for byte, what is counted, and how a call ends.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;
use crate::proxy::messages::tests::{counter, deciding, deciding_under, futures_poll, metered_for};
use crate::proxy::messages::Carrier;

/// A client's body: `frames`, then its end; counts how often it is read.
struct Frames {
    frames: VecDeque<Bytes>,
    reads: Arc<AtomicUsize>,
}

impl Body for Frames {
    type Data = Bytes;
    type Error = BodyFailure;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyFailure>>> {
        let this = self.get_mut();
        this.reads.fetch_add(1, Ordering::SeqCst);
        Poll::Ready(this.frames.pop_front().map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// `payload` as one gRPC message: its prefix, then itself.
fn message(payload: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0];
    bytes.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// `stream` cut into frames at `cuts`.
fn frames_of(stream: &[u8], cuts: &[usize]) -> VecDeque<Bytes> {
    let mut frames = VecDeque::new();
    let mut from = 0;
    for &cut in cuts.iter().chain([&stream.len()]) {
        frames.push_back(Bytes::copy_from_slice(&stream[from..cut]));
        from = cut;
    }
    frames
}

/// A call under `rules` whose client sends `frames`: its metered body,
/// the end its answer watches, and how often the client was read.
fn call(
    deciding: &Deciding,
    frames: VecDeque<Bytes>,
) -> (ClientBody, Arc<CallEnd>, Arc<AtomicUsize>) {
    let reads = Arc::new(AtomicUsize::new(0));
    let client = Frames {
        frames,
        reads: Arc::clone(&reads),
    };
    let metered = metered_for(deciding, Carrier::Grpc, &[]).expect("a message rule applies");
    let metrics = Arc::clone(&deciding.metrics);
    let metered = *metered;
    let (body, end) = meter(
        ClientBody::Metered(SyncWrapper::new(Box::pin(client))),
        metered,
        deciding.clone(),
        &metrics,
    );
    (body, end, reads)
}

/// What the body passes until it ends or fails: the bytes, and whether
/// it failed with HTTP/2's `CANCEL`.
async fn drain(body: &mut ClientBody) -> (Vec<u8>, bool) {
    let (frames, cancelled) = drain_frames(body).await;
    (frames.concat(), cancelled)
}

/// [`drain`], frame by frame.
async fn drain_frames(body: &mut ClientBody) -> (Vec<Vec<u8>>, bool) {
    let mut passed = Vec::new();
    loop {
        match std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await {
            Some(Ok(frame)) => passed.push(frame.into_data().unwrap().to_vec()),
            Some(Err(failure)) => {
                let reason = failure
                    .downcast_ref::<h2::Error>()
                    .and_then(h2::Error::reason);
                return (passed, reason == Some(h2::Reason::CANCEL));
            }
            None => return (passed, false),
        }
    }
}

const PER_MINUTE: &str = "[[rule]]\nname = \"msgs\"\nunit = \"message\"\nrate = \"3/m\"\n";

#[tokio::test]
async fn messages_pass_byte_for_byte_however_the_frames_cut_them_and_count_once_each() {
    let deciding = deciding(PER_MINUTE);
    let stream = [message(b"first"), message(b""), message(&[7; 300])].concat();
    // A prefix cut after its flag and inside its length, two messages in
    // one frame, a frame of one byte.
    let cuts = [1, 3, 12, 13, 20];
    let (mut body, end, _) = call(&deciding, frames_of(&stream, &cuts));
    let (passed, cancelled) = drain(&mut body).await;
    assert_eq!(passed, stream);
    assert!(!cancelled);
    assert_eq!(counter(&deciding, "msgs", "allowed"), 3);
    assert_eq!(end.ending(), None);
    assert!(deciding.metrics.render().contains("sluice_grpc_streams 1"));
    drop((body, end));
    assert!(deciding.metrics.render().contains("sluice_grpc_streams 0"));
}

#[tokio::test]
async fn a_frame_of_messages_admitted_at_once_leaves_as_one_frame() {
    let three = [message(b"one"), message(b"two"), message(b"three")].concat();
    let first = deciding(PER_MINUTE);
    let (mut body, _end, _) = call(&first, frames_of(&three, &[]));
    let (frames, cancelled) = drain_frames(&mut body).await;
    assert_eq!(frames, std::slice::from_ref(&three));
    assert!(!cancelled);
    assert_eq!(counter(&first, "msgs", "allowed"), 3);
    // A frame of four, the fourth over the limit: the three before it
    // pass as one frame, then the call ends.
    let second = deciding(PER_MINUTE);
    let four = [three.clone(), message(b"four")].concat();
    let (mut body, end, _) = call(&second, frames_of(&four, &[]));
    let (frames, cancelled) = drain_frames(&mut body).await;
    assert_eq!(frames, [three]);
    assert!(cancelled);
    assert!(matches!(end.ending(), Some(CallEnding::Limited { .. })));
}

#[tokio::test]
async fn a_message_over_the_limit_never_passes_and_ends_the_call_with_its_pushback() {
    let deciding = deciding(PER_MINUTE);
    let allowed = [message(b"one"), message(b"two"), message(b"three")].concat();
    let stream = [allowed.clone(), message(b"four"), message(b"five")].concat();
    let (mut body, end, _) = call(&deciding, frames_of(&stream, &[2, allowed.len() + 2]));
    let (passed, cancelled) = drain(&mut body).await;
    assert_eq!(passed, allowed, "nothing of the fourth message passes");
    assert!(cancelled, "the server's stream is reset with CANCEL");
    assert_eq!(
        end.ending(),
        Some(&CallEnding::Limited {
            rule: Arc::from("msgs"),
            retry_after_ms: 20_000,
        })
    );
    assert_eq!(counter(&deciding, "msgs", "allowed"), 3);
    assert_eq!(counter(&deciding, "msgs", "limited"), 1);
}

#[tokio::test]
async fn a_message_longer_than_max_message_bytes_ends_the_call_before_it_is_counted() {
    let deciding = deciding_under("max_message_bytes = 10", PER_MINUTE);
    let stream = [message(b"short"), message(b"eleven byte")].concat();
    let (mut body, end, _) = call(&deciding, frames_of(&stream, &[]));
    let (passed, cancelled) = drain(&mut body).await;
    assert_eq!(passed, message(b"short"));
    assert!(cancelled);
    assert_eq!(end.ending(), Some(&CallEnding::TooLarge));
    assert_eq!(counter(&deciding, "msgs", "allowed"), 1);
    assert_eq!(counter(&deciding, "msgs", "limited"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_held_message_stops_the_client_being_read_until_its_budget_frees() {
    let deciding = deciding(
        "[[rule]]\nname = \"paced\"\nunit = \"message\"\nrate = \"1/s\"\n\
         on_limit = \"delay\"\nmax_delay = \"5s\"\n",
    );
    let stream = [message(b"now"), message(b"in a second"), message(b"after")].concat();
    let first = message(b"now").len();
    let (mut body, end, reads) = call(&deciding, frames_of(&stream, &[first]));
    let mut passed = Vec::new();
    // The first message passes; the second's prefix is read and held.
    let mut next = || {
        futures_poll(&mut std::future::poll_fn(|cx| {
            Pin::new(&mut body).poll_frame(cx)
        }))
    };
    let Poll::Ready(Some(Ok(frame))) = next() else {
        panic!("the first message passes")
    };
    passed.extend_from_slice(&frame.into_data().unwrap());
    assert!(next().is_pending());
    let read = reads.load(Ordering::SeqCst);
    tokio::time::advance(Duration::from_millis(999)).await;
    assert!(next().is_pending());
    assert_eq!(
        reads.load(Ordering::SeqCst),
        read,
        "the client is not read while held"
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    let (rest, cancelled) = drain(&mut body).await;
    passed.extend_from_slice(&rest);
    assert_eq!(passed, stream);
    assert!(!cancelled);
    assert_eq!(end.ending(), None);
    assert_eq!(counter(&deciding, "paced", "delayed"), 2);
}
