//! Config values written back the way the config spells them: periods,
//! rates, a rule's `match`, its limits and capacities. `sluice check`, the
//! reload diff, `GET /admin/rules` and the policy's 429 details all print
//! them, so a value reads the same everywhere.

use std::time::Duration;

use super::{MatchConfig, Rate, RuleConfig};

/// A period in its largest whole unit: `60s` → `1m`, `90s` → `90s`,
/// `900s` → `15m`, `500ms` → `500ms`.
pub fn format_period(period: Duration) -> String {
    let millis = period.as_millis();
    if millis % 1000 != 0 {
        return format!("{millis}ms");
    }
    let secs = period.as_secs();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if secs >= size && secs % size == 0 {
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

/// A rule's `match`: `method=GET|POST prefix=/api`, or `*` for every request.
pub fn describe_match(matcher: &MatchConfig) -> String {
    let mut parts = Vec::new();
    let mut field = |name: &str, values: Vec<String>| {
        if !values.is_empty() {
            parts.push(format!("{name}={}", values.join("|")));
        }
    };
    field(
        "method",
        matcher.method.iter().map(ToString::to_string).collect(),
    );
    field("host", matcher.host.clone());
    field("path", matcher.path.clone());
    field("prefix", matcher.path_prefix.clone());
    field("glob", matcher.path_glob.clone());
    if parts.is_empty() {
        "*".to_owned()
    } else {
        parts.join(" ")
    }
}

/// A rule's limits: each rate (`100/m, 1000/h`), or a concurrency rule's
/// bound (`100 in flight`).
pub fn describe_limits(rule: &RuleConfig) -> String {
    if let Some(max_in_flight) = rule.max_in_flight {
        return format!("{max_in_flight} in flight");
    }
    rule.limits
        .iter()
        .map(|limit| format_rate(limit.rate))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A rule's capacities: each limit's, or a concurrency rule's bound.
pub fn describe_capacity(rule: &RuleConfig) -> String {
    if let Some(max_in_flight) = rule.max_in_flight {
        return max_in_flight.to_string();
    }
    rule.limits
        .iter()
        .map(|limit| limit.capacity.to_string())
        .collect::<Vec<_>>()
        .join(", ")
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
