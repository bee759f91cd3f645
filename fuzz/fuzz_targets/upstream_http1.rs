//! Any bytes as an upstream's answer to a request: sluice's own HTTP/1.1
//! exchange and hyper's client (the oracle), each reading them off a
//! loopback connection, relay the same head (status, version, fields), the
//! same body bytes (or both fail), make the same decision about reusing the
//! upstream connection, and deliver the same request body to the upstream
//! (`sluice::proxy::upstream_differential`, which lists the differences
//! that are intended).
//!
//! The first byte picks the request: `H` a `HEAD`, `P` a `POST` with a
//! 5-byte body, `Q` a `POST` with a 9,000-byte body (past what is copied
//! behind the head), anything else a bodiless `GET`.
#![no_main]

use http::Method;
use libfuzzer_sys::fuzz_target;
use sluice::proxy::upstream_differential;

/// Larger answers add nothing a framing bug needs, and slow every run.
const MAX_ANSWER: usize = 16 * 1024;

fuzz_target!(|data: &[u8]| {
    let Some((&first, answer)) = data.split_first() else {
        return;
    };
    if answer.len() > MAX_ANSWER {
        return;
    }
    let (method, body) = match first {
        b'H' => (Method::HEAD, Vec::new()),
        b'P' => (Method::POST, b"hello".to_vec()),
        b'Q' => (Method::POST, vec![b'q'; 9000]),
        _ => (Method::GET, Vec::new()),
    };
    if let Err(divergence) = upstream_differential::compare(&method, &body, answer) {
        panic!("sluice's client and hyper's disagree: {divergence}");
    }
});
