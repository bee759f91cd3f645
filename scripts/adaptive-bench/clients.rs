//! The adaptive benchmark's closed-loop clients: one thread and one HTTP/1.1
//! keep-alive connection each, std only (run.sh builds it with `rustc -O`).
//!
//!   clients --target 127.0.0.1:18680 --clients 50 --duration 30 --out PREFIX
//!           [--think-ms 0] [--backoff-ms 50] [--jitter 0.5] [--path /work] [--timeout 10]
//!           [--start-unix-ns NS]
//!
//! Each client sends the next GET as soon as the previous one is answered
//! (after --think-ms, if any). After a refusal (503, or 429: what a plain
//! concurrency rule answers) it keeps the connection and sleeps --backoff-ms,
//! give or take --jitter (default 0.5: uniform in 25-75 ms for 50 ms).
//! A connection the server closes (or that breaks) is opened again; a request
//! not answered within --timeout s counts as status 0 and its connection is
//! dropped. Latency is from just before the request is written to when the
//! whole answer has been read, on a thread that does nothing else: a client's
//! own bookkeeping adds microseconds, not the event-loop batches a single
//! Python process would (which put a 0.1 ms refusal at 3 ms p99).
//!
//! --start-unix-ns: the wall-clock instant the load begins (the sampler in
//! load.py is given the same one), so both measure t from one origin.
//!
//! Writes PREFIX.requests.csv (t_end s since the start, latency_ms, status),
//! PREFIX.refusal.txt (the first refusal's head and body) and
//! PREFIX.load.txt (this process's CPU seconds). No request is sent after
//! --duration; one unanswered 2 s later is abandoned. Loopback targets only.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

struct Cfg {
    target: SocketAddr,
    clients: usize,
    duration: f64,
    think: Duration,
    backoff: Duration,
    jitter: f64,
    timeout: Duration,
    request: Vec<u8>,
    out: String,
    start_unix_ns: Option<u128>,
}

fn usage(msg: &str) -> ! {
    eprintln!("clients: {msg}\nusage: clients --target HOST:PORT --clients N --duration S --out PREFIX \
               [--think-ms MS] [--backoff-ms MS] [--path P] [--timeout S] [--start-unix-ns NS]");
    std::process::exit(2)
}

fn parse_args() -> Cfg {
    let mut args = std::env::args().skip(1);
    let (mut target, mut clients, mut duration, mut out) = (None, 50usize, 30.0f64, None);
    let (mut think, mut backoff, mut timeout, mut path, mut start) = (0.0f64, 50.0f64, 10.0f64, "/work".to_string(), None);
    let mut jitter = 0.5f64;
    while let Some(k) = args.next() {
        let v = args.next().unwrap_or_else(|| usage(&format!("{k} needs a value")));
        let num = |v: &str| v.parse::<f64>().unwrap_or_else(|_| usage(&format!("{k}: not a number: {v}")));
        match k.as_str() {
            "--target" => target = Some(v),
            "--clients" => clients = num(&v) as usize,
            "--duration" => duration = num(&v),
            "--think-ms" => think = num(&v),
            "--backoff-ms" => backoff = num(&v),
            "--jitter" => jitter = num(&v).clamp(0.0, 1.0),
            "--timeout" => timeout = num(&v),
            "--path" => path = v,
            "--out" => out = Some(v),
            "--start-unix-ns" => start = Some(v.parse::<u128>().unwrap_or_else(|_| usage("--start-unix-ns"))),
            _ => usage(&format!("unknown option {k}")),
        }
    }
    let target_s = target.unwrap_or_else(|| usage("--target is required"));
    let target: SocketAddr = target_s.parse().unwrap_or_else(|_| usage("--target must be IP:PORT"));
    if !target.ip().is_loopback() {
        usage("this harness sends traffic to loopback addresses only");
    }
    Cfg {
        target,
        clients,
        duration,
        think: Duration::from_secs_f64(think / 1000.0),
        backoff: Duration::from_secs_f64(backoff / 1000.0),
        jitter,
        timeout: Duration::from_secs_f64(timeout),
        request: format!("GET {path} HTTP/1.1\r\nhost: {target_s}\r\nuser-agent: adaptive-bench\r\n\r\n").into_bytes(),
        out: out.unwrap_or_else(|| usage("--out is required")),
        start_unix_ns: start,
    }
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if hay.len() < from + needle.len() {
        return None;
    }
    hay[from..].windows(needle.len()).position(|w| w == needle).map(|i| i + from)
}

/// The length of the first whole answer in buf, its status and whether the
/// server closes after it; None while it is not all there.
fn answer(buf: &[u8]) -> Option<(usize, u16, bool)> {
    let end = find(buf, b"\r\n\r\n", 0)? + 4;
    let head = buf[..end].to_ascii_lowercase();
    let status = std::str::from_utf8(&buf[9..12.min(end)]).ok()?.parse::<u16>().unwrap_or(0);
    let total = if let Some(i) = find(&head, b"\r\ncontent-length:", 0) {
        let j = find(&head, b"\r\n", i + 2)?;
        end + std::str::from_utf8(&head[i + 17..j]).ok()?.trim().parse::<usize>().ok()?
    } else if find(&head, b"\r\ntransfer-encoding: chunked", 0).is_some() {
        find(buf, b"\r\n0\r\n\r\n", end - 2)? + 7
    } else {
        end // sluice and upstream.py always send a length
    };
    if buf.len() < total {
        return None;
    }
    Some((total, status, find(&head, b"\r\nconnection: close", 0).is_some()))
}

type Row = (f64, f64, u16);

/// xorshift64*: the backoff's jitter, seeded per client so runs repeat.
struct Rng(u64);
impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn client(cfg: Arc<Cfg>, k: usize, t0: Instant, refusal: Arc<Mutex<Option<Vec<u8>>>>) -> Vec<Row> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (k as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
    // a backoff drawn from [1 - jitter, 1 + jitter] x --backoff-ms, so the
    // clients a refusal turned away do not all come back in the same instant
    let backoff = |rng: &mut Rng| cfg.backoff.mul_f64(1.0 - cfg.jitter + 2.0 * cfg.jitter * rng.unit());
    let deadline = t0 + Duration::from_secs_f64(cfg.duration);
    let give_up = deadline + Duration::from_secs(2);
    let mut rows = Vec::with_capacity(16384);
    let mut conn: Option<TcpStream> = None;
    let mut buf = vec![0u8; 0];
    let mut chunk = [0u8; 16384];
    let since = |t: Instant| t.duration_since(t0).as_secs_f64();
    while Instant::now() < deadline {
        if conn.is_none() {
            match TcpStream::connect_timeout(&cfg.target, cfg.timeout) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    conn = Some(s);
                    buf.clear();
                }
                Err(_) => {
                    rows.push((since(Instant::now()), 0.0, 0));
                    std::thread::sleep(backoff(&mut rng));
                    continue;
                }
            }
        }
        let s = conn.as_mut().unwrap();
        let t1 = Instant::now();
        let mut result = s.write_all(&cfg.request).map(|_| None);
        while let Ok(None) = result {
            if let Some(a) = answer(&buf) {
                result = Ok(Some(a));
                break;
            }
            let left = give_up.saturating_duration_since(Instant::now()).min(cfg.timeout.saturating_sub(t1.elapsed()));
            if left.is_zero() {
                result = Err(std::io::ErrorKind::TimedOut.into());
                break;
            }
            let _ = s.set_read_timeout(Some(left));
            match s.read(&mut chunk) {
                Ok(0) => result = Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => result = Err(e),
            }
        }
        let t2 = Instant::now();
        match result {
            Ok(Some((total, status, close))) => {
                rows.push((since(t2), (t2 - t1).as_secs_f64() * 1000.0, status));
                let refused = status == 503 || status == 429;
                if refused {
                    let mut r = refusal.lock().unwrap();
                    if r.is_none() {
                        *r = Some(buf[..total].to_vec());
                    }
                }
                buf.drain(..total);
                if close {
                    conn = None;
                }
                let wait = if refused { backoff(&mut rng) } else { cfg.think };
                if !wait.is_zero() {
                    std::thread::sleep(wait);
                }
            }
            _ => {
                if t2 < give_up {
                    rows.push((since(t2), (t2 - t1).as_secs_f64() * 1000.0, 0));
                }
                conn = None;
                std::thread::sleep(backoff(&mut rng));
            }
        }
    }
    rows
}

fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // after the command: state is field 3, utime 14 and stime 15 (1-based)
    f.get(11).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0) + f.get(12).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0)
}

fn main() {
    let cfg = Arc::new(parse_args());
    if let Some(ns) = cfg.start_unix_ns {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
        if ns > now {
            std::thread::sleep(Duration::from_nanos((ns - now).min(10_000_000_000) as u64));
        }
    }
    let t0 = Instant::now();
    let refusal = Arc::new(Mutex::new(None));
    let threads: Vec<_> = (0..cfg.clients)
        .map(|k| {
            let (cfg, refusal) = (cfg.clone(), refusal.clone());
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || client(cfg, k, t0, refusal))
                .expect("a client thread")
        })
        .collect();
    let mut rows: Vec<Row> = Vec::new();
    for t in threads {
        rows.extend(t.join().expect("a client thread panicked"));
    }
    let wall = t0.elapsed().as_secs_f64();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut csv = String::with_capacity(rows.len() * 24 + 32);
    csv.push_str("t_end,latency_ms,status\n");
    for (t, lat, st) in &rows {
        csv.push_str(&format!("{t:.4},{lat:.3},{st}\n"));
    }
    let write = |suffix: &str, data: &[u8]| {
        std::fs::write(format!("{}{suffix}", cfg.out), data).unwrap_or_else(|e| {
            eprintln!("clients: cannot write {}{suffix}: {e}", cfg.out);
            std::process::exit(1)
        })
    };
    write(".requests.csv", csv.as_bytes());
    write(".refusal.txt", refusal.lock().unwrap().as_deref().unwrap_or(b""));
    write(".load.txt", format!("cpu_ticks {}\nwall_s {wall:.3}\n", cpu_ticks()).as_bytes());
    eprintln!("  {} answers from {} clients", rows.len(), cfg.clients);
}
