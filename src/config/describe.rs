//! Config values written back the way the config spells them: periods,
//! rates, a rule's `match`, its limits and capacities. `sluice check`, the
//! reload diff, `GET /admin/rules` and the policy's 429 details all print
//! them, so a value reads the same everywhere.

use std::time::Duration;

use super::upstreams::PROTOCOLS;
use super::{Balance, LimitConfig, MatchConfig, Rate, RuleConfig, UpstreamConfig};

/// Each item as it displays, `separator` between them.
pub fn joined<T: std::fmt::Display>(items: impl IntoIterator<Item = T>, separator: &str) -> String {
    let items: Vec<String> = items.into_iter().map(|item| item.to_string()).collect();
    items.join(separator)
}

/// A period in its largest whole unit: `60s` → `1m`, `90s` → `90s`,
/// `900s` → `15m`, `500ms` → `500ms`.
pub fn format_period(period: Duration) -> String {
    let millis = period.as_millis();
    if !millis.is_multiple_of(1000) {
        return format!("{millis}ms");
    }
    let secs = period.as_secs();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if secs >= size && secs.is_multiple_of(size) {
            return format!("{}{unit}", secs / size);
        }
    }
    format!("{secs}s")
}

/// A rate as the config spells it: `100/m`, `5/15m`, `1/500ms`.
pub fn format_rate(rate: Rate) -> String {
    let period = format_period(rate.period);
    let period = match period.as_str() {
        "1s" => "s",
        "1m" => "m",
        "1h" => "h",
        "1d" => "d",
        other => other,
    };
    format!("{}/{period}", rate.count)
}

/// A limit's rate as the config spells it: [`format_rate`]'s, or on a
/// calendar its unit (`10000/mo`).
pub fn format_limit(limit: &LimitConfig) -> String {
    match limit.calendar {
        Some(calendar) => format!("{}/{}", limit.rate.count, calendar.unit().symbol()),
        None => format_rate(limit.rate),
    }
}

/// A limit's period as a multi-limit rule's names carry it: `1m`, `15m`;
/// on a calendar `1d`, `1w`, `1mo`, `1y`.
pub fn format_limit_period(limit: &LimitConfig) -> String {
    match limit.calendar {
        Some(calendar) => format!("1{}", calendar.unit().symbol()),
        None => format_period(limit.rate.period),
    }
}

/// A rule's `match`: `method=GET|POST prefix=/api`, or `*` for every request.
pub fn describe_match(matcher: &MatchConfig) -> String {
    /// A field that is given, its values joined by `|`.
    fn field<T: std::fmt::Display>(parts: &mut Vec<String>, name: &str, values: &[T]) {
        if !values.is_empty() {
            parts.push(format!("{name}={}", joined(values, "|")));
        }
    }
    let mut parts = Vec::new();
    field(&mut parts, "method", &matcher.method);
    field(&mut parts, "host", &matcher.host);
    field(&mut parts, "path", &matcher.path);
    field(&mut parts, "prefix", &matcher.path_prefix);
    field(&mut parts, "glob", &matcher.path_glob);
    for (name, values) in &matcher.header {
        let values: Vec<_> = values
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()))
            .collect();
        field(&mut parts, &format!("header.{name}"), &values);
    }
    field(&mut parts, "client", &matcher.client);
    if let Some(domain) = &matcher.domain {
        parts.push(format!("domain={domain}"));
    }
    for (key, value) in &matcher.descriptor {
        parts.push(format!("descriptor.{key}={value}"));
    }
    if parts.is_empty() {
        "*".to_owned()
    } else {
        parts.join(" ")
    }
}

/// A pool as `check` prints it: its name, servers (with weights other than
/// 1) and how it balances, retries and checks its servers.
pub fn describe_upstream(pool: &UpstreamConfig) -> String {
    let servers: Vec<String> = pool
        .servers
        .iter()
        .map(|server| match server.weight {
            1 => server.written(),
            weight => format!("{} (weight {weight})", server.written()),
        })
        .collect();
    let balance = match &pool.balance {
        Balance::LeastRequest => "least_request".to_owned(),
        Balance::RoundRobin => "round_robin".to_owned(),
        Balance::Hash(source) => format!("hash:{source}"),
    };
    let protocol = PROTOCOLS.iter().find(|(_, p)| *p == pool.protocol);
    let protocol = protocol.map_or("", |(name, _)| name);
    let mut parts = vec![
        balance,
        protocol.to_owned(),
        format!("retries {}", pool.retries),
    ];
    match &pool.eject {
        Some(eject) => parts.push(format!(
            "eject after {} for {}",
            eject.after,
            format_period(eject.duration)
        )),
        None => parts.push("no passive checks".to_owned()),
    }
    if let Some(health) = &pool.health {
        parts.push(format!(
            "checks GET {} every {} (out after {}, in after {})",
            health.path,
            format_period(health.interval),
            health.fails,
            health.passes
        ));
    }
    parts.push(format!(
        "panic over {}% out",
        (pool.max_share * 100.0).round()
    ));
    format!(
        "{}: {}  ({})",
        pool.name,
        servers.join(" "),
        parts.join(", ")
    )
}

/// A rule's limits: each rate (`100/m, 1000/h`), or a concurrency rule's
/// bound (`100 in flight`).
pub fn describe_limits(rule: &RuleConfig) -> String {
    if let (Some(floor), Some(ceiling)) = (rule.min_in_flight, rule.max_in_flight) {
        return format!("adaptive, {floor}–{ceiling} in flight");
    }
    if let Some(max_in_flight) = rule.max_in_flight {
        return format!("{max_in_flight} in flight");
    }
    let rates = joined(rule.limits.iter().map(format_limit), ", ");
    match rule.limits.iter().find_map(|limit| limit.calendar) {
        Some(calendar) => format!("{rates} ({} calendar)", calendar.zone()),
        None => rates,
    }
}

/// A rule's capacities: each limit's, or a concurrency rule's bound.
pub fn describe_capacity(rule: &RuleConfig) -> String {
    if let Some(max_in_flight) = rule.max_in_flight {
        return max_in_flight.to_string();
    }
    joined(rule.limits.iter().map(|limit| limit.capacity), ", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_print_in_their_largest_whole_unit() {
        assert_eq!(format_period(Duration::from_secs(60)), "1m");
        assert_eq!(format_period(Duration::from_secs(90)), "90s");
        assert_eq!(format_period(Duration::from_secs(900)), "15m");
        assert_eq!(format_period(Duration::from_secs(3600)), "1h");
        assert_eq!(format_period(Duration::from_secs(86_400)), "1d");
        assert_eq!(format_period(Duration::from_millis(500)), "500ms");
        assert_eq!(format_period(Duration::from_secs(10)), "10s");
    }
}
