//! Both directions over in-memory pipes, with gates the tests steer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::Semaphore;

use super::*;

const KEY: [u8; 4] = [1, 2, 3, 4];

/// A masked client frame.
fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mut out = vec![first, 0x80 | payload.len() as u8];
    out.extend_from_slice(&KEY);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ KEY[i % 4]));
    out
}

/// An unmasked server frame.
fn server_frame(payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mut out = vec![0x82, payload.len() as u8];
    out.extend_from_slice(payload);
    out
}

/// Admits while `permits` has one (waiting for one otherwise, as a rule in
/// delay mode holds a message), refuses when `refuse_after` messages passed.
struct TestGate {
    permits: Semaphore,
    asked: AtomicU64,
    refuse_after: u64,
}

impl TestGate {
    fn new(permits: usize, refuse_after: u64) -> Arc<TestGate> {
        Arc::new(TestGate {
            permits: Semaphore::new(permits),
            asked: AtomicU64::new(0),
            refuse_after,
        })
    }
}

impl Gate for Arc<TestGate> {
    fn admit(&self) -> Admitting<'_> {
        Box::pin(async move {
            let asked = self.asked.fetch_add(1, Ordering::SeqCst);
            if asked >= self.refuse_after {
                return Admission::Refused {
                    rule: Arc::from("chat"),
                    retry_after: 0,
                };
            }
            match self.permits.acquire().await {
                Ok(permit) => {
                    permit.forget();
                    Admission::Pass
                }
                Err(_) => Admission::Unavailable,
            }
        })
    }
}

/// A metered tunnel between two pipes, run as the tunnel runs it (see
/// [`run`]). Returns the client's and the server's ends.
fn tunnel(
    gate: Arc<TestGate>,
    max_message: u64,
    client_early: Vec<u8>,
) -> (
    DuplexStream,
    DuplexStream,
    tokio::task::JoinHandle<io::Result<Ended>>,
) {
    run(
        Some(gate),
        max_message,
        client_early,
        Duration::from_secs(300),
    )
}

/// A tunnel between two pipes, metered when `gate` is given, run as
/// `server/http1/tunnel.rs` runs it: a closing sends the client its frame
/// and shuts its side; both pipes are dropped once it ends. Returns the
/// client's and the server's ends.
fn run(
    gate: Option<Arc<TestGate>>,
    max_message: u64,
    client_early: Vec<u8>,
    idle_timeout: Duration,
) -> (
    DuplexStream,
    DuplexStream,
    tokio::task::JoinHandle<io::Result<Ended>>,
) {
    let (client, mut client_side) = tokio::io::duplex(1 << 16);
    let (mut server_side, server) = tokio::io::duplex(1 << 16);
    let task = tokio::spawn(async move {
        let early = (client_early, Vec::new());
        let (client, server) = (&mut client_side, &mut server_side);
        let ended = match &gate {
            Some(gate) => {
                metered(client, server, early, gate, (max_message, 0), idle_timeout).await?
            }
            None => plain(client, server, early, idle_timeout).await?,
        };
        if let Ended::Closing(closing) = &ended {
            client_side.write_all(&closing.frame).await?;
            client_side.shutdown().await?;
        }
        Ok(ended)
    });
    (client, server, task)
}

async fn read_exactly(stream: &mut DuplexStream, n: usize) -> Vec<u8> {
    let mut bytes = vec![0; n];
    stream.read_exact(&mut bytes).await.unwrap();
    bytes
}

async fn read_to_end(stream: &mut DuplexStream) -> Vec<u8> {
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).await.unwrap();
    bytes
}

#[tokio::test]
async fn plain_copies_both_ways_early_bytes_first_and_the_clients_end_closes_both() {
    let (mut client, mut client_side) = tokio::io::duplex(1 << 16);
    let (mut server_side, mut server) = tokio::io::duplex(1 << 16);
    let task = tokio::spawn(async move {
        let early = (b"early-up".to_vec(), b"early-down".to_vec());
        let idle = Duration::from_secs(300);
        plain(&mut client_side, &mut server_side, early, idle).await
    });
    client.write_all(b"+more").await.unwrap();
    server.write_all(b"+back").await.unwrap();
    assert_eq!(read_exactly(&mut server, 13).await, b"early-up+more");
    assert_eq!(read_exactly(&mut client, 15).await, b"early-down+back");
    // The client's end of stream closes both sides: the server need not
    // close first.
    client.write_all(b"+last").await.unwrap();
    client.shutdown().await.unwrap();
    assert_eq!(read_to_end(&mut server).await, b"+last");
    assert_eq!(read_to_end(&mut client).await, b"");
    match task.await.unwrap().unwrap() {
        Ended::Closed {
            from_client,
            from_server,
            by,
        } => {
            assert_eq!((from_client, from_server), (18, 15));
            assert_eq!(by, EndedBy::Client);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_servers_end_passes_what_it_sent_then_closes_both() {
    for gate in [None, Some(TestGate::new(100, u64::MAX))] {
        let metered = gate.is_some();
        let (mut client, mut server, task) =
            run(gate, 1 << 20, Vec::new(), Duration::from_secs(300));
        let last = server_frame(b"last words");
        server.write_all(&last).await.unwrap();
        server.shutdown().await.unwrap();
        // The client never closes; sluice does.
        assert_eq!(read_to_end(&mut client).await, last, "metered {metered}");
        assert_eq!(read_to_end(&mut server).await, b"");
        assert!(matches!(
            task.await.unwrap().unwrap(),
            Ended::Closed {
                by: EndedBy::Server,
                ..
            }
        ));
    }
}

/// A Close frame from the server, unmasked.
fn server_close(code: u16) -> Vec<u8> {
    vec![0x88, 2, (code >> 8) as u8, code as u8]
}

#[tokio::test]
async fn a_close_frame_each_way_closes_both_sides_though_neither_closes_its_socket() {
    for gate in [None, Some(TestGate::new(100, u64::MAX))] {
        for client_first in [true, false] {
            let what = format!("metered {}, client first {client_first}", gate.is_some());
            let (mut client, mut server, task) =
                run(gate.clone(), 1 << 20, Vec::new(), Duration::from_secs(300));
            let from_client = masked(0x88, &1000u16.to_be_bytes());
            let from_server = server_close(1000);
            // A message first, so that the Close frames follow others.
            client.write_all(&masked(0x81, b"hi")).await.unwrap();
            read_exactly(&mut server, 8).await;
            if client_first {
                client.write_all(&from_client).await.unwrap();
                assert_eq!(
                    read_exactly(&mut server, from_client.len()).await,
                    from_client
                );
                server.write_all(&from_server).await.unwrap();
            } else {
                server.write_all(&from_server).await.unwrap();
                assert_eq!(
                    read_exactly(&mut client, from_server.len()).await,
                    from_server
                );
                client.write_all(&from_client).await.unwrap();
            }
            // Neither side shuts its socket: sluice closes both.
            let (at_client, at_server) =
                tokio::join!(read_to_end(&mut client), read_to_end(&mut server));
            if client_first {
                assert_eq!((at_client, at_server), (from_server, Vec::new()), "{what}");
            } else {
                assert_eq!((at_client, at_server), (Vec::new(), from_client), "{what}");
            }
            assert!(
                matches!(
                    task.await.unwrap().unwrap(),
                    Ended::Closed {
                        by: EndedBy::CloseHandshake,
                        ..
                    }
                ),
                "{what}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_tunnel_silent_both_ways_for_its_idle_timeout_gets_1001_on_each_side() {
    let idle = Duration::from_secs(10);
    for gate in [None, Some(TestGate::new(100, u64::MAX))] {
        let what = format!("metered {}", gate.is_some());
        let start = tokio::time::Instant::now();
        let (mut client, mut server, task) = run(gate, 1 << 20, Vec::new(), idle);
        // Bytes each way move the clock on.
        tokio::time::sleep(Duration::from_secs(6)).await;
        client.write_all(&masked(0x81, b"hi")).await.unwrap();
        read_exactly(&mut server, 8).await;
        tokio::time::sleep(Duration::from_secs(6)).await;
        server.write_all(&server_frame(b"ho")).await.unwrap();
        read_exactly(&mut client, 4).await;
        let (at_client, at_server) =
            tokio::join!(read_to_end(&mut client), read_to_end(&mut server));
        assert_eq!(start.elapsed(), Duration::from_secs(22), "{what}");
        // Masked towards the server: sluice is its client.
        assert_ne!(at_server[1] & 0x80, 0, "{what}");
        assert_eq!(close_of(&at_server), (1001, "idle timeout".to_owned()));
        assert_eq!(at_client[1] & 0x80, 0, "{what}");
        assert_eq!(close_of(&at_client), (1001, "idle timeout".to_owned()));
        assert!(matches!(
            task.await.unwrap().unwrap(),
            Ended::Closing(Closing { code: 1001, .. })
        ));
    }
}

#[tokio::test(start_paused = true)]
async fn an_idle_close_never_lands_inside_a_frame() {
    for gate in [None, Some(TestGate::new(100, u64::MAX))] {
        let what = format!("metered {}", gate.is_some());
        let (mut client, mut server, task) =
            run(gate, 1 << 20, Vec::new(), Duration::from_secs(10));
        // Half of a frame each way, then silence.
        let up = masked(0x82, &[9; 40]);
        let down = server_frame(&[8; 40]);
        client.write_all(&up[..20]).await.unwrap();
        server.write_all(&down[..20]).await.unwrap();
        read_exactly(&mut client, 20).await;
        let (at_client, at_server) =
            tokio::join!(read_to_end(&mut client), read_to_end(&mut server));
        // The server got the frame's start and no Close frame inside it;
        // nor did the client (its frame waits for the server's to end).
        assert_eq!(at_server, &up[..20], "{what}");
        assert_eq!(at_client, b"", "{what}");
        assert!(matches!(
            task.await.unwrap().unwrap(),
            Ended::Closing(Closing { code: 1001, .. })
        ));
    }
}

#[tokio::test]
async fn each_message_is_admitted_once_and_arrives_byte_for_byte() {
    let gate = TestGate::new(100, u64::MAX);
    let early = masked(0x81, b"first");
    let (mut client, mut server, task) = tunnel(Arc::clone(&gate), 1 << 20, early.clone());
    let mut sent = early;
    // A fragmented message with a ping between its fragments, in pieces.
    let conversation = [
        masked(0x01, b"frag"),
        masked(0x89, b"ping"),
        masked(0x80, b"ment"),
        masked(0x82, &[0; 100]),
    ]
    .concat();
    for piece in conversation.chunks(3) {
        client.write_all(piece).await.unwrap();
    }
    sent.extend_from_slice(&conversation);
    assert_eq!(read_exactly(&mut server, sent.len()).await, sent);
    assert_eq!(gate.asked.load(Ordering::SeqCst), 3);
    client.shutdown().await.unwrap();
    server.shutdown().await.unwrap();
    assert!(matches!(task.await.unwrap().unwrap(), Ended::Closed { .. }));
}

/// The Close frame's code and reason, unmasking a masked one.
fn close_of(frame: &[u8]) -> (u16, String) {
    assert_eq!(frame[0], 0x88, "{frame:02x?}");
    let len = usize::from(frame[1] & 0x7F);
    let payload: Vec<u8> = if frame[1] & 0x80 != 0 {
        let key = &frame[2..6];
        frame[6..6 + len]
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ key[i % 4])
            .collect()
    } else {
        frame[2..2 + len].to_vec()
    };
    (
        u16::from_be_bytes([payload[0], payload[1]]),
        String::from_utf8(payload[2..].to_vec()).unwrap(),
    )
}

#[tokio::test]
async fn a_refused_message_never_reaches_the_server_and_both_sides_get_1008() {
    let gate = TestGate::new(100, 2);
    let (mut client, mut server, task) = tunnel(gate, 1 << 20, Vec::new());
    let passing = [masked(0x81, b"one"), masked(0x81, b"two")].concat();
    client.write_all(&passing).await.unwrap();
    client.write_all(&masked(0x81, b"three")).await.unwrap();
    let at_server = read_to_end(&mut server).await;
    assert!(at_server.starts_with(&passing), "{at_server:02x?}");
    let close = &at_server[passing.len()..];
    // Masked: sluice is the server's client.
    assert_ne!(close[1] & 0x80, 0);
    assert_eq!(close_of(close), (1008, "rate limited: chat".to_owned()));
    let at_client = read_to_end(&mut client).await;
    assert_eq!(at_client[1] & 0x80, 0);
    assert_eq!(
        close_of(&at_client),
        (1008, "rate limited: chat".to_owned())
    );
    assert!(matches!(
        task.await.unwrap().unwrap(),
        Ended::Closing(Closing { code: 1008, .. })
    ));
}

#[tokio::test]
async fn a_held_message_stops_the_client_while_the_server_keeps_talking() {
    let gate = TestGate::new(1, u64::MAX);
    let (mut client, mut server, _task) = tunnel(Arc::clone(&gate), 1 << 20, Vec::new());
    let first = masked(0x81, b"one");
    let second = masked(0x81, b"two");
    client.write_all(&first).await.unwrap();
    client.write_all(&second).await.unwrap();
    assert_eq!(read_exactly(&mut server, first.len()).await, first);
    // The second waits for a permit; the server's messages still flow.
    for n in 0..3u8 {
        let pushed = server_frame(&[n; 10]);
        server.write_all(&pushed).await.unwrap();
        assert_eq!(read_exactly(&mut client, pushed.len()).await, pushed);
    }
    tokio::task::yield_now().await;
    let mut probe = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(50), server.read(&mut probe)).await;
    assert!(early.is_err(), "the held message arrived");
    gate.permits.add_permits(1);
    assert_eq!(read_exactly(&mut server, second.len()).await, second);
}

#[tokio::test]
async fn violations_close_with_1002_and_1009_before_the_frame_passes() {
    for (bytes, code) in [
        (vec![0x81, 0x02, b'h', b'i'], 1002),
        (masked(0x83, b""), 1002),
        (masked(0x80, b"stray"), 1002),
        // 2^20 + 1 bytes announced: refused from its header.
        (
            {
                let mut header = vec![0x82, 0x80 | 127];
                header.extend_from_slice(&((1u64 << 20) + 1).to_be_bytes());
                header.extend_from_slice(&KEY);
                header
            },
            1009,
        ),
    ] {
        let gate = TestGate::new(100, u64::MAX);
        let (mut client, mut server, task) = tunnel(gate, 1 << 20, Vec::new());
        let ok = masked(0x81, b"ok");
        client.write_all(&ok).await.unwrap();
        client.write_all(&bytes).await.unwrap();
        let at_server = read_to_end(&mut server).await;
        assert_eq!(&at_server[..ok.len()], &ok[..]);
        assert_eq!(close_of(&at_server[ok.len()..]).0, code, "{bytes:02x?}");
        assert_eq!(close_of(&read_to_end(&mut client).await).0, code);
        assert!(matches!(task.await.unwrap().unwrap(), Ended::Closing(_)));
    }
}

#[tokio::test]
async fn the_clients_close_frame_waits_for_the_servers_frame_in_flight() {
    let gate = TestGate::new(100, 0);
    let (mut client, mut server, task) = tunnel(gate, 1 << 20, Vec::new());
    let pushed = server_frame(&[7; 100]);
    server.write_all(&pushed[..30]).await.unwrap();
    assert_eq!(read_exactly(&mut client, 30).await, &pushed[..30]);
    client.write_all(&masked(0x81, b"refused")).await.unwrap();
    // The server got its Close; the rest of its frame still reaches the
    // client, then the client's Close.
    let at_server = read_to_end(&mut server).await;
    assert_eq!(close_of(&at_server).0, 1008);
    server.write_all(&pushed[30..]).await.unwrap();
    server.write_all(&server_frame(b"never")).await.unwrap();
    let at_client = read_to_end(&mut client).await;
    let rest = pushed.len() - 30;
    assert!(at_client[..rest] == pushed[30..]);
    assert_eq!(close_of(&at_client[rest..]).0, 1008);
    assert_eq!(at_client.len(), rest + 2 + 2 + "rate limited: chat".len());
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn nothing_is_kept_between_reads_the_sink_takes() {
    let (mut client, mut client_side) = tokio::io::duplex(1 << 16);
    let (mut server_side, mut server) = tokio::io::duplex(1 << 16);
    let mut flow = Flow::new(Reader::new(1 << 20, 0), Vec::new());
    let frame = masked(0x81, b"hello");
    // A header cut in two is kept, then the buffer is freed once written.
    client.write_all(&frame[..3]).await.unwrap();
    let polled = poll_fn(|cx| {
        let _ = flow.poll(cx, &mut client_side, &mut server_side);
        Poll::Ready(())
    });
    polled.await;
    assert_eq!(flow.kept, &frame[..3]);
    client.write_all(&frame[3..]).await.unwrap();
    let stop = poll_fn(|cx| flow.poll(cx, &mut client_side, &mut server_side)).await;
    assert_eq!(stop.unwrap(), Stop::Message(6));
    flow.admitted();
    client.write_all(&masked(0x89, b"")).await.unwrap();
    client.shutdown().await.unwrap();
    let stop = poll_fn(|cx| flow.poll(cx, &mut client_side, &mut server_side)).await;
    assert_eq!(stop.unwrap(), Stop::End);
    assert_eq!(flow.kept.capacity(), 0);
    drop(server_side);
    assert_eq!(
        read_to_end(&mut server).await,
        [frame, masked(0x89, b"")].concat()
    );
}

#[tokio::test]
async fn messages_pass_whole_over_a_completion_transport() {
    // Each write of the pump hands its bytes over and gets them back on a
    // later poll (`testing/completion.rs`): what arrives is still every
    // byte, in order, each message admitted once.
    use crate::testing::completion;
    let (mut client, mut client_side) = completion::pair();
    let (mut server_side, mut server) = completion::pair();
    let completions = client.completions();
    let gate = TestGate::new(1_000, u64::MAX);
    let early = masked(0x81, b"first");
    let task = {
        let (gate, early) = (Arc::clone(&gate), early.clone());
        tokio::spawn(async move {
            let early = (early, Vec::new());
            let idle = Duration::from_secs(300);
            metered(
                &mut client_side,
                &mut server_side,
                early,
                &gate,
                (1 << 20, 0),
                idle,
            )
            .await
        })
    };
    let mut conversation = [
        masked(0x01, b"frag"),
        masked(0x89, b"ping"),
        masked(0x80, b"ment"),
    ]
    .concat();
    for n in 0..200u8 {
        conversation.extend_from_slice(&masked(0x82, &[n; 100]));
    }
    for piece in conversation.chunks(777) {
        client.write_all(piece).await.unwrap();
    }
    let sent = [early, conversation].concat();
    let mut arrived = vec![0; sent.len()];
    server.read_exact(&mut arrived).await.unwrap();
    assert!(
        arrived == sent,
        "the server read other bytes than were sent"
    );
    assert_eq!(gate.asked.load(Ordering::SeqCst), 2 + 200);
    let answer = server_frame(b"back");
    server.write_all(&answer).await.unwrap();
    assert_eq!(
        {
            let mut back = vec![0; answer.len()];
            client.read_exact(&mut back).await.unwrap();
            back
        },
        answer
    );
    client.shutdown().await.unwrap();
    server.shutdown().await.unwrap();
    assert!(matches!(task.await.unwrap().unwrap(), Ended::Closed { .. }));
    assert!(completions.load(Ordering::SeqCst) > 10);
}
