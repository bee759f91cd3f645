//! The connection to Redis: one multiplexed connection that every request's
//! call is pipelined on, a deadline on each call, and a circuit breaker.
//!
//! While the link is up, calls go straight to the connection. A connection
//! error, or [`FAILURES_TO_OPEN`] calls in a row that failed (a frozen Redis
//! answers nothing: each call waits its whole `timeout`), takes it down:
//! calls then fail at once, without touching the network, while one task
//! probes Redis (connect, `PING`, load the script) every [`PROBE_EVERY`]
//! until it answers, and puts the new connection up. So a dead Redis costs
//! a request nothing but the fallback, and sluice is back on Redis within
//! about a second of Redis answering again.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Client, Cmd, ErrorKind, FromRedisValue, Pipeline, RedisError,
    RedisFuture, RetryMethod, ServerErrorKind, Value,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::access::{auth_refused, Access};
use super::script::SOURCE;
use crate::config::shown_redis_url;
use crate::store::admission::StoreError;

/// Calls that fail in a row before the link stops sending.
const FAILURES_TO_OPEN: u32 = 3;
/// How often a down link tries Redis again.
const PROBE_EVERY: Duration = Duration::from_millis(250);
/// The longest a probe waits to connect: longer than a call may, since a
/// probe holds no request.
const PROBE_CONNECT: Duration = Duration::from_secs(1);

/// Why a Redis store cannot be set up: nothing was connected yet, the
/// URLs given are not ones the client reads.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("no Redis URL")]
    NoUrl,
    #[error("{urls}: {source}")]
    Url {
        urls: String,
        #[source]
        source: RedisError,
    },
}

/// A shared, self-healing connection to one Redis node.
#[derive(Debug, Clone)]
pub struct Link(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    client: Node,
    script_hash: String,
    /// Where the instances' shared key seed lives.
    seed_key: String,
    /// The shared key seed, once read.
    seed: watch::Sender<Option<Seed>>,
    timeout: Duration,
    /// The connection while the link is up.
    up: ArcSwapOption<Connection>,
    /// Calls failed in a row.
    failures: AtomicU32,
    /// Whether a probe task runs.
    probing: AtomicBool,
}

impl Link {
    /// A link to `url`, reached with `access`, down until its first probe
    /// connects (started by the first call, or by [`Link::start`]).
    pub fn new(
        url: &str,
        access: &Access,
        timeout: Duration,
        seed_key: String,
    ) -> Result<Link, LinkError> {
        let client = access.client(url).map_err(|source| LinkError::Url {
            urls: shown_redis_url(url).into_owned(),
            source,
        })?;
        let client = Node::Single(Box::new(client));
        Ok(Link::with_node(client, timeout, seed_key))
    }

    /// A link to the Redis Cluster that `urls` (some of its nodes) belong
    /// to, reached with `access`: commands go to the node serving their
    /// key's slot, following `MOVED`/`ASK` and a failed-over primary.
    pub fn cluster(
        urls: &[String],
        access: &Access,
        timeout: Duration,
        seed_key: String,
    ) -> Result<Link, LinkError> {
        let client = access
            .cluster_client(urls, |builder| {
                builder
                    .connection_timeout(PROBE_CONNECT)
                    .response_timeout(PROBE_CONNECT)
            })
            .map_err(|source| LinkError::Url {
                urls: super::shown_urls(urls).join(", "),
                source,
            })?;
        let client = Node::Cluster(Box::new(client));
        Ok(Link::with_node(client, timeout, seed_key))
    }

    fn with_node(client: Node, timeout: Duration, seed_key: String) -> Link {
        Link(Arc::new(Shared {
            client,
            script_hash: redis::Script::new(SOURCE).get_hash().to_owned(),
            seed_key,
            seed: watch::Sender::new(None),
            timeout,
            up: ArcSwapOption::empty(),
            failures: AtomicU32::new(0),
            probing: AtomicBool::new(false),
        }))
    }

    /// Starts connecting in the background (call it from the runtime).
    pub fn start(&self) {
        self.probe();
    }

    /// Whether the link goes to a Redis Cluster (a call's keys must then
    /// share one slot).
    pub fn is_cluster(&self) -> bool {
        matches!(self.0.client, Node::Cluster(_))
    }

    /// What tells this link from another (links are shared by cloning).
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// Whether calls are being sent to Redis.
    pub fn is_up(&self) -> bool {
        self.0.up.load().is_some()
    }

    /// The key seed the instances share, as soon as it is read (and again
    /// should it change: a Redis restarted empty gets a new one).
    pub fn seeds(&self) -> watch::Receiver<Option<Seed>> {
        self.0.seed.subscribe()
    }

    /// The longest a call may take.
    pub fn timeout(&self) -> Duration {
        self.0.timeout
    }

    /// The script's SHA1, for `EVALSHA`.
    pub fn script_hash(&self) -> &str {
        &self.0.script_hash
    }

    /// Runs `command` within the timeout; the script is loaded again if
    /// Redis lost it (a restart, `SCRIPT FLUSH`).
    pub async fn run<T: FromRedisValue>(&self, command: Cmd) -> Result<T, StoreError> {
        let Some(connection) = self.0.up.load_full() else {
            self.probe();
            return Err(down());
        };
        let mut connection = (*connection).clone();
        let answer = tokio::time::timeout(self.0.timeout, async {
            match command.query_async::<T>(&mut connection).await {
                Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    load_script(&mut connection).await?;
                    command.query_async(&mut connection).await
                }
                answer => answer,
            }
        })
        .await;
        match answer {
            Ok(Ok(answer)) => {
                self.0.failures.store(0, Ordering::Relaxed);
                Ok(answer)
            }
            // Redis answered, with an error that passes on its own (it is
            // loading its data, a failover or a resharding is under way):
            // an outage.
            Ok(Err(error)) if passes_on_its_own(&error) => {
                Err(self.failed(&error.to_string(), false))
            }
            // Redis no longer lets this connection in (its password or
            // user changed): an outage until a probe gets in again.
            Ok(Err(error)) if auth_refused(&error) => Err(self.failed(&error.to_string(), true)),
            // Redis answered, with an error of the script's: not an outage.
            Ok(Err(error)) if !connection_lost(&error) && !error.is_timeout() => {
                self.0.failures.store(0, Ordering::Relaxed);
                Err(StoreError::Script(format!("Redis: {error}").into()))
            }
            Ok(Err(error)) => Err(self.failed(&error.to_string(), connection_lost(&error))),
            Err(_) => Err(self.failed(&format!("no answer within {:?}", self.0.timeout), false)),
        }
    }

    /// Sends `command` from a task, for callers that cannot wait (a `Drop`):
    /// the task, which a caller may await (`None` outside a runtime: not
    /// sent).
    pub fn send_detached(&self, command: Cmd) -> Option<JoinHandle<()>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let link = self.clone();
        Some(runtime.spawn(async move {
            if let Err(error) = link.run::<Value>(command).await {
                tracing::debug!(%error, "a call was not sent to Redis");
            }
        }))
    }

    /// Counts a failed call, taking the link down when the connection is
    /// lost or failures pile up.
    fn failed(&self, detail: &str, lost: bool) -> StoreError {
        let failures = self.0.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if lost || failures >= FAILURES_TO_OPEN {
            if self.0.up.swap(None).is_some() {
                tracing::warn!(detail, "Redis is not answering; probing it until it does");
            }
            self.probe();
        }
        StoreError::Unavailable(format!("Redis: {detail}").into())
    }

    /// Starts the probe task unless one runs.
    fn probe(&self) {
        if self.0.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.0.probing.store(false, Ordering::Release);
            return;
        };
        let shared = Arc::downgrade(&self.0);
        runtime.spawn(async move {
            let mut logged = false;
            loop {
                let Some(link) = shared.upgrade() else {
                    return;
                };
                let connected = tokio::time::timeout(PROBE_CONNECT, connect(&link))
                    .await
                    .unwrap_or_else(|_| Err(no_answer(PROBE_CONNECT)));
                match connected {
                    Ok((connection, seed)) => {
                        link.seed
                            .send_if_modified(|known| known.replace(seed) != Some(seed));
                        link.failures.store(0, Ordering::Relaxed);
                        link.up.store(Some(Arc::new(connection)));
                        link.probing.store(false, Ordering::Release);
                        tracing::info!("connected to Redis");
                        return;
                    }
                    // Once per failure streak: the calls that fail meanwhile
                    // fail at once, without a line each.
                    Err(error) if !logged && auth_refused(&error) => {
                        tracing::warn!(%error, "Redis refused AUTH (the password from password_env or the URL, or its user); deciding with on_error until it lets sluice in");
                        logged = true;
                    }
                    Err(error) if !logged => {
                        tracing::warn!(%error, "cannot reach Redis; deciding with on_error until it answers");
                        logged = true;
                    }
                    Err(_) => {}
                }
                drop(link);
                tokio::time::sleep(PROBE_EVERY).await;
            }
        });
    }
}

/// Where the link connects: one Redis, or a Redis Cluster.
#[derive(Debug)]
enum Node {
    Single(Box<Client>),
    Cluster(Box<ClusterClient>),
}

/// The connection of a link that is up.
#[derive(Clone)]
enum Connection {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Connection::Single(_) => "Connection::Single",
            Connection::Cluster(_) => "Connection::Cluster",
        })
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(connection) => connection.req_packed_command(cmd),
            Connection::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            Connection::Cluster(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(connection) => connection.get_db(),
            Connection::Cluster(connection) => connection.get_db(),
        }
    }
}

/// A new connection that answered `PING` and holds the script, and the
/// instances' shared key seed (made by the first instance that asks).
async fn connect(link: &Shared) -> Result<(Connection, Seed), RedisError> {
    let mut connection = match &link.client {
        Node::Single(client) => {
            // No response timeout of the client's: each call has its own
            // deadline (`Link::run`), and a second timer per call would
            // cost every request.
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(PROBE_CONNECT))
                .set_response_timeout(None);
            Connection::Single(
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?,
            )
        }
        Node::Cluster(client) => Connection::Cluster(client.get_async_connection().await?),
    };
    redis::cmd("PING")
        .query_async::<Value>(&mut connection)
        .await?;
    load_script(&mut connection).await?;
    let fresh = format!("{:x}:{:x}", super::random_u64(), super::random_u64());
    let (_, seed): (Value, String) = redis::pipe()
        .cmd("SET")
        .arg(&link.seed_key)
        .arg(fresh)
        .arg("NX")
        .cmd("GET")
        .arg(&link.seed_key)
        .query_async(&mut connection)
        .await?;
    let seed = parse_seed(&seed).ok_or_else(|| {
        RedisError::from((
            ErrorKind::Parse,
            "the shared key seed is not two hexadecimal numbers",
            seed.clone(),
        ))
    })?;
    Ok((connection, seed))
}

/// Two numbers a key hasher is seeded with.
pub type Seed = [u64; 2];

fn parse_seed(text: &str) -> Option<Seed> {
    let (a, b) = text.split_once(':')?;
    Some([
        u64::from_str_radix(a, 16).ok()?,
        u64::from_str_radix(b, 16).ok()?,
    ])
}

/// Loads the script (on every node of a cluster).
async fn load_script(connection: &mut Connection) -> Result<(), RedisError> {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(SOURCE)
        .query_async::<Value>(connection)
        .await
        .map(|_| ())
}

fn no_answer(waited: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer within {waited:?}"),
    ))
}

/// Whether `error` means the connection is gone (not a script's error).
fn connection_lost(error: &RedisError) -> bool {
    error.is_io_error() || error.is_connection_dropped() || error.is_connection_refusal()
}

/// Errors Redis answers while it cannot serve for a while: `LOADING`,
/// `TRYAGAIN`, `MASTERDOWN`, `CLUSTERDOWN` (wait and retry), and
/// `READONLY` from a primary demoted by a failover.
fn passes_on_its_own(error: &RedisError) -> bool {
    matches!(
        error.retry_method(),
        RetryMethod::WaitAndRetry | RetryMethod::RefreshSlotsAndRetry
    )
}

/// What every call answers while the link is down: no allocation, since
/// every request asks during an outage.
fn down() -> StoreError {
    StoreError::Unavailable(Cow::Borrowed("Redis is down (probing it)"))
}
