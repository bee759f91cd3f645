//! WebSocket tunnels that count messages (RFC 6455): a client's frames
//! read as they stream ([`frames`]), and the tunnel's two directions
//! copied through buffers that exist only while bytes wait in them
//! ([`pump`]). What a tunnel with a `unit = "message"` rule asks before
//! each message is its [`pump::Gate`]'s business (`proxy/messages.rs`);
//! this module knows frames and sockets only, and the handshake's key and
//! answer sluice makes when it opens a server's side itself ([`handshake`]).

pub mod frames;
pub mod handshake;
pub mod pump;
