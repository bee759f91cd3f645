//! Which pool serves a request, and the pools themselves as they change
//! (docs/upstreams.md): [`Routes`] is one immutable snapshot (the
//! `[[route]]`s and every pool), [`Upstreams`] holds the current one and
//! makes the next when a reload brings another config or a host name
//! resolves to other addresses. Each snapshot shares the servers that stay
//! with the one before (their connections, counts and health).
//!
//! Off the request path, per pool: a task that looks its host names up
//! again every `resolve_every` (every second while a name has never
//! resolved), and one that runs its active checks.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::task::JoinHandle;

use super::pool::dial::Destination;
use super::pool::tls::{Alpn, UpstreamTls};
use super::pool::{Pool, Speaks};
use super::upstream::resolve::{self, Resolve};
use super::upstream::{Member, Server, Upstream};
use crate::clock::{Clock, ProxyClock};
use crate::config::{ServerUrl, UpstreamConfig, UpstreamProtocol, UpstreamsConfig};
use crate::key::RequestFacts;
use crate::metrics::UpstreamSeries;
use crate::policy::Matcher;

mod health;

/// How long a pool's first lookup may hold up building it.
const FIRST_LOOKUP: Duration = Duration::from_secs(2);

/// While a name has never resolved, it is looked up this often.
const UNRESOLVED_EVERY: Duration = Duration::from_secs(1);

/// The routes and pools requests are forwarded by, as one snapshot.
#[derive(Debug)]
pub struct Routes {
    routes: Vec<(Matcher, usize)>,
    pools: Vec<Upstream>,
    default: usize,
}

impl Routes {
    /// The pool of the first route whose match fits, else the default.
    #[inline]
    pub fn route(&self, facts: &RequestFacts<'_>) -> &Upstream {
        let index = self
            .routes
            .iter()
            .find(|(matcher, _)| matcher.matches(facts))
            .map_or(self.default, |(_, pool)| *pool);
        &self.pools[index]
    }

    /// The pool no route takes the requests of.
    pub fn default_pool(&self) -> &Upstream {
        &self.pools[self.default]
    }

    /// Every pool, in the config's order.
    pub fn pools(&self) -> &[Upstream] {
        &self.pools
    }

    /// The pool by name.
    pub fn pool(&self, name: &str) -> Option<&Upstream> {
        self.pools.iter().find(|pool| &**pool.name() == name)
    }
}

/// The addresses each server URL of each pool stands for: by pool name,
/// then URL as written.
type Addresses = HashMap<(String, String), Vec<SocketAddr>>;

/// The current [`Routes`] and what makes the next.
#[derive(Debug, Clone)]
pub struct Upstreams {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    current: ArcSwap<Routes>,
    /// The config the current snapshot was built from; held while a
    /// snapshot is built, so builds never interleave.
    config: Mutex<Arc<UpstreamsConfig>>,
    resolver: Arc<dyn Resolve>,
    series: UpstreamSeries,
    clock: ProxyClock,
    /// The runtime the pools' tasks run on (none: no tasks, as in
    /// `check`).
    runtime: Option<tokio::runtime::Handle>,
    /// The pools' lookup and health tasks, ended at the next reload.
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Hands a snapshot a task made to the request path.
    publish: std::sync::OnceLock<Publisher>,
}

/// What hands a new snapshot to the request path.
pub type Publish = Box<dyn Fn(Arc<Routes>) + Send + Sync>;

/// A [`Publish`], which has no `Debug` of its own.
struct Publisher(Publish);

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Publisher")
    }
}

impl Upstreams {
    /// The pools of `config`, their names looked up once (a name that does
    /// not resolve within two seconds leaves its pool without that server
    /// for now); their tasks start with [`Upstreams::start`].
    pub fn new(
        config: &UpstreamsConfig,
        resolver: Arc<dyn Resolve>,
        series: UpstreamSeries,
        clock: ProxyClock,
    ) -> Upstreams {
        let config = Arc::new(config.clone());
        let addresses = first_lookups(&config, resolver.as_ref(), None);
        let routes = build(&config, None, &addresses, &series, &clock);
        Upstreams {
            inner: Arc::new(Inner {
                current: ArcSwap::from_pointee(routes),
                config: Mutex::new(config),
                resolver,
                series,
                clock,
                runtime: tokio::runtime::Handle::try_current().ok(),
                tasks: Mutex::new(Vec::new()),
                publish: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Starts the pools' tasks; the snapshots they make go to `publish`.
    pub fn start(&self, publish: Publish) {
        let _ = self.inner.publish.set(Publisher(publish));
        self.start_tasks();
    }

    /// The current snapshot.
    #[inline]
    pub fn load(&self) -> Arc<Routes> {
        self.inner.current.load_full()
    }

    /// Applies a reloaded config: the servers that stay in a pool keep
    /// their state; the others finish their requests in flight. Returns the
    /// new snapshot for the request path. Blocks for a new name's first
    /// lookup: call it off the async workers.
    pub fn reload(&self, config: &UpstreamsConfig) -> Arc<Routes> {
        let inner = &*self.inner;
        let config = Arc::new(config.clone());
        let current = inner.current.load_full();
        let addresses = first_lookups(&config, inner.resolver.as_ref(), Some(&current));
        let routes = {
            let mut held = inner.lock_config();
            let routes = Arc::new(build(
                &config,
                Some(&current),
                &addresses,
                &inner.series,
                &inner.clock,
            ));
            inner.current.store(Arc::clone(&routes));
            *held = config;
            routes
        };
        self.start_tasks();
        routes
    }

    /// Ends the tasks of the config before, and starts the current one's.
    fn start_tasks(&self) {
        let inner = &*self.inner;
        let mut tasks = inner
            .tasks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for task in tasks.drain(..) {
            task.abort();
        }
        let Some(runtime) = &inner.runtime else {
            return;
        };
        let config = Arc::clone(&inner.lock_config());
        for pool in &config.pools {
            let names = pool
                .servers
                .iter()
                .any(|server| resolve::literal(server.host(), server.port()).is_none());
            if names {
                let weak = Arc::downgrade(&self.inner);
                tasks.push(runtime.spawn(keep_resolving(
                    weak,
                    pool.name.clone(),
                    pool.resolve_every,
                )));
            }
            if let Some(check) = &pool.health {
                let weak = Arc::downgrade(&self.inner);
                let name = pool.name.clone();
                tasks.push(runtime.spawn(health::keep_checking(
                    weak_routes(weak),
                    name,
                    check.clone(),
                )));
            }
        }
    }

    /// Sets each pool's gauges (servers in and out, panic): when `/metrics`
    /// is scraped.
    pub fn set_gauges(&self) {
        let now = self.inner.clock.now();
        for pool in self.load().pools() {
            let (servers_in, servers_out, panic) = pool.state(now);
            self.inner
                .series
                .set_state(pool.name(), servers_in, servers_out, panic);
        }
    }
}

impl Inner {
    fn lock_config(&self) -> std::sync::MutexGuard<'_, Arc<UpstreamsConfig>> {
        self.config
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A way for a task to read the current snapshot while the proxy lives.
fn weak_routes(weak: Weak<Inner>) -> impl Fn() -> Option<Arc<Routes>> + Send + 'static {
    move || weak.upgrade().map(|inner| inner.current.load_full())
}

/// Looks the host names of pool `name` up again every `every` (every
/// second while one has never resolved) and makes a new snapshot when
/// their addresses changed. Ends with the proxy.
async fn keep_resolving(weak: Weak<Inner>, name: String, every: Duration) {
    let mut wait = Duration::ZERO;
    loop {
        tokio::time::sleep(wait).await;
        let Some(inner) = weak.upgrade() else { return };
        let config = Arc::clone(&inner.lock_config());
        let Some(pool) = config.pools.iter().find(|pool| pool.name == name) else {
            return;
        };
        let current = inner.current.load_full();
        let mut fresh = Addresses::new();
        let mut unresolved = false;
        for server in &pool.servers {
            if resolve::literal(server.host(), server.port()).is_some() {
                continue;
            }
            let before = addresses_of(&current, &pool.name, server);
            let answer = inner
                .resolver
                .lookup(bare(server.host()), server.port())
                .await;
            if let Err(error) = &answer {
                tracing::warn!(upstream = %pool.name, server = %server.written(), %error, "cannot resolve a server's name; its last addresses are kept");
            }
            let after = resolve::after_lookup(&before, answer);
            unresolved |= after.is_empty();
            if after != before {
                fresh.insert((pool.name.clone(), server.written()), after);
            }
        }
        if !fresh.is_empty() {
            let held = inner.lock_config();
            if Arc::ptr_eq(&held, &config) {
                let current = inner.current.load_full();
                let routes = Arc::new(build(
                    &held,
                    Some(&current),
                    &fresh,
                    &inner.series,
                    &inner.clock,
                ));
                inner.current.store(Arc::clone(&routes));
                if let Some(publisher) = inner.publish.get() {
                    (publisher.0)(routes);
                }
                tracing::info!(upstream = %pool.name, "a server name resolved to other addresses");
            }
        }
        wait = if unresolved {
            UNRESOLVED_EVERY.min(every)
        } else {
            every
        };
    }
}

/// A host as a URL writes it, without an IPv6 address's brackets.
fn bare(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(host)
}

/// The addresses of every name in `config` not known in `previous` (or all
/// of them at start), each looked up within [`FIRST_LOOKUP`]; a name known
/// before keeps its addresses until its pool's task looks it up again.
fn first_lookups(
    config: &UpstreamsConfig,
    resolver: &dyn Resolve,
    previous: Option<&Routes>,
) -> Addresses {
    let mut addresses = Addresses::new();
    for pool in &config.pools {
        for server in &pool.servers {
            if resolve::literal(server.host(), server.port()).is_some() {
                continue;
            }
            let known = previous
                .map(|routes| addresses_of(routes, &pool.name, server))
                .unwrap_or_default();
            if !known.is_empty() {
                continue;
            }
            let answer = resolver.lookup_blocking(bare(server.host()), server.port(), FIRST_LOOKUP);
            let found = match answer {
                Some(answer) => resolve::after_lookup(&[], answer),
                None => Vec::new(),
            };
            if found.is_empty() {
                tracing::warn!(
                    upstream = %pool.name,
                    server = %server.written(),
                    "the server's name does not resolve yet; the pool goes on without it"
                );
            }
            addresses.insert((pool.name.clone(), server.written()), found);
        }
    }
    addresses
}

/// The addresses `server` of pool `pool` stands for in `routes`.
fn addresses_of(routes: &Routes, pool: &str, server: &ServerUrl) -> Vec<SocketAddr> {
    routes
        .pool(pool)
        .map(|upstream| addresses_in(upstream, &server.written()))
        .unwrap_or_default()
}

/// The addresses the server URL written `written` stands for in `upstream`.
fn addresses_in(upstream: &Upstream, written: &str) -> Vec<SocketAddr> {
    upstream
        .members()
        .iter()
        .filter(|member| **member.server.url() == *written)
        .map(|member| member.server.address())
        .collect()
}

/// The snapshot of `config`: each URL's servers are its IP address, or the
/// addresses `fresh` has for its name, else those it had in `previous`;
/// a server `previous` had (same pool, URL and address) is kept.
fn build(
    config: &UpstreamsConfig,
    previous: Option<&Routes>,
    fresh: &Addresses,
    series: &UpstreamSeries,
    clock: &ProxyClock,
) -> Routes {
    let pools = config
        .pools
        .iter()
        .map(|pool| {
            let before = previous.and_then(|routes| routes.pool(&pool.name));
            let members = members(pool, before, fresh, clock);
            Upstream::new(pool, members, series.pool(&pool.name))
        })
        .collect();
    Routes {
        routes: config
            .routes
            .iter()
            .map(|route| {
                (
                    Matcher::new(&route.matcher, config.paths_alike),
                    route.upstream,
                )
            })
            .collect(),
        pools,
        default: config.default,
    }
}

/// The members of `pool`, reusing `before`'s servers (the same pool in
/// the snapshot before).
fn members(
    pool: &UpstreamConfig,
    before: Option<&Upstream>,
    fresh: &Addresses,
    clock: &ProxyClock,
) -> Vec<Member> {
    let mut members = Vec::new();
    for url in &pool.servers {
        let written = url.written();
        let addresses = match resolve::literal(url.host(), url.port()) {
            Some(address) => vec![address],
            None => fresh
                .get(&(pool.name.clone(), written.clone()))
                .cloned()
                .or_else(|| before.map(|upstream| addresses_in(upstream, &written)))
                .unwrap_or_default(),
        };
        for address in addresses {
            let kept = before.and_then(|upstream| {
                upstream
                    .members()
                    .iter()
                    .find(|m| {
                        **m.server.url() == *written
                            && m.server.address() == address
                            && m.server.pool().speaks() == speaks(pool)
                            && m.server.pool().connect_timeout() == pool.connect_timeout
                    })
                    .map(|m| Arc::clone(&m.server))
            });
            let server = match kept {
                Some(kept) => {
                    if let Some(roots) = &pool.roots {
                        kept.pool().trust(Arc::clone(roots));
                    }
                    kept
                }
                None => Arc::new(new_server(pool, url, address, clock)),
            };
            members.push(Member {
                server,
                weight: url.weight,
            });
        }
    }
    members
}

/// A server at `address` for `url`, with a connection pool of its own
/// (over TLS for an https:// pool, verified for the URL's host).
fn new_server(
    pool: &UpstreamConfig,
    url: &ServerUrl,
    address: SocketAddr,
    clock: &ProxyClock,
) -> Server {
    let tls = pool.https().then(|| upstream_tls(pool, url));
    let connections = Pool::speaking(
        speaks(pool),
        Destination(address),
        tls,
        pool.connect_timeout,
        clock.clone(),
    );
    Server::new(Arc::from(url.written().as_str()), address, connections)
}

/// The TLS side of an https server, verified against the pool's
/// authorities. A config changed after its validation (a library's own)
/// gets them read here, and fails closed: no authorities, or no name to
/// verify, and no handshake succeeds.
fn upstream_tls(pool: &UpstreamConfig, url: &ServerUrl) -> UpstreamTls {
    let roots = pool.roots.clone().unwrap_or_else(|| {
        crate::tls::read_roots(pool.upstream_ca.as_deref()).map_or_else(
            |error| {
                tracing::error!(%error, "no authorities to verify the https upstream with");
                Arc::new(rustls::RootCertStore::empty())
            },
            Arc::new,
        )
    });
    let host = url.host();
    let name = crate::tls::server_name(host).unwrap_or_else(|_| {
        tracing::error!(host, "the https upstream's host cannot be verified by TLS");
        rustls::pki_types::ServerName::try_from("unverifiable.invalid").expect("a valid DNS name")
    });
    let alpn = match pool.protocol {
        UpstreamProtocol::Http1 | UpstreamProtocol::H2c => Alpn::Http1,
        UpstreamProtocol::H2 => Alpn::H2,
        UpstreamProtocol::Auto => Alpn::Both,
    };
    UpstreamTls::new(name, roots, pool.connect_timeout, alpn)
}

/// Which HTTP `pool`'s servers are spoken to in (`auto` is HTTP/1.1 over
/// plain TCP, where there is no ALPN to ask).
fn speaks(pool: &UpstreamConfig) -> Speaks {
    match pool.protocol {
        UpstreamProtocol::Http1 => Speaks::Http1,
        UpstreamProtocol::H2c | UpstreamProtocol::H2 => Speaks::H2,
        UpstreamProtocol::Auto if pool.https() => Speaks::Auto,
        UpstreamProtocol::Auto => Speaks::Http1,
    }
}
