//! Where requests go (docs/upstreams.md): `[server] upstream` (a URL, or the
//! name of a pool), the `[[upstream]]` pools and the `[[route]]`s between
//! them.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::RootCertStore;
use toml::Spanned;

use super::keys::parse_key_source;
use super::raw::{Located, RawServerUrl, Start};
use super::raw::{RawConfig, RawEject, RawHealth, RawMatch, RawRoute, RawServer, RawUpstream};
use super::server::parse_upstream;
use super::validate::{non_empty, Validator};
use super::{
    Balance, Eject, HealthCheck, KeySource, MatchConfig, RouteConfig, ServerConfig, ServerUrl,
    UpstreamConfig, UpstreamProtocol, UpstreamsConfig, DEFAULT_POOL,
};

/// `protocol`'s values, as written.
pub(super) const PROTOCOLS: [(&str, UpstreamProtocol); 4] = [
    ("http1", UpstreamProtocol::Http1),
    ("h2c", UpstreamProtocol::H2c),
    ("h2", UpstreamProtocol::H2),
    ("auto", UpstreamProtocol::Auto),
];

/// Passive checks' defaults (docs/upstreams.md, "Passive checks").
const EJECT_AFTER: u32 = 5;
const EJECT_FOR: Duration = Duration::from_secs(30);
const MAX_SHARE: f64 = 0.5;

impl Validator<'_> {
    /// `[server] upstream`, the pools and the routes.
    pub(super) fn upstreams(&mut self, raw: &RawConfig, server: &ServerConfig) -> UpstreamsConfig {
        let empty = RawServer::default();
        let raw_server = raw.server.as_ref().unwrap_or(&empty);
        let mut pools = Vec::with_capacity(raw.upstream.len() + 1);
        let mut names: HashMap<String, usize> = HashMap::new();
        let headers = self.source.headers("[[upstream]]");
        let headers = (headers.len() == raw.upstream.len()).then_some(headers);
        let errors_before = self.errors.len();
        let default_url = self.default_url(raw_server, raw, server);
        let from_url = default_url.is_some();
        // `[server] upstream` missing, or a URL that does not parse: said.
        let reported = self.errors.len() > errors_before;
        if let Some(pool) = default_url {
            names.insert(DEFAULT_POOL.to_owned(), usize::MAX);
            pools.push(pool);
        }
        for (index, upstream) in raw.upstream.iter().enumerate() {
            let at = headers
                .as_ref()
                .and_then(|h| h.get(index).copied())
                .or_else(|| upstream.name.start())
                .unwrap_or(0);
            let pool = self.pool(index, at, upstream, server);
            if let Some(field) = &upstream.name {
                let name = field.get_ref();
                let taken = match names.get(name) {
                    Some(&usize::MAX) => "the name of the pool [server] upstream's URL makes; \
                                          name this pool otherwise"
                        .to_owned(),
                    Some(first) => {
                        format!("already the name of upstream[{first}]; pool names must be unique")
                    }
                    None => String::new(),
                };
                if taken.is_empty() {
                    names.insert(name.clone(), index);
                } else {
                    let path = format!("upstream[{index}].name");
                    self.error(field.span().start, &path, format!("\"{name}\" is {taken}"));
                }
            }
            pools.push(pool);
        }
        let by_name = |name: &str| {
            pools
                .iter()
                .position(|pool| pool.name == name && !pool.name.is_empty())
        };
        let default = match raw_server.upstream.as_ref() {
            Some(field) if !from_url && !reported => {
                by_name(field.get_ref()).unwrap_or_else(|| {
                    let known = known_names(&pools);
                    self.invalid(
                        field.span().start,
                        "server.upstream",
                        format!(
                        "\"{}\" is neither a URL (http://HOST[:PORT] or https://HOST[:PORT]) nor \
                         the name of an [[upstream]] pool{known}",
                        field.get_ref()
                    ),
                    )
                })
            }
            _ => 0,
        };
        if pools.is_empty() {
            // Reported by `default_url`; a placeholder keeps the rest whole.
            let url = http::Uri::from_static("http://127.0.0.1/");
            pools.push(placeholder_pool(vec![ServerUrl { url, weight: 1 }], server));
        }
        let routes = self.routes(&raw.route, &pools);
        self.unused_server_ca(raw_server, &pools);
        UpstreamsConfig {
            pools,
            routes,
            default,
            paths_alike: server.paths_alike,
        }
    }

    /// The pool `[server] upstream = "<URL>"` makes; `None` when it names a
    /// pool (or is missing, which is reported here).
    fn default_url(
        &mut self,
        raw_server: &RawServer,
        raw: &RawConfig,
        server: &ServerConfig,
    ) -> Option<UpstreamConfig> {
        let path = "server.upstream";
        let Some(field) = &raw_server.upstream else {
            let at = self
                .source
                .headers("[server]")
                .first()
                .copied()
                .unwrap_or(0);
            return self.invalid(
                at,
                path,
                "is required: the address of the protected service, for example \
                 upstream = \"http://127.0.0.1:3000\", or the name of an [[upstream]] pool",
            );
        };
        let text = field.get_ref();
        let names_a_pool = raw.upstream.iter().any(|pool| {
            pool.name
                .as_ref()
                .is_some_and(|name| name.get_ref() == text)
        });
        if names_a_pool {
            return None;
        }
        if !text.contains("://") && !text.contains(':') && !raw.upstream.is_empty() {
            // A name that is no pool's: reported by the caller, with the names.
            return None;
        }
        let url = self.ok(field.span().start, path, parse_upstream(text))?;
        let servers = vec![ServerUrl { url, weight: 1 }];
        let roots = self.roots(&servers, server.upstream_ca.as_deref(), || {
            non_empty(&raw_server.upstream_ca)
                .map(|ca| (ca.span().start, "server.upstream_ca".to_owned()))
                .unwrap_or((field.span().start, path.to_owned()))
        });
        Some(UpstreamConfig {
            eject: Some(Eject {
                after: EJECT_AFTER,
                duration: EJECT_FOR,
            }),
            upstream_ca: server.upstream_ca.clone(),
            roots,
            ..placeholder_pool(servers, server)
        })
    }

    /// One `[[upstream]]`, starting at `at`.
    fn pool(
        &mut self,
        index: usize,
        at: usize,
        raw: &RawUpstream,
        server: &ServerConfig,
    ) -> UpstreamConfig {
        let path = |field: &str| format!("upstream[{index}].{field}");
        // As [server]'s: each reader takes `raw.<key>`, named `upstream[i].<key>`.
        macro_rules! read {
            ($how:ident, $key:ident, $($arg:expr),+) => {
                self.$how(raw.$key.as_ref(), &path(stringify!($key)), $($arg),+)
            };
        }
        let name = match &raw.name {
            None => self.invalid(
                at,
                &format!("upstream[{index}]"),
                "needs a name, for example name = \"api\"",
            ),
            Some(field) => {
                let name = field.get_ref();
                let fits = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
                if !fits {
                    self.error(
                        field.span().start,
                        &path("name"),
                        format!(
                            "\"{name}\" is not a pool name: use letters, digits, '-', '_' and \
                             '.' (it is a metric label)"
                        ),
                    );
                }
                name.clone()
            }
        };
        let servers = self.servers(index, at, raw);
        let https = servers.first().is_some_and(ServerUrl::https);
        let protocol = self.protocol(index, raw, https, servers.is_empty());
        let balance = match &raw.balance {
            None => Balance::LeastRequest,
            Some(field) => self.balance(field, &path("balance")),
        };
        let upstream_ca = match non_empty(&raw.upstream_ca) {
            Some(ca) => Some(self.file_path(ca.get_ref())),
            None => server.upstream_ca.clone(),
        };
        let ca_path = path("upstream_ca");
        let servers_path = path("servers");
        let roots = self.roots(&servers, upstream_ca.as_deref(), || {
            match non_empty(&raw.upstream_ca) {
                Some(ca) => (ca.span().start, ca_path),
                None => (raw.servers.start_or(at), servers_path),
            }
        });
        let (eject, max_share) = self.eject(index, at, raw.eject.as_ref());
        UpstreamConfig {
            name,
            servers,
            protocol,
            balance,
            resolve_every: read!(timeout, resolve_every, Duration::from_secs(30)),
            retries: read!(int, retries, 1, 0..=10) as u32,
            health: raw
                .health
                .as_ref()
                .and_then(|health| self.health(index, at, health)),
            eject,
            max_share,
            connect_timeout: read!(timeout, connect_timeout, server.connect_timeout),
            upstream_timeout: read!(timeout, upstream_timeout, server.upstream_timeout),
            upstream_ca,
            roots,
        }
    }

    /// A pool's `servers`: URLs, all http:// or all https://, with weights.
    fn servers(&mut self, index: usize, at: usize, raw: &RawUpstream) -> Vec<ServerUrl> {
        let base = format!("upstream[{index}].servers");
        let Some(field) = &raw.servers else {
            return self.invalid(
                at,
                &base,
                "is required: the pool's servers, for example \
                 servers = [\"http://10.0.0.11:3000\", \"http://10.0.0.12:3000\"]",
            );
        };
        if field.get_ref().is_empty() {
            self.error(
                field.span().start,
                &base,
                "names no server; list at least one URL",
            );
        }
        let mut servers: Vec<ServerUrl> = Vec::with_capacity(field.get_ref().len());
        let mut first_scheme: Option<(String, usize)> = None;
        for (i, entry) in field.get_ref().iter().enumerate() {
            let path = format!("{base}[{i}]");
            let entry_at = entry.span().start;
            if let Some(server) = self.server_url(&path, entry_at, entry.get_ref()) {
                let scheme = server.url.scheme_str().unwrap_or("http").to_owned();
                match &first_scheme {
                    Some((first, first_index)) if *first != scheme => self.error(
                        entry_at,
                        &path,
                        format!(
                            "is {scheme}:// but {base}[{first_index}] is {first}://: a pool's \
                             servers all speak TLS (https://) or none do"
                        ),
                    ),
                    Some(_) => {}
                    None => first_scheme = Some((scheme, i)),
                }
                if servers.iter().any(|known| known.url == server.url) {
                    self.error(
                        entry_at,
                        &path,
                        format!(
                            "{} is already in this pool; give it a weight instead of listing \
                             it twice",
                            server.written()
                        ),
                    );
                } else {
                    servers.push(server);
                }
            }
        }
        servers
    }

    fn server_url(&mut self, path: &str, at: usize, raw: &RawServerUrl) -> Option<ServerUrl> {
        for key in &raw.unknown {
            let key_at = key.start_or(at);
            self.error(
                key_at,
                &format!("{path}.{}", key.text),
                "is not a server key (allowed: url, weight)",
            );
        }
        let weight = self.int(raw.weight.as_ref(), &format!("{path}.weight"), 1, 1..=1000) as u32;
        let Some(url) = &raw.url else {
            return self.invalid(
                at,
                path,
                "needs a url, for example { url = \"http://10.0.0.11:3000\", weight = 2 }",
            );
        };
        // A bare string's span is its entry's.
        let url_at = if url.span().is_empty() {
            at
        } else {
            url.span().start
        };
        let url = self.ok(url_at, path, parse_upstream(url.get_ref()))?;
        Some(ServerUrl { url, weight })
    }

    fn protocol(
        &mut self,
        index: usize,
        raw: &RawUpstream,
        https: bool,
        no_server: bool,
    ) -> UpstreamProtocol {
        let path = format!("upstream[{index}].protocol");
        let protocol = self.choice(
            raw.protocol.as_ref(),
            &path,
            &PROTOCOLS,
            UpstreamProtocol::Http1,
        );
        let problem = match protocol {
            UpstreamProtocol::H2 if !https && !no_server => {
                "\"h2\" is HTTP/2 over TLS, and this pool's servers are http://; use \"h2c\" \
                 (HTTP/2 without TLS) or https:// servers"
            }
            UpstreamProtocol::H2c if https => {
                "\"h2c\" is HTTP/2 without TLS, and this pool's servers are https://; use \"h2\""
            }
            _ => return protocol,
        };
        self.error(raw.protocol.start_or(0), &path, problem);
        protocol
    }

    fn balance(&mut self, field: &Spanned<String>, path: &str) -> Balance {
        let text = field.get_ref();
        let balance = match text.as_str() {
            "least_request" => Ok(Balance::LeastRequest),
            "round_robin" => Ok(Balance::RoundRobin),
            _ => match text.strip_prefix("hash:").map(parse_key_source) {
                Some(Ok(KeySource::Descriptor(_))) => Err(format!(
                    "\"{text}\": a proxied request has no rate limit service descriptor; hash \
                     on a source of the request, such as \"hash:header:x-user\""
                )),
                Some(Ok(source)) if source.reads_body() => Err(format!(
                    "\"{text}\": a request's body is read only for the rules that key on it, \
                     not to pick a server; hash on a field or the client, such as \
                     \"hash:header:x-user\""
                )),
                Some(Ok(source)) => Ok(Balance::Hash(source)),
                Some(Err(message)) => Err(format!("\"{text}\": {message}")),
                None => Err(format!(
                    "\"{text}\" is not a way to balance (allowed: \"least_request\", \
                     \"round_robin\", \"hash:<key source>\" such as \"hash:ip\" or \
                     \"hash:header:x-user\")"
                )),
            },
        };
        let balance = self.ok(field.span().start, path, balance);
        balance.unwrap_or(Balance::LeastRequest)
    }

    fn health(&mut self, index: usize, at: usize, raw: &Located<RawHealth>) -> Option<HealthCheck> {
        let path = |key: &str| format!("upstream[{index}].health.{key}");
        let at = raw.start_or(at);
        let health = &raw.value;
        let Some(check_path) = &health.path else {
            return self.invalid(
                at,
                &format!("upstream[{index}].health"),
                "needs a path, for example health = { path = \"/healthz\", interval = \"5s\" }",
            );
        };
        let written = check_path.get_ref();
        let fits =
            written.starts_with('/') && written.bytes().all(|b| b.is_ascii_graphic() && b != b'#');
        if !fits {
            self.error(
                check_path.span().start,
                &path("path"),
                format!("\"{written}\" must be a path starting with '/', such as \"/healthz\""),
            );
        }
        let secs = Duration::from_secs;
        let interval = self.timeout(health.interval.as_ref(), &path("interval"), secs(5));
        let timeout = self.timeout(health.timeout.as_ref(), &path("timeout"), secs(1));
        let host = health.host.as_ref().and_then(|host| {
            let text = host.get_ref();
            if http::HeaderValue::from_str(text).is_ok() && !text.is_empty() {
                Some(text.clone())
            } else {
                self.invalid(
                    host.span().start,
                    &path("host"),
                    format!("\"{text}\" is not a Host value, such as \"api.example.com\""),
                )
            }
        });
        Some(HealthCheck {
            path: written.clone(),
            interval,
            timeout,
            fails: self.int(health.fails.as_ref(), &path("fails"), 3, 1..=100) as u32,
            passes: self.int(health.passes.as_ref(), &path("passes"), 2, 1..=100) as u32,
            host,
        })
    }

    /// `eject`: the passive checks (on by default) and `max_share`.
    fn eject(
        &mut self,
        index: usize,
        at: usize,
        raw: Option<&Located<RawEject>>,
    ) -> (Option<Eject>, f64) {
        let defaults = Eject {
            after: EJECT_AFTER,
            duration: EJECT_FOR,
        };
        let Some(raw) = raw else {
            return (Some(defaults), MAX_SHARE);
        };
        let path = |key: &str| format!("upstream[{index}].eject.{key}");
        let at = raw.start_or(at);
        let eject = &raw.value;
        match eject.enabled {
            Some(false) => return (None, MAX_SHARE),
            Some(true) => return (Some(defaults), MAX_SHARE),
            None => {}
        }
        for key in &eject.unknown {
            let key_at = key.start_or(at);
            self.error(
                key_at,
                &path(&key.text),
                "is not a key of eject (allowed: after, for, max_share; or eject = false)",
            );
        }
        let after = self.int(eject.after.as_ref(), &path("after"), 5, 1..=1000) as u32;
        let duration = self.timeout(eject.duration.as_ref(), &path("for"), EJECT_FOR);
        let max_share = eject.max_share.as_ref().and_then(|field| {
            let value = *field.get_ref();
            let share = Some(value)
                .filter(|share| (0.0..=1.0).contains(share))
                .ok_or_else(|| {
                    format!(
                        "{value} is out of range: must be between 0 and 1 (the share of a pool's \
                     servers that may be out before requests go to all of them)"
                    )
                });
            self.ok(field.span().start, &path("max_share"), share)
        });
        let max_share = max_share.unwrap_or(MAX_SHARE);
        (Some(Eject { after, duration }), max_share)
    }

    /// The authorities https `servers` are verified against (`ca`, or the
    /// system's roots), loaded now so `check` reports a CA that cannot
    /// serve, at the place `blame` gives.
    fn roots(
        &mut self,
        servers: &[ServerUrl],
        ca: Option<&Path>,
        blame: impl FnOnce() -> (usize, String),
    ) -> Option<Arc<RootCertStore>> {
        if !servers.first().is_some_and(ServerUrl::https) {
            return None;
        }
        match crate::tls::read_roots(ca) {
            Ok(roots) => Some(Arc::new(roots)),
            Err(message) => {
                let (at, path) = blame();
                let message = if path.ends_with("upstream_ca") {
                    message
                } else {
                    format!("{message}; or name the upstream's CA in upstream_ca")
                };
                self.invalid(at, &path, message)
            }
        }
    }

    /// `[server] upstream_ca` when no pool that inherits it is https://.
    fn unused_server_ca(&mut self, raw_server: &RawServer, pools: &[UpstreamConfig]) {
        let Some(field) = non_empty(&raw_server.upstream_ca) else {
            return;
        };
        if !pools.iter().any(UpstreamConfig::https) {
            self.warn(
                field.span().start,
                "server.upstream_ca",
                "is unused: the upstream is http://, which is not TLS",
            );
        }
    }

    /// The `[[route]]`s: a match and a pool each; a route an earlier one
    /// leaves nothing to is an error.
    fn routes(&mut self, raw: &[RawRoute], pools: &[UpstreamConfig]) -> Vec<RouteConfig> {
        let headers = self.source.headers("[[route]]");
        let headers = (headers.len() == raw.len()).then_some(headers);
        let mut routes: Vec<RouteConfig> = Vec::with_capacity(raw.len());
        for (index, route) in raw.iter().enumerate() {
            let at = headers
                .as_ref()
                .and_then(|h| h.get(index).copied())
                .or_else(|| route.upstream.start())
                .unwrap_or(0);
            let matcher = match &route.matcher {
                Some(raw_match) => self.matcher(&format!("route[{index}].match"), raw_match),
                None => self.matcher(&format!("route[{index}].match"), &RawMatch::default()),
            };
            if let Some(domain) = route.matcher.as_ref().and_then(|m| m.domain.as_ref()) {
                self.error(
                    domain.span().start,
                    &format!("route[{index}].match.domain"),
                    "a route sends proxied requests, and rate limit service calls are answered \
                     by sluice itself; remove domain",
                );
            }
            let Some(field) = &route.upstream else {
                self.error(
                    at,
                    &format!("route[{index}]"),
                    "needs an upstream: the name of the [[upstream]] pool it sends to",
                );
                continue;
            };
            let name = field.get_ref();
            let found = pools
                .iter()
                .position(|pool| pool.name == *name)
                .ok_or_else(|| {
                    format!(
                        "\"{name}\" is not the name of an [[upstream]] pool{}",
                        known_names(pools)
                    )
                });
            let path = format!("route[{index}].upstream");
            let Some(upstream) = self.ok(field.span().start, &path, found) else {
                continue;
            };
            if let Some(earlier) = routes.iter().position(|r| covers(&r.matcher, &matcher)) {
                self.error(
                    at,
                    &format!("route[{index}]"),
                    format!(
                        "can never match: every request it fits is taken by an earlier route \
                         (the {} one, to \"{}\"); put it first or narrow the earlier one",
                        ordinal(earlier),
                        pools[routes[earlier].upstream].name
                    ),
                );
            }
            routes.push(RouteConfig { matcher, upstream });
        }
        routes
    }
}

/// The pool `default` of `servers` with the defaults and `server`'s
/// timeouts, and no passive checks or CA: as it is, the pool standing in
/// for one that could not be read (already reported).
fn placeholder_pool(servers: Vec<ServerUrl>, server: &ServerConfig) -> UpstreamConfig {
    UpstreamConfig {
        name: DEFAULT_POOL.to_owned(),
        servers,
        protocol: UpstreamProtocol::Http1,
        balance: Balance::LeastRequest,
        resolve_every: Duration::from_secs(30),
        retries: 1,
        health: None,
        eject: None,
        max_share: MAX_SHARE,
        connect_timeout: server.connect_timeout,
        upstream_timeout: server.upstream_timeout,
        upstream_ca: None,
        roots: None,
    }
}

/// Whether every request `later` fits also fits `earlier`, judged field by
/// field (each given field of `earlier` must be implied by `later`'s). Never
/// says so wrongly; may miss a cover it cannot prove (globs).
pub(super) fn covers(earlier: &MatchConfig, later: &MatchConfig) -> bool {
    fn subset<T: PartialEq>(wide: &[T], narrow: &[T]) -> bool {
        wide.is_empty() || (!narrow.is_empty() && narrow.iter().all(|n| wide.contains(n)))
    }
    let starts = |path: &str| {
        earlier
            .path_prefix
            .iter()
            .any(|p| path.starts_with(p.as_str()))
    };
    let prefixes_hold = earlier.path_prefix.is_empty()
        || (!later.path.is_empty() && later.path.iter().all(|p| starts(p)))
        || (!later.path_prefix.is_empty() && later.path_prefix.iter().all(|p| starts(p)));
    let paths_hold = subset(&earlier.path, &later.path);
    let globs_hold = earlier.path_glob.is_empty()
        || (!later.path_glob.is_empty()
            && later
                .path_glob
                .iter()
                .all(|g| earlier.path_glob.contains(g)));
    // Each header `earlier` names, `later` names too, with values among
    // `earlier`'s.
    let headers_hold = earlier.header.iter().all(|(name, wide)| {
        later
            .header
            .iter()
            .any(|(n, narrow)| n == name && subset(wide, narrow))
    });
    let clients_hold = earlier.client.is_empty()
        || (!later.client.is_empty()
            && later
                .client
                .iter()
                .all(|narrow| earlier.client.iter().any(|wide| wide.contains(narrow))));
    subset(&earlier.method, &later.method)
        && subset(&earlier.host, &later.host)
        && headers_hold
        && clients_hold
        && paths_hold
        && prefixes_hold
        && globs_hold
}

/// "first", "second", ... for a route's index.
fn ordinal(index: usize) -> String {
    match index {
        0 => "first".to_owned(),
        1 => "second".to_owned(),
        2 => "third".to_owned(),
        n => format!("{}th", n + 1),
    }
}

/// " (pools: a, b)", or "" when there are none.
fn known_names(pools: &[UpstreamConfig]) -> String {
    let names: Vec<&str> = pools
        .iter()
        .map(|pool| pool.name.as_str())
        .filter(|name| !name.is_empty() && *name != DEFAULT_POOL)
        .collect();
    if names.is_empty() {
        " (no [[upstream]] is configured)".to_owned()
    } else {
        format!(" (pools: {})", names.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{only_error, valid};
    use super::*;

    const POOLS: &str = "[server]\nupstream = \"api\"\n\
        [[upstream]]\nname = \"api\"\n\
        servers = [\"http://10.0.0.11:3000\", { url = \"http://10.0.0.12:3000\", weight = 3 }]\n\
        balance = \"hash:header:x-user\"\nretries = 2\n\
        health = { path = \"/healthz\", interval = \"2s\" }\n\
        eject = { after = 3 }\n\
        [[upstream]]\nname = \"v2\"\nservers = [\"https://v2.internal\"]\nprotocol = \"h2\"\n\
        [[route]]\nmatch = { path_prefix = \"/v2/\" }\nupstream = \"v2\"\n";

    #[test]
    fn pools_and_routes_are_read_with_their_defaults() {
        let config = valid(POOLS);
        let upstreams = &config.upstreams;
        assert_eq!(upstreams.pools.len(), 2);
        assert_eq!(upstreams.default_pool().name, "api");
        let api = &upstreams.pools[0];
        assert_eq!(api.servers[1].weight, 3);
        assert_eq!(api.servers[1].written(), "http://10.0.0.12:3000");
        assert_eq!(
            api.balance,
            Balance::Hash(KeySourceForTest::header("x-user"))
        );
        assert_eq!(api.retries, 2);
        let health = api.health.as_ref().unwrap();
        assert_eq!(
            (health.interval, health.timeout, health.fails, health.passes),
            (Duration::from_secs(2), Duration::from_secs(1), 3, 2)
        );
        assert_eq!(
            api.eject,
            Some(Eject {
                after: 3,
                duration: Duration::from_secs(30)
            })
        );
        assert_eq!(api.max_share, 0.5);
        assert_eq!(api.upstream_timeout, Duration::from_secs(60));
        let v2 = &upstreams.pools[1];
        assert_eq!(v2.protocol, UpstreamProtocol::H2);
        assert!(v2.roots.is_some(), "https servers are verified");
        assert_eq!(upstreams.routes[0].upstream, 1);
        // A URL in [server] is the pool "default", with every default.
        let config =
            valid("[server]\nupstream = \"http://127.0.0.1:3000\"\nupstream_timeout = \"5s\"\n");
        let default = config.upstreams.default_pool();
        assert_eq!(default.name, DEFAULT_POOL);
        assert_eq!(default.retries, 1);
        assert_eq!(default.upstream_timeout, Duration::from_secs(5));
        assert_eq!(default.balance, Balance::LeastRequest);
        // eject = false turns passive checks off.
        let off = valid(&POOLS.replace("eject = { after = 3 }", "eject = false"));
        assert_eq!(off.upstreams.pools[0].eject, None);
    }

    struct KeySourceForTest;

    impl KeySourceForTest {
        fn header(name: &str) -> crate::config::KeySource {
            crate::config::KeySource::Header(http::HeaderName::from_bytes(name.as_bytes()).unwrap())
        }
    }

    /// Each mistake `check` must name, with its line and column.
    #[test]
    fn mistakes_are_reported_where_they_are_written() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "upstream = \"api\"",
                "upstream = \"nope\"",
                "test.toml:2:12: server.upstream: \"nope\" is neither a URL",
            ),
            (
                "[[route]]\nmatch = { path_prefix = \"/v2/\" }\nupstream = \"v2\"",
                "[[route]]\nmatch = { path_prefix = \"/v2/\" }\nupstream = \"v3\"",
                "test.toml:16:12: route[0].upstream: \"v3\" is not the name of an [[upstream]] pool (pools: api, v2)",
            ),
            (
                "servers = [\"https://v2.internal\"]",
                "servers = [\"https://v2.internal\", \"http://v2b.internal\"]",
                "test.toml:12:35: upstream[1].servers[1]: is http:// but upstream[1].servers[0] is https://",
            ),
            (
                "servers = [\"https://v2.internal\"]",
                "servers = [\"http://v2.internal\"]",
                "test.toml:13:12: upstream[1].protocol: \"h2\" is HTTP/2 over TLS",
            ),
            (
                "balance = \"hash:header:x-user\"",
                "balance = \"hash:cookie:session\"",
                "test.toml:6:11: upstream[0].balance: \"hash:cookie:session\": ",
            ),
            (
                "balance = \"hash:header:x-user\"",
                "balance = \"random\"",
                "test.toml:6:11: upstream[0].balance: \"random\" is not a way to balance",
            ),
            (
                "name = \"v2\"\nservers = [\"https://v2.internal\"]\nprotocol = \"h2\"\n[[route]]\nmatch = { path_prefix = \"/v2/\" }\nupstream = \"v2\"",
                "name = \"api\"\nservers = [\"https://v2.internal\"]",
                "test.toml:11:8: upstream[1].name: \"api\" is already the name of upstream[0]",
            ),
            (
                "eject = { after = 3 }",
                "eject = { after = 3, max_share = 2 }",
                "test.toml:9:34: upstream[0].eject.max_share: 2 is out of range",
            ),
            (
                "eject = { after = 3 }",
                "eject = { after = 3, within = \"1m\" }",
                "test.toml:9:22: upstream[0].eject.within: is not a key of eject",
            ),
            (
                "health = { path = \"/healthz\", interval = \"2s\" }",
                "health = { interval = \"2s\" }",
                "test.toml:8:10: upstream[0].health: needs a path",
            ),
            (
                "{ url = \"http://10.0.0.12:3000\", weight = 3 }",
                "{ url = \"http://10.0.0.12:3000\", weight = 0 }",
                "upstream[0].servers[1].weight: 0 is out of range",
            ),
            (
                "\"http://10.0.0.11:3000\", {",
                "\"http://10.0.0.11:3000/api\", {",
                "test.toml:5:12: upstream[0].servers[0]: \"http://10.0.0.11:3000/api\" must not have a path",
            ),
        ];
        let mut wrong = Vec::new();
        for (from, to, says) in cases {
            assert!(POOLS.contains(from), "{from}");
            let line = only_error(&POOLS.replacen(from, to, 1));
            if !line.contains(says) {
                wrong.push(format!("{to}:\n got: {line}\nwant: {says}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn a_url_in_server_may_not_share_its_pools_name() {
        let line = only_error(
            "[server]\nupstream = \"http://127.0.0.1:3000\"\n\
             [[upstream]]\nname = \"default\"\nservers = [\"http://10.0.0.1\"]\n",
        );
        assert!(
            line.starts_with(
                "test.toml:4:8: upstream[0].name: \"default\" is the name of the pool"
            ),
            "{line}"
        );
    }

    #[test]
    fn a_route_an_earlier_one_covers_can_never_match() {
        let routes = |first: &str, second: &str| {
            format!(
                "[server]\nupstream = \"a\"\n\
                 [[upstream]]\nname = \"a\"\nservers = [\"http://10.0.0.1\"]\n\
                 [[upstream]]\nname = \"b\"\nservers = [\"http://10.0.0.2\"]\n\
                 [[route]]\nmatch = {first}\nupstream = \"b\"\n\
                 [[route]]\nmatch = {second}\nupstream = \"a\"\n"
            )
        };
        for (first, second) in [
            ("{}", "{ path = \"/x\" }"),
            (
                "{ path_prefix = \"/api\" }",
                "{ path_prefix = \"/api/v2\" }",
            ),
            (
                "{ path_prefix = \"/api\" }",
                "{ path = \"/api/users\", method = \"GET\" }",
            ),
            (
                "{ method = [\"GET\", \"POST\"] }",
                "{ method = \"GET\", host = \"h\" }",
            ),
            ("{ host = \"h\" }", "{ host = \"h\" }"),
            (
                "{ header = { x-plan = [\"free\", \"trial\"] } }",
                "{ header = { X-Plan = \"free\", x-app = \"web\" } }",
            ),
            (
                "{ client = \"10.0.0.0/8\" }",
                "{ client = [\"10.1.0.0/16\", \"10.2.3.4\"], path = \"/x\" }",
            ),
        ] {
            let line = only_error(&routes(first, second));
            assert!(
                line.starts_with("test.toml:12:1: route[1]: can never match: every request it fits is taken by an earlier route (the first one, to \"b\")"),
                "{first} / {second}: {line}"
            );
        }
        for (first, second) in [
            ("{ path = \"/x\" }", "{}"),
            (
                "{ path_prefix = \"/api/v2\" }",
                "{ path_prefix = \"/api\" }",
            ),
            ("{ method = \"GET\" }", "{ method = [\"GET\", \"POST\"] }"),
            ("{ host = \"h\" }", "{ path = \"/x\" }"),
            ("{ path_glob = \"/a/*\" }", "{ path = \"/a/b\" }"),
            (
                "{ header = { x-plan = \"free\" } }",
                "{ header = { x-plan = [\"free\", \"trial\"] } }",
            ),
            (
                "{ header = { x-plan = \"free\" } }",
                "{ header = { x-app = \"web\" } }",
            ),
            (
                "{ client = \"10.1.0.0/16\" }",
                "{ client = \"10.0.0.0/8\" }",
            ),
            ("{ client = \"10.0.0.0/8\" }", "{ path = \"/x\" }"),
        ] {
            valid(&routes(first, second));
        }
    }
}
