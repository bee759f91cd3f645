//! Abuse of how the limit key is derived, end to end over raw sockets
//! (docs/edge-behaviour.md's "Hostile inputs" rows C4–C7, D1–D5, E1, E2 and E6), one test per
//! row, named after it: the client writes exact bytes, often pipelined on one
//! keep-alive connection, and plays a load balancer where `trusted_proxies`
//! says so. D2 runs the real binary to read its RSS from /proc.

use crate::support;
use crate::wire;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use support::{metric, start, write_config, SluiceProcess, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use wire::{parse_responses, RawResponse};

/// A `GET` with `Host` and the given header lines, as exact bytes.
fn get(target: &str, headers: &[&str]) -> Vec<u8> {
    let mut request = format!("GET {target} HTTP/1.1\r\nHost: sluice.test\r\n");
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    request.into_bytes()
}

/// A connection to `addr` from `source` (any address in 127.0.0.0/8 works on
/// Linux without setup, row C8).
async fn connect_from(addr: SocketAddr, source: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    let source: IpAddr = source.parse().unwrap();
    socket.bind(SocketAddr::new(source, 0)).unwrap();
    socket.connect(addr).await.unwrap()
}

/// Reads until `n` complete responses arrived; panics after 20 s or on close.
/// Parses as bytes arrive (each response once), so thousands of pipelined
/// answers cost linear time even in a debug build.
async fn read_responses(stream: &mut TcpStream, n: usize) -> Vec<RawResponse> {
    let mut received = Vec::new();
    let mut responses = Vec::with_capacity(n);
    // Where the next unparsed response starts in `received`.
    let mut cursor = 0;
    let mut buffer = vec![0u8; 64 * 1024];
    let deadline = Instant::now() + Duration::from_secs(20);
    while responses.len() < n {
        while let Some(length) = complete_response_len(&received[cursor..]) {
            responses.extend(parse_responses(&received[cursor..cursor + length]));
            cursor += length;
        }
        if responses.len() >= n {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buffer)).await {
            Ok(Ok(read)) if read > 0 => received.extend_from_slice(&buffer[..read]),
            _ => panic!(
                "{} of {n} responses before close or timeout",
                responses.len()
            ),
        }
    }
    responses
}

/// The length of the complete response at the start of `bytes`, if it is
/// all there (`Content-Length` framing; a chunked one is measured by parsing).
fn complete_response_len(bytes: &[u8]) -> Option<usize> {
    let head_end = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&bytes[..head_end])
        .ok()?
        .to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    match length {
        Some(length) => (bytes.len() >= head_end + length).then_some(head_end + length),
        None if head.contains("transfer-encoding: chunked") => {
            let end = bytes.windows(5).position(|w| w == b"0\r\n\r\n")? + 5;
            parse_responses(&bytes[..end])
                .first()?
                .complete
                .then_some(end)
        }
        None => Some(head_end),
    }
}

/// Writes `requests` in one go (pipelined) and reads one response each.
async fn pipeline(stream: &mut TcpStream, requests: &[Vec<u8>]) -> Vec<RawResponse> {
    stream.write_all(&requests.concat()).await.unwrap();
    read_responses(stream, requests.len()).await
}

/// Statuses of `requests` pipelined on a fresh connection from 127.0.0.1.
async fn statuses(addr: SocketAddr, requests: &[Vec<u8>]) -> Vec<u16> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let answers = pipeline(&mut stream, requests).await;
    answers.iter().map(|r| r.status).collect()
}

fn repeated(code: u16, n: usize) -> Vec<u16> {
    vec![code; n]
}

/// The `r=` of `name` in a `RateLimit` header.
fn remaining_of(response: &RawResponse, name: &str) -> u64 {
    let header = response.header("ratelimit").expect("a RateLimit header");
    let prefix = format!("\"{name}\";r=");
    header
        .split(", ")
        .find_map(|item| item.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(';').next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no item for {name} in RateLimit: {header}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c4_a_new_spoofed_x_forwarded_for_per_request_is_ignored_from_an_untrusted_peer() {
    // trusted_proxies defaults to []: the peer is the client.
    let (upstream, sluice) = start(
        r#"
[[rule]]
name = "per-ip"
rate = "5/m"
"#,
    )
    .await;
    let requests: Vec<Vec<u8>> = (0..200u32)
        .map(|i| {
            let spoof = format!(
                "X-Forwarded-For: 198.51.{}.{}, 10.0.0.{}",
                i / 200,
                i % 200 + 1,
                i % 7
            );
            get("/", &[&spoof])
        })
        .collect();

    let codes = statuses(sluice.addr, &requests).await;

    assert_eq!(codes, [repeated(200, 5), repeated(429, 195)].concat());
    assert_eq!(
        sluice.metric(r#"sluice_tracked_keys{rule="per-ip"}"#).await,
        1.0,
        "one bucket: the peer's"
    );
    for seen in upstream.seen() {
        assert_eq!(seen.headers.get("x-forwarded-for").unwrap(), "127.0.0.1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c5_behind_a_trusted_proxy_the_key_is_the_rightmost_valid_untrusted_address() {
    // The test client plays the load balancer at 127.0.0.1. Room in the head
    // for a 5,000-entry list (45 KB).
    let (upstream, sluice) = start(
        r#"
trusted_proxies = ["127.0.0.1/32"]
max_header_bytes = 131072

[[rule]]
name = "per-ip"
rate = "6/m"
"#,
    )
    .await;
    let long_list = format!("X-Forwarded-For: {}198.51.100.7", "1.2.3.4, ".repeat(4_999));
    // Six spellings of a chain whose client is 198.51.100.7.
    let client_is_198_51_100_7 = [
        get("/", &["X-Forwarded-For: forged, 198.51.100.7"]),
        get(
            "/",
            &[
                "X-Forwarded-For: forged",
                "X-Forwarded-For: 203.0.113.9",
                "X-Forwarded-For: 198.51.100.7",
            ],
        ),
        get("/", &["X-Forwarded-For: unknown, 198.51.100.7"]),
        get("/", &["X-Forwarded-For: 198.51.100.7:80"]),
        get("/", &[&long_list]),
        get("/", &["X-Forwarded-For: 203.0.113.1,198.51.100.7 ,"]),
        // The seventh is over 198.51.100.7's 6/m.
        get("/", &["X-Forwarded-For: 198.51.100.7"]),
    ];
    assert_eq!(
        statuses(sluice.addr, &client_is_198_51_100_7).await,
        [repeated(200, 6), vec![429]].concat(),
        "every spelling charged 198.51.100.7"
    );

    // An IPv6 entry with a port is its own client.
    assert_eq!(
        statuses(sluice.addr, &[get("/", &["X-Forwarded-For: [::1]:80"])]).await,
        [200]
    );

    // Malformed rightmost entries end the walk at the peer: 127.0.0.1's
    // bucket, which six of them spend.
    let malformed = [
        get("/", &["X-Forwarded-For: 198.51.100.7, unknown"]),
        get("/", &["X-Forwarded-For: garbage"]),
        get("/", &["X-Forwarded-For: 198.51.100.7, 1.2.3.4:x"]),
        get("/", &["X-Forwarded-For: 198.51.100.7, [::1"]),
        get("/", &["X-Forwarded-For: 198.51.100.7, 300.1.1.1"]),
        get("/", &["X-Forwarded-For: 198.51.100.7, _hidden"]),
        get("/", &[]),
    ];
    assert_eq!(
        statuses(sluice.addr, &malformed).await,
        [repeated(200, 6), vec![429]].concat(),
        "malformed chains charge the peer"
    );
    assert_eq!(
        sluice.metric(r#"sluice_tracked_keys{rule="per-ip"}"#).await,
        3.0,
        "198.51.100.7, ::1/64 and the peer"
    );
    let first = &upstream.seen()[0];
    assert_eq!(
        first.headers.get("x-forwarded-for").unwrap(),
        "forged, 198.51.100.7, 127.0.0.1",
        "the trusted peer is appended to the chain"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c6_a_chain_shorter_than_the_trusted_hops_never_gives_an_empty_key() {
    let (_upstream, sluice) = start(
        r#"
trusted_proxies = ["127.0.0.1/32", "10.0.0.0/8"]

[[rule]]
name = "per-ip"
rate = "3/m"
"#,
    )
    .await;

    // No entry, an empty header, only empty elements: all the peer.
    let peer = [
        get("/", &[]),
        get("/", &["X-Forwarded-For:"]),
        get("/", &["X-Forwarded-For: , ,"]),
        get("/", &["X-Forwarded-For:"]),
        get("/", &["X-Forwarded-For: ,"]),
    ];
    assert_eq!(
        statuses(sluice.addr, &peer).await,
        [200, 200, 200, 429, 429],
        "empty chains share the peer's bucket, not an empty one"
    );

    // Only trusted entries (one hop where two are trusted): the leftmost.
    let trusted_only = [
        get("/", &["X-Forwarded-For: 10.1.1.1"]),
        get("/", &["X-Forwarded-For: 10.1.1.1"]),
        get("/", &["X-Forwarded-For: 10.1.1.1, 10.2.2.2"]),
        get("/", &["X-Forwarded-For: 10.1.1.1"]),
    ];
    assert_eq!(
        statuses(sluice.addr, &trusted_only).await,
        [200, 200, 200, 429]
    );
    assert_eq!(
        sluice.metric(r#"sluice_tracked_keys{rule="per-ip"}"#).await,
        2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c7_rotating_ipv6_addresses_inside_one_64_share_one_bucket() {
    let (_upstream, sluice) = start(
        r#"
trusted_proxies = ["127.0.0.1/32"]

[[rule]]
name = "per-ip"
rate = "5/m"
"#,
    )
    .await;
    // 2,000 distinct addresses in 2001:db8::/64 (a fixed-seed LCG picks the
    // interface identifiers).
    let mut state: u64 = 0x5eed;
    let requests: Vec<Vec<u8>> = (0..2_000)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let [a, b, c, d] = [48, 32, 16, 0].map(|shift| (state >> shift) as u16);
            get(
                "/",
                &[&format!(
                    "X-Forwarded-For: 2001:db8::{a:x}:{b:x}:{c:x}:{d:x}"
                )],
            )
        })
        .collect();

    let codes = statuses(sluice.addr, &requests).await;

    assert_eq!(codes, [repeated(200, 5), repeated(429, 1_995)].concat());
    assert_eq!(
        sluice.metric(r#"sluice_tracked_keys{rule="per-ip"}"#).await,
        1.0
    );
    // The next /64 is another client.
    assert_eq!(
        statuses(
            sluice.addr,
            &[get("/", &["X-Forwarded-For: 2001:db8:0:1::1"])]
        )
        .await,
        [200]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_path_tricks_charge_the_bucket_of_the_path_the_upstream_receives() {
    let (upstream, sluice) = start(
        r#"
[[rule]]
name = "login"
match = { path = "/api/login" }
rate = "9/m"
"#,
    )
    .await;
    // Spellings normalising makes `/api/login`, and those the default
    // `server.paths_alike` folds to it (case, a trailing slash, `;`
    // parameters: what Express, ASP.NET, Tomcat serve as `/api/login`).
    let same_path = [
        get("//api/login", &[]),
        get("/api/./login", &[]),
        get("/api/x/../login", &[]),
        get("/api/%6Cogin", &[]),
        get("/api/login?a=1", &[]),
        get("http://sluice.test/api/login", &[]),
        get("/api/%2e%2e/api/login", &[]),
        get("/API/login", &[]),
        get("/api/login/", &[]),
        get("/api/login;x", &[]),
    ];
    assert_eq!(
        statuses(sluice.addr, &same_path).await,
        [repeated(200, 9), vec![429]].concat(),
        "ten spellings of /api/login, one bucket"
    );

    // An encoded slash is another path (no upstream reads it as a
    // separator): not the rule's, forwarded as normalised.
    let other_paths = [get("/api%2Flogin", &[]), get("/api%2flogin", &[])];
    assert_eq!(statuses(sluice.addr, &other_paths).await, [200, 200]);

    // Paths that cannot be normalised are refused, never forwarded.
    for bad in ["/%2e%2e/api/login", "/api/%zz", "/api/login/%2"] {
        let answer = statuses(sluice.addr, &[get(bad, &[])]).await;
        assert_eq!(answer, [400], "{bad}");
    }

    // The upstream received the normalised path (not folded: it serves
    // those spellings alike itself); the tenth spelling was refused.
    let targets: Vec<String> = upstream.seen().into_iter().map(|s| s.target).collect();
    assert_eq!(
        targets,
        [
            "/api/login",
            "/api/login",
            "/api/login",
            "/api/login",
            "/api/login?a=1",
            "/api/login",
            "/api/login",
            "/API/login",
            "/api/login/",
            "/api%2Flogin",
            "/api%2Flogin",
        ]
    );
}

/// Sends one request per key, `keys` in all, over `connections` keep-alive
/// connections pipelining 200 at a time; returns the status counts
/// (200, 429, other).
async fn flood_keys(addr: SocketAddr, prefix: &str, keys: std::ops::Range<u32>) -> [usize; 3] {
    const CONNECTIONS: u32 = 4;
    let mut tasks = Vec::new();
    for connection in 0..CONNECTIONS {
        let prefix = prefix.to_owned();
        let mine: Vec<u32> = keys
            .clone()
            .filter(|k| k % CONNECTIONS == connection)
            .collect();
        tasks.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let mut counts = [0usize; 3];
            for batch in mine.chunks(200) {
                let requests: Vec<Vec<u8>> = batch
                    .iter()
                    .map(|k| get("/", &[&format!("X-Api-Key: {prefix}-{k:08}")]))
                    .collect();
                for answer in pipeline(&mut stream, &requests).await {
                    counts[match answer.status {
                        200 => 0,
                        429 => 1,
                        _ => 2,
                    }] += 1;
                }
            }
            counts
        }));
    }
    let mut total = [0usize; 3];
    for task in tasks {
        let counts = task.await.unwrap();
        for (sum, n) in total.iter_mut().zip(counts) {
            *sum += n;
        }
    }
    total
}

async fn scrape(admin: SocketAddr) -> String {
    support::get(&format!("http://{admin}/metrics"), &[])
        .await
        .body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_a_key_cardinality_flood_stays_within_max_keys_and_rss_plateaus() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        r#"
[server]
listen = "127.0.0.1:0"
upstream = "http://{}"

[admin]
listen = "127.0.0.1:0"

[store]
max_keys = 10000

[[rule]]
name = "per-key"
key = ["header:x-api-key"]
rate = "10/h"
"#,
        upstream.addr
    );
    let sluice = SluiceProcess::spawn(&write_config(dir.path(), &config));

    // 15,000 keys: the table fills at 10,000 and the overflow sketch (1 MiB)
    // is allocated. Then 15,000 more: memory must not follow.
    let first = flood_keys(sluice.addr, "flood", 0..15_000).await;
    let rss_at_15k = sluice.memory_kib("VmRSS");
    let second = flood_keys(sluice.addr, "flood", 15_000..30_000).await;
    let rss_at_30k = sluice.memory_kib("VmRSS");
    eprintln!(
        "d2: RSS {rss_at_15k} KiB at 15k keys, {rss_at_30k} KiB at 30k; \
         answers 200/429/other {first:?} then {second:?}"
    );

    assert_eq!(first[2] + second[2], 0, "only 200 and 429");
    assert!(
        first[0] >= 10_000,
        "the first 10,000 keys had room: {first:?}"
    );
    let text = scrape(sluice.admin).await;
    let tracked = metric(&text, r#"sluice_tracked_keys{rule="per-key"}"#).unwrap();
    assert!(tracked <= 10_000.0, "{tracked} buckets for max_keys 10000");
    assert!(
        metric(&text, r#"sluice_evictions_total{reason="overflow"}"#).unwrap() > 0.0,
        "new keys went to the overflow sketch"
    );
    assert!(
        rss_at_30k <= rss_at_15k + 4 * 1024,
        "RSS grew from {rss_at_15k} KiB to {rss_at_30k} KiB over 15,000 more keys"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d3_flooding_new_keys_does_not_reset_an_abusers_bucket() {
    let (_upstream, sluice) = start(
        r#"
[store]
max_keys = 500

[[rule]]
name = "per-key"
key = ["header:x-api-key"]
rate = "2/s"
burst = 20
"#,
    )
    .await;
    let addr = sluice.addr;
    let mut abuser = TcpStream::connect(addr).await.unwrap();
    let abuse = get("/", &["X-Api-Key: abuser"]);
    // Spend the burst.
    let spent = pipeline(&mut abuser, &vec![abuse.clone(); 20]).await;
    assert!(spent.iter().all(|r| r.status == 200));

    /// The abuser at 20 requests/s (10× its rate) for `length`: (admitted, sent).
    async fn abuse_for(stream: &mut TcpStream, request: &[u8], length: Duration) -> (u32, u32) {
        let (mut admitted, mut sent) = (0, 0);
        let start = Instant::now();
        while start.elapsed() < length {
            let answer = pipeline(stream, &[request.to_vec()]).await;
            admitted += u32::from(answer[0].status == 200);
            sent += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        (admitted, sent)
    }

    let before = abuse_for(&mut abuser, &abuse, Duration::from_secs(2)).await;

    // Churn: new keys as fast as two connections can send them, for 3 s.
    let churn_until = Instant::now() + Duration::from_secs(3);
    let churn: Vec<_> = (0..2u32)
        .map(|connection| {
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(addr).await.unwrap();
                let mut sent = 0u32;
                while Instant::now() < churn_until {
                    let requests: Vec<Vec<u8>> = (0..100)
                        .map(|i| {
                            let key = format!("X-Api-Key: churn-{connection}-{sent}-{i}");
                            get("/", &[&key])
                        })
                        .collect();
                    pipeline(&mut stream, &requests).await;
                    sent += 100;
                }
                sent
            })
        })
        .collect();
    let churn_started = Instant::now();
    let during = abuse_for(&mut abuser, &abuse, Duration::from_secs(3)).await;
    let churn_length = churn_started.elapsed().as_secs_f64();
    let mut churned = 0;
    for task in churn {
        churned += task.await.unwrap();
    }

    let ratio = |(admitted, sent): (u32, u32)| 1.0 - f64::from(admitted) / f64::from(sent);
    eprintln!(
        "d3: abuser admitted/sent {before:?} before, {during:?} during {churned} churn keys; \
         429 ratio {:.2} → {:.2}",
        ratio(before),
        ratio(during)
    );
    assert!(
        churned > 1_000,
        "only {churned} churn keys for max_keys 500"
    );
    // At 2/s the abuser earns at most 2 per second of churn (+1 for
    // rounding); a reset bucket would hand it 20 at once.
    let earned = (2.0 * churn_length).ceil() as u32 + 1;
    assert!(
        during.0 <= earned,
        "the abuser got {} during {churn_length:.1} s of churn (at most {earned})",
        during.0
    );
    assert!(ratio(during) >= 0.8, "429 ratio {:.2}", ratio(during));
    let text = sluice.metrics().await;
    let tracked = metric(&text, r#"sluice_tracked_keys{rule="per-key"}"#).unwrap();
    let idle = metric(&text, r#"sluice_evictions_total{reason="idle"}"#).unwrap();
    let overflow = metric(&text, r#"sluice_evictions_total{reason="overflow"}"#).unwrap();
    assert!(tracked <= 500.0);
    assert!(idle + overflow > 0.0, "the churn pressed the store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_a_missing_or_empty_key_shares_one_bucket_and_a_huge_key_gets_431() {
    // The documented choice (docs/configuration.md, "Keys"): `missing = "shared"` (the
    // default) puts keyless requests in one bucket; an empty value counts as
    // missing; a key is hashed whatever its length, up to the head's cap
    // (`max_header_bytes`, 32 KiB), beyond which the request is 431.
    let (upstream, sluice) = start(
        r#"
[[rule]]
name = "per-key"
key = ["header:x-api-key"]
rate = "3/m"
"#,
    )
    .await;
    let keyless = [
        get("/", &[]),
        get("/", &["X-Api-Key:"]),
        get("/", &["X-Api-Key:    "]),
        get("/", &[]),
        get("/", &["X-Api-Key:"]),
    ];
    assert_eq!(
        statuses(sluice.addr, &keyless).await,
        [200, 200, 200, 429, 429]
    );
    assert_eq!(
        statuses(sluice.addr, &[get("/", &["X-Api-Key: alice"])]).await,
        [200]
    );

    let large = format!("X-Api-Key: {}", "k".repeat(16 * 1024));
    assert_eq!(
        statuses(sluice.addr, &vec![get("/", &[&large]); 4]).await,
        [200, 200, 200, 429],
        "a 16 KiB key is its own bucket"
    );

    let huge = format!("X-Api-Key: {}", "k".repeat(70 * 1024));
    let received = wire::exchange(sluice.addr, &get("/", &[&huge])).await;
    let responses = received.responses();
    assert_eq!(responses[0].status, 431, "{}", received.text());
    assert_eq!(
        responses[0].header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(upstream.count(), 3 + 1 + 3, "the 431 never reached it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_metrics_do_not_grow_with_the_number_of_keys() {
    let (_upstream, sluice) = start(
        r#"
[store]
max_keys = 1000

[[rule]]
name = "per-key"
key = ["header:x-api-key"]
rate = "10/h"
"#,
    )
    .await;
    // Every series exists once the first keys were seen (and overflowed).
    flood_keys(sluice.addr, "warm", 0..1_500).await;
    let before = sluice.metrics().await;
    flood_keys(sluice.addr, "flood", 0..8_000).await;
    let after = sluice.metrics().await;

    let series = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.rsplit_once(' ').map(|(name, _)| name.to_owned()))
            .collect()
    };
    assert_eq!(series(&before), series(&after), "the same series");
    assert!(
        after.len() <= before.len() + 256,
        "/metrics grew from {} to {} bytes",
        before.len(),
        after.len()
    );
    assert!(!after.contains("flood-"), "no key in any label");
}

// Paused time: the refill comes by `advance`, exactly, however long the
// thousand take to answer on a busy machine.
#[tokio::test(start_paused = true)]
async fn e1_a_thousand_rejected_requests_use_no_budget() {
    let (upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "per-ip"
rate = "1/2s"
"#,
    )
    .await;
    let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
    let started = tokio::time::Instant::now();
    let first = pipeline(&mut stream, &[get("/", &[])]).await;
    let rejected = pipeline(&mut stream, &vec![get("/", &[]); 1_000]).await;
    assert_eq!(started.elapsed(), Duration::ZERO, "no time passed");
    assert_eq!(first[0].status, 200);
    assert!(rejected.iter().all(|r| r.status == 429));

    // One refill interval after the admitted request: exactly one more.
    tokio::time::advance(Duration::from_secs(2)).await;
    let after = pipeline(&mut stream, &[get("/", &[]), get("/", &[])]).await;
    assert_eq!(after[0].status, 200, "rejects were not counted");
    assert_eq!(after[1].status, 429);
    assert_eq!(upstream.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2_per_ip_rejects_leave_the_global_limit_untouched() {
    // The global rule comes first, so it takes its unit before per-ip says
    // no, and must give it back.
    let (_upstream, sluice) = start(
        r#"
[[rule]]
name = "global"
key = ["global"]
rate = "100/m"

[[rule]]
name = "per-ip"
rate = "2/m"
"#,
    )
    .await;
    let mut spender = connect_from(sluice.addr, "127.0.0.1").await;
    let answers = pipeline(&mut spender, &vec![get("/", &[]); 22]).await;
    let codes: Vec<u16> = answers.iter().map(|r| r.status).collect();
    assert_eq!(codes, [repeated(200, 2), repeated(429, 20)].concat());

    let mut other = connect_from(sluice.addr, "127.0.0.2").await;
    let answer = pipeline(&mut other, &[get("/", &[])]).await;
    assert_eq!(answer[0].status, 200);
    assert_eq!(
        remaining_of(&answer[0], "global"),
        100 - 3,
        "only the three admitted requests took from the global limit"
    );
}

// Paused time: the waits are exact, so the test sees the token arrive at
// 10/3 s to the nanosecond.
#[tokio::test(start_paused = true)]
async fn e6_retry_after_is_never_shorter_than_the_real_wait() {
    // One token every 3.33 s: an honest Retry-After rounds up to 4.
    let (_upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "per-ip"
rate = "3/10s"
burst = 1
"#,
    )
    .await;
    let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
    let answers = pipeline(&mut stream, &[get("/", &[]), get("/", &[])]).await;
    assert_eq!(answers[0].status, 200);
    let limited = &answers[1];
    assert_eq!(limited.status, 429);
    let retry_after: u64 = limited
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After in seconds");
    // The real wait is 10/3 s, and no time passed since the spend.
    assert_eq!(retry_after, 4);

    // 3 s after the spend there is still no token (so "3" would have
    // lied), nor a nanosecond before 10/3 s; at 10/3 s there is.
    tokio::time::advance(Duration::from_secs(3)).await;
    assert_eq!(pipeline(&mut stream, &[get("/", &[])]).await[0].status, 429);
    // (The interval is whole nanoseconds: 3,333,333,333.)
    let token = Duration::from_nanos(10_000_000_000 / 3);
    tokio::time::advance(token - Duration::from_secs(3) - Duration::from_nanos(1)).await;
    assert_eq!(pipeline(&mut stream, &[get("/", &[])]).await[0].status, 429);
    tokio::time::advance(Duration::from_nanos(1)).await;
    assert_eq!(pipeline(&mut stream, &[get("/", &[])]).await[0].status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e4_held_clients_that_leave_with_fin_or_rst_leave_the_queue_and_never_reach_the_upstream() {
    let (upstream, sluice) = start(
        r#"
[[rule]]
name = "paced"
rate = "1/10s"
burst = 1
on_limit = "delay"
max_delay = "10m"
max_queue = 100
"#,
    )
    .await;
    let depth = r#"sluice_queue_depth{rule="paced"}"#;
    assert_eq!(statuses(sluice.addr, &[get("/", &[])]).await, [200]);

    // 40 requests held behind the spent bucket (the last for 400 s).
    let mut held = Vec::new();
    for _ in 0..40 {
        let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
        stream.write_all(&get("/held", &[])).await.unwrap();
        held.push(stream);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while sluice.metric(depth).await < 40.0 {
        assert!(Instant::now() < deadline, "the 40 were not all held");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Half hang up with FIN, half with RST (SO_LINGER 0).
    let left_at = Instant::now();
    for (index, stream) in held.into_iter().enumerate() {
        if index % 2 == 0 {
            stream.set_zero_linger().unwrap();
        }
        drop(stream);
    }
    while sluice.metric(depth).await > 0.0 {
        assert!(
            left_at.elapsed() < Duration::from_secs(1),
            "queue depth still {} after 1 s",
            sluice.metric(depth).await
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!("e4: queue empty {:?} after the hang-ups", left_at.elapsed());
    assert_eq!(upstream.count(), 1, "no held request was forwarded");
    assert_eq!(
        sluice
            .metric(r#"sluice_requests_total{rule="paced",outcome="allowed"}"#)
            .await,
        1.0
    );
}
