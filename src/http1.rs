//! HTTP/1.1 on the wire, as both sides of sluice speak it: its own server
//! to clients (`server/http1.rs`) and its own client to upstreams
//! (`proxy/pool/exchange.rs`). What is here knows bytes and framing and
//! nothing of the proxy:
//!
//! - [`framing`]: how a message's body is delimited, and the fields that say so;
//! - [`chunked`]: the chunked coding, read (with its trailer fields);
//! - [`outflow`]: a body written out — its frames framed, short ones
//!   gathered into one write;
//! - [`pipe`]: a request body passed from the connection that reads it to
//!   what sends it on, as fast as that asks;
//! - [`transport`]: the one interface both sides read and write through,
//!   where another I/O backend (io_uring) would plug in (ARCHITECTURE.md);
//! - [`sending`]: the bytes a write hands the transport, owned;
//! - [`date`]: the `date` field, formatted once a second;
//! - [`names`]: field names as a peer spells them, remembered per
//!   connection.

pub mod chunked;
pub mod date;
pub mod framing;
pub mod names;
pub mod outflow;
pub mod pipe;
pub mod sending;
pub mod transport;
