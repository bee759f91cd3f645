//! Any bytes as an upstream's answer to a bodiless `GET` (or `HEAD`, when
//! the first byte is `H`): sluice's plain exchange and hyper's client,
//! each reading them off a loopback connection through sluice's own pool
//! and `prepare_response`, relay the same head (status, version, fields),
//! the same body bytes (or both fail) and make the same decision about
//! reusing the upstream connection (`sluice::proxy::upstream_differential`,
//! which lists the differences that are intended).
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
    let method = if first == b'H' {
        Method::HEAD
    } else {
        Method::GET
    };
    if let Err(divergence) = upstream_differential::compare(&method, answer) {
        panic!("the two clients disagree: {divergence}");
    }
});
