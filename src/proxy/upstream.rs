//! One pool of servers (`[[upstream]]`, or the URL in `[server]`): which
//! server takes a request, the attempts a request makes, and what each
//! attempt tells the pool about its servers (docs/upstreams.md).
//!
//! An [`Upstream`] is an immutable snapshot (its servers, weights and
//! settings); a reload or a new DNS answer makes another that shares the
//! [`Server`]s that stay, so their connections, counts and health go on.
//!
//! Picking a server costs nothing for a pool of one. Otherwise the balance
//! picks among all servers and only when its pick is out does the pool
//! look at the others: if more than `max_share` of them are out (or all),
//! it sends to every server as if none were (panic routing), else it picks
//! again among those in.
//!
//! Attempts: a request goes to one server, then, after a failure that is
//! safe to repeat, to another not yet tried, `retries` times at most
//! ([`Retry`]). Every attempt is timed and its failure counted; the pool
//! learns from each (passive checks).

pub mod balance;
pub mod eject;
pub mod resolve;
pub mod server;

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Request, Response, StatusCode};
use smallvec::SmallVec;
use tokio::time::Instant;

use super::client_request::ClientBody;
use super::deadline::GuardedBody;
use super::pool::{
    is_idempotent, AddedFields, Exchanged, ForwardError, Load, PooledBody, RequestBody, Sent, Then,
};
use crate::clock::{Clock, Nanos, ProxyClock};
use crate::config::{Balance, KeySource, UpstreamConfig};
use crate::metrics::{seconds, PoolSeries};
use balance::{Candidate, Weights};
pub use server::Server;

/// One server of a pool snapshot, with its weight there.
#[derive(Debug, Clone)]
pub struct Member {
    pub server: Arc<Server>,
    pub weight: u32,
}

impl Candidate for Member {
    #[inline]
    fn weight(&self) -> u32 {
        self.weight
    }

    #[inline]
    fn load(&self) -> u32 {
        self.server.pool().in_flight()
    }

    #[inline]
    fn ring_id(&self) -> u64 {
        self.server.ring_id()
    }
}

/// A pool of servers, as one snapshot.
#[derive(Debug)]
pub struct Upstream {
    name: Arc<str>,
    members: Vec<Member>,
    weights: Weights,
    /// `round_robin`'s order of members.
    order: Vec<u32>,
    /// `round_robin`'s next turn.
    turn: AtomicUsize,
    balance: Balance,
    retries: u32,
    /// `eject`'s `after` and `for`.
    eject: Option<(u32, Duration)>,
    max_share: f64,
    timeout: Duration,
    /// Sent as `Host` when the client named none (HTTP/1.0).
    host: HeaderValue,
    series: PoolSeries,
}

/// The prepared request as the upstream side gets it: its head where the
/// client's request is (never moved), and its body, taken out of it.
pub struct Outbound<'r> {
    pub request: &'r Request<ClientBody>,
    pub body: &'r mut RequestBody,
    /// A WebSocket handshake: a `101` is its answer.
    pub handshake: bool,
}

impl Outbound<'_> {
    /// This attempt's part of the request.
    fn sent(&mut self) -> Sent<'_> {
        Sent {
            body: &mut *self.body,
            handshake: self.handshake,
        }
    }
}

/// What an attempt teaches the pool, learnt inside the exchange's future
/// ([`Pool::send_then`](super::pool::Pool::send_then)). One type for both
/// kinds of attempt, so that the exchange is compiled once for both, and
/// inlined as it was before pools.
enum Learn<'s> {
    /// A pool of one server's only attempt ([`Upstream::send_to_one`]):
    /// timed, learnt from, and its server's in-flight count (`load`) handed
    /// to the response body.
    Once {
        upstream: &'s Upstream,
        server: &'s Server,
        load: Load,
        sent: Nanos,
        clock: &'s ProxyClock,
        ended: &'s mut Nanos,
    },
    /// An attempt of [`Upstream::send_to_any`], which learns after it.
    Later,
}

impl Then for Learn<'_> {
    #[inline]
    fn then(self, outcome: &mut Exchanged) {
        let Learn::Once {
            upstream,
            server,
            load,
            sent,
            clock,
            ended,
        } = self
        else {
            return;
        };
        *ended = clock.now();
        let took = ended.saturating_sub(sent);
        upstream.series.seconds.observe(seconds(took));
        upstream.learn(server, outcome, false, false, *ended);
        if let Ok(response) = outcome {
            response.body_mut().hold_load(load);
        }
    }
}

/// A request body of at most this many bytes is read whole before it is
/// sent when a retry could need it again (docs/upstreams.md, "Retries").
pub const RESEND_MAX: u64 = 64 * 1024;

/// Whether a failed attempt may be made again on another server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// Nothing of the request reached a server that could have acted on
    /// it, or the request is idempotent and whole again: another server.
    Another,
    /// The answer stands.
    No,
}

impl Upstream {
    /// The snapshot of `config`'s pool with `members` (each server once,
    /// in the order of the config's URLs), counting into `series`.
    pub fn new(config: &UpstreamConfig, members: Vec<Member>, series: PoolSeries) -> Upstream {
        let weights: Vec<u32> = members.iter().map(|m| m.weight).collect();
        let host = config
            .servers
            .first()
            .and_then(|server| HeaderValue::from_str(&server.authority()).ok())
            .unwrap_or_else(|| HeaderValue::from_static("localhost"));
        Upstream {
            name: Arc::from(config.name.as_str()),
            weights: Weights::new(weights.iter().copied()),
            order: match config.balance {
                Balance::RoundRobin => balance::round_robin_order(&weights),
                _ => Vec::new(),
            },
            turn: AtomicUsize::new(0),
            members,
            balance: config.balance.clone(),
            retries: config.retries,
            eject: config.eject.map(|eject| (eject.after, eject.duration)),
            max_share: config.max_share,
            timeout: config.upstream_timeout,
            host,
            series,
        }
    }

    /// The pool's name (`default` for the URL in `[server]`).
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// `Host` for a request that named none.
    pub fn host(&self) -> &HeaderValue {
        &self.host
    }

    /// The key source of `hash:` balancing.
    pub fn hash_source(&self) -> Option<&KeySource> {
        match &self.balance {
            Balance::Hash(source) => Some(source),
            _ => None,
        }
    }

    /// Servers in and out at `now`, and whether the pool is in panic.
    pub fn state(&self, now: Nanos) -> (usize, usize, bool) {
        let out = self.members.iter().filter(|m| !m.server.is_in(now)).count();
        (self.members.len() - out, out, self.panics(out))
    }

    /// Whether `out` servers out of the pool's put it in panic.
    fn panics(&self, out: usize) -> bool {
        let count = self.members.len();
        out > 0 && (out == count || out as f64 > self.max_share * count as f64)
    }

    /// The server for an attempt at `now`: not one of `tried`, in unless
    /// the pool is in panic. `hash`: the request's key for `hash:`
    /// balancing (`None`: its source was missing, and the request is
    /// balanced by least request).
    pub fn pick(&self, hash: Option<u64>, tried: &[u16], now: Nanos) -> Option<usize> {
        let count = self.members.len();
        if count == 1 && tried.is_empty() {
            return Some(0);
        }
        if count == 0 {
            return None;
        }
        let untried = |i: usize| !tried.contains(&(i as u16));
        // A first attempt has tried nothing: no list to look through.
        let first = if tried.is_empty() {
            self.choose(hash, |_| true)?
        } else {
            self.choose(hash, untried)?
        };
        if self.members[first].server.is_in(now) {
            return Some(first);
        }
        let out = self.members.iter().filter(|m| !m.server.is_in(now)).count();
        if self.panics(out) {
            return Some(first);
        }
        self.choose(hash, |i| untried(i) && self.members[i].server.is_in(now))
    }

    fn choose(&self, hash: Option<u64>, eligible: impl Fn(usize) -> bool) -> Option<usize> {
        match (&self.balance, hash) {
            (Balance::Hash(_), Some(key)) => balance::rendezvous(&self.members, key, eligible),
            (Balance::RoundRobin, _) => {
                let turn = self.turn.fetch_add(1, Ordering::Relaxed);
                balance::round_robin(&self.order, turn, eligible)
            }
            _ => balance::least_request(&self.members, &self.weights, eligible, random),
        }
    }

    /// The server of a pool of one, which has nowhere else to send: its
    /// requests go through [`Upstream::send_to_one`], others' through
    /// [`Upstream::send_to_any`].
    #[inline]
    pub fn only(&self) -> Option<&Server> {
        match self.members.as_slice() {
            [only] => Some(&only.server),
            _ => None,
        }
    }

    /// Sends `request` to `server`, the pool's only one
    /// ([`Upstream::only`]), once. `sent`: when the attempt begins, on
    /// `clock`; `ended` is set to when it ended.
    ///
    /// Its future is the connection pool's own, and what the attempt
    /// teaches is learnt there ([`Pool::send_then`]): no future of the
    /// pool's around it, and none of [`Upstream::send_to_any`]'s size (each
    /// future is moved, a copy, on its way to being polled).
    ///
    /// [`Pool::send_then`]: super::pool::Pool::send_then
    pub fn send_to_one<'s>(
        &'s self,
        server: &'s Server,
        request: Outbound<'s>,
        added: &'s AddedFields,
        sent: Nanos,
        clock: &'s ProxyClock,
        ended: &'s mut Nanos,
    ) -> impl Future<Output = Exchanged> + 's {
        let learn = Learn::Once {
            upstream: self,
            server,
            load: Load::begin(server.pool()),
            sent,
            clock,
            ended,
        };
        let deadline = Instant::now() + self.timeout;
        let Outbound {
            request,
            body,
            handshake,
        } = request;
        let sent = Sent { body, handshake };
        server
            .pool()
            .send_then(request, added, sent, deadline, learn)
    }

    /// Sends `request` to a server of the pool, and to others while its
    /// attempts fail in a way that is safe to repeat: for a pool of several
    /// servers (or none). `sent`: when the first attempt begins, on
    /// `clock`; `ended` is set to when the last one ended. The answer is
    /// returned as the connection gave it (a response is large: it is not
    /// moved more than it must be).
    pub async fn send_to_any(
        &self,
        mut request: Outbound<'_>,
        added: &AddedFields,
        hash: Option<u64>,
        sent: Nanos,
        clock: &ProxyClock,
        ended: &mut Nanos,
    ) -> Result<Response<PooledBody>, ForwardError> {
        *ended = sent;
        let Some(mut index) = self.pick(hash, &[], sent) else {
            self.series.errors_connect.inc();
            return Err(ForwardError::NoServer);
        };
        let idempotent = is_idempotent(request.request.method());
        // A small body is read whole first when another server may need it.
        if self.retries > 0 {
            read_whole(request.request, request.body).await?;
        }
        let mut tried: SmallVec<[u16; 4]> = SmallVec::new();
        let mut began = sent;
        loop {
            let server = &self.members[index].server;
            let load = Load::begin(server.pool());
            let deadline = Instant::now() + self.timeout;
            if let Some(trace) = &added.trace {
                trace.begin_attempt(server.address(), began);
            }
            // `Learn::Later` rather than nothing: see `Learn`.
            let mut result = server
                .pool()
                .send_then(
                    request.request,
                    added,
                    request.sent(),
                    deadline,
                    Learn::Later,
                )
                .await;
            *ended = clock.now();
            if let Some(trace) = &added.trace {
                trace.end_attempt(attempt_outcome(&result), *ended);
            }
            self.series
                .seconds
                .observe(seconds(ended.saturating_sub(began)));
            let resendable = request.body.is_held();
            let retry = self.learn(server, &result, idempotent, resendable, *ended);
            if retry == Retry::Another && tried.len() < self.retries as usize {
                tried.push(index as u16);
                if let Some(next) = self.pick(hash, &tried, *ended) {
                    tracing::debug!(
                        upstream = %self.name,
                        server = %server.address(),
                        "retrying on another server"
                    );
                    self.series.retries.inc();
                    (index, began) = (next, *ended);
                    continue;
                }
            }
            if let Ok(response) = &mut result {
                response.body_mut().hold_load(load);
            }
            return result;
        }
    }

    /// Counts an attempt's outcome on its server and the pool's series
    /// (the passive checks learn from it), and says whether it may be made
    /// again elsewhere.
    /// `resendable`: sluice can send the request again (it has no body, its
    /// body was read whole, or hyper's client handed it back unsent).
    fn learn(
        &self,
        server: &Server,
        result: &Result<Response<PooledBody>, ForwardError>,
        idempotent: bool,
        resendable: bool,
        now: Nanos,
    ) -> Retry {
        let (failed, retry) = match result {
            Ok(response) => match response.status() {
                StatusCode::BAD_GATEWAY
                | StatusCode::SERVICE_UNAVAILABLE
                | StatusCode::GATEWAY_TIMEOUT => {
                    let again = if resendable && idempotent {
                        Retry::Another
                    } else {
                        Retry::No
                    };
                    (true, again)
                }
                _ => (false, Retry::No),
            },
            Err(error) => {
                let again = match error {
                    // Nothing reached the server, or it reset the exchange
                    // before any byte of an answer: any request sluice can
                    // send again.
                    ForwardError::Connect | ForwardError::Tls | ForwardError::Other
                        if resendable =>
                    {
                        Retry::Another
                    }
                    // The server may have acted on it: idempotent ones only.
                    ForwardError::Timeout if resendable && idempotent => Retry::Another,
                    _ => Retry::No,
                };
                match error {
                    ForwardError::Connect => self.series.errors_connect.inc(),
                    ForwardError::Tls => self.series.errors_tls.inc(),
                    ForwardError::Timeout => self.series.errors_timeout.inc(),
                    ForwardError::Other => self.series.errors_other.inc(),
                    // The client's fault says nothing about the server.
                    // Nor does a server's not speaking WebSocket over HTTP/2.
                    ForwardError::ClientBody
                    | ForwardError::NoServer
                    | ForwardError::NoExtendedConnect => return Retry::No,
                }
                (true, again)
            }
        };
        if !failed {
            server.succeeded();
        } else if server.failed(now, self.eject) {
            self.series.ejections.inc();
            tracing::warn!(
                upstream = %self.name,
                server = %server.address(),
                "server taken out by passive checks after failures in a row"
            );
        }
        retry
    }
}

/// How an attempt ended, as its span says: the status, or the kind of
/// failure (`sluice_upstream_errors_total`'s kinds).
pub fn attempt_outcome(
    result: &Result<Response<PooledBody>, ForwardError>,
) -> Result<u16, &'static str> {
    match result {
        Ok(response) => Ok(response.status().as_u16()),
        Err(ForwardError::Connect | ForwardError::NoServer) => Err("connect"),
        Err(ForwardError::Tls) => Err("tls"),
        Err(ForwardError::Timeout) => Err("timeout"),
        Err(ForwardError::ClientBody) => Err("client_body"),
        Err(_) => Err("other"),
    }
}

/// Reads a streamed `body` whole when it is declared at most [`RESEND_MAX`]
/// bytes (`request`'s `Content-Length`), so that it can be sent again. A
/// body that breaks off, or overruns its deadline or size cap, fails as the
/// client's.
async fn read_whole(
    request: &Request<ClientBody>,
    body: &mut RequestBody,
) -> Result<(), ForwardError> {
    use http_body_util::BodyExt;
    let RequestBody::Streamed(streamed) = body else {
        return Ok(());
    };
    let declared = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_none_or(|length| length > RESEND_MAX) {
        return Ok(());
    }
    let streamed = std::mem::replace(streamed, GuardedBody::empty());
    let bytes = streamed
        .collect()
        .await
        .map_err(|_| ForwardError::ClientBody)?
        .to_bytes();
    *body = RequestBody::Whole(bytes);
    Ok(())
}

thread_local! {
    /// This thread's xorshift state for `least_request`'s draws.
    static DRAWS: Cell<u64> = Cell::new(getrandom::u64().unwrap_or(0x9E37_79B9_7F4A_7C15) | 1);
}

/// A random number for a draw (xorshift64; not for secrets).
fn random() -> u64 {
    DRAWS.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x
    })
}
