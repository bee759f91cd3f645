//! A flood of QUIC client Initials that never go on with their handshakes,
//! as from spoofed sources; `scripts/http3-bench/run.sh` sends it at sluice
//! with `quic_retry = "always"` and reads sluice's CPU per Initial.
//!
//! ```sh
//! quic_initial_flood TARGET COUNT RATE SOURCES [GRACE]
//! ```
//!
//! Builds COUNT genuine client Initials first, each the first datagram of
//! a connection of its own (so each has its own Destination Connection ID
//! and ClientHello), with quinn-proto's client (ALPN `h3`, TLS 1.3, X25519
//! only, so that the ClientHello fits one 1,200-byte datagram: with the
//! post-quantum key share rustls offers by default it would take two).
//! Then binds SOURCES UDP sockets to distinct loopback addresses
//! 127.a.b.c (a, b, c in 1..=254, so never 127.0.0.1, the address a real
//! client uses: Linux lets any 127/8 address be bound) and sends the
//! Initials to TARGET round-robin over them, RATE a second (0: as fast as
//! the sockets take them), never answering what comes back.
//!
//! Counts what comes back on those sockets until GRACE seconds (default 2)
//! after the last send: Retry packets (long header, type Retry, RFC 9000
//! §17.2.5) and any other datagram (a server's Initial, say, if it
//! started a handshake instead). Prints a line per second of the run,
//! `t=S sent=N retries=N other=N`, then the totals:
//! `flood initials=N sources=N sent=N send_errors=N seconds=T rate=R
//! retries=N other=N`, and on stderr how long building took.
//!
//! Sending is on this thread, counting on one other (a current-thread
//! runtime waiting on every socket at once), so that the flooder's own cost
//! stays small beside the server's.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Connections built per quinn-proto endpoint: an endpoint keeps a little
/// state for each connection it started, which a fresh one drops.
const PER_ENDPOINT: usize = 1024;
/// The longest run the per-second counts cover.
const MAX_SECONDS: usize = 3600;
/// The largest datagram read back.
const MAX_DATAGRAM: usize = 2048;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(error) = run(&args) {
        eprintln!("quic_initial_flood: {error}");
        std::process::exit(1);
    }
}

/// The positional arguments.
struct Args {
    target: SocketAddr,
    count: usize,
    rate: f64,
    sources: usize,
    grace: Duration,
}

impl Args {
    fn parse(args: &[String]) -> Result<Args, Error> {
        if !(4..=5).contains(&args.len()) {
            return Err("usage: quic_initial_flood TARGET COUNT RATE SOURCES [GRACE]".into());
        }
        let parsed = Args {
            target: args[0].parse()?,
            count: args[1].parse()?,
            rate: args[2].parse()?,
            sources: args[3].parse()?,
            grace: Duration::from_secs_f64(args.get(4).map_or(Ok(2.0), |g| g.parse())?),
        };
        if parsed.count == 0 || parsed.sources == 0 || parsed.sources > 254 * 254 * 254 {
            return Err("COUNT must be positive, SOURCES in 1..=16387064".into());
        }
        Ok(parsed)
    }
}

/// The counts, a slot per second of the run.
struct Counts {
    start: Instant,
    sent: Vec<AtomicU64>,
    retries: Vec<AtomicU64>,
    other: Vec<AtomicU64>,
}

impl Counts {
    fn new(start: Instant) -> Counts {
        let slots = || (0..MAX_SECONDS).map(|_| AtomicU64::new(0)).collect();
        Counts {
            start,
            sent: slots(),
            retries: slots(),
            other: slots(),
        }
    }

    fn second(&self) -> usize {
        (self.start.elapsed().as_secs() as usize).min(MAX_SECONDS - 1)
    }
}

fn run(args: &[String]) -> Result<(), Error> {
    let args = Args::parse(args)?;
    let building = Instant::now();
    let initials = build_initials(args.target, args.count)?;
    eprintln!(
        "quic_initial_flood: built {} Initials of {} bytes in {:.1} s",
        initials.len(),
        initials[0].len(),
        building.elapsed().as_secs_f64()
    );
    let sockets = bind_sources(args.sources)?;
    let receivers = sockets
        .iter()
        .map(UdpSocket::try_clone)
        .collect::<Result<Vec<_>, _>>()?;
    let start = Instant::now();
    let counts = Arc::new(Counts::new(start));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let counting = {
        let counts = counts.clone();
        std::thread::spawn(move || count_answers(receivers, counts, stopped))
    };
    let send_errors = send_all(&args, &initials, &sockets, &counts);
    let seconds = start.elapsed().as_secs_f64();
    std::thread::sleep(args.grace);
    let _ = stop.send(());
    counting
        .join()
        .map_err(|_| "the counting thread panicked")??;
    report(&args, &counts, send_errors, seconds);
    Ok(())
}

/// COUNT client Initials for `target`, each from a connection of its own.
fn build_initials(target: SocketAddr, count: usize) -> Result<Vec<Vec<u8>>, Error> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.kx_groups = vec![rustls::crypto::aws_lc_rs::kx_group::X25519];
    // No server ever answers these handshakes far enough for a certificate
    // to be checked: an empty set of roots will do.
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let quic_tls = quinn_proto::crypto::rustls::QuicClientConfig::try_from(tls)?;
    let config = quinn_proto::ClientConfig::new(Arc::new(quic_tls));
    let endpoint_config = Arc::new(quinn_proto::EndpointConfig::default());
    let mut initials = Vec::with_capacity(count);
    let mut endpoint = None;
    for i in 0..count {
        if i % PER_ENDPOINT == 0 {
            endpoint = Some(quinn_proto::Endpoint::new(
                endpoint_config.clone(),
                None,
                false,
                None,
            ));
        }
        let endpoint = endpoint.as_mut().expect("made above");
        let now = Instant::now();
        let (_, mut connection) = endpoint.connect(now, config.clone(), target, "localhost")?;
        let mut datagram = Vec::with_capacity(1200);
        let transmit = connection
            .poll_transmit(now, 1, &mut datagram)
            .ok_or("a new connection had no Initial to send")?;
        datagram.truncate(transmit.size);
        initials.push(datagram);
    }
    Ok(initials)
}

/// Source `i`'s address: 127.a.b.c with a, b, c in 1..=254.
fn source(i: usize) -> Ipv4Addr {
    let i = i as u32;
    let digit = |place: u32| (1 + (i / place) % 254) as u8;
    Ipv4Addr::new(127, digit(254 * 254), digit(254), digit(1))
}

/// A non-blocking UDP socket on each source address, any port.
fn bind_sources(sources: usize) -> Result<Vec<UdpSocket>, Error> {
    (0..sources)
        .map(|i| -> Result<UdpSocket, Error> {
            let socket = UdpSocket::bind((source(i), 0))
                .map_err(|error| format!("binding {}: {error}", source(i)))?;
            socket.set_nonblocking(true)?;
            Ok(socket)
        })
        .collect()
}

/// Sends every Initial once, paced to RATE; returns how many sends failed
/// (other than a full socket buffer, which is waited out).
fn send_all(args: &Args, initials: &[Vec<u8>], sockets: &[UdpSocket], counts: &Counts) -> u64 {
    let mut errors = 0;
    for (i, datagram) in initials.iter().enumerate() {
        if args.rate > 0.0 {
            let due = counts.start + Duration::from_secs_f64(i as f64 / args.rate);
            let now = Instant::now();
            // Sleeping for less than a millisecond oversleeps: a late packet
            // catches up with the next ones instead.
            if due > now + Duration::from_millis(1) {
                std::thread::sleep(due - now);
            }
        }
        let socket = &sockets[i % sockets.len()];
        loop {
            match socket.send_to(datagram, args.target) {
                Ok(_) => counts.sent[counts.second()].fetch_add(1, Relaxed),
                Err(error) if error.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_micros(50));
                    continue;
                }
                Err(_) => {
                    errors += 1;
                    0
                }
            };
            break;
        }
    }
    errors
}

/// Counts the datagrams that come back on `sockets` until `stop`.
fn count_answers(
    sockets: Vec<UdpSocket>,
    counts: Arc<Counts>,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    runtime.block_on(async move {
        for socket in sockets {
            let socket = tokio::net::UdpSocket::from_std(socket)?;
            let counts = counts.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; MAX_DATAGRAM];
                while let Ok(n) = socket.recv(&mut buf).await {
                    let slot = counts.second();
                    match is_retry(&buf[..n]) {
                        true => counts.retries[slot].fetch_add(1, Relaxed),
                        false => counts.other[slot].fetch_add(1, Relaxed),
                    };
                }
            });
        }
        let _ = stop.await;
        Ok(())
    })
}

/// A QUIC v1 long header (first two bits set) of type Retry (0b11 in the
/// type bits, RFC 9000 §17.2) with version 1.
fn is_retry(datagram: &[u8]) -> bool {
    datagram.len() >= 5
        && datagram[0] & 0xc0 == 0xc0
        && (datagram[0] >> 4) & 0x03 == 0x03
        && datagram[1..5] == [0, 0, 0, 1]
}

fn report(args: &Args, counts: &Counts, send_errors: u64, seconds: f64) {
    let last = counts.second();
    let load = |slots: &[AtomicU64], t: usize| slots[t].load(Relaxed);
    let (mut sent, mut retries, mut other) = (0, 0, 0);
    for t in 0..=last {
        let row = [&counts.sent, &counts.retries, &counts.other].map(|slots| load(slots, t));
        println!("t={t} sent={} retries={} other={}", row[0], row[1], row[2]);
        sent += row[0];
        retries += row[1];
        other += row[2];
    }
    println!(
        "flood initials={} sources={} sent={sent} send_errors={send_errors} seconds={seconds:.2} \
         rate={:.0} retries={retries} other={other}",
        args.count,
        args.sources,
        sent as f64 / seconds,
    );
}
