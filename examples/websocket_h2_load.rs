//! WebSockets over HTTP/2 (RFC 8441) against WebSockets over HTTP/1.1,
//! through the release binary on loopback; `scripts/websocket-h2-bench/run.sh`
//! runs it. One program, three modes:
//!
//! ```sh
//! websocket_h2_load upstream PORT
//! websocket_h2_load memory ADDR --sluice-pid PID --mode h2|h1
//!     [--tunnels 1000] [--streams 250] [--settle 12]
//! websocket_h2_load echo ADDR --sluice-pid PID [--tunnels 1000]
//!     [--streams 250] [--rounds 5] [--rate 5000 --seconds 10 | --rate 0 --sweeps 20]
//!     [--settle 12]
//! ```
//!
//! - `upstream`: an HTTP/1.1 WebSocket server (RFC 6455) that answers each
//!   handshake `101` with the `Sec-WebSocket-Accept` of its key (sluice
//!   checks it: docs/conversation.md, "WebSockets over HTTP/2"), then echoes
//!   each frame's payload back unmasked as a server's frame with the same
//!   first byte, answers a ping with a pong and a Close frame with its own.
//! - `memory`: opens `--tunnels` WebSockets through sluice, as
//!   `--tunnels / --streams` HTTP/2 connections carrying `--streams`
//!   extended `CONNECT`s each (`h2`) or as as many HTTP/1.1 upgrades (`h1`),
//!   each echoing one message once open (so each tunnel has carried bytes
//!   both ways), then waits `--settle` seconds and reads sluice's VmRSS
//!   again: KiB per tunnel.
//! - `echo`: opens both sets (the `h2` one first, VmRSS read after each),
//!   then runs `--rounds` rounds, each the `h2` set then the `h1` set or
//!   the other way round (alternating, so neither always goes first after
//!   the other's idle spell). In a round every tunnel of the set sends one
//!   masked 64-byte text message and waits for its echo, either at a steady
//!   aggregate `--rate` for `--seconds` (each tunnel every
//!   `tunnels / rate` s, the tunnels' starts spread evenly over that
//!   period), or, with `--rate 0`, in `--sweeps` sweeps in which all the
//!   set's tunnels send at once and the sweep ends when the last echo is
//!   back. Reports each round's p50/p99/p99.9/max latency (from just
//!   before the write to the echo read whole) and sluice's CPU per echoed
//!   message: utime+stime from `/proc/PID/stat` (clock ticks) and the
//!   run time of its threads from `/proc/PID/task/*/schedstat` (ns).
//!
//! The client and the upstream are each one thread (a current-thread
//! runtime), so that the two share the one CPU the script pins them to and
//! leave sluice's alone. Every wait is bounded: an exchange that takes more
//! than 5 s counts as an error, and opening gives up after 10 s a tunnel.

use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::join_all;
use http::{Method, Request, StatusCode};
use http_body_util::Empty;
use hyper::client::conn::http2::SendRequest;
use hyper::upgrade::Upgraded;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Each message's payload: the issue's 64 bytes of text.
const PAYLOAD: usize = 64;
/// A client's frame: two header bytes, the mask, the payload.
const SENT: usize = 2 + 4 + PAYLOAD;
/// The server's echo: two header bytes and the payload, unmasked.
const ECHO: usize = 2 + PAYLOAD;
/// A text frame with FIN.
const TEXT: u8 = 0x81;
/// The longest an exchange or an opening may take before it is an error.
const BOUND: Duration = Duration::from_secs(5);
const OPEN_BOUND: Duration = Duration::from_secs(10);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let outcome = match args.first().map(String::as_str) {
        Some("upstream") => runtime.block_on(upstream(&args[1..])),
        Some("memory") => runtime.block_on(memory(&Args::parse(&args[1..]))),
        Some("echo") => runtime.block_on(echo(&Args::parse(&args[1..]))),
        _ => Err("usage: websocket_h2_load upstream PORT | memory ADDR ... | echo ADDR ...".into()),
    };
    if let Err(error) = outcome {
        eprintln!("websocket_h2_load: {error}");
        std::process::exit(1);
    }
}

/// A client mode's arguments: the address, then `--name value` pairs.
struct Args {
    addr: SocketAddr,
    sluice_pid: u32,
    mode: String,
    tunnels: usize,
    streams: usize,
    settle: f64,
    rounds: usize,
    rate: f64,
    seconds: f64,
    sweeps: usize,
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
            mode: "h2".into(),
            tunnels: 1000,
            streams: 250,
            settle: 12.0,
            rounds: 5,
            rate: 5000.0,
            seconds: 10.0,
            sweeps: 20,
        };
        let mut rest = args[1..].iter();
        while let Some(name) = rest.next() {
            let value = rest
                .next()
                .unwrap_or_else(|| panic!("{name} needs a value"));
            let number = || -> f64 { value.parse().unwrap_or_else(|_| panic!("{name} {value}")) };
            match name.as_str() {
                "--sluice-pid" => parsed.sluice_pid = number() as u32,
                "--mode" => parsed.mode = value.clone(),
                "--tunnels" => parsed.tunnels = number() as usize,
                "--streams" => parsed.streams = number() as usize,
                "--settle" => parsed.settle = number(),
                "--rounds" => parsed.rounds = number() as usize,
                "--rate" => parsed.rate = number(),
                "--seconds" => parsed.seconds = number(),
                "--sweeps" => parsed.sweeps = number() as usize,
                _ => panic!("unknown argument {name}"),
            }
        }
        assert!(parsed.sluice_pid > 0, "--sluice-pid PID is needed");
        assert!(parsed.streams > 0 && parsed.tunnels > 0);
        parsed
    }
}

// ---------------------------------------------------------------- frames

/// The `Sec-WebSocket-Accept` answering `key` (RFC 6455 §4.2.2).
fn accept_for(key: &str) -> String {
    use base64::Engine as _;
    let hashed = aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11").as_bytes(),
    );
    base64::engine::general_purpose::STANDARD.encode(hashed.as_ref())
}

/// The value of the field `name` in an HTTP/1.1 `head`.
fn field<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().find_map(|line| {
        let (field, value) = line.split_once(':')?;
        field.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// Message `seq`'s payload: its number in hex, then filler, 64 ASCII bytes
/// (a text message's payload must be UTF-8, which the server checks).
fn payload(seq: u64) -> [u8; PAYLOAD] {
    let mut out = [b'.'; PAYLOAD];
    out[..16].copy_from_slice(format!("{seq:016x}").as_bytes());
    out
}

/// Message `seq` as a client sends it: masked with a fresh key, as RFC 6455
/// §5.3 wants of a client.
fn masked_text(seq: u64) -> [u8; SENT] {
    let key: [u8; 4] = rand::random();
    let mut out = [0u8; SENT];
    out[0] = TEXT;
    out[1] = 0x80 | PAYLOAD as u8;
    out[2..6].copy_from_slice(&key);
    for (i, b) in payload(seq).iter().enumerate() {
        out[6 + i] = b ^ key[i % 4];
    }
    out
}

/// A server's frame: `first`, then `payload` unmasked.
fn server_frame(out: &mut Vec<u8>, first: u8, payload: &[u8]) {
    out.push(first);
    match payload.len() {
        n if n < 126 => out.push(n as u8),
        n if n <= 0xFFFF => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
}

/// One frame at the front of `buf`, if it is all there: its first byte,
/// its payload unmasked, and its length on the wire.
fn parse(buf: &[u8]) -> Option<(u8, Vec<u8>, usize)> {
    let (&first, &second) = (buf.first()?, buf.get(1)?);
    let (len, mut at) = match second & 0x7F {
        126 => (
            u64::from(u16::from_be_bytes([*buf.get(2)?, *buf.get(3)?])),
            4,
        ),
        127 => (u64::from_be_bytes(buf.get(2..10)?.try_into().ok()?), 10),
        n => (u64::from(n), 2),
    };
    let key = if second & 0x80 != 0 {
        let key: [u8; 4] = buf.get(at..at + 4)?.try_into().ok()?;
        at += 4;
        key
    } else {
        [0; 4]
    };
    let end = at + usize::try_from(len).ok()?;
    let payload = buf
        .get(at..end)?
        .iter()
        .enumerate()
        .map(|(i, b)| b ^ key[i % 4])
        .collect();
    Some((first, payload, end))
}

// ---------------------------------------------------------------- upstream

async fn upstream(args: &[String]) -> Result<(), Error> {
    let port: u16 = args.first().and_then(|p| p.parse().ok()).ok_or("PORT")?;
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    println!("serving 127.0.0.1:{port}");
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(async move {
                    if let Err(error) = serve(stream).await {
                        eprintln!("upstream connection: {error}");
                    }
                });
            }
            // Out of descriptors, say: said, and the listener goes on.
            Err(error) => {
                eprintln!("accept: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One connection: the handshake, then echoes until a Close frame or the
/// connection's end.
async fn serve(mut stream: TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    buf.drain(..end);
    let Some(key) = field(&head, "sec-websocket-key") else {
        stream
            .write_all(
                b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            )
            .await?;
        return Ok(());
    };
    let answer = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n\r\n",
        accept_for(key)
    );
    stream.write_all(answer.as_bytes()).await?;
    let mut out = Vec::with_capacity(256);
    loop {
        let mut used = 0;
        let mut closed = false;
        while let Some((first, payload, len)) = parse(&buf[used..]) {
            used += len;
            match first & 0x0F {
                0x8 => {
                    server_frame(&mut out, first, &payload);
                    closed = true;
                    break;
                }
                0x9 => server_frame(&mut out, 0x8A, &payload),
                0xA => {}
                _ => server_frame(&mut out, first, &payload),
            }
        }
        buf.drain(..used);
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
        if closed {
            return stream.shutdown().await;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

// ---------------------------------------------------------------- client

/// One HTTP/2 connection to sluice (prior knowledge), once its SETTINGS
/// advertised extended CONNECT: before that h2 refuses to send one.
async fn connect_h2(addr: SocketAddr) -> Result<SendRequest<Empty<Bytes>>, Error> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (send, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(stream))
        .await?;
    let (said, mut advertised) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut connection = Box::pin(connection);
        // hyper's connection future is not woken by the server's SETTINGS
        // alone: until they have said extended CONNECT, it is polled every
        // 10 ms too (as tests/support/websocket_h2.rs does), then only as
        // hyper wakes it.
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        let mut known = false;
        let _ = poll_fn(|cx| {
            if !known {
                while tick.poll_tick(cx).is_ready() {}
            }
            let polled = connection.as_mut().poll(cx);
            if !known && connection.is_extended_connect_protocol_enabled() {
                known = true;
                said.send_replace(true);
            }
            polled
        })
        .await;
    });
    tokio::time::timeout(Duration::from_secs(5), advertised.wait_for(|&on| on))
        .await
        .map_err(|_| "sluice's SETTINGS did not advertise extended CONNECT within 5 s")??;
    Ok(send)
}

/// A WebSocket on a stream of `send`'s connection: an extended CONNECT with
/// `:protocol = websocket` (RFC 8441 §4), answered `200`.
async fn open_h2(send: &SendRequest<Empty<Bytes>>) -> Result<TokioIo<Upgraded>, Error> {
    let mut request = Request::builder()
        .method(Method::CONNECT)
        .uri("http://bench/ws")
        .header("sec-websocket-version", "13")
        .body(Empty::new())?;
    request
        .extensions_mut()
        .insert(hyper::ext::Protocol::from_static("websocket"));
    let mut response = send.clone().send_request(request).await?;
    if response.status() != StatusCode::OK {
        return Err(format!("extended CONNECT answered {}", response.status()).into());
    }
    Ok(TokioIo::new(hyper::upgrade::on(&mut response).await?))
}

/// A WebSocket over its own HTTP/1.1 connection: the upgrade, answered
/// `101` with the accept of this key.
async fn open_h1(addr: SocketAddr) -> Result<TcpStream, Error> {
    use base64::Engine as _;
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let key = base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 16]>());
    let head = format!(
        "GET /ws HTTP/1.1\r\nHost: bench\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await?;
    // Read a byte at a time: nothing past the head may be taken off the
    // stream (the upstream sends nothing of its own, but the reads of the
    // echoes assume the stream starts at a frame).
    let mut answer = Vec::with_capacity(256);
    while !answer.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        if stream.read(&mut byte).await? == 0 {
            return Err(format!("closed before an answer: {answer:?}").into());
        }
        answer.push(byte[0]);
    }
    let answer = String::from_utf8_lossy(&answer);
    if !answer.starts_with("HTTP/1.1 101") {
        return Err(format!("the upgrade was answered {answer:?}").into());
    }
    if field(&answer, "sec-websocket-accept") != Some(accept_for(&key).as_str()) {
        return Err(format!("the 101 accepts another key: {answer:?}").into());
    }
    Ok(stream)
}

/// One message and its echo: the time from just before the write to the
/// echo read whole.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut S,
    seq: u64,
) -> Result<Duration, Error> {
    let frame = masked_text(seq);
    let mut echo = [0u8; ECHO];
    let start = Instant::now();
    tokio::time::timeout(BOUND, async {
        io.write_all(&frame).await?;
        io.flush().await?;
        io.read_exact(&mut echo).await
    })
    .await
    .map_err(|_| "no echo within 5 s")??;
    let took = start.elapsed();
    if echo[0] != TEXT || echo[1] != PAYLOAD as u8 || echo[2..] != payload(seq) {
        return Err(format!("a wrong echo: {echo:?}").into());
    }
    Ok(took)
}

/// The tunnels of one kind, each with its next message's number.
struct Set<S> {
    name: &'static str,
    tunnels: Vec<(S, u64)>,
    /// HTTP/2 connections the set's tunnels are on (none for HTTP/1.1),
    /// kept so that the connections stay up.
    connections: Vec<SendRequest<Empty<Bytes>>>,
}

async fn open_h2_set(
    addr: SocketAddr,
    count: usize,
    streams: usize,
) -> Result<Set<TokioIo<Upgraded>>, Error> {
    let mut set = Set {
        name: "h2",
        tunnels: Vec::with_capacity(count),
        connections: Vec::new(),
    };
    while set.tunnels.len() < count {
        if set.tunnels.len() % streams == 0 {
            set.connections.push(connect_h2(addr).await?);
        }
        let send = set.connections.last().expect("a connection");
        let mut io = tokio::time::timeout(OPEN_BOUND, open_h2(send))
            .await
            .map_err(|_| "an extended CONNECT took over 10 s")??;
        exchange(&mut io, 0).await?;
        set.tunnels.push((io, 1));
    }
    Ok(set)
}

async fn open_h1_set(addr: SocketAddr, count: usize) -> Result<Set<TcpStream>, Error> {
    let mut set = Set {
        name: "h1",
        tunnels: Vec::with_capacity(count),
        connections: Vec::new(),
    };
    while set.tunnels.len() < count {
        let mut io = tokio::time::timeout(OPEN_BOUND, open_h1(addr))
            .await
            .map_err(|_| "an upgrade took over 10 s")??;
        exchange(&mut io, 0).await?;
        set.tunnels.push((io, 1));
    }
    Ok(set)
}

// ---------------------------------------------------------------- sluice

/// sluice's VmRSS, KiB.
fn rss_kib(pid: u32) -> Result<u64, Error> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .ok_or_else(|| "no VmRSS".into())
}

/// sluice's utime+stime, clock ticks (`/proc/PID/stat`, fields 14 and 15).
fn cpu_ticks(pid: u32) -> Result<u64, Error> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name, in parentheses, may hold spaces: count from its end.
    let after = stat.rsplit_once(')').ok_or("no )")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    Ok(fields[11].parse::<u64>()? + fields[12].parse::<u64>()?)
}

/// The run time of all sluice's threads, ns (`/proc/PID/task/*/schedstat`,
/// the first field): finer than clock ticks.
fn sched_ns(pid: u32) -> Result<u64, Error> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let path = task?.path().join("schedstat");
        // A thread that ended between the listing and the read took its
        // time with it: nothing to add.
        if let Ok(text) = std::fs::read_to_string(path) {
            total += text
                .split_whitespace()
                .next()
                .and_then(|ns| ns.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Ok(total)
}

fn clock_ticks_per_second() -> f64 {
    // CLK_TCK is 100 on every Linux this runs on; getconf says so when it
    // is at hand.
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100.0)
}

// ---------------------------------------------------------------- modes

async fn memory(args: &Args) -> Result<(), Error> {
    let before = rss_kib(args.sluice_pid)?;
    let opened = Instant::now();
    // Either set is held until the end of this function.
    let (h2, h1);
    let connections = match args.mode.as_str() {
        "h2" => {
            h2 = open_h2_set(args.addr, args.tunnels, args.streams).await?;
            h2.connections.len()
        }
        "h1" => {
            h1 = open_h1_set(args.addr, args.tunnels).await?;
            h1.tunnels.len()
        }
        other => return Err(format!("--mode {other}: h2 or h1").into()),
    };
    let open_s = opened.elapsed().as_secs_f64();
    let right_after = rss_kib(args.sluice_pid)?;
    tokio::time::sleep(Duration::from_secs_f64(args.settle)).await;
    let after = rss_kib(args.sluice_pid)?;
    println!(
        "memory mode={} tunnels={} connections={connections} open_s={open_s:.2} \
         rss_before_kib={before} rss_open_kib={right_after} rss_after_kib={after} \
         kib_per_tunnel={:.2}",
        args.mode,
        args.tunnels,
        (after as f64 - before as f64) / args.tunnels as f64
    );
    Ok(())
}

/// What one round of one set measured.
struct Round {
    latencies_ns: Vec<u64>,
    errors: u64,
    skipped: u64,
    wall: Duration,
    cpu_ticks: u64,
    sched_ns: u64,
}

/// Each tunnel at the steady rate: `every` apart, starting at `first`,
/// until `until`; a send that comes due while the last echo is still
/// awaited is skipped (counted), not queued.
async fn paced<S: AsyncRead + AsyncWrite + Unpin>(
    tunnel: &mut (S, u64),
    first: tokio::time::Instant,
    every: Duration,
    until: tokio::time::Instant,
) -> (Vec<u64>, u64, u64) {
    let (mut latencies, mut errors, mut skipped) = (Vec::new(), 0, 0);
    let mut due = first;
    while due < until {
        tokio::time::sleep_until(due).await;
        match exchange(&mut tunnel.0, tunnel.1).await {
            Ok(took) => latencies.push(took.as_nanos() as u64),
            Err(error) => {
                errors += 1;
                eprintln!("exchange: {error}");
                // A tunnel that failed once is left alone for this round.
                break;
            }
        }
        tunnel.1 += 1;
        due += every;
        let now = tokio::time::Instant::now();
        while due < now {
            due += every;
            skipped += 1;
        }
    }
    (latencies, errors, skipped)
}

async fn round<S: AsyncRead + AsyncWrite + Unpin>(
    set: &mut Set<S>,
    args: &Args,
) -> Result<Round, Error> {
    let (ticks, sched) = (cpu_ticks(args.sluice_pid)?, sched_ns(args.sluice_pid)?);
    let started = Instant::now();
    let mut result = Round {
        latencies_ns: Vec::new(),
        errors: 0,
        skipped: 0,
        wall: Duration::ZERO,
        cpu_ticks: 0,
        sched_ns: 0,
    };
    let n = set.tunnels.len();
    if args.rate > 0.0 {
        let every = Duration::from_secs_f64(n as f64 / args.rate);
        // The first sends 10 ms out, so that all the tunnels' futures are
        // set up before any is due.
        let start = tokio::time::Instant::now() + Duration::from_millis(10);
        let until = start + Duration::from_secs_f64(args.seconds);
        let each = join_all(set.tunnels.iter_mut().enumerate().map(|(i, tunnel)| {
            let first = start + every.mul_f64(i as f64 / n as f64);
            paced(tunnel, first, every, until)
        }))
        .await;
        for (latencies, errors, skipped) in each {
            result.latencies_ns.extend(latencies);
            result.errors += errors;
            result.skipped += skipped;
        }
    } else {
        for _ in 0..args.sweeps {
            let each = join_all(set.tunnels.iter_mut().map(|tunnel| async move {
                let took = exchange(&mut tunnel.0, tunnel.1).await;
                tunnel.1 += 1;
                took
            }))
            .await;
            for took in each {
                match took {
                    Ok(took) => result.latencies_ns.push(took.as_nanos() as u64),
                    Err(error) => {
                        result.errors += 1;
                        eprintln!("exchange: {error}");
                    }
                }
            }
        }
    }
    result.wall = started.elapsed();
    result.cpu_ticks = cpu_ticks(args.sluice_pid)? - ticks;
    result.sched_ns = sched_ns(args.sluice_pid)? - sched;
    Ok(result)
}

/// The `q` quantile of sorted values (nearest rank).
fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Per-round figures of one set, for the medians at the end.
#[derive(Default)]
struct Kept {
    p50: Vec<f64>,
    p99: Vec<f64>,
    cpu: Vec<f64>,
    sched: Vec<f64>,
    all_ns: Vec<u64>,
}

fn report(name: &str, r: usize, mut round: Round, tick: f64, kept: &mut Kept) {
    round.latencies_ns.sort_unstable();
    let lat = &round.latencies_ns;
    let messages = lat.len() as f64;
    let us = |ns: u64| ns as f64 / 1000.0;
    let cpu = round.cpu_ticks as f64 / tick * 1e6 / messages;
    let sched = round.sched_ns as f64 / 1000.0 / messages;
    println!(
        "round={r} set={name} messages={} errors={} skipped={} wall_s={:.2} rate={:.0} \
         p50_us={:.1} p90_us={:.1} p99_us={:.1} p999_us={:.1} max_us={:.1} \
         cpu_us_per_message={cpu:.2} sched_us_per_message={sched:.2}",
        lat.len(),
        round.errors,
        round.skipped,
        round.wall.as_secs_f64(),
        messages / round.wall.as_secs_f64(),
        us(quantile(lat, 0.5)),
        us(quantile(lat, 0.9)),
        us(quantile(lat, 0.99)),
        us(quantile(lat, 0.999)),
        us(quantile(lat, 1.0)),
    );
    kept.p50.push(us(quantile(lat, 0.5)));
    kept.p99.push(us(quantile(lat, 0.99)));
    kept.cpu.push(cpu);
    kept.sched.push(sched);
    kept.all_ns.extend_from_slice(lat);
}

async fn echo(args: &Args) -> Result<(), Error> {
    let tick = clock_ticks_per_second();
    let empty = rss_kib(args.sluice_pid)?;
    let mut h2 = open_h2_set(args.addr, args.tunnels, args.streams).await?;
    let with_h2 = rss_kib(args.sluice_pid)?;
    let mut h1 = open_h1_set(args.addr, args.tunnels).await?;
    let with_both = rss_kib(args.sluice_pid)?;
    tokio::time::sleep(Duration::from_secs_f64(args.settle)).await;
    let settled = rss_kib(args.sluice_pid)?;
    println!(
        "open h2_tunnels={} h2_connections={} h1_tunnels={} rss_empty_kib={empty} \
         rss_h2_kib={with_h2} rss_both_kib={with_both} rss_settled_kib={settled}",
        h2.tunnels.len(),
        h2.connections.len(),
        h1.tunnels.len()
    );
    let pace = if args.rate > 0.0 {
        format!(
            "steady aggregate rate {} messages/s for {} s",
            args.rate, args.seconds
        )
    } else {
        format!("{} sweeps of all tunnels at once", args.sweeps)
    };
    println!("pace: {pace}");
    // A round of each not counted: whatever either path sets up on its
    // first busy spell (buffers, timers) is set up before the rounds.
    let warm = Args {
        seconds: args.seconds.min(2.0),
        sweeps: args.sweeps.min(2),
        mode: String::new(),
        ..*args
    };
    round(&mut h2, &warm).await?;
    round(&mut h1, &warm).await?;
    let (mut k2, mut k1) = (Kept::default(), Kept::default());
    for r in 1..=args.rounds {
        // Which goes first alternates: each set in turn follows the other.
        let h2_first = r % 2 == 1;
        for which in [h2_first, !h2_first] {
            if which {
                let result = round(&mut h2, args).await?;
                report(h2.name, r, result, tick, &mut k2);
            } else {
                let result = round(&mut h1, args).await?;
                report(h1.name, r, result, tick, &mut k1);
            }
        }
    }
    for (name, kept) in [("h2", &mut k2), ("h1", &mut k1)] {
        kept.all_ns.sort_unstable();
        println!(
            "median set={name} p50_us={:.1} p99_us={:.1} cpu_us_per_message={:.2} \
             sched_us_per_message={:.2} pooled_p50_us={:.1} pooled_p99_us={:.1}",
            median(&mut kept.p50),
            median(&mut kept.p99),
            median(&mut kept.cpu),
            median(&mut kept.sched),
            quantile(&kept.all_ns, 0.5) as f64 / 1000.0,
            quantile(&kept.all_ns, 0.99) as f64 / 1000.0,
        );
    }
    println!(
        "ratio h2/h1 p50={:.3} p99={:.3} cpu={:.3} sched={:.3}",
        median(&mut k2.p50) / median(&mut k1.p50),
        median(&mut k2.p99) / median(&mut k1.p99),
        median(&mut k2.cpu) / median(&mut k1.cpu),
        median(&mut k2.sched) / median(&mut k1.sched),
    );
    drop(h1);
    drop(h2);
    Ok(())
}
