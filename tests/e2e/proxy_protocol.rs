//! The PROXY protocol (docs/edge.md, "Behind a load balancer"): raw bytes on a TCP connection
//! to a real sluice, as an L4 balancer sends them, and what the client and
//! the real upstream behind sluice see. The carried address is the client
//! for "Client IP": per-IP budgets and the `X-Forwarded-For` sent upstream
//! name it; anything but a complete header from a trusted peer closes the
//! connection before a request is read.

use crate::support;

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use support::{eventually, start, write_config, SluiceProcess, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// sluice trusting the test's own address (127.0.0.1) as its balancer.
const BEHIND_A_BALANCER: &str = r#"trusted_proxies = ["127.0.0.1/32"]
proxy_protocol = true

[[rule]]
name = "per-ip"
key = ["ip"]
rate = "1000/m"
"#;

const REQUEST: &[u8] = b"GET /who HTTP/1.1\r\nhost: api.example\r\nconnection: close\r\n\r\n";

/// The v2 signature.
const V2: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// A v2 PROXY header over TCP/IPv4 from `source:port`, with an AWS-style
/// VPC endpoint TLV that sluice must skip.
fn v2_ipv4(source: [u8; 4], port: u16) -> Vec<u8> {
    let tlv = [&[0xea, 0, 9, 1][..], b"vpce-0123"].concat();
    let mut block = source.to_vec();
    block.extend([10, 0, 0, 1]);
    block.extend(port.to_be_bytes());
    block.extend(443u16.to_be_bytes());
    block.extend(tlv);
    v2(0x21, 0x11, &block)
}

/// A v2 PROXY header over TCP/IPv6 from `source:port`.
fn v2_ipv6(source: &str, port: u16) -> Vec<u8> {
    let source: std::net::Ipv6Addr = source.parse().unwrap();
    let mut block = source.octets().to_vec();
    block.extend(std::net::Ipv6Addr::LOCALHOST.octets());
    block.extend(port.to_be_bytes());
    block.extend(443u16.to_be_bytes());
    v2(0x21, 0x21, &block)
}

/// A v2 header: version and command, family and transport, `block`.
fn v2(version_command: u8, family: u8, block: &[u8]) -> Vec<u8> {
    let mut header = V2.to_vec();
    header.extend([version_command, family]);
    header.extend((block.len() as u16).to_be_bytes());
    header.extend(block);
    header
}

/// Connects to `addr` and writes `parts`, pausing `pause` between them,
/// then reads until sluice closes: its whole answer, or the error that
/// ended the connection (a reset when sluice closed it with bytes unread).
async fn exchange(addr: SocketAddr, parts: &[&[u8]], pause: Duration) -> io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(addr).await?;
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(pause).await;
        }
        stream.write_all(part).await?;
    }
    read_to_close(&mut stream).await
}

/// Everything until the connection ends (10 s at most).
async fn read_to_close(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("sluice neither answered nor closed the connection")?;
    Ok(answer)
}

/// One request behind `header`, in one write: the status line sluice
/// answers with.
async fn status_behind(addr: SocketAddr, header: &[u8]) -> String {
    let bytes = [header, REQUEST].concat();
    let answer = exchange(addr, &[&bytes], Duration::ZERO)
        .await
        .expect("the connection failed");
    status_line(&answer)
}

fn status_line(answer: &[u8]) -> String {
    let text = String::from_utf8_lossy(answer);
    text.lines().next().unwrap_or_default().to_owned()
}

/// The connection ended without a byte of answer: closed (EOF), or reset
/// because sluice closed it with the client's bytes unread.
fn assert_closed_unanswered(result: io::Result<Vec<u8>>, what: &str) {
    match result {
        Ok(answer) => assert!(
            answer.is_empty(),
            "{what}: answered {:?}",
            String::from_utf8_lossy(&answer)
        ),
        Err(error) => assert!(
            matches!(
                error.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionAborted
            ),
            "{what}: {error}"
        ),
    }
}

/// The `X-Forwarded-For` of the upstream's `n`th request.
fn forwarded_for(upstream: &Upstream, n: usize) -> String {
    let seen = upstream.seen();
    let headers = &seen[n].headers;
    let values: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .map(|value| value.to_str().unwrap())
        .collect();
    values.join(", ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_tcp4_and_tcp6_name_the_client() {
    let (upstream, sluice) = start(BEHIND_A_BALANCER).await;

    let tcp4 = status_behind(
        sluice.addr,
        b"PROXY TCP4 203.0.113.7 10.0.0.1 56324 443\r\n",
    )
    .await;
    let tcp6 = status_behind(
        sluice.addr,
        b"PROXY TCP6 2001:db8::7 2001:db8::1 56324 443\r\n",
    )
    .await;

    assert_eq!(tcp4, "HTTP/1.1 200 OK");
    assert_eq!(tcp6, "HTTP/1.1 200 OK");
    assert_eq!(forwarded_for(&upstream, 0), "203.0.113.7");
    assert_eq!(forwarded_for(&upstream, 1), "2001:db8::7");
    assert_eq!(upstream.seen()[0].target, "/who");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_over_ipv4_and_ipv6_names_the_client() {
    let (upstream, sluice) = start(BEHIND_A_BALANCER).await;

    let ipv4 = status_behind(sluice.addr, &v2_ipv4([198, 51, 100, 9], 40000)).await;
    let ipv6 = status_behind(sluice.addr, &v2_ipv6("2001:db8:5::9", 40000)).await;

    assert_eq!(ipv4, "HTTP/1.1 200 OK");
    assert_eq!(ipv6, "HTTP/1.1 200 OK");
    assert_eq!(forwarded_for(&upstream, 0), "198.51.100.9");
    assert_eq!(forwarded_for(&upstream, 1), "2001:db8:5::9");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_local_and_v1_unknown_keep_the_peer() {
    let (upstream, sluice) = start(BEHIND_A_BALANCER).await;

    // A balancer's health check: LOCAL, with no addresses.
    let local = status_behind(sluice.addr, &v2(0x20, 0x00, &[])).await;
    let unknown = status_behind(sluice.addr, b"PROXY UNKNOWN\r\n").await;

    assert_eq!(local, "HTTP/1.1 200 OK");
    assert_eq!(unknown, "HTTP/1.1 200 OK");
    // The peer is sluice's trusted balancer, so its own address is
    // appended to whatever chain it sent (none here).
    assert_eq!(forwarded_for(&upstream, 0), "127.0.0.1");
    assert_eq!(forwarded_for(&upstream, 1), "127.0.0.1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_carried_client_has_its_own_per_ip_budget() {
    let (upstream, sluice) = start(
        r#"trusted_proxies = ["127.0.0.1/32"]
proxy_protocol = true

[[rule]]
name = "per-ip"
key = ["ip"]
rate = "1/m"
"#,
    )
    .await;
    let first = b"PROXY TCP4 203.0.113.7 10.0.0.1 50000 443\r\n";
    let second = b"PROXY TCP4 203.0.113.8 10.0.0.1 50000 443\r\n";

    let first_once = status_behind(sluice.addr, first).await;
    let first_again = status_behind(sluice.addr, first).await;
    let second_once = status_behind(sluice.addr, second).await;
    let second_by_v2 = status_behind(sluice.addr, &v2_ipv4([203, 0, 113, 8], 1)).await;

    assert_eq!(first_once, "HTTP/1.1 200 OK");
    assert_eq!(first_again, "HTTP/1.1 429 Too Many Requests");
    assert_eq!(second_once, "HTTP/1.1 200 OK");
    // The same client through either version shares one bucket.
    assert_eq!(second_by_v2, "HTTP/1.1 429 Too Many Requests");
    assert_eq!(upstream.count(), 2);
    assert_eq!(forwarded_for(&upstream, 0), "203.0.113.7");
    assert_eq!(forwarded_for(&upstream, 1), "203.0.113.8");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cannot_name_itself_behind_the_header() {
    let (upstream, sluice) = start(BEHIND_A_BALANCER).await;
    let request = b"GET /who HTTP/1.1\r\nhost: api.example\r\n\
                    x-forwarded-for: 192.0.2.66\r\nconnection: close\r\n\r\n";
    let bytes = [
        &b"PROXY TCP4 203.0.113.7 10.0.0.1 50000 443\r\n"[..],
        request,
    ]
    .concat();

    let answer = exchange(sluice.addr, &[&bytes], Duration::ZERO)
        .await
        .unwrap();

    assert_eq!(status_line(&answer), "HTTP/1.1 200 OK");
    // The carried client is not a trusted proxy: its own header is
    // replaced, as any untrusted peer's is.
    assert_eq!(forwarded_for(&upstream, 0), "203.0.113.7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_in_pieces_is_waited_for() {
    let (upstream, sluice) = start(BEHIND_A_BALANCER).await;
    let v1 = b"PROXY TCP4 203.0.113.7 10.0.0.1 50000 443\r\n";
    let v2 = v2_ipv4([203, 0, 113, 9], 50000);

    let v1_split = exchange(
        sluice.addr,
        &[
            &v1[..9],
            &v1[9..v1.len() - 1],
            &[&v1[v1.len() - 1..], REQUEST].concat(),
        ],
        Duration::from_millis(100),
    )
    .await
    .unwrap();
    let v2_split = exchange(
        sluice.addr,
        &[&v2[..5], &v2[5..20], &[&v2[20..], REQUEST].concat()],
        Duration::from_millis(100),
    )
    .await
    .unwrap();

    assert_eq!(status_line(&v1_split), "HTTP/1.1 200 OK");
    assert_eq!(status_line(&v2_split), "HTTP/1.1 200 OK");
    assert_eq!(forwarded_for(&upstream, 0), "203.0.113.7");
    assert_eq!(forwarded_for(&upstream, 1), "203.0.113.9");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_oversized_or_missing_headers_close_the_connection() {
    let (upstream, sluice) = start(BEHIND_A_BALANCER).await;
    let oversized = format!("PROXY UNKNOWN {}\r\n", "x".repeat(100));
    assert!(oversized.len() > 107);
    let mut bad_v2 = v2_ipv4([203, 0, 113, 7], 1);
    bad_v2[12] = 0x11;

    for (what, header) in [
        ("plain HTTP first", &b""[..]),
        (
            "a malformed v1 address",
            b"PROXY TCP4 203.0.113 10.0.0.1 50000 443\r\n",
        ),
        (
            "a v1 port with a leading zero",
            b"PROXY TCP4 203.0.113.7 10.0.0.1 050000 443\r\n",
        ),
        ("a v1 line over 107 bytes", oversized.as_bytes()),
        ("v2 version 1", &bad_v2),
        ("the lower-case v1 prefix", b"proxy UNKNOWN\r\n"),
    ] {
        let bytes = [header, REQUEST].concat();
        assert_closed_unanswered(exchange(sluice.addr, &[&bytes], Duration::ZERO).await, what);
    }

    // sluice still serves a good header afterwards; the upstream saw only
    // that request.
    let good = status_behind(sluice.addr, b"PROXY UNKNOWN\r\n").await;
    assert_eq!(good, "HTTP/1.1 200 OK");
    assert_eq!(upstream.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v2_header_longer_than_4096_bytes_closes_the_connection() {
    let (upstream, sluice) = start(BEHIND_A_BALANCER).await;
    let mut block = vec![203, 0, 113, 7, 10, 0, 0, 1, 0, 1, 1, 187];
    // A TLV of padding (PP2_TYPE_NOOP) taking it past 4096 bytes in all.
    block.extend([0x04, 0x10, 0x00]);
    block.extend(vec![0; 0x1000]);

    let result = exchange(
        sluice.addr,
        &[&[&v2(0x21, 0x11, &block)[..], REQUEST].concat()],
        Duration::ZERO,
    )
    .await;

    assert_closed_unanswered(result, "a 4,127-byte v2 header");
    assert_eq!(upstream.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_header_closes_the_connection() {
    let (upstream, sluice) = start(&format!(
        "header_read_timeout = \"300ms\"\n{BEHIND_A_BALANCER}"
    ))
    .await;
    let header = b"PROXY TCP4 203.0.113.7 10.0.0.1 50000 443\r\n";

    let result = exchange(
        sluice.addr,
        &[&header[..20], &[&header[20..], REQUEST].concat()],
        Duration::from_millis(1500),
    )
    .await;

    assert_closed_unanswered(result, "a header finished after header_read_timeout");
    assert_eq!(upstream.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_cut_short_by_the_peer_closes_at_once() {
    // header_read_timeout is long: the close must come from the client's
    // end of stream, not from the clock.
    let (upstream, sluice) = start(&format!(
        "header_read_timeout = \"60s\"\n{BEHIND_A_BALANCER}"
    ))
    .await;
    let mut stream = TcpStream::connect(sluice.addr).await.unwrap();

    stream.write_all(b"PROXY TCP4 203.0.113.7 ").await.unwrap();
    stream.shutdown().await.unwrap();

    assert_closed_unanswered(read_to_close(&mut stream).await, "half a header, then FIN");
    assert_eq!(upstream.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_peer_is_closed_without_a_request_read() {
    let (upstream, sluice) = start(
        r#"trusted_proxies = ["10.0.0.0/8"]
proxy_protocol = true
"#,
    )
    .await;

    let v1 = [
        &b"PROXY TCP4 203.0.113.7 10.0.0.1 50000 443\r\n"[..],
        REQUEST,
    ]
    .concat();
    let v2 = [&v2_ipv4([203, 0, 113, 7], 1)[..], REQUEST].concat();
    for (what, bytes) in [("v1", &v1[..]), ("v2", &v2[..]), ("no header", REQUEST)] {
        assert_closed_unanswered(
            exchange(sluice.addr, &[bytes], Duration::ZERO).await,
            &format!("an untrusted peer sending {what}"),
        );
    }

    // Closed at once, not when the head clock runs out: a peer that sends
    // nothing is closed too.
    let mut silent = TcpStream::connect(sluice.addr).await.unwrap();
    assert_closed_unanswered(read_to_close(&mut silent).await, "a silent untrusted peer");
    assert_eq!(upstream.count(), 0);
}

/// CPU ticks (user + system) `pid` has used, from `/proc/<pid>/stat`.
/// The sockets process `pid` has open.
fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // utime and stime are the 14th and 15th fields; the command name before
    // them is parenthesised and may hold spaces.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_the_rest_of_a_header_does_not_spin() {
    // The peeked bytes stay in the socket, so it stays readable: a reader
    // that waited for readiness again would spin until the header came.
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"[server]
listen = "127.0.0.1:0"
upstream = "http://{}"
workers = 1
trusted_proxies = ["127.0.0.1/32"]
proxy_protocol = true
header_read_timeout = "30s"

[admin]
listen = "127.0.0.1:0"
"#,
        upstream.addr
    );
    let sluice = SluiceProcess::spawn(&write_config(dir.path(), &toml));
    let pid = sluice.child.id();
    let header = b"PROXY TCP4 203.0.113.7 10.0.0.1 50000 443\r\n";
    let idle = sockets(pid);
    let mut streams = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
        stream.write_all(&header[..20]).await.unwrap();
        streams.push(stream);
    }
    eventually(
        Duration::from_secs(5),
        "sluice never accepted the four",
        || async { sockets(pid) >= idle + 4 },
    )
    .await;

    // The CPU sluice uses while the four wait, over this long.
    const MEASURED: Duration = Duration::from_secs(2);
    let before = cpu_ticks(pid);
    tokio::time::sleep(MEASURED).await;
    let used = cpu_ticks(pid) - before;

    // Spinning on 4 connections would take the whole core for 2 s (200
    // ticks at the usual 100 a second; far fewer on a loaded machine, but
    // still many more than an idle process's few).
    assert!(used <= 40, "{used} CPU ticks in 2 s with 4 headers pending");
    // The headers still complete.
    for mut stream in streams {
        stream
            .write_all(&[&header[20..], REQUEST].concat())
            .await
            .unwrap();
        let answer = read_to_close(&mut stream).await.unwrap();
        assert_eq!(status_line(&answer), "HTTP/1.1 200 OK");
    }
    assert_eq!(upstream.count(), 4);
}
