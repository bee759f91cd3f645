//! WebSocket on loopback with plain tokio sockets (RFC 6455): an upstream
//! that answers every handshake `101`, records every byte it receives
//! after it and every message, echoes each message back and answers pings,
//! answers a Close frame with its own and closes; on a path ending in
//! `/push/<ms>`, it sends a message of its own every `ms`; on a path with
//! `hold`, it keeps its connection open after the close handshake, until
//! sluice closes it; on a path ending in `/hangup/<ms>`, it closes the
//! connection after `ms`; on a path with `wrong-accept`, its `101`'s
//! `Sec-WebSocket-Accept` answers another key. A request that is no
//! handshake is answered `200 plain`. And a client
//! that opens a WebSocket through sluice and sends masked frames.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};

use super::{eventually, get, metric, write_config, SluiceProcess};

/// sluice (the binary) in front of `upstream` with `rest` after the
/// `[server]` table's `upstream` line (more `[server]` keys, then rules).
pub fn sluice(upstream: &WsUpstream, rest: &str) -> (SluiceProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n\n[server]\nlisten = \"127.0.0.1:0\"\n\
         upstream = \"http://{}\"\n{rest}",
        upstream.addr
    );
    let path = write_config(dir.path(), &config);
    (SluiceProcess::spawn(&path), dir)
}

/// One sample of sluice's `/metrics`; panics when it has no `series`.
pub async fn series(sluice: &SluiceProcess, series: &str) -> f64 {
    let text = get(&sluice.admin_url("/metrics"), &[]).await.body;
    metric(&text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// Waits (10 s at most) until `name` reads `value`.
pub async fn reaches(sluice: &SluiceProcess, name: &str, value: f64) {
    eventually(
        Duration::from_secs(10),
        &format!("{name} never read {value}"),
        || async { series(sluice, name).await == value },
    )
    .await;
}

/// A frame's first byte: FIN and the opcode.
pub const TEXT: u8 = 0x81;
pub const BINARY: u8 = 0x82;
pub const CLOSE: u8 = 0x88;
pub const PING: u8 = 0x89;
pub const PONG: u8 = 0x8A;
/// A first fragment of a text message, and the fragments after it.
pub const TEXT_START: u8 = 0x01;
pub const CONTINUE: u8 = 0x00;
pub const CONTINUE_END: u8 = 0x80;

/// One frame read whole (payload unmasked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub first: u8,
    pub payload: Vec<u8>,
}

impl Frame {
    /// A Close frame's code and reason.
    pub fn close(&self) -> Option<(u16, String)> {
        if self.first & 0x0F != 0x8 || self.payload.len() < 2 {
            return None;
        }
        let code = u16::from_be_bytes([self.payload[0], self.payload[1]]);
        Some((
            code,
            String::from_utf8_lossy(&self.payload[2..]).into_owned(),
        ))
    }
}

/// A frame with `first` (FIN and opcode) and `payload`, masked with
/// `mask` when it is a client's.
pub fn frame(first: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = vec![first];
    let bit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(bit | n as u8),
        n if n <= 0xFFFF => {
            out.push(bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(key) => {
            out.extend_from_slice(&key);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        }
        None => out.extend_from_slice(payload),
    }
    out
}

/// A masked client frame (a fixed key: any key is valid).
pub fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
    frame(first, payload, Some([0x5a, 0x17, 0xc3, 0x08]))
}

/// Reads one frame off the front of `buf`, if it is all there: the frame
/// and its length.
fn parse(buf: &[u8]) -> Option<(Frame, usize)> {
    let (&first, &second) = (buf.first()?, buf.get(1)?);
    let masked = second & 0x80 != 0;
    let (len, mut at) = match second & 0x7F {
        126 => (
            u64::from(u16::from_be_bytes([*buf.get(2)?, *buf.get(3)?])),
            4,
        ),
        127 => (u64::from_be_bytes(buf.get(2..10)?.try_into().ok()?), 10),
        n => (u64::from(n), 2),
    };
    let key = if masked {
        let key: [u8; 4] = buf.get(at..at + 4)?.try_into().ok()?;
        at += 4;
        Some(key)
    } else {
        None
    };
    let end = at + usize::try_from(len).ok()?;
    let payload = buf.get(at..end)?;
    let payload = match key {
        Some(key) => payload
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ key[i % 4])
            .collect(),
        None => payload.to_vec(),
    };
    Some((Frame { first, payload }, end))
}

/// What the upstream saw of one connection.
#[derive(Debug, Default)]
pub struct Seen {
    /// The handshake's request line and fields.
    pub head: Mutex<String>,
    /// Every byte received after the handshake, as received.
    pub bytes: Mutex<Vec<u8>>,
    /// Every data message, reassembled: its opcode and payload.
    pub messages: Mutex<Vec<(u8, Vec<u8>)>>,
    /// The Close frame received, if any.
    pub close: Mutex<Option<(u16, String)>>,
    /// Messages it pushed on its own.
    pub pushed: AtomicU64,
    /// Its reads saw the connection end (sluice shut or closed it).
    pub ended: AtomicBool,
}

/// The WebSocket upstream.
pub struct WsUpstream {
    pub addr: SocketAddr,
    /// Each connection, in the order accepted.
    pub conns: Arc<Mutex<Vec<Arc<Seen>>>>,
    /// How many connections were accepted so far, for [`WsUpstream::conn`]
    /// to wait on.
    accepted: tokio::sync::watch::Receiver<usize>,
}

impl WsUpstream {
    pub async fn start() -> WsUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let conns: Arc<Mutex<Vec<Arc<Seen>>>> = Arc::default();
        let kept = Arc::clone(&conns);
        let (count, accepted) = tokio::sync::watch::channel(0);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let seen = Arc::new(Seen::default());
                let total = {
                    let mut conns = kept.lock().unwrap();
                    conns.push(Arc::clone(&seen));
                    conns.len()
                };
                count.send_replace(total);
                tokio::spawn(serve(stream, seen));
            }
        });
        WsUpstream {
            addr,
            conns,
            accepted,
        }
    }

    /// The `n`th connection, once it was accepted (within 5 s).
    pub async fn conn(&self, n: usize) -> Arc<Seen> {
        let mut accepted = self.accepted.clone();
        let waited = tokio::time::timeout(
            Duration::from_secs(5),
            accepted.wait_for(|&total| total > n),
        )
        .await;
        assert!(
            matches!(waited, Ok(Ok(_))),
            "the upstream never accepted connection {n}"
        );
        let conns = self.conns.lock().unwrap();
        Arc::clone(&conns[n])
    }
}

async fn serve(stream: TcpStream, seen: Arc<Seen>) {
    let (mut read, write) = stream.into_split();
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    // The handshake's head.
    let head_end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        match read.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    *seen.head.lock().unwrap() = head.clone();
    buf.drain(..head_end);
    if field(&head, "upgrade").is_none() {
        // Not a handshake: a plain answer, and the connection closes.
        let mut write = write;
        let plain = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nplain";
        let _ = write.write_all(plain).await;
        let _ = write.shutdown().await;
        return;
    }
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let accept = if path.contains("wrong-accept") {
        "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".to_owned()
    } else {
        accept_for(field(&head, "sec-websocket-key").unwrap_or_default())
    };
    let mut answer = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {accept}\r\n"
    );
    if let Some(protocol) = field(&head, "sec-websocket-protocol") {
        let first = protocol.split(',').next().unwrap_or_default().trim();
        answer.push_str(&format!("Sec-WebSocket-Protocol: {first}\r\n"));
    }
    if path.contains("deflate") {
        answer.push_str("Sec-WebSocket-Extensions: permessage-deflate\r\n");
    }
    answer.push_str("\r\n");
    let write = Arc::new(tokio::sync::Mutex::new(write));
    if write
        .lock()
        .await
        .write_all(answer.as_bytes())
        .await
        .is_err()
    {
        return;
    }
    if let Some(every) = path
        .split_once("/push/")
        .and_then(|(_, ms)| ms.parse::<u64>().ok())
    {
        tokio::spawn(push(Arc::clone(&write), Arc::clone(&seen), every));
    }
    seen.bytes.lock().unwrap().extend_from_slice(&buf);
    let hold = path.contains("hold");
    let hangup = path
        .split_once("/hangup/")
        .and_then(|(_, ms)| ms.parse::<u64>().ok())
        .map(|ms| tokio::time::Instant::now() + Duration::from_millis(ms));
    let mut message: Option<(u8, Vec<u8>)> = None;
    loop {
        while let Some((frame, len)) = parse(&buf) {
            buf.drain(..len);
            let opcode = frame.first & 0x0F;
            let fin = frame.first & 0x80 != 0;
            match opcode {
                0x8 => {
                    *seen.close.lock().unwrap() = frame.close().or(Some((1005, String::new())));
                    let mut write = write.lock().await;
                    let _ = write
                        .write_all(&self::frame(CLOSE, &frame.payload, None))
                        .await;
                    if !hold {
                        let _ = write.shutdown().await;
                        return;
                    }
                }
                0x9 => {
                    let _ = write
                        .lock()
                        .await
                        .write_all(&self::frame(PONG, &frame.payload, None))
                        .await;
                }
                0xA => {}
                _ => {
                    let (start, mut payload) = match (opcode, message.take()) {
                        (0, Some(begun)) => begun,
                        (_, _) => (opcode, Vec::new()),
                    };
                    payload.extend_from_slice(&frame.payload);
                    if fin {
                        seen.messages.lock().unwrap().push((start, payload.clone()));
                        let echo = self::frame(0x80 | start, &payload, None);
                        let _ = write.lock().await.write_all(&echo).await;
                    } else {
                        message = Some((start, payload));
                    }
                }
            }
        }
        let far = tokio::time::Instant::now() + Duration::from_secs(3600);
        let read = tokio::select! {
            read = read.read(&mut chunk) => read,
            // Both halves dropped: the connection closes.
            _ = tokio::time::sleep_until(hangup.unwrap_or(far)) => return,
        };
        match read {
            Ok(0) | Err(_) => {
                seen.ended.store(true, Ordering::SeqCst);
                return;
            }
            Ok(n) => {
                seen.bytes.lock().unwrap().extend_from_slice(&chunk[..n]);
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

/// The value of the field `name` in the HTTP/1.1 `head`, if it has one.
pub fn field<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().find_map(|line| {
        let (field, value) = line.split_once(':')?;
        field.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// The `Sec-WebSocket-Accept` answering `key` (RFC 6455 §4.2.2).
pub fn accept_for(key: &str) -> String {
    use base64::Engine as _;
    let hashed = aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11").as_bytes(),
    );
    base64::engine::general_purpose::STANDARD.encode(hashed.as_ref())
}

/// Sends `push <n>` every `every` ms until the connection ends.
async fn push(write: Arc<tokio::sync::Mutex<OwnedWriteHalf>>, seen: Arc<Seen>, every: u64) {
    let mut tick = tokio::time::interval(Duration::from_millis(every));
    loop {
        tick.tick().await;
        let n = seen.pushed.fetch_add(1, Ordering::SeqCst);
        let frame = frame(TEXT, format!("push {n}").as_bytes(), None);
        if write.lock().await.write_all(&frame).await.is_err() {
            return;
        }
    }
}

/// A client of sluice's, over a WebSocket once the handshake was answered
/// `101` (or, over HTTP/2, on the stream its `CONNECT` opened).
pub struct WsClient<S = TcpStream> {
    pub stream: S,
    buf: Vec<u8>,
}

impl WsClient {
    /// Sends a handshake for `path` with `headers` to `addr`: the answer's
    /// status, and the client.
    pub async fn connect(
        addr: SocketAddr,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (u16, WsClient) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let mut head = format!(
            "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let end = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed before an answer: {buf:?}");
            buf.extend_from_slice(&chunk[..n]);
        };
        let status = String::from_utf8_lossy(&buf[..end])
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap();
        buf.drain(..end);
        (status, WsClient { stream, buf })
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> WsClient<S> {
    /// A client over `stream`, a WebSocket already open.
    pub fn over(stream: S) -> WsClient<S> {
        WsClient {
            stream,
            buf: Vec::new(),
        }
    }

    /// Sends `bytes` as they are.
    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Sends one masked text message.
    pub async fn text(&mut self, text: &str) {
        self.send(&masked(TEXT, text.as_bytes())).await;
    }

    /// The next frame from sluice, within `within`; `None` when the
    /// connection ended (or nothing came).
    pub async fn next(&mut self, within: Duration) -> Option<Frame> {
        let deadline = tokio::time::Instant::now() + within;
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            if let Some((frame, len)) = parse(&self.buf) {
                self.buf.drain(..len);
                return Some(frame);
            }
            let read = tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await;
            match read {
                Ok(Ok(n)) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                _ => return None,
            }
        }
    }

    /// Frames until a Close frame (returned with those before it), within
    /// `within`.
    pub async fn until_close(&mut self, within: Duration) -> (Vec<Frame>, Option<(u16, String)>) {
        let deadline = tokio::time::Instant::now() + within;
        let mut before = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Some(frame) if frame.close().is_some() => return (before, frame.close()),
                Some(frame) => before.push(frame),
                None => return (before, None),
            }
        }
    }

    /// Whether sluice closed the connection (end of stream) within
    /// `within`, reading and dropping what comes before.
    pub async fn ends(&mut self, within: Duration) -> bool {
        let mut chunk = vec![0u8; 64 * 1024];
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => {}
                Err(_) => return false,
            }
        }
    }
}
