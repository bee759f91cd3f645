//! What reading a PROXY protocol header costs
//! (`sluice::server::proxy_protocol::parse`): once per connection with
//! `server.proxy_protocol`, never per request. Each input is a header as a
//! balancer sends it, followed by the start of the request it carries:
//!
//! - `v1-tcp4`: `PROXY TCP4 …\r\n`, what HAProxy and AWS's classic ELB send;
//! - `v1-tcp6`: the same over IPv6 with two full addresses, the longest
//!   TCP line;
//! - `v2-inet`: version 2 over IPv4, no TLVs (28 bytes);
//! - `v2-inet-tlv`: the same with an AWS VPC endpoint id TLV, as an AWS
//!   Network Load Balancer behind PrivateLink sends it.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use sluice::server::proxy_protocol::{parse, Parsed};

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n";

fn v2_inet(tlvs: &[u8]) -> Vec<u8> {
    let mut header = b"\r\n\r\n\0\r\nQUIT\n\x21\x11".to_vec();
    header.extend(u16::try_from(12 + tlvs.len()).unwrap().to_be_bytes());
    header.extend([203, 0, 113, 7, 192, 0, 2, 1]);
    header.extend(56324u16.to_be_bytes());
    header.extend(443u16.to_be_bytes());
    header.extend(tlvs);
    header
}

fn inputs() -> Vec<(&'static str, Vec<u8>)> {
    let v1_tcp6 = "PROXY TCP6 2001:db8:85a3:8d3:1319:8a2e:370:7348 \
                   2001:db8:85a3:8d3:1319:8a2e:370:7334 56324 443\r\n";
    let tlv = [&[0xea, 0, 23, 1][..], b"vpce-08d2bf15fac5001c9"].concat();
    [
        (
            "v1-tcp4",
            b"PROXY TCP4 203.0.113.7 192.0.2.1 56324 443\r\n".to_vec(),
        ),
        ("v1-tcp6", v1_tcp6.as_bytes().to_vec()),
        ("v2-inet", v2_inet(&[])),
        ("v2-inet-tlv", v2_inet(&tlv)),
    ]
    .into_iter()
    .map(|(name, header)| (name, [&header[..], REQUEST].concat()))
    .collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("proxy_protocol");
    for (name, bytes) in inputs() {
        assert!(
            matches!(
                parse(&bytes),
                Parsed::Complete {
                    source: Some(_),
                    ..
                }
            ),
            "{name}"
        );
        group.bench_function(name, |b| b.iter(|| parse(black_box(&bytes))));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
