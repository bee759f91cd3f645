//! The command line (clap derive) and the `check` report.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::{
    describe_capacity, describe_limits, describe_match, describe_upstream, format_limit,
    format_period, format_rate, format_timestamp, joined, AlgorithmKind, Charge, Config,
    LimitConfig, MissingCharge, OnChange, OnLimit, QuicRetry, Rate, RedisConfig, RedisMode,
    Reservation, Reserve, RuleConfig, StoreBackend, SunsetConfig, Tiers, Variant,
};
use crate::key::{KeyLabels, LabelKey};

/// sluice: a rate-limiting reverse proxy.
#[derive(Debug, Parser)]
#[command(version, about, long_about = None)]
pub struct Cli {
    /// Log format on stderr (`RUST_LOG` filters).
    #[arg(
        long,
        global = true,
        value_enum,
        env = "SLUICE_LOG_FORMAT",
        default_value = "text"
    )]
    pub log: LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

/// Log output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve: proxy traffic to the upstream, enforcing the rules.
    Run {
        /// Config file [default: $SLUICE_CONFIG, then ./sluice.toml]
        #[arg(long, short, env = "SLUICE_CONFIG", default_value = "sluice.toml")]
        config: PathBuf,
    },
    /// Validate a config file and print the effective rules (exit 0), or the
    /// errors with line and column (exit 1). With --diff OLD NEW: validate
    /// NEW and show what reloading from OLD to NEW does to each rule's
    /// buckets.
    Check {
        /// Config file [default: $SLUICE_CONFIG, then ./sluice.toml]
        #[arg(long, short, env = "SLUICE_CONFIG", default_value = "sluice.toml")]
        config: PathBuf,
        /// Compare two config files: the running one and the one to reload.
        #[arg(long, num_args = 2, value_names = ["OLD", "NEW"], conflicts_with = "config")]
        diff: Option<Vec<PathBuf>>,
    },
    /// A self-contained tour: starts a built-in upstream and sluice with the
    /// demo config on free 127.0.0.1 ports, prints the status page's
    /// address, sends a burst and prints what was allowed and limited, then
    /// keeps serving until Ctrl-C with curl lines to try by hand.
    Demo {
        /// Exit after the tour instead of serving.
        #[arg(long)]
        once: bool,
    },
    /// Decide recorded traffic with a config's rules, offline: each access
    /// log line in time order, on a clock set to its time, compared with
    /// what the log says happened (docs/replay.md). LOG is a file, a .gz
    /// file or - for stdin. Exit 0 when the replay ran; 1 on a broken
    /// config or an unreadable file.
    Replay {
        /// The config whose rules decide [default: $SLUICE_CONFIG, then ./sluice.toml]
        #[arg(long, short, env = "SLUICE_CONFIG", default_value = "sluice.toml")]
        config: PathBuf,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
        /// Stop (exit 1) at the first line that is not an access log line,
        /// reported as FILE:LINE.
        #[arg(long)]
        strict: bool,
        /// Access logs, read in turn.
        #[arg(required = true, value_name = "LOG")]
        logs: Vec<PathBuf>,
    },
    /// From recorded traffic, each key's busiest period of a rule, their
    /// distribution, and a rate and burst that all but --spare percent of
    /// the keys stayed within, as a [[rule]] to paste (docs/replay.md).
    Suggest {
        /// The config that names the rule [default: $SLUICE_CONFIG, then ./sluice.toml]
        #[arg(long, short, env = "SLUICE_CONFIG", default_value = "sluice.toml")]
        config: PathBuf,
        /// The rule whose key, match and period are used.
        #[arg(long)]
        rule: String,
        /// Percent of keys, the busiest, the suggested rate may limit.
        #[arg(long, default_value_t = 0.1)]
        spare: f64,
        /// Access logs, read in turn (a .gz file, or - for stdin).
        #[arg(required = true, value_name = "LOG")]
        logs: Vec<PathBuf>,
    },
    /// Print, on stdout, the sluice [[rule]] tables equivalent to another
    /// rate limiter's config, to append to a sluice config (exit 0); or
    /// print on stderr why it has no equivalent, naming each field (exit 1).
    Import {
        #[command(subcommand)]
        format: ImportFormat,
    },
}

/// The configs `sluice import` reads.
#[derive(Debug, Subcommand)]
pub enum ImportFormat {
    /// An envoyproxy/ratelimit YAML file (one domain): prints a rule per
    /// descriptor entry with a rate_limit, for sluice's rate limit service
    /// (its [rls] section).
    EnvoyRatelimit {
        /// The envoyproxy/ratelimit config file.
        file: PathBuf,
    },
    /// Envoy Gateway's BackendTrafficPolicy objects (YAML, one or more
    /// documents): prints a rule per rate limit rule of rateLimit.global
    /// (fixed windows) and rateLimit.local (token buckets). Other objects,
    /// and fields such as targetRefs, are skipped and named in a comment.
    EnvoyGateway {
        /// The YAML file, as given to kubectl apply.
        file: PathBuf,
    },
    /// Traefik's rateLimit middlewares: Middleware objects (traefik.io or
    /// traefik.containo.us, YAML, one or more documents) or the dynamic
    /// configuration's http.middlewares: prints a token bucket rule per
    /// middleware. Other objects and middlewares are skipped and named in a
    /// comment.
    Traefik {
        /// The YAML file.
        file: PathBuf,
    },
}

/// The effective rules as a table, for `sluice check`. The `cost` column
/// appears only when some rule costs more than 1 (or its GraphQL query's:
/// `graphql`). A concurrency rule's limit
/// reads `100 in flight`; `on_limit` reads `reject` or `delay ≤30s q1000`
/// (longest hold, most requests waiting per bucket). Under the table, one
/// line per tiers, overrides, sunset, ban, charge, refund_on and non-default
/// on_change of a rule:
/// `rule NAME: ...`.
///
/// An override's key is shown as `labels` show it: a caller's credential as
/// its label (docs/operations.md, "Keys in logs and admin views").
pub fn describe_rules(config: &Config, labels: &KeyLabels) -> String {
    let mut out = rule_table(&config.rules);
    for rule in &config.rules {
        if rule.unit == crate::config::Unit::Message {
            let _ = writeln!(
                out,
                "rule {}: counts messages, not requests (unit = message): each a client sends \
                 on the WebSocket tunnels its handshakes open and on the gRPC calls it matches, \
                 at most {} bytes (server.max_message_bytes)",
                rule.name, config.server.max_message_bytes
            );
        }
        for line in describe_extras(rule, labels) {
            let _ = writeln!(out, "rule {}: {line}", rule.name);
        }
    }
    for pool in &config.upstreams.pools {
        let _ = writeln!(out, "upstream {}", describe_upstream(pool));
    }
    for route in &config.upstreams.routes {
        let _ = writeln!(
            out,
            "route {} -> {}",
            describe_match(&route.matcher),
            config.upstreams.pools[route.upstream].name
        );
    }
    let _ = writeln!(
        out,
        "default upstream {}  listen {}  admin {}  max_keys {}",
        config.upstreams.default_pool().name,
        config.server.listen,
        config.admin.listen,
        config.store.max_keys
    );
    if let Some(rls) = &config.rls {
        let _ = writeln!(
            out,
            "rate limit service {} (gRPC h2c; rules with match.domain, docs/rate-limit-service.md)",
            rls.listen
        );
    }
    describe_tracing(&config.tracing, &mut out);
    describe_tls(config, &mut out);
    if let StoreBackend::Redis(redis) = &config.store.backend {
        describe_redis(redis, &config.rules, &mut out);
    }
    out
}

/// The rules as a table, a row each under the header, columns padded to
/// their widest cell.
fn rule_table(rules: &[RuleConfig]) -> String {
    let show_cost = rules
        .iter()
        .any(|rule| rule.cost != 1 || rule.graphql_cost || rule.reserve.is_some());
    let header = "rule match key missing algorithm limits capacity cost on_limit mode".split(' ');
    let header = header.filter(|column| show_cost || *column != "cost");
    let mut rows: Vec<Vec<String>> = vec![header.map(str::to_owned).collect()];
    rows.extend(rules.iter().map(|rule| rule_row(rule, show_cost)));
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|column| {
            rows.iter()
                .map(|row| row[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &rows {
        for (column, cell) in row.iter().enumerate() {
            // `{:<width$}` pads by characters, like the widths ("≤" is one).
            let _ = write!(out, "{cell:<width$}  ", width = widths[column]);
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    }
    out
}

/// One rule's row of [`rule_table`].
fn rule_row(rule: &RuleConfig, show_cost: bool) -> Vec<String> {
    let mut row = vec![
        rule.name.clone(),
        describe_match(&rule.matcher),
        joined(&rule.key, "+"),
        // A descriptor a rule decides carries every entry it names.
        if rule.matcher.is_service() {
            "-".to_owned()
        } else {
            format!("{:?}", rule.missing).to_lowercase()
        },
        rule.algorithm.name().to_owned(),
        describe_limits(rule),
        describe_capacity(rule),
    ];
    if show_cost {
        row.push(if rule.graphql_cost {
            "graphql".to_owned()
        } else if rule.reserve.is_some() {
            "reserve".to_owned()
        } else {
            rule.cost.to_string()
        });
    }
    row.push(describe_on_limit(rule.on_limit));
    row.push(if rule.shadow { "shadow" } else { "enforce" }.to_owned());
    row
}

/// The listener's certificates (with the names each serves) and the
/// authorities each upstream's TLS is verified against.
fn describe_tls(config: &Config, out: &mut String) {
    if let Some(tls) = &config.server.tls {
        let served: Vec<String> = tls
            .certs
            .iter()
            .map(|pair| {
                let names = crate::tls::certified_key(&pair.cert, &pair.key)
                    .map(|key| crate::tls::dns_names(&key).join(" "))
                    .ok()
                    .filter(|names| !names.is_empty())
                    .unwrap_or_else(|| "no DNS name".to_owned());
                format!("{} ({names})", pair.cert.display())
            })
            .collect();
        let _ = writeln!(
            out,
            "tls 1.3 and 1.2, h2 and http/1.1; by SNI, else the first: {}",
            served.join(", ")
        );
        if tls.http3 {
            let retry = match tls.quic_retry {
                QuicRetry::Always => "always".to_owned(),
                QuicRetry::Never => "never (a completed handshake proves it)".to_owned(),
                QuicRetry::Busy(n) => format!("once {n} handshakes are in progress"),
            };
            let _ = writeln!(
                out,
                "http/3 on udp {}, the same certificates; an unproved address is sent a Retry \
                 {retry}",
                config.server.listen
            );
        }
    }
    for pool in &config.upstreams.pools {
        let Some(roots) = &pool.roots else { continue };
        let authorities = (pool.upstream_ca.as_ref()).map(|ca| ca.display().to_string());
        let authorities = authorities.unwrap_or_else(|| "the system's roots".to_owned());
        let count = match roots.len() {
            1 => "1 authority".to_owned(),
            n => format!("{n} authorities"),
        };
        let _ = writeln!(
            out,
            "upstream {} TLS verified against {authorities} ({count})",
            pool.name
        );
    }
}

/// A Redis store's line, and in hybrid mode what it does with each rule.
fn describe_redis(redis: &RedisConfig, rules: &[RuleConfig], out: &mut String) {
    let instances = match redis.instances {
        0 => "counted by heartbeats".to_owned(),
        n => n.to_string(),
    };
    let mode = match redis.mode {
        RedisMode::Strict => "strict".to_owned(),
        RedisMode::Hybrid { sync_interval } => {
            format!("hybrid (sync every {})", format_period(sync_interval))
        }
    };
    let mut reached = String::new();
    if redis.urls.iter().any(|url| url.starts_with("rediss://")) {
        let by = redis.ca.as_ref().map(|ca| ca.display().to_string());
        let by = by.unwrap_or_else(|| "the system's roots".to_owned());
        let _ = write!(reached, "  tls verified by {by}");
    }
    if let Some(name) = &redis.password_env {
        let _ = write!(reached, "  password from ${name}");
    }
    let _ = writeln!(
        out,
        "store redis{} {}  mode {mode}  timeout {}  on_error {}  settle_retry_for {}  \
         instances {instances}{reached}",
        if redis.cluster { " cluster" } else { "" },
        joined(
            redis
                .urls
                .iter()
                .map(|url| crate::config::shown_redis_url(url)),
            ", "
        ),
        format_period(redis.timeout),
        format!("{:?}", redis.on_error).to_lowercase(),
        format_period(redis.settle_retry_for),
    );
    if let RedisMode::Hybrid { sync_interval } = redis.mode {
        for rule in rules {
            let _ = writeln!(
                out,
                "rule {}: hybrid: {}",
                rule.name,
                hybrid_behaviour(rule, sync_interval)
            );
        }
    }
}

/// What hybrid mode does with `rule` (docs/multi-instance.md, "Hybrid
/// mode").
fn hybrid_behaviour(rule: &RuleConfig, sync_interval: std::time::Duration) -> String {
    let every = format_period(sync_interval);
    let decided = match rule.algorithm {
        AlgorithmKind::Adaptive => "decided by each instance alone, with the limit it learned \
                                    from its own requests (not divided, not synced)"
            .to_owned(),
        AlgorithmKind::SlidingLog | AlgorithmKind::Concurrency => format!(
            "decided by each instance at its share of the limit (limit / instances, rounded \
             up), not synced ({} keeps exact stamps or requests in flight)",
            rule.algorithm.name()
        ),
        _ if matches!(rule.on_limit, OnLimit::Delay { .. }) => format!(
            "decided in memory, synced every {every}; requests are held by the instance that \
             took them, and the others learn of their slots at the next sync"
        ),
        _ => format!(
            "decided in memory, synced every {every}; overshoot at most one interval's traffic \
             while traffic is steady, two intervals' at worst"
        ),
    };
    match rule.ban {
        Some(_) => format!("{decided}; strikes added up across instances with each sync"),
        None => decided,
    }
}

/// How `check` shows keys: labelled with the admin token's key, the one a
/// running sluice of a memory store uses (a Redis deployment labels with
/// the seed its instances share, which `check` does not read).
pub fn labels_of(config: &Config) -> KeyLabels {
    let key = LabelKey::for_token(config.admin.token().as_deref());
    KeyLabels::new(key, config.admin.reveal_keys)
}

/// Most overrides listed by name before the rest are only counted.
const OVERRIDES_SHOWN: usize = 5;

/// The lines under the table for one rule: `tiers by header:x-plan: premium
/// 100/s; free 10/s, 1000/d burst 5`, `overrides "seller-42" 1000/s`,
/// `sunset 100/d → 10/d from 2026-12-01 to 2027-01-01 step 1d (31 steps)`,
/// `ban 20 in 1m → 10m`, `charge elapsed_ms after the response`, `reserve
/// 4000 at admission, settled by the charge`,
/// `refund_on 5xx, client_abort`, `on_change keep` (only when not the
/// default).
fn describe_extras(rule: &RuleConfig, labels: &KeyLabels) -> Vec<String> {
    let mut lines = Vec::new();
    lines.extend(rule.tiers.as_ref().map(describe_tiers));
    if !rule.overrides.is_empty() {
        lines.push(describe_overrides(rule, labels));
    }
    if let (Some(sunset), Some(limit)) = (&rule.sunset, rule.limits.first()) {
        lines.push(describe_sunset(sunset, limit));
    }
    if let Some(ban) = &rule.ban {
        lines.push(format!(
            "ban {} in {} → {}",
            ban.after,
            format_period(ban.within),
            format_period(ban.duration)
        ));
    }
    lines.extend(rule.charge.as_ref().map(describe_charge));
    lines.extend(rule.reserve.as_ref().map(describe_reserve));
    if !rule.refund_on.is_empty() {
        lines.push(format!("refund_on {}", rule.refund_on.names().join(", ")));
    }
    if rule.on_change != OnChange::default() {
        lines.push(format!("on_change {:?}", rule.on_change).to_lowercase());
    }
    lines
}

/// `tiers by header:x-plan: premium 100/s; free share 0.1`.
fn describe_tiers(tiers: &Tiers) -> String {
    let each: Vec<String> = tiers
        .tiers
        .iter()
        .map(|tier| match tier.share {
            Some(share) => format!("{} share {}", tier.name, f64::from(share) / 1000.0),
            None => format!("{} {}", tier.name, describe_variant(&tier.limits)),
        })
        .collect();
    format!("tiers by {}: {}", tiers.by, each.join("; "))
}

/// `overrides "seller-42" 1000/s`, the first [`OVERRIDES_SHOWN`] by key
/// (as `labels` show it), the rest counted.
fn describe_overrides(rule: &RuleConfig, labels: &KeyLabels) -> String {
    let mut each: Vec<String> = rule
        .overrides
        .iter()
        .take(OVERRIDES_SHOWN)
        .map(|o: &Variant| {
            let key = labels.show_typed(&rule.key, &o.name);
            format!("{key:?} {}", describe_variant(&o.limits))
        })
        .collect();
    if rule.overrides.len() > OVERRIDES_SHOWN {
        each.push(format!(
            "and {} more",
            rule.overrides.len() - OVERRIDES_SHOWN
        ));
    }
    format!("overrides {}", each.join("; "))
}

/// `sunset 100/d → 10/d from … to … step 1d (31 steps)`, of the rule's
/// first limit.
fn describe_sunset(sunset: &SunsetConfig, limit: &LimitConfig) -> String {
    let schedule = sunset.schedule(limit);
    let to = Rate {
        count: sunset.to,
        period: limit.rate.period,
    };
    let mut line = format!(
        "sunset {} → {} from {} to {} step {} ({} steps)",
        format_rate(limit.rate),
        format_rate(to),
        format_timestamp(sunset.start),
        format_timestamp(sunset.end),
        format_period(sunset.step),
        schedule.steps()
    );
    if sunset.to == 0 {
        line.push_str(", then 410");
    }
    if let Some(link) = &sunset.link {
        let _ = write!(line, ", link {link}");
    }
    line
}

/// `charge elapsed_ms after the response`, with what a value that never
/// arrives is charged.
fn describe_charge(charge: &Charge) -> String {
    // Measured sources (time, bytes) always arrive: no missing price.
    let awaits = charge.sources.iter().any(|s| !s.source.is_measured());
    let missing = match charge.missing {
        _ if !awaits => String::new(),
        MissingCharge::Units(0) => String::new(),
        MissingCharge::Units(units) => format!(" ({units} for a value that never arrives)"),
        MissingCharge::KeepReservation => {
            " (a value that never arrives keeps the whole reservation)".to_owned()
        }
    };
    format!("charge {charge} after the response{missing}")
}

/// `reserve 4000 at admission, settled by the charge`, with what a missing
/// source reserves.
fn describe_reserve(reserve: &Reserve) -> String {
    let missing = match (&reserve.amount, reserve.missing) {
        (Reservation::Units(_), _) => String::new(),
        (_, Some(units)) => format!(" ({units} when a source is missing)"),
        (_, None) => " (the capacity when a source is missing)".to_owned(),
    };
    format!(
        "reserve {} at admission, settled by the charge{missing}",
        reserve.amount
    )
}

/// Tracing's effective settings, one line each with where it came from
/// (docs/observability.md): nothing when neither `[tracing]` nor a variable
/// asked for it.
fn describe_tracing(tracing: &crate::config::Tracing, out: &mut String) {
    use crate::config::Tracing;
    match tracing {
        Tracing::Off(why) if why.starts_with("no [tracing]") => {}
        Tracing::Off(why) => {
            let _ = writeln!(out, "tracing off: {why}");
        }
        Tracing::On(on) => {
            for shown in &on.shown {
                let _ = writeln!(
                    out,
                    "tracing {} {}  (from {})",
                    shown.name, shown.value, shown.from
                );
            }
        }
    }
}

/// A tier's or override's limits: `10/s, 1000/d`, with ` burst 5` when a
/// capacity differs from its COUNT.
fn describe_variant(limits: &[LimitConfig]) -> String {
    let mut text = joined(limits.iter().map(format_limit), ", ");
    if let Some(limit) = limits.iter().find(|l| l.capacity != l.rate.count) {
        let _ = write!(text, " burst {}", limit.capacity);
    }
    text
}

/// The `on_limit` cell: `reject`, or `delay ≤30s q1000`.
fn describe_on_limit(on_limit: OnLimit) -> String {
    match on_limit {
        OnLimit::Reject => "reject".to_owned(),
        OnLimit::Delay {
            max_delay,
            max_queue,
        } => format!("delay ≤{} q{max_queue}", format_period(max_delay)),
    }
}
