//! What one scrape of `GET /metrics` costs: a real sluice (in-process, on
//! loopback) with 20 rules, each with a token bucket, after 0 or 100,000
//! keys were given buckets (5,000 a rule, through `POST /v1/check`, which
//! takes from the same buckets as proxied traffic). One iteration is one
//! HTTP/1.1 GET on a kept-alive connection, read to the end of the body: the
//! scrape as Prometheus makes it, loopback round trip included.
//!
//! Per-rule series (`sluice_tracked_keys` and the bans gauge) are brought up
//! to date at each scrape from counters the tables keep, not by walking
//! buckets, so the 100k-key figure should match the empty one; the bench
//! shows it. The process collector reads `/proc/self` (stat, limits and the
//! descriptor directory) at each scrape, part of the measured time.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use sluice::config::Config;
use sluice::server::Server;

const RULES: usize = 20;

/// A config of `RULES` rules keyed by a header, admin on an ephemeral port.
fn config() -> Config {
    let mut text = String::from(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://127.0.0.1:9\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n",
    );
    for rule in 0..RULES {
        text.push_str(&format!(
            "[[rule]]\nname = \"rule-{rule:02}\"\nmatch = {{ path_prefix = \"/r{rule}\" }}\n\
             key = [\"header:x-user\"]\nrate = \"1000/s\"\n"
        ));
    }
    Config::from_toml(&text, "bench.toml").expect("a valid config")
}

/// One HTTP/1.1 request on `stream`; the answer's body.
fn exchange(stream: &mut BufReader<TcpStream>, request: &str, body: &str) -> String {
    let head = format!(
        "{request} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.get_mut().write_all(head.as_bytes()).unwrap();
    let mut length = 0;
    let mut status = String::new();
    stream.read_line(&mut status).unwrap();
    assert!(status.contains(" 200 "), "{request}: {status}");
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap();
            }
        }
    }
    let mut answer = vec![0; length];
    stream.read_exact(&mut answer).unwrap();
    String::from_utf8(answer).unwrap()
}

/// Starts sluice on a runtime of its own (2 workers, as on the bench
/// machine) and gives `keys` keys a bucket, spread evenly over the rules.
fn start(keys: usize) -> (tokio::runtime::Runtime, SocketAddr) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let admin = runtime.block_on(async {
        let server = Server::bind(config()).await.unwrap();
        let admin = server.admin_addr().unwrap();
        tokio::spawn(server.serve(std::future::pending()));
        admin
    });
    let mut stream = BufReader::new(TcpStream::connect(admin).unwrap());
    // Batches of 1,000 checks, one rule's keys after another.
    let per_rule = keys / RULES;
    for rule in 0..RULES {
        let mut given = 0;
        while given < per_rule {
            let batch: Vec<String> = (given..(given + 1000).min(per_rule))
                .map(|key| format!("{{\"rule\":\"rule-{rule:02}\",\"key\":\"user-{key}\"}}"))
                .collect();
            given += batch.len();
            let answer = exchange(
                &mut stream,
                "POST /v1/check",
                &format!("[{}]", batch.join(",")),
            );
            assert!(!answer.contains("\"status\""), "{answer}");
        }
    }
    (runtime, admin)
}

fn scrape(c: &mut Criterion) {
    let mut group = c.benchmark_group("metrics_render");
    group
        .measurement_time(Duration::from_secs(5))
        .sample_size(50);
    for keys in [0, 100_000] {
        let (runtime, admin) = start(keys);
        let mut stream = BufReader::new(TcpStream::connect(admin).unwrap());
        let text = exchange(&mut stream, "GET /metrics", "");
        let tracked: f64 = text
            .lines()
            .filter(|line| line.starts_with("sluice_tracked_keys{"))
            .map(|line| line.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum();
        assert_eq!(tracked as usize, keys, "tracked keys");
        eprintln!(
            "metrics_render/{RULES}rules/{keys}keys: {} bytes, {} lines",
            text.len(),
            text.lines().count()
        );
        group.bench_with_input(
            BenchmarkId::new(format!("{RULES}rules"), keys),
            &keys,
            |b, _| b.iter(|| exchange(&mut stream, "GET /metrics", "").len()),
        );
        drop(stream);
        runtime.shutdown_timeout(Duration::from_secs(1));
    }
    group.finish();
}

criterion_group!(benches, scrape);
criterion_main!(benches);
