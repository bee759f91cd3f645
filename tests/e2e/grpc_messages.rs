//! gRPC message limits (`unit = "message"`; docs/streams.md) on the real
//! binary: a tonic client speaking to sluice over HTTP/2 (and an HTTP/3
//! client, to sluice in-process), a hyper HTTP/2
//! server behind it that echoes each chunk of a call as it arrives and
//! records the bytes it got and how the call's body ended. Each message
//! counted once and passed byte for byte, a refused one ending the call
//! `RESOURCE_EXHAUSTED` with its pushback and the server's stream reset
//! with `CANCEL`, a held call slowed by flow control while another call
//! on the same connection flows, and the streams gauge. Real time, with
//! generous tolerances.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes};
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use tokio::sync::mpsc;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::grpc::sluice_for;
use crate::support::websocket::{reaches, series};
use crate::support::SluiceProcess;

/// How long anything the tests wait for may take.
const WITHIN: Duration = Duration::from_secs(10);

/// How a call's body ended at the server.
#[derive(Debug, Clone, PartialEq)]
enum BodyEnd {
    Complete,
    Reset(Option<h2::Reason>),
}

/// What the server saw of each call: the bytes of its body, when each
/// chunk came, and how it ended.
#[derive(Debug, Default)]
struct Seen {
    bytes: Vec<u8>,
    arrivals: Vec<(Instant, usize)>,
    end: Option<BodyEnd>,
}

/// The server behind sluice: for `/echo.Echo/Stream`, answers at once and
/// echoes each chunk as it comes; for `/echo.Echo/Collect`, answers once
/// the body ended. Both end with `grpc-status: 0`.
struct EchoServer {
    addr: SocketAddr,
    calls: Arc<Mutex<Vec<Arc<Mutex<Seen>>>>>,
}

impl EchoServer {
    async fn start() -> EchoServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let calls: Arc<Mutex<Vec<Arc<Mutex<Seen>>>>> = Arc::default();
        let recorded = Arc::clone(&calls);
        tokio::spawn(async move {
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                let recorded = Arc::clone(&recorded);
                let service = hyper::service::service_fn(move |request| {
                    let seen = Arc::new(Mutex::new(Seen::default()));
                    recorded.lock().unwrap().push(Arc::clone(&seen));
                    answer(request, seen)
                });
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(socket), service),
                );
            }
        });
        EchoServer { addr, calls }
    }

    fn call(&self, index: usize) -> Arc<Mutex<Seen>> {
        Arc::clone(&self.calls.lock().unwrap()[index])
    }

    fn calls(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

type Echoed = StreamBody<Received<Result<Frame<Bytes>, std::convert::Infallible>>>;

/// What a channel receives, as a stream.
type Received<T> = futures_util::stream::PollFn<
    Box<dyn FnMut(&mut std::task::Context<'_>) -> std::task::Poll<Option<T>> + Send + Sync>,
>;

fn received<T: Send + 'static>(mut receiver: mpsc::Receiver<T>) -> Received<T> {
    futures_util::stream::poll_fn(Box::new(move |cx| receiver.poll_recv(cx)))
}

async fn answer(
    request: Request<Incoming>,
    seen: Arc<Mutex<Seen>>,
) -> Result<Response<Echoed>, std::convert::Infallible> {
    let collect = request.uri().path().ends_with("/Collect");
    let (frames, echoed) = mpsc::channel(64);
    let mut body = request.into_body();
    let reading = tokio::spawn(async move {
        loop {
            let end = match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        {
                            let mut seen = seen.lock().unwrap();
                            seen.bytes.extend_from_slice(&data);
                            seen.arrivals.push((Instant::now(), data.len()));
                        }
                        let _ = frames.send(Ok(Frame::data(data))).await;
                    }
                    continue;
                }
                None => BodyEnd::Complete,
                Some(Err(error)) => BodyEnd::Reset(
                    std::error::Error::source(&error)
                        .and_then(|source| source.downcast_ref::<h2::Error>())
                        .and_then(h2::Error::reason),
                ),
            };
            seen.lock().unwrap().end = Some(end);
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", "0".parse().unwrap());
            let _ = frames.send(Ok(Frame::trailers(trailers))).await;
            return;
        }
    });
    if collect {
        let _ = reading.await;
    }
    let response = Response::builder()
        .header("content-type", "application/grpc")
        .body(StreamBody::new(received(echoed)))
        .unwrap();
    Ok(response)
}

/// Messages as raw bytes: the codec tonic frames them with.
#[derive(Debug, Clone, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// `payload` as it goes on the wire: the prefix, then the message.
fn framed(payload: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0];
    bytes.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// One HTTP/2 connection to sluice, which every call of the client shares.
async fn client(sluice: &SluiceProcess) -> tonic::client::Grpc<Channel> {
    let channel = Channel::from_shared(format!("http://{}", sluice.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    tonic::client::Grpc::new(channel)
}

/// The answer to a call: its head (or its status, when it has none),
/// then its messages and status.
type Answer =
    tokio::task::JoinHandle<Result<tonic::Response<tonic::codec::Streaming<Bytes>>, Status>>;

/// A bidirectional call to `method` whose messages the returned sender
/// sends (dropped: the client's half ends), and its answer.
fn open(
    grpc: &tonic::client::Grpc<Channel>,
    method: &'static str,
) -> (mpsc::Sender<Bytes>, Answer) {
    let (messages, outgoing) = mpsc::channel(1);
    let mut grpc = grpc.clone();
    let answer = tokio::spawn(async move {
        grpc.ready().await.unwrap();
        let path = http::uri::PathAndQuery::from_static(method);
        let request = tonic::Request::new(received(outgoing));
        grpc.streaming(request, path, Raw).await
    });
    (messages, answer)
}

/// The answer's head, within [`WITHIN`].
async fn head(answer: Answer) -> Result<tonic::codec::Streaming<Bytes>, Status> {
    let answered = tokio::time::timeout(WITHIN, answer)
        .await
        .expect("an answer");
    answered.unwrap().map(tonic::Response::into_inner)
}

/// The answer's next message, within [`WITHIN`].
async fn next(answers: &mut tonic::codec::Streaming<Bytes>) -> Result<Option<Bytes>, Status> {
    tokio::time::timeout(WITHIN, answers.message())
        .await
        .expect("a message or the status")
}

const STREAM: &str = "/echo.Echo/Stream";

fn outcome(rule: &str, outcome: &str) -> String {
    format!("sluice_requests_total{{rule=\"{rule}\",outcome=\"{outcome}\"}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_message_counts_once_and_reaches_the_server_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let server = EchoServer::start().await;
    let rules = "[[rule]]\nname = \"msgs\"\nunit = \"message\"\nmatch = { path_prefix = \"/echo.Echo/\" }\nrate = \"5/m\"\n";
    let sluice = sluice_for(dir.path(), server.addr, rules);
    let grpc = client(&sluice).await;
    let (messages, answer) = open(&grpc, STREAM);
    let payloads: [&[u8]; 3] = [b"first", b"", &[9; 20_000]];
    for payload in payloads {
        messages
            .send(Bytes::copy_from_slice(payload))
            .await
            .unwrap();
    }
    let mut answers = head(answer).await.unwrap();
    let mut echoed = Vec::new();
    let expected: Vec<u8> = payloads.iter().flat_map(|p| framed(p)).collect();
    while echoed.len() < expected.len() {
        let message = next(&mut answers).await.unwrap().expect("an echo");
        echoed.extend_from_slice(&framed(&message));
    }
    assert_eq!(echoed, expected);
    reaches(&sluice, "sluice_grpc_streams", 1.0).await;
    drop(messages);
    assert_eq!(next(&mut answers).await.unwrap(), None, "the call ends OK");
    let seen = server.call(0);
    assert_eq!(seen.lock().unwrap().bytes, expected);
    assert_eq!(seen.lock().unwrap().end, Some(BodyEnd::Complete));
    assert_eq!(series(&sluice, &outcome("msgs", "allowed")).await, 3.0);
    reaches(&sluice, "sluice_grpc_streams", 0.0).await;
}

/// The status a call ended with, from its answer's head or its stream.
async fn status_of(answer: Answer) -> Status {
    let mut answers = match head(answer).await {
        Err(status) => return status,
        Ok(answers) => answers,
    };
    loop {
        match next(&mut answers).await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the call ended OK"),
            Err(status) => return status,
        }
    }
}

/// `status` is the refusal of rule `msgs`, with its pushback.
fn assert_refused(status: &Status) {
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(status.message(), "rate limited: msgs");
    let waited = pushback(status);
    assert!((1..=60_000).contains(&waited), "{waited} ms");
}

/// The pushback a refused call's status carries, in milliseconds.
fn pushback(status: &Status) -> u64 {
    let value = status.metadata().get("grpc-retry-pushback-ms");
    value
        .expect("a pushback")
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

const TWO_A_MINUTE: &str = "[[rule]]\nname = \"msgs\"\nunit = \"message\"\nrate = \"2/m\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_limit_ends_the_call_resource_exhausted_and_cancels_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = EchoServer::start().await;
    let sluice = sluice_for(dir.path(), server.addr, TWO_A_MINUTE);
    let grpc = client(&sluice).await;
    // The server answered before the refusal (the echoes of the messages
    // before it came first), or had not answered at all (the status is
    // the whole answer).
    for method in [STREAM, "/echo.Echo/Collect"] {
        let calls = server.calls();
        let (messages, answer) = open(&grpc, method);
        let passed = if method == STREAM {
            messages.send(Bytes::from_static(b"one")).await.unwrap();
            let mut answers = head(answer).await.unwrap();
            assert_eq!(
                next(&mut answers).await.unwrap().as_deref(),
                Some(&b"one"[..])
            );
            messages.send(Bytes::from_static(b"two")).await.unwrap();
            assert_eq!(
                next(&mut answers).await.unwrap().as_deref(),
                Some(&b"two"[..])
            );
            messages.send(Bytes::from_static(b"three")).await.unwrap();
            let status = next(&mut answers).await.unwrap_err();
            assert_refused(&status);
            [framed(b"one"), framed(b"two")].concat()
        } else {
            // The budget is spent: its first message is refused.
            let _ = messages.send(Bytes::from_static(b"four")).await;
            assert_refused(&status_of(answer).await);
            Vec::new()
        };
        let seen = server.call(calls);
        crate::support::eventually(WITHIN, "the server's stream ends", || async {
            seen.lock().unwrap().end.is_some()
        })
        .await;
        let seen = seen.lock().unwrap();
        assert_eq!(seen.bytes, passed, "{method}");
        assert_eq!(
            seen.end,
            Some(BodyEnd::Reset(Some(h2::Reason::CANCEL))),
            "{method}"
        );
    }
    assert_eq!(series(&sluice, &outcome("msgs", "allowed")).await, 2.0);
    assert_eq!(series(&sluice, &outcome("msgs", "limited")).await, 2.0);
    // The client's connection outlives its calls.
    let (messages, answer) = open(&grpc, STREAM);
    messages.send(Bytes::from_static(b"five")).await.unwrap();
    assert_refused(&status_of(answer).await);
    reaches(&sluice, "sluice_grpc_streams", 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_longer_than_max_message_bytes_ends_the_call() {
    // 2 MiB, over the default 1 MiB.
    let dir = tempfile::tempdir().unwrap();
    let server = EchoServer::start().await;
    let sluice = sluice_for(
        dir.path(),
        server.addr,
        "[[rule]]\nname = \"msgs\"\nunit = \"message\"\nrate = \"100/m\"\n",
    );
    let grpc = client(&sluice).await;
    let (messages, answer) = open(&grpc, STREAM);
    messages.send(Bytes::from(vec![1; 2 << 20])).await.unwrap();
    let status = status_of(answer).await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(status.message(), "message larger than max_message_bytes");
    assert_eq!(series(&sluice, &outcome("msgs", "allowed")).await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_is_slowed_by_flow_control_while_another_on_its_connection_flows() {
    let dir = tempfile::tempdir().unwrap();
    let server = EchoServer::start().await;
    let rules = "[[rule]]\nname = \"paced\"\nunit = \"message\"\n\
                 match = { path = \"/echo.Echo/Stream\" }\n\
                 rate = \"10/s\"\nburst = 1\non_limit = \"delay\"\nmax_delay = \"30s\"\n";
    let sluice = sluice_for(dir.path(), server.addr, rules);
    let grpc = client(&sluice).await;
    let (messages, answer) = open(&grpc, STREAM);
    // 20 messages of 16 KiB, sent as fast as the client may: held to
    // 10 a second, the last passes about 1.9 s after the first.
    let sending = tokio::spawn(async move {
        for index in 0..20u8 {
            messages
                .send(Bytes::from(vec![index; 16 * 1024]))
                .await
                .unwrap();
        }
        messages
    });
    let _answers = head(answer).await.unwrap();
    // Meanwhile another call on the same connection goes at once.
    let began = Instant::now();
    let (other, other_answer) = open(&grpc, "/echo.Echo/Other");
    other.send(Bytes::from_static(b"quick")).await.unwrap();
    let mut other_answers = head(other_answer).await.unwrap();
    assert_eq!(
        next(&mut other_answers).await.unwrap().as_deref(),
        Some(&b"quick"[..])
    );
    assert!(
        began.elapsed() < Duration::from_secs(1),
        "{:?}",
        began.elapsed()
    );
    let messages = tokio::time::timeout(WITHIN, sending)
        .await
        .unwrap()
        .unwrap();
    let seen = server.call(0);
    crate::support::eventually(WITHIN, "all 20 messages reach the server", || async {
        seen.lock().unwrap().bytes.len() == 20 * (16 * 1024 + 5)
    })
    .await;
    let seen = seen.lock().unwrap();
    let first = seen.arrivals.first().unwrap().0;
    let last = seen.arrivals.last().unwrap().0;
    let spread = last - first;
    assert!(
        spread >= Duration::from_millis(1_700) && spread < Duration::from_secs(5),
        "{spread:?}"
    );
    // In order, nothing lost.
    let expected: Vec<u8> = (0..20u8)
        .flat_map(|index| framed(&vec![index; 16 * 1024]))
        .collect();
    assert!(
        seen.bytes == expected,
        "the messages arrive whole and in order"
    );
    drop(messages);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_and_check_show_the_message_rules_a_call_is_held_to() {
    let dir = tempfile::tempdir().unwrap();
    let server = EchoServer::start().await;
    let rules = "[[rule]]\nname = \"msgs\"\nunit = \"message\"\nkey = [\"header:x-user\"]\n\
                 match = { path_prefix = \"/echo.Echo/\" }\nrate = \"5/m\"\n";
    let sluice = sluice_for(dir.path(), server.addr, rules);
    let explain = |content_type: &'static str| {
        let question = serde_json::json!({
            "method": "POST",
            "path": "/echo.Echo/Stream",
            "headers": {"content-type": content_type, "x-user": "alice"},
            "ip": "203.0.113.7",
        });
        let url = format!("http://{}/admin/explain", sluice.admin);
        async move {
            crate::support::post_json(&url, &question.to_string(), &[])
                .await
                .json()
        }
    };
    let call = explain("application/grpc").await;
    let rule = &call["rules"][0];
    assert_eq!(rule["matched"], true, "{call}");
    assert_eq!(rule["counts_messages"], true, "{call}");
    // Its key as keys are shown: a header may be a credential.
    assert!(rule["key"].as_str().unwrap().starts_with("a…#"), "{call}");
    assert!(!call.to_string().contains("alice"), "{call}");
    assert!(
        rule["reason"].as_str().unwrap().contains("gRPC call"),
        "{call}"
    );
    // A POST that is not a gRPC call carries no messages.
    let post = explain("application/json").await;
    assert_eq!(post["rules"][0]["matched"], false, "{post}");
    assert_eq!(post["rules"][0]["failed"], "unit", "{post}");
    let said = crate::support::checked(&dir.path().join("sluice.toml"));
    assert!(said.contains("on the gRPC calls it matches"), "{said}");
}

/// Over HTTP/3 too (docs/streams.md): a call's messages are admitted one by
/// one, and the one over the limit ends the call `RESOURCE_EXHAUSTED`,
/// the server's stream reset with `CANCEL`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_over_http3_is_metered_message_by_message() {
    let ca = crate::support::certs::TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    ca.write_leaf(dir.path(), "localhost", &["localhost"]);
    let server = EchoServer::start().await;
    let config = format!(
        "[server]\nupstream = \"grpc\"\n[server.tls]\n\
         certs = [{{ cert = \"{cert}\", key = \"{key}\" }}]\nhttp3 = true\n\
         [[upstream]]\nname = \"grpc\"\nprotocol = \"h2c\"\nservers = [\"http://{echo}\"]\n\
         {TWO_A_MINUTE}",
        cert = dir.path().join("localhost.pem").display(),
        key = dir.path().join("localhost.key").display(),
        echo = server.addr,
    );
    let sluice = crate::support::Sluice::start(&config, server.addr).await;
    let mut h3 =
        crate::support::h3_client::H3Client::connect(ca.pem(), sluice.addr, "localhost").await;
    let headers = [("content-type", "application/grpc"), ("te", "trailers")];
    // Two messages within the budget reach the server byte for byte.
    let both = [framed(b"one"), framed(b"two")].concat();
    let (got, trailers) = h3.exchange("POST", STREAM, &headers, Some(&both)).await;
    assert_eq!(got.status, http::StatusCode::OK);
    assert_eq!(got.body.as_bytes(), both);
    assert_eq!(trailers.expect("the server's status")["grpc-status"], "0");
    assert_eq!(server.call(0).lock().unwrap().bytes, both);
    // The next is refused before any byte of it reaches the server (which
    // may not see the call at all); the status is the whole answer, or
    // comes after the server's.
    let three = framed(b"three");
    let (got, trailers) = h3.exchange("POST", STREAM, &headers, Some(&three)).await;
    assert_eq!(got.status, http::StatusCode::OK);
    let status = trailers.as_ref().unwrap_or(&got.headers);
    assert_eq!(status["grpc-status"], "8", "{got:?} {trailers:?}");
    assert_eq!(status["grpc-message"], "rate limited: msgs");
    let calls = server.calls.lock().unwrap().clone();
    let reached: Vec<u8> = calls
        .iter()
        .flat_map(|call| call.lock().unwrap().bytes.clone())
        .collect();
    assert_eq!(reached, both);
    let outcome =
        |outcome: &str| format!("sluice_requests_total{{rule=\"msgs\",outcome=\"{outcome}\"}}");
    assert_eq!(sluice.metric(&outcome("allowed")).await, 2.0);
    assert_eq!(sluice.metric(&outcome("limited")).await, 1.0);
}
