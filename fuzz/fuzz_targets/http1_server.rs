//! Arbitrary bytes as everything a client sends on one connection: served
//! by sluice's HTTP/1.1 server and by hyper's (the oracle), the same
//! requests reach the service (method, target, version, fields, body), the
//! client reads the same answers (the service's byte for byte, a refusal by
//! its status) and the connection ends alike
//! (`sluice::server::differential`, which says what is not compared).
//! Where `http1_head` holds the server's head reader to httparse's
//! reading, this holds the whole connection, bodies included, to hyper's.
//!
//! The byte 0x1F (ASCII's unit separator, which no head may hold) cuts the
//! input into pieces, each sent once the connection has done all it can
//! with what came before: heads and bodies split across reads.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::server::differential::{serve, Side};

/// Where the input is cut into pieces.
const CUT: u8 = 0x1f;

fuzz_target!(|data: &[u8]| {
    let pieces: Vec<&[u8]> = data.split(|&byte| byte == CUT).collect();
    // The differential needs paused time: it moves only when every task
    // waits, which is how "done with what it has" is told exactly.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let (sluice, hyper) = runtime.block_on(async {
        (
            serve(Side::Sluice, &pieces).await,
            serve(Side::Hyper, &pieces).await,
        )
    });
    assert_eq!(
        sluice,
        hyper,
        "\nsluice: {}\nhyper:  {}",
        String::from_utf8_lossy(&sluice.raw),
        String::from_utf8_lossy(&hyper.raw)
    );
});
