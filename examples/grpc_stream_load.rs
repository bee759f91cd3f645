//! Load for gRPC message limits (`unit = "message"` on gRPC calls), against
//! the release binary on loopback; `scripts/grpc-stream-bench/run.sh` runs
//! it. One program, three modes:
//!
//! ```sh
//! grpc_stream_load serve PORT
//! grpc_stream_load held ADDR --sluice-pid PID [--seconds 30] [--settle 2]
//!     [--neighbour-seconds 25] [--no-held] [--per-frame 16]
//! grpc_stream_load load ADDR --sluice-pid PID [--streams 16]
//!     [--messages 25000] [--depth 32] [--per-frame 1] [--path /bench.Load/Echo]
//! ```
//!
//! - `serve`: the upstream, a hyper HTTP/2 (h2c) server that echoes each
//!   call's body back as it reads it, frame for frame, then ends the answer
//!   with `grpc-status: 0`. It reads each call's messages (a flag byte, a
//!   4-byte big-endian length, the message) and checks the sequence number
//!   each message opens with, so a message lost, repeated or reordered on
//!   the way shows; when a call ends it prints one `call ...` line: the
//!   messages, how many broke the sequence, the bytes of a message cut
//!   short, how the body ended, and when the messages came.
//! - `held`: one HTTP/2 connection to sluice carrying a ping-pong call on
//!   `/bench.Load/Ping` (one message, then its echo, again and again) and,
//!   unless `--no-held`, a call on `/bench.Load/Held` that sends 64-byte
//!   messages for `--seconds` as fast as HTTP/2 flow control lets it.
//!   sluice's VmRSS is read before the held call opens and while it runs.
//! - `load`: one HTTP/2 connection, `--streams` calls each sending
//!   `--messages` 64-byte messages with at most `--depth` of them not yet
//!   echoed, `--per-frame` to a DATA frame; sluice's CPU (utime+stime from
//!   `/proc/PID/stat`, and the tasks' run time from `/proc/PID/task/*/schedstat`)
//!   from the first message sent to the last echo, per message.
//!
//! The client speaks HTTP/2 with the h2 crate (not tonic) so that what goes
//! into each DATA frame, and when, is this program's choice: a message
//! never waits in a codec's buffer, and the sender never has more in
//! flight than the stream's window (h2 would buffer a `send_data` beyond
//! it without bound). Every wait is bounded; a run that overstays exits 1.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, Request, Response};
use hyper::body::{Body, Frame, Incoming};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// Each message's size: the issue's 64 bytes, the first 8 a sequence
/// number.
const MESSAGE: usize = 64;
/// A gRPC message's prefix: the compressed flag, then the length.
const PREFIX: usize = 5;
/// A message as it goes on the wire.
const FRAMED: usize = PREFIX + MESSAGE;
/// The width of the arrival-time cells the server counts messages in.
const CELL: Duration = Duration::from_millis(10);

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let outcome = match args.first().map(String::as_str) {
        Some("serve") => runtime.block_on(serve(&args[1..])),
        Some("held") => runtime.block_on(held(&Args::parse(&args[1..]))),
        Some("load") => runtime.block_on(load(&Args::parse(&args[1..]))),
        _ => Err("usage: grpc_stream_load serve PORT | held ADDR ... | load ADDR ...".into()),
    };
    if let Err(error) = outcome {
        eprintln!("grpc_stream_load: {error} ({error:?})");
        std::process::exit(1);
    }
}

/// A client mode's arguments: the address, then `--name value` pairs and
/// `--no-held`.
struct Args {
    addr: SocketAddr,
    sluice_pid: u32,
    seconds: f64,
    settle: f64,
    neighbour_seconds: f64,
    no_held: bool,
    per_frame: usize,
    streams: usize,
    messages: u64,
    depth: u64,
    path: String,
}

impl Args {
    fn parse(args: &[String]) -> Args {
        let addr = args
            .first()
            .and_then(|a| a.parse().ok())
            .expect("ADDR, as 127.0.0.1:PORT");
        let mut parsed = Args {
            addr,
            sluice_pid: 0,
            seconds: 30.0,
            settle: 2.0,
            neighbour_seconds: 25.0,
            no_held: false,
            per_frame: 0,
            streams: 16,
            messages: 25_000,
            depth: 32,
            path: "/bench.Load/Echo".into(),
        };
        let mut rest = args[1..].iter();
        while let Some(name) = rest.next() {
            if name == "--no-held" {
                parsed.no_held = true;
                continue;
            }
            let value = rest
                .next()
                .unwrap_or_else(|| panic!("{name} needs a value"));
            let number = || -> f64 { value.parse().unwrap_or_else(|_| panic!("{name} {value}")) };
            match name.as_str() {
                "--sluice-pid" => parsed.sluice_pid = number() as u32,
                "--seconds" => parsed.seconds = number(),
                "--settle" => parsed.settle = number(),
                "--neighbour-seconds" => parsed.neighbour_seconds = number(),
                "--per-frame" => parsed.per_frame = number() as usize,
                "--streams" => parsed.streams = number() as usize,
                "--messages" => parsed.messages = number() as u64,
                "--depth" => parsed.depth = number() as u64,
                "--path" => parsed.path = value.clone(),
                _ => panic!("unknown argument {name}"),
            }
        }
        parsed
    }
}

// ---------------------------------------------------------------- messages

/// Message `seq`, framed: the prefix, the sequence number, then filler.
fn put_message(buf: &mut BytesMut, seq: u64) {
    buf.put_u8(0);
    buf.put_u32(MESSAGE as u32);
    buf.put_u64(seq);
    buf.put_bytes(0x5a, MESSAGE - 8);
}

/// `count` messages from `first` on, framed, in one buffer.
fn messages(first: u64, count: u64) -> Bytes {
    let mut buf = BytesMut::with_capacity(count as usize * FRAMED);
    for seq in first..first + count {
        put_message(&mut buf, seq);
    }
    buf.freeze()
}

/// Reads length-prefixed messages from the chunks of a body, wherever the
/// chunks cut them, and checks that their sequence numbers run 0, 1, 2…
#[derive(Default)]
struct Reader {
    /// The message being read, up to its end.
    partial: Vec<u8>,
    /// The sequence number the next message should carry.
    next: u64,
    /// Whole messages read.
    messages: u64,
    /// Messages whose sequence number was not the next one.
    out_of_order: u64,
}

impl Reader {
    /// Reads `data`; returns the messages it completed.
    fn read(&mut self, mut data: &[u8]) -> u64 {
        let mut completed = 0;
        while !data.is_empty() {
            if self.partial.len() < PREFIX {
                let take = (PREFIX - self.partial.len()).min(data.len());
                self.partial.extend_from_slice(&data[..take]);
                data = &data[take..];
                if self.partial.len() < PREFIX {
                    break;
                }
            }
            let length = u32::from_be_bytes(self.partial[1..PREFIX].try_into().unwrap());
            let whole = PREFIX + length as usize;
            let take = (whole - self.partial.len()).min(data.len());
            self.partial.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.partial.len() == whole {
                let seq = self
                    .partial
                    .get(PREFIX..PREFIX + 8)
                    .map(|bytes| u64::from_be_bytes(bytes.try_into().unwrap()));
                if seq != Some(self.next) {
                    self.out_of_order += 1;
                }
                self.next = seq.map_or(self.next + 1, |seq| seq + 1);
                self.messages += 1;
                completed += 1;
                self.partial.clear();
            }
        }
        completed
    }
}

// ---------------------------------------------------------------- upstream

async fn serve(args: &[String]) -> Result<(), Error> {
    let port: u16 = args.first().ok_or("serve PORT")?.parse()?;
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    println!("serving 127.0.0.1:{port}");
    loop {
        let (socket, _) = listener.accept().await?;
        socket.set_nodelay(true)?;
        let service = hyper::service::service_fn(|request: Request<Incoming>| async move {
            let path = request.uri().path().to_owned();
            let echo = Echo {
                body: request.into_body(),
                path,
                reader: Reader::default(),
                first: None,
                cells: Vec::new(),
                ended: None,
                empty_frames: 0,
            };
            let response = Response::builder()
                .header("content-type", "application/grpc")
                .body(echo)
                .unwrap();
            Ok::<_, std::convert::Infallible>(response)
        });
        tokio::spawn(async move {
            let served =
                hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(socket), service)
                    .await;
            if let Err(error) = served {
                // Debug: hyper's Display says only "http2 error"; the h2
                // error under it names the reason and who sent it.
                println!("upstream connection: {error:?}");
            }
        });
    }
}

/// An answer that is its call's body, echoed: each frame passes back as
/// it is read (so the upstream reads no faster than its answer is taken),
/// its messages counted and checked on the way.
struct Echo {
    body: Incoming,
    path: String,
    reader: Reader,
    first: Option<Instant>,
    /// Messages completed in each [`CELL`] since the first frame.
    cells: Vec<u32>,
    /// How the body ended, once it did.
    ended: Option<&'static str>,
    /// Empty chunks of the body, not echoed.
    empty_frames: u64,
}

impl Echo {
    fn count(&mut self, data: &[u8]) {
        let now = Instant::now();
        let first = *self.first.get_or_insert(now);
        let completed = self.reader.read(data);
        let cell = (now.duration_since(first).as_nanos() / CELL.as_nanos()) as usize;
        if self.cells.len() <= cell {
            self.cells.resize(cell + 1, 0);
        }
        self.cells[cell] += completed as u32;
    }

    /// The call's line: what came, and at what rate over the first 30 s
    /// and from 5 s to 25 s (past the burst and before the client stops).
    fn report(&self) {
        let per_second = |from: f64, to: f64| {
            let (a, b) = (secs_to_cell(from), secs_to_cell(to));
            let got: u64 = self
                .cells
                .iter()
                .take(b)
                .skip(a)
                .map(|&n| u64::from(n))
                .sum();
            got as f64 / (to - from)
        };
        let last_cell = self.cells.iter().rposition(|&n| n > 0).unwrap_or(0);
        let in_30s: u64 = self
            .cells
            .iter()
            .take(secs_to_cell(30.0))
            .map(|&n| u64::from(n))
            .sum();
        println!(
            "call path={} messages={} out_of_order={} partial_bytes={} empty_frames={} end={} \
             in_first_30s={} rate_first_30s={:.1} rate_5_to_25s={:.1} last_message_ms={}",
            self.path,
            self.reader.messages,
            self.reader.out_of_order,
            self.reader.partial.len(),
            self.empty_frames,
            self.ended.unwrap_or("dropped"),
            in_30s,
            in_30s as f64 / 30.0,
            per_second(5.0, 25.0),
            (last_cell as u128 * CELL.as_millis()),
        );
    }
}

fn secs_to_cell(secs: f64) -> usize {
    (secs / CELL.as_secs_f64()).round() as usize
}

impl Body for Echo {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = self.get_mut();
        if this.ended.is_some() {
            return Poll::Ready(None);
        }
        loop {
            return match std::task::ready!(Pin::new(&mut this.body).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    // An empty chunk (the client's end of stream comes as
                    // one) is not echoed: h2 0.4.20 answers a peer that
                    // sends more than 100 empty DATA frames on a connection
                    // with GOAWAY, and sluice's pool carries every call on
                    // one connection to this server.
                    Ok(data) if data.is_empty() => {
                        this.empty_frames += 1;
                        continue;
                    }
                    Ok(data) => {
                        this.count(&data);
                        Poll::Ready(Some(Ok(Frame::data(data))))
                    }
                    // The client's trailers: a gRPC client sends none.
                    Err(_) => continue,
                },
                None => {
                    this.ended = Some("complete");
                    this.report();
                    let mut trailers = HeaderMap::new();
                    trailers.insert("grpc-status", "0".parse().unwrap());
                    Poll::Ready(Some(Ok(Frame::trailers(trailers))))
                }
                Some(Err(error)) => {
                    this.ended = Some("reset");
                    this.report();
                    Poll::Ready(Some(Err(error.into())))
                }
            };
        }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        if self.ended.is_none() {
            self.report();
        }
    }
}

// ------------------------------------------------------------------ client

/// One HTTP/2 connection to `addr`. Its receive windows are large, so that
/// echoes never wait on the client.
async fn connect(addr: SocketAddr) -> Result<h2::client::SendRequest<Bytes>, Error> {
    let socket = TcpStream::connect(addr).await?;
    socket.set_nodelay(true)?;
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(4 << 20)
        .initial_connection_window_size(16 << 20)
        .handshake(socket)
        .await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            eprintln!("client connection: {error}");
        }
    });
    Ok(send.ready().await?)
}

/// A call: what sends its messages, and its answer.
struct Call {
    send: h2::SendStream<Bytes>,
    answer: h2::client::ResponseFuture,
}

async fn open(client: &h2::client::SendRequest<Bytes>, path: &str) -> Result<Call, Error> {
    let request = Request::post(format!("http://sluice.bench{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())?;
    let mut client = client.clone().ready().await?;
    let (answer, send) = client.send_request(request, false)?;
    Ok(Call { send, answer })
}

/// Sends all of `data` on `send`, each DATA frame no larger than the
/// stream's window lets through at the time (a message may be cut across
/// two frames, as any client's may).
async fn send_within_window(
    send: &mut h2::SendStream<Bytes>,
    mut data: Bytes,
) -> Result<(), Error> {
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let mut capacity = send.capacity();
        while capacity == 0 {
            match poll_fn(|cx| send.poll_capacity(cx)).await {
                Some(Ok(_)) => capacity = send.capacity(),
                Some(Err(error)) => return Err(error.into()),
                None => return Err("the stream closed".into()),
            }
        }
        let part = data.split_to(capacity.min(data.len()));
        send.send_data(part, false)?;
    }
    Ok(())
}

/// The answer to a call, read to its end, its echoed messages counted
/// (into `echoed`, waking `progress`, as they come) and checked.
async fn read_answer(
    answer: h2::client::ResponseFuture,
    echoed: Arc<AtomicU64>,
    progress: Arc<Notify>,
) -> Result<Reader, Error> {
    let response = answer.await?;
    let mut body = response.into_body();
    let mut reader = Reader::default();
    while let Some(data) = body.data().await {
        let data = data?;
        let _ = body.flow_control().release_capacity(data.len());
        let completed = reader.read(&data);
        if completed > 0 {
            echoed.fetch_add(completed, Ordering::Release);
            progress.notify_one();
        }
    }
    let trailers = body.trailers().await?.unwrap_or_default();
    match trailers.get("grpc-status").map(|s| s.as_bytes()) {
        Some(b"0") => Ok(reader),
        status => Err(format!("the call ended with grpc-status {status:?}").into()),
    }
}

/// `pid`'s memory from `/proc/PID/status`, in KiB: `VmRSS`, and its
/// anonymous part (`RssAnon`: the heap, what buffers cost) apart from the
/// file-backed one (`RssFile`: mostly the binary's code, which grows as
/// code runs for the first time).
#[derive(Clone, Copy, Default)]
struct Memory {
    rss: u64,
    anon: u64,
    file: u64,
}

fn memory_of(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .unwrap_or(0)
    };
    Memory {
        rss: field("VmRSS:"),
        anon: field("RssAnon:"),
        file: field("RssFile:"),
    }
}

/// The median and the largest of `values`.
fn median_max(values: &[u64]) -> (u64, u64) {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0);
    (median, sorted.last().copied().unwrap_or(0))
}

/// `pid`'s CPU: utime+stime in clock ticks (`/proc/PID/stat`, as
/// `scripts/grpc-bench/run.sh` reads it), and its tasks' run time in
/// nanoseconds (`/proc/PID/task/*/schedstat`), finer than a tick.
fn cpu_of(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command's closing parenthesis, from `state` on:
    // utime and stime are the 14th and 15th of the line.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let ticks = field(14).unwrap_or(0) + field(15).unwrap_or(0);
    let mut nanos = 0;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            let schedstat =
                std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
            nanos += schedstat
                .split_whitespace()
                .next()
                .and_then(|ns| ns.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    (ticks, nanos)
}

/// Linux's USER_HZ, the clock tick `/proc/PID/stat` counts in: 100 on
/// every architecture sluice is built for (`getconf CLK_TCK`).
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

// --------------------------------------------------------- held and ping

/// The ping-pong call beside the held one: one message, then its echo,
/// until `until`; the latency of each round trip.
async fn ping_pong(call: Call, until: Instant) -> Result<Vec<Duration>, Error> {
    let Call { mut send, answer } = call;
    let response = answer.await?;
    let mut body = response.into_body();
    let mut reader = Reader::default();
    let mut latencies = Vec::new();
    let mut seq = 0;
    while Instant::now() < until {
        let began = Instant::now();
        send_within_window(&mut send, messages(seq, 1)).await?;
        seq += 1;
        while reader.messages < seq {
            let data = body.data().await.ok_or("the ping call ended early")??;
            let _ = body.flow_control().release_capacity(data.len());
            reader.read(&data);
        }
        latencies.push(began.elapsed());
    }
    send.send_data(Bytes::new(), true)?;
    while let Some(data) = body.data().await {
        let _ = body.flow_control().release_capacity(data?.len());
    }
    if reader.out_of_order > 0 {
        return Err(format!("{} pings echoed out of order", reader.out_of_order).into());
    }
    Ok(latencies)
}

/// The held call's sender: messages as fast as the window takes them until
/// `until`, `per_frame` at most in a frame; then the end of its body.
/// Returns the messages sent (each sent whole).
async fn flood(
    send: &mut h2::SendStream<Bytes>,
    per_frame: u64,
    until: Instant,
) -> Result<u64, Error> {
    let mut seq = 0;
    while Instant::now() < until {
        // A batch started is sent whole: the upstream must not see a
        // message cut short by the end of the run.
        send_within_window(send, messages(seq, per_frame)).await?;
        seq += per_frame;
    }
    send.send_data(Bytes::new(), true)?;
    Ok(seq)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e6
}

async fn held(args: &Args) -> Result<(), Error> {
    let bound = Duration::from_secs_f64(args.seconds + args.settle + 120.0);
    tokio::time::timeout(bound, held_run(args))
        .await
        .map_err(|_| format!("the run took longer than {bound:?}"))?
}

async fn held_run(args: &Args) -> Result<(), Error> {
    let per_frame = match args.per_frame {
        0 => 16,
        n => n as u64,
    };
    let client = connect(args.addr).await?;
    // Warm the connection and both paths' code up, so that the level
    // before counts the code pages they fault in: a second of pings on a
    // call of its own, and a short call on the held path (30 messages, some
    // over the burst and so delayed), in both modes.
    let warm = open(&client, "/bench.Load/Ping").await?;
    let warmed = ping_pong(warm, Instant::now() + Duration::from_secs(1)).await?;
    let Call { mut send, answer } = open(&client, "/bench.Load/Held").await?;
    let answer = tokio::spawn(read_answer(
        answer,
        Arc::new(AtomicU64::new(0)),
        Arc::new(Notify::new()),
    ));
    send_within_window(&mut send, messages(0, 30)).await?;
    send.send_data(Bytes::new(), true)?;
    let warm_held = answer.await??;
    // The 30 messages took a tenth of the bucket's refill: full again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = memory_of(args.sluice_pid);
    println!(
        "warm pings={} held_messages={} rss_before_kib={} anon_before_kib={} file_before_kib={}",
        warmed.len(),
        warm_held.messages,
        before.rss,
        before.anon,
        before.file
    );

    let began = Instant::now();
    let send_until = began + Duration::from_secs_f64(args.seconds);
    let ping_from = began + Duration::from_secs_f64(args.settle);
    let ping_until = ping_from + Duration::from_secs_f64(args.neighbour_seconds);

    // The RSS, every 250 ms from the open of the held call (or where it
    // would open) until its sender stops.
    let pid = args.sluice_pid;
    let sampling = tokio::spawn(async move {
        let mut samples = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        while Instant::now() < send_until {
            tick.tick().await;
            samples.push((began.elapsed().as_secs_f64(), memory_of(pid)));
        }
        samples
    });

    let holding = if args.no_held {
        None
    } else {
        let Call { mut send, answer } = open(&client, "/bench.Load/Held").await?;
        let echoed = Arc::new(AtomicU64::new(0));
        let answer = tokio::spawn(read_answer(answer, echoed, Arc::new(Notify::new())));
        let sender = tokio::spawn(async move { flood(&mut send, per_frame, send_until).await });
        Some((sender, answer))
    };

    tokio::time::sleep_until(ping_from.into()).await;
    let ping = open(&client, "/bench.Load/Ping").await?;
    let mut latencies = ping_pong(ping, ping_until).await?;

    let samples = sampling.await?;
    if let Some((sender, answer)) = holding {
        let sent = sender.await??;
        let stopped = began.elapsed();
        let reader = answer.await??;
        let drained = began.elapsed();
        println!(
            "held sent={sent} offered_per_s={:.1} echoed={} echo_out_of_order={} \
             send_stopped_s={:.2} answer_ended_s={:.2}",
            sent as f64 / stopped.as_secs_f64(),
            reader.messages,
            reader.out_of_order,
            stopped.as_secs_f64(),
            drained.as_secs_f64()
        );
        if reader.messages != sent || reader.out_of_order > 0 {
            return Err("the held call's echoes were not its messages, in order".into());
        }
    }
    // From the settle on: the held stream at its full window by then.
    let steady: Vec<Memory> = samples
        .iter()
        .filter(|(at, _)| *at >= args.settle)
        .map(|&(_, memory)| memory)
        .collect();
    let growth = |part: fn(&Memory) -> u64| {
        let values: Vec<u64> = steady.iter().map(part).collect();
        let (median, max) = median_max(&values);
        let base = part(&before) as i64;
        (median as i64 - base, max as i64 - base)
    };
    let (rss_median, rss_max) = growth(|m| m.rss);
    let (anon_median, anon_max) = growth(|m| m.anon);
    let (file_median, file_max) = growth(|m| m.file);
    // VmRSS each second, for the shape of the growth.
    let series: Vec<String> = samples
        .iter()
        .step_by(4)
        .map(|(_, memory)| memory.rss.to_string())
        .collect();
    println!(
        "rss held={} samples={} growth_median_kib={rss_median} growth_max_kib={rss_max} \
         anon_growth_median_kib={anon_median} anon_growth_max_kib={anon_max} \
         file_growth_median_kib={file_median} file_growth_max_kib={file_max} \
         vmrss_each_second_kib={}",
        !args.no_held,
        steady.len(),
        series.join(",")
    );
    latencies.sort_unstable();
    println!(
        "neighbour held={} pings={} p50_us={:.1} p90_us={:.1} p99_us={:.1} p999_us={:.1} \
         max_us={:.1}",
        !args.no_held,
        latencies.len(),
        percentile(&latencies, 50.0),
        percentile(&latencies, 90.0),
        percentile(&latencies, 99.0),
        percentile(&latencies, 99.9),
        percentile(&latencies, 100.0),
    );
    Ok(())
}

// -------------------------------------------------------------------- load

async fn load(args: &Args) -> Result<(), Error> {
    let bound = Duration::from_secs(300);
    tokio::time::timeout(bound, load_run(args))
        .await
        .map_err(|_| format!("the run took longer than {bound:?}"))?
}

async fn load_run(args: &Args) -> Result<(), Error> {
    let per_frame = args.per_frame.max(1) as u64;
    let client = connect(args.addr).await?;
    let mut calls = Vec::new();
    for _ in 0..args.streams {
        calls.push(open(&client, &args.path).await?);
    }
    let (ticks_before, nanos_before) = cpu_of(args.sluice_pid);
    let began = Instant::now();
    let mut streams = Vec::new();
    for Call { mut send, answer } in calls {
        let echoed = Arc::new(AtomicU64::new(0));
        let progress = Arc::new(Notify::new());
        // Set once the answer ended, well or not: a sender waiting for
        // echoes stops waiting then.
        let ended = Arc::new(AtomicBool::new(false));
        let answer = tokio::spawn({
            let (echoed, progress, ended) = (
                Arc::clone(&echoed),
                Arc::clone(&progress),
                Arc::clone(&ended),
            );
            async move {
                let read = read_answer(answer, echoed, Arc::clone(&progress)).await;
                ended.store(true, Ordering::Release);
                progress.notify_one();
                read
            }
        });
        let (total, depth) = (args.messages, args.depth);
        let sender = tokio::spawn(async move {
            let mut sent = 0;
            while sent < total {
                // Each frame `per_frame` messages (the last what is left),
                // sent once that many more may be in flight.
                let batch = per_frame.min(total - sent);
                let mut in_flight = sent - echoed.load(Ordering::Acquire);
                while in_flight + batch > depth {
                    if ended.load(Ordering::Acquire) {
                        return Err("the answer ended before every message was sent".into());
                    }
                    // A permit stored by a `notify_one` before this wait
                    // wakes it at once: no echo is missed.
                    progress.notified().await;
                    in_flight = sent - echoed.load(Ordering::Acquire);
                }
                send_within_window(&mut send, messages(sent, batch)).await?;
                sent += batch;
            }
            send.send_data(Bytes::new(), true)?;
            Ok::<_, Error>(sent)
        });
        streams.push((sender, answer));
    }
    let mut sent = 0;
    let mut echoed = 0;
    for (sender, answer) in streams {
        let answered = answer.await?;
        let sending = sender.await?;
        // The answer's error first: it says why the sender stopped.
        let reader = answered?;
        sent += sending?;
        if reader.out_of_order > 0 {
            return Err("echoes out of order".into());
        }
        echoed += reader.messages;
    }
    let elapsed = began.elapsed();
    let (ticks_after, nanos_after) = cpu_of(args.sluice_pid);
    if echoed != sent {
        return Err(format!("sent {sent} messages, {echoed} echoed").into());
    }
    let ticks = ticks_after - ticks_before;
    let cpu_us = ticks as f64 / CLOCK_TICKS_PER_SECOND * 1e6;
    let run_us = (nanos_after - nanos_before) as f64 / 1e3;
    println!(
        "load path={} streams={} per_frame={per_frame} depth={} messages={sent} elapsed_s={:.3} \
         messages_per_s={:.0} sluice_ticks={ticks} cpu_us_per_message={:.3} \
         schedstat_us_per_message={:.3}",
        args.path,
        args.streams,
        args.depth,
        elapsed.as_secs_f64(),
        sent as f64 / elapsed.as_secs_f64(),
        cpu_us / sent as f64,
        run_us / sent as f64,
    );
    Ok(())
}
