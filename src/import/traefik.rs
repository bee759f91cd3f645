//! Traefik's `rateLimit` middleware as sluice rules for the requests sluice
//! proxies (docs/import-gateway-policies.md): `Middleware` objects
//! (traefik.io/v1alpha1, or the older traefik.containo.us/v1alpha1) and the
//! dynamic configuration's `http.middlewares`.
//!
//! Traefik keeps a token bucket per source (golang.org/x/time/rate): it
//! refills at `average` per `period` and holds `burst` tokens (at least 1),
//! so a middleware is one `token_bucket` rule with that rate and burst. A
//! request whose token is due within Traefik's longest hold (half the time
//! between two tokens, counted in whole requests a second, or 500ms below
//! one a second) is held until then, and a later one refused: sluice's
//! `on_limit = "delay"` with that `max_delay`. The source is the client IP
//! by default, a header's value (`requestHeaderName`: requests without it
//! share one bucket, as sluice's `missing = "shared"` does) or the host.
//! How Traefik finds the client IP (`ipStrategy`) is one server setting in
//! sluice (`server.trusted_proxies`, `server.ipv6_prefix`): the output says
//! what to set there.

use std::fmt::Write as _;

use serde_norway::Value;

use super::yaml::{join, Object, Reader};
use super::{import_objects, opening, toml_string, ImportError, Objects, RuleNames, Written};

/// The `[[rule]]` tables (and comments) equivalent to the `rateLimit`
/// middlewares in `yaml` (one or more documents), or every field that has
/// no equivalent. `source_name` names the file in the header comment and
/// in errors.
pub fn translate(yaml: &str, source_name: &str) -> Result<String, ImportError> {
    import_objects::<Import>(yaml, source_name)
}

const API_VERSIONS: [&str; 2] = ["traefik.io/v1alpha1", "traefik.containo.us/v1alpha1"];

#[derive(Default)]
struct Import {
    reader: Reader,
    /// `# ` lines for what was skipped.
    skipped: Vec<String>,
    /// `# ` lines for the server settings the middlewares assume.
    settings: Vec<String>,
    limits: Vec<Limit>,
}

/// One `rateLimit` middleware, as read.
struct Limit {
    /// Its YAML path, `spec.rateLimit`.
    at: String,
    /// Where it is, for the comment: `Middleware "test-ratelimit"`.
    label: String,
    /// The middleware's name.
    middleware: String,
    average: u64,
    /// Traefik's `period`, in whole milliseconds.
    period_ms: u64,
    period_at: String,
    burst: u64,
    burst_at: String,
    source: Source,
}

/// What Traefik groups requests by (`sourceCriterion`).
enum Source {
    Ip,
    /// A header's value, lower-cased.
    Header(String),
    Host,
}

/// How the fields of a mapping are named: exactly, as Kubernetes reads a
/// `Middleware`, or in any case, as Traefik reads its dynamic
/// configuration (`ratelimit` in its labels is `rateLimit`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Names {
    Exact,
    AnyCase,
}

impl Objects for Import {
    fn reader(&mut self) -> &mut Reader {
        &mut self.reader
    }

    fn object(&mut self, object: &Object) {
        let traefik = object
            .api_version
            .as_deref()
            .is_some_and(|version| version.starts_with("traefik."));
        match (&object.kind, traefik) {
            (Some(kind), true) if kind == "Middleware" => {
                let version = object.api_version.as_deref().unwrap_or_default();
                if !API_VERSIONS.contains(&version) {
                    self.reader.problem(
                        object.path("apiVersion"),
                        format!(
                            "unknown version; this import reads {}",
                            API_VERSIONS.join(" and ")
                        ),
                    );
                    return;
                }
                self.middleware_object(object);
            }
            (None, false) if object.api_version.is_none() => self.dynamic(object),
            _ => self.skip(
                object.place(),
                &object.label(),
                "not a Traefik Middleware or dynamic configuration",
            ),
        }
    }

    fn write(&self, names: &mut RuleNames) -> Vec<Written> {
        self.limits
            .iter()
            .map(|limit| limit.write(&names.claim(&format!("traefik-{}", limit.middleware))))
            .collect()
    }

    /// The header comment, what was skipped and what to set, then each rule.
    fn output(&self, source_name: &str, written: &[Written]) -> String {
        let lists = [
            (
                "Server settings these middlewares assume:",
                &self.settings[..],
            ),
            ("Skipped:", &self.skipped[..]),
        ];
        let mut out = opening("traefik", source_name, HEADER, &lists);
        for (limit, written) in self.limits.iter().zip(written) {
            let _ = writeln!(out, "\n# from {} ({})", limit.at, limit.label);
            if let Source::Header(_) = limit.source {
                out.push_str(
                    "# requests without the header share one bucket, as Traefik groups them\n",
                );
            }
            out.push_str(&written.toml);
        }
        if self.limits.is_empty() {
            out.push_str("\n# No rate limit: nothing to add.\n");
        }
        out
    }
}

impl Import {
    /// A comment line for something left out: where, what, why.
    fn skip(&mut self, place: &str, what: &str, why: &str) {
        let line = match (place, what) {
            ("", what) => format!("{what}: {why}"),
            (place, "") => format!("{place}: {why}"),
            (place, what) => format!("{place}: {what}: {why}"),
        };
        self.skipped.push(line);
    }

    fn middleware_object(&mut self, object: &Object) {
        let Some((name, spec_at, spec)) = self.reader.named_spec(object, "the middleware's spec")
        else {
            return;
        };
        let mut limited = false;
        for (field, value) in spec {
            let at = join(&spec_at, &field);
            if field == "rateLimit" {
                limited = true;
                self.rate_limit(value, &at, &object.label(), &name, Names::Exact);
            } else if field.eq_ignore_ascii_case("rateLimit") {
                self.reader.problem(
                    at,
                    "unknown field: Kubernetes reads field names as written (rateLimit), and \
                     drops this one",
                );
            } else {
                self.skip("", &at, &format!("not a rateLimit ({})", object.label()));
            }
        }
        if !limited {
            self.skip(object.place(), &object.label(), "no rateLimit");
        }
    }

    /// A dynamic configuration file: `http.middlewares`.
    fn dynamic(&mut self, object: &Object) {
        let root = object.path("");
        let Some(fields) = self.reader.fields(object.value, &root, "must be a mapping") else {
            return;
        };
        let mut found = false;
        for (field, value) in fields {
            let at = object.path(&field);
            if !field.eq_ignore_ascii_case("http") {
                self.skip("", &at, "not HTTP middlewares");
                continue;
            }
            found = true;
            let Some(http) = self.reader.fields(value, &at, "must be a mapping") else {
                continue;
            };
            for (field, value) in http {
                let field_at = join(&at, &field);
                if !field.eq_ignore_ascii_case("middlewares") {
                    self.skip("", &field_at, "not middlewares");
                    continue;
                }
                let Some(middlewares) = self.reader.fields(
                    value,
                    &field_at,
                    "must be a mapping from a middleware's name to the middleware",
                ) else {
                    continue;
                };
                for (name, middleware) in middlewares {
                    self.dynamic_middleware(middleware, &join(&field_at, &name), &name);
                }
            }
        }
        if !found {
            self.skip(
                object.place(),
                "",
                "neither a Traefik Middleware nor a dynamic configuration with http.middlewares",
            );
        }
    }

    fn dynamic_middleware(&mut self, value: &Value, at: &str, name: &str) {
        let Some(fields) = self
            .reader
            .fields(value, at, "must be a mapping (one middleware)")
        else {
            return;
        };
        let label = format!("middleware {name:?}");
        let mut limited = false;
        for (field, value) in fields {
            let field_at = join(at, &field);
            if field.eq_ignore_ascii_case("rateLimit") {
                limited = true;
                self.rate_limit(value, &field_at, &label, name, Names::AnyCase);
            } else {
                self.skip("", &field_at, "not a rateLimit");
            }
        }
        if !limited && !self.skipped.iter().any(|line| line.starts_with(at)) {
            self.skip("", at, "no rateLimit");
        }
    }

    /// The canonical name of a field written `written`, one of `known`;
    /// `None` (reported) for an unknown one.
    fn field(
        &mut self,
        written: &str,
        known: &[&'static str],
        names: Names,
        at: &str,
    ) -> Option<&'static str> {
        if let Some(name) = known.iter().find(|name| **name == written) {
            return Some(name);
        }
        let any_case = known.iter().find(|name| name.eq_ignore_ascii_case(written));
        match (names, any_case) {
            (Names::AnyCase, Some(name)) => Some(name),
            (Names::Exact, Some(name)) => self.reader.invalid(
                at,
                format!(
                    "unknown field: Kubernetes reads field names as written ({name}), and \
                         drops this one"
                ),
            ),
            (_, None) => self
                .reader
                .invalid(at, format!("unknown field; {}", known.join(", "))),
        }
    }

    fn rate_limit(&mut self, value: &Value, at: &str, label: &str, name: &str, names: Names) {
        let Some(fields) = self.reader.fields(
            value,
            at,
            "must be a mapping with average, period, burst and sourceCriterion",
        ) else {
            return;
        };
        let mut limit = Limit {
            at: at.to_owned(),
            label: label.to_owned(),
            middleware: name.to_owned(),
            average: 0,
            period_ms: 1000,
            period_at: join(at, "period"),
            burst: 1,
            burst_at: join(at, "burst"),
            source: Source::Ip,
        };
        const KNOWN: [&str; 5] = ["average", "period", "burst", "sourceCriterion", "redis"];
        for (field, value) in fields {
            let field_at = join(at, &field);
            match self.field(&field, &KNOWN, names, &field_at) {
                Some("average") => {
                    limit.average = self
                        .reader
                        .whole(value, &field_at, i64::MAX as u64)
                        .unwrap_or(0);
                }
                Some("period") => {
                    limit.period_at = field_at.clone();
                    if let Some(ms) = self.period(value, &field_at) {
                        limit.period_ms = ms;
                    }
                }
                Some("burst") => {
                    limit.burst_at = field_at.clone();
                    // Traefik takes a burst of 0 for 1.
                    let burst = self.reader.whole(value, &field_at, i64::MAX as u64);
                    limit.burst = burst.unwrap_or(1).max(1);
                }
                Some("sourceCriterion") => {
                    limit.source = self.source(value, &field_at, label, names);
                }
                Some("redis") if !value.is_null() => self.skip(
                    "",
                    &field_at,
                    &format!(
                        "Traefik shares the buckets among its instances through Redis; sluice \
                         instances share theirs with [store] backend = \"redis\" ({label})"
                    ),
                ),
                _ => {}
            }
        }
        if limit.average == 0 {
            if !self.reader.said_within(at) {
                self.skip(
                    "",
                    at,
                    &format!("average is 0, which Traefik reads as no limit ({label})"),
                );
            }
            return;
        }
        self.limits.push(limit);
    }

    /// `period`: whole seconds, or a Go duration (`1m`, `1.5s`); 0 is a
    /// second, as Traefik reads it.
    fn period(&mut self, value: &Value, at: &str) -> Option<u64> {
        let wanted =
            || "must be whole seconds or a duration such as \"1m\" or \"500ms\"".to_owned();
        let seconds = |seconds: i64| i128::from(seconds) * 1_000_000_000;
        let nanos = match value {
            Value::Null => return None,
            Value::Number(number) => number.as_i64().map(seconds).ok_or_else(wanted),
            Value::String(text) => text.parse().map(seconds).or_else(|_| go_duration(text)),
            _ => Err(wanted()),
        };
        let nanos = self.reader.ok(at, nanos)?;
        if nanos < 0 {
            return self
                .reader
                .invalid(at, "must not be negative (Traefik refuses the middleware)");
        }
        if nanos == 0 {
            return Some(1000);
        }
        if nanos % 1_000_000 != 0 {
            return self
                .reader
                .invalid(at, "no equivalent: sluice's periods are whole milliseconds");
        }
        let ms = u64::try_from(nanos / 1_000_000).map_err(|_| "is too long a period".to_owned());
        self.reader.ok(at, ms)
    }

    /// `sourceCriterion`: what a bucket is kept for.
    fn source(&mut self, value: &Value, at: &str, label: &str, names: Names) -> Source {
        let Some(fields) = self.reader.fields(
            value,
            at,
            "must be a mapping with ipStrategy, requestHeaderName or requestHost",
        ) else {
            return Source::Ip;
        };
        const KNOWN: [&str; 3] = ["ipStrategy", "requestHeaderName", "requestHost"];
        let mut chosen: Vec<(&str, Source)> = Vec::new();
        for (field, value) in fields {
            let field_at = join(at, &field);
            match self.field(&field, &KNOWN, names, &field_at) {
                Some("ipStrategy") if !value.is_null() => {
                    self.ip_strategy(value, &field_at, label, names);
                    chosen.push(("ipStrategy", Source::Ip));
                }
                Some("requestHeaderName") => {
                    let Some(header) = self.reader.string(value, &field_at) else {
                        continue;
                    };
                    if header.is_empty() {
                        continue;
                    }
                    let lower = header.to_ascii_lowercase();
                    if http::HeaderName::from_bytes(lower.as_bytes()).is_err() {
                        self.reader
                            .problem(field_at, format!("{header:?} is not a header name"));
                        continue;
                    }
                    chosen.push(("requestHeaderName", Source::Header(lower)));
                }
                Some("requestHost") if self.reader.flag(value, &field_at) => {
                    chosen.push(("requestHost", Source::Host));
                }
                _ => {}
            }
        }
        if chosen.len() > 1 {
            let names: Vec<&str> = chosen.iter().map(|(name, _)| *name).collect();
            self.reader.problem(
                at,
                format!(
                    "sets {}: Traefik refuses more than one criterion",
                    names.join(" and ")
                ),
            );
        }
        chosen.pop().map_or(Source::Ip, |(_, source)| source)
    }

    /// `ipStrategy`: how Traefik finds the client IP, which sluice decides
    /// once for every rule: say what to set.
    fn ip_strategy(&mut self, value: &Value, at: &str, label: &str, names: Names) {
        let Some(fields) = self.reader.fields(
            value,
            at,
            "must be a mapping with depth, excludedIPs and ipv6Subnet",
        ) else {
            return;
        };
        const KNOWN: [&str; 3] = ["depth", "excludedIPs", "ipv6Subnet"];
        let (mut depth, mut excluded, mut subnet) = (0, Vec::new(), None);
        for (field, value) in fields {
            let field_at = join(at, &field);
            match self.field(&field, &KNOWN, names, &field_at) {
                Some("depth") => depth = self.reader.whole(value, &field_at, 1 << 31).unwrap_or(0),
                Some("excludedIPs") => {
                    let items =
                        self.reader
                            .items(value, &field_at, "must be a list of IPs or CIDRs");
                    for (i, item) in items.iter().enumerate() {
                        excluded.extend(self.reader.string(item, &format!("{field_at}[{i}]")));
                    }
                }
                Some("ipv6Subnet") => subnet = self.reader.whole(value, &field_at, 128),
                _ => {}
            }
        }
        if depth > 0 {
            self.settings.push(format!(
                "{at}.depth ({label}): Traefik takes the client IP {depth} from the right of \
                 X-Forwarded-For; sluice takes the rightmost address not in \
                 server.trusted_proxies, from a peer in it: list the {depth} proxies in front \
                 of sluice there"
            ));
        } else if !excluded.is_empty() {
            let list: Vec<String> = excluded.iter().map(|ip| toml_string(ip)).collect();
            self.settings.push(format!(
                "{at}.excludedIPs ({label}): sluice passes over the addresses in \
                 server.trusted_proxies the same way (and reads X-Forwarded-For only from a \
                 peer among them): trusted_proxies = [{}]",
                list.join(", ")
            ));
        }
        if let Some(subnet) = subnet.filter(|_| excluded.is_empty() || depth > 0) {
            self.settings.push(format!(
                "{at}.ipv6Subnet ({label}): server.ipv6_prefix = {subnet}"
            ));
        }
    }
}

/// What every import says first, after the source.
const HEADER: &str = "\
# Append these rules to a sluice config. One rule per rateLimit middleware: Traefik
# keeps a token bucket per source (average per period, burst deep), as sluice's
# token_bucket does; a request whose token is due within Traefik's longest hold
# (half the time between two tokens, or 500ms below one request a second) is held
# until then (on_limit = \"delay\", max_delay), and a later one refused with 429.
# Where sluice decides otherwise:
# - a middleware limits the routers that use it; each rule here applies to every
#   request sluice proxies (narrow it with match.host or match.path_prefix);
# - sluice's client IP is the peer's unless server.trusted_proxies names the proxies
#   in front, and sluice keys IPv6 clients by their /64 (server.ipv6_prefix = 128
#   keys each address, as Traefik does without ipStrategy.ipv6Subnet).
";

impl Limit {
    /// Traefik's longest hold, as it computes it: half the time between two
    /// tokens in nanoseconds, the rate counted in whole requests a second
    /// (`time.Second / (time.Duration(rate) * 2)`), or 500ms below one.
    fn max_delay_nanos(&self) -> u128 {
        let per_second = u128::from(self.average) * 1000 / u128::from(self.period_ms);
        if per_second == 0 {
            500_000_000
        } else {
            1_000_000_000 / (per_second * 2)
        }
    }

    fn write(&self, name: &str) -> Written {
        let mut toml = String::new();
        let _ = writeln!(toml, "[[rule]]\nname = {}", toml_string(name));
        let key = match &self.source {
            Source::Ip => "ip".to_owned(),
            Source::Header(header) => format!("header:{header}"),
            Source::Host => "host".to_owned(),
        };
        let _ = writeln!(toml, "key = [{}]", toml_string(&key));
        if let Source::Header(_) = self.source {
            toml.push_str("missing = \"shared\"\n");
        }
        let rate = crate::config::format_rate(crate::config::Rate {
            count: self.average,
            period: std::time::Duration::from_millis(self.period_ms),
        });
        let _ = writeln!(
            toml,
            "algorithm = \"token_bucket\"\nrate = \"{rate}\"\nburst = {}",
            self.burst
        );
        // sluice holds for whole milliseconds: a hold Traefik would keep
        // under one is a refusal at once.
        let hold_ms = self.max_delay_nanos() / 1_000_000;
        if hold_ms > 0 {
            let _ = writeln!(toml, "on_limit = \"delay\"\nmax_delay = \"{hold_ms}ms\"");
        }
        Written {
            toml,
            at: self.at.clone(),
            sources: vec![
                ("rate".to_owned(), self.period_at.clone()),
                ("burst".to_owned(), self.burst_at.clone()),
            ],
        }
    }
}

/// A Go duration (`time.ParseDuration`: `300ms`, `-1.5h`, `2h45m`) in
/// nanoseconds.
fn go_duration(text: &str) -> Result<i128, String> {
    let invalid = || {
        format!(
            "{text:?} is not whole seconds or a Go duration such as \"1m\", \"1.5s\" or \"500ms\""
        )
    };
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (whole, after) = rest.split_at(digits);
        let (fraction, after) = match after.strip_prefix('.') {
            Some(after) => {
                let digits = after
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(after.len());
                after.split_at(digits)
            }
            None => ("", after),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid());
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let scale: i128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(invalid()),
        };
        let whole: i128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| invalid())?
        };
        let mut part = whole.checked_mul(scale).ok_or_else(invalid)?;
        if !fraction.is_empty() {
            let digits = fraction.len().min(18);
            let numerator: i128 = fraction[..digits].parse().map_err(|_| invalid())?;
            part += numerator * scale / 10_i128.pow(digits as u32);
        }
        total = total.checked_add(part).ok_or_else(invalid)?;
        if total > i128::from(i64::MAX) {
            return Err(invalid());
        }
        rest = after;
    }
    Ok(if negative { -total } else { total })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::testing::{problems_of, rules_of};

    /// A `Middleware` named `m` whose `spec.rateLimit` is `limit` (YAML,
    /// written from column 0).
    fn middleware(limit: &str) -> String {
        let mut yaml = "apiVersion: traefik.io/v1alpha1\nkind: Middleware\nmetadata:\n  name: m\n\
                        spec:\n  rateLimit:\n"
            .to_owned();
        for line in limit.lines() {
            let _ = writeln!(yaml, "    {line}");
        }
        yaml
    }

    /// The rule `yaml` imports to, as `field = value` lines (not its name).
    fn only_rule(yaml: &str) -> Vec<String> {
        assert_eq!(rules_of(translate(yaml, "test.yaml")).len(), 1);
        only_rule_of(&translate(yaml, "test.yaml").unwrap())
    }

    fn problems(yaml: &str) -> Vec<String> {
        problems_of(translate(yaml, "test.yaml"))
    }

    /// The `# - ` lines under `title`.
    fn listed(text: &str, title: &str) -> Vec<String> {
        text.lines()
            .skip_while(|line| *line != format!("# {title}"))
            .skip(1)
            .take_while(|line| line.starts_with("# - "))
            .map(|line| line[4..].to_owned())
            .collect()
    }

    #[test]
    fn average_period_and_burst_are_a_token_bucket_holding_as_traefik_holds() {
        let text = translate(&middleware("average: 100\nburst: 200"), "mw.yaml").unwrap();
        assert!(
            text.starts_with("# Imported by `sluice import traefik` from \"mw.yaml\".\n"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "\n# from spec.rateLimit (Middleware \"m\")
[[rule]]
name = \"traefik-m\"
key = [\"ip\"]
algorithm = \"token_bucket\"
rate = \"100/s\"
burst = 200
on_limit = \"delay\"
max_delay = \"5ms\"
"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_period_is_whole_seconds_or_a_go_duration() {
        for (period, rate) in [
            ("1m", "6/m"),
            ("10", "6/10s"),
            ("\"10\"", "6/10s"),
            ("1.5s", "6/1500ms"),
            ("1h30m", "6/90m"),
            ("24h", "6/d"),
            ("0", "6/s"),
            ("0s", "6/s"),
        ] {
            let rule = only_rule(&middleware(&format!("average: 6\nperiod: {period}")));
            assert_eq!(rule[2], format!("rate = \"{rate}\""), "{period}");
        }
        let at = "spec.rateLimit.period";
        for (period, message) in [
            (
                "-1s",
                "must not be negative (Traefik refuses the middleware)".to_owned(),
            ),
            (
                "-3",
                "must not be negative (Traefik refuses the middleware)".to_owned(),
            ),
            (
                "1500us",
                "no equivalent: sluice's periods are whole milliseconds".to_owned(),
            ),
            (
                "soon",
                "\"soon\" is not whole seconds or a Go duration such as \"1m\", \"1.5s\" or \
                 \"500ms\""
                    .to_owned(),
            ),
            (
                "1d",
                "\"1d\" is not whole seconds or a Go duration such as \"1m\", \"1.5s\" or \
                 \"500ms\""
                    .to_owned(),
            ),
        ] {
            assert_eq!(
                problems(&middleware(&format!("average: 6\nperiod: {period}"))),
                [format!("{at}: {message}")],
                "{period}"
            );
        }
        assert_eq!(go_duration(".5s"), Ok(500_000_000));
        assert_eq!(go_duration("1h2m3s4ms5us6ns"), Ok(3_723_004_005_006));
        assert!(go_duration("1.s").is_ok());
        assert!(go_duration("s").is_err());
        assert!(go_duration("").is_err());
        assert!(go_duration("9999999999h").is_err());
    }

    #[test]
    fn burst_defaults_to_one_and_zero_is_one() {
        for limit in ["average: 5", "average: 5\nburst: 0", "average: 5\nburst: 1"] {
            let rule = only_rule(&middleware(limit));
            assert_eq!(rule[3], "burst = 1", "{limit}");
        }
        assert_eq!(
            problems(&middleware("average: 5\nburst: -2")),
            ["spec.rateLimit.burst: must be a whole number from 0 to 9223372036854775807"]
        );
    }

    #[test]
    fn traefiks_hold_is_half_a_token_or_500ms_below_one_a_second() {
        for (limit, hold) in [
            ("average: 1\nperiod: 10s", Some("500ms")),
            ("average: 1", Some("500ms")),
            ("average: 5\nperiod: 2s", Some("250ms")),
            ("average: 3", Some("166ms")),
            ("average: 1000", None),
        ] {
            let rule = only_rule(&middleware(limit));
            let held = rule
                .iter()
                .find_map(|line| line.strip_prefix("max_delay = \""))
                .map(|rest| rest.trim_end_matches('"'));
            assert_eq!(held, hold, "{limit}");
            assert_eq!(
                rule.contains(&"on_limit = \"delay\"".to_owned()),
                hold.is_some()
            );
        }
    }

    #[test]
    fn an_average_of_zero_is_no_limit() {
        let text = translate(&middleware("burst: 100"), "t").unwrap();
        assert_eq!(
            listed(&text, "Skipped:"),
            ["spec.rateLimit: average is 0, which Traefik reads as no limit (Middleware \"m\")"]
        );
        assert!(
            text.ends_with("\n# No rate limit: nothing to add.\n"),
            "{text}"
        );
    }

    #[test]
    fn the_source_is_the_client_ip_a_header_or_the_host() {
        let header = only_rule(&middleware(
            "average: 5\nsourceCriterion:\n  requestHeaderName: Username",
        ));
        assert_eq!(
            header[0..2],
            ["key = [\"header:username\"]", "missing = \"shared\""]
        );
        let text = translate(
            &middleware("average: 5\nsourceCriterion:\n  requestHeaderName: username"),
            "t",
        )
        .unwrap();
        assert!(
            text.contains(
                "# requests without the header share one bucket, as Traefik groups them\n[[rule]]"
            ),
            "{text}"
        );
        let host = only_rule(&middleware(
            "average: 5\nsourceCriterion: { requestHost: true }",
        ));
        assert_eq!(host[0], "key = [\"host\"]");
        let ip = only_rule(&middleware(
            "average: 5\nsourceCriterion: { ipStrategy: {} }",
        ));
        assert_eq!(ip[0], "key = [\"ip\"]");
        assert_eq!(
            problems(&middleware(
                "average: 5\nsourceCriterion: { requestHost: true, requestHeaderName: u, ipStrategy: { depth: 1 } }"
            )),
            [
                "spec.rateLimit.sourceCriterion: sets requestHost and requestHeaderName and \
                 ipStrategy: Traefik refuses more than one criterion"
            ]
        );
    }

    #[test]
    fn the_ip_strategy_is_the_server_settings_to_make() {
        let settings = |strategy: &str| {
            let text = translate(
                &middleware(&format!(
                    "average: 5\nsourceCriterion:\n  ipStrategy: {strategy}"
                )),
                "t",
            )
            .unwrap();
            assert_eq!(only_rule_of(&text)[0], "key = [\"ip\"]");
            listed(&text, "Server settings these middlewares assume:")
        };
        let at = "spec.rateLimit.sourceCriterion.ipStrategy";
        assert_eq!(
            settings("{ depth: 2, ipv6Subnet: 56 }"),
            [
                format!(
                    "{at}.depth (Middleware \"m\"): Traefik takes the client IP 2 from the right \
                     of X-Forwarded-For; sluice takes the rightmost address not in \
                     server.trusted_proxies, from a peer in it: list the 2 proxies in front of \
                     sluice there"
                ),
                format!("{at}.ipv6Subnet (Middleware \"m\"): server.ipv6_prefix = 56"),
            ]
        );
        // Traefik reads ipv6Subnet only beside depth or without excludedIPs.
        assert_eq!(
            settings("{ excludedIPs: [127.0.0.1/32, 192.168.1.7], ipv6Subnet: 64 }"),
            [format!(
                "{at}.excludedIPs (Middleware \"m\"): sluice passes over the addresses in \
                 server.trusted_proxies the same way (and reads X-Forwarded-For only from a peer \
                 among them): trusted_proxies = [\"127.0.0.1/32\", \"192.168.1.7\"]"
            )]
        );
        assert_eq!(
            settings("{ ipv6Subnet: 64 }"),
            [format!(
                "{at}.ipv6Subnet (Middleware \"m\"): server.ipv6_prefix = 64"
            )]
        );
        assert!(settings("{}").is_empty());
    }

    /// The lines of the first rule in `text` after its name.
    fn only_rule_of(text: &str) -> Vec<String> {
        text.lines()
            .skip_while(|line| *line != "[[rule]]")
            .skip(2)
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn the_dynamic_configuration_is_read_in_any_case_and_other_middlewares_skipped() {
        let yaml = "http:
  routers:
    r: { rule: \"Host(`a`)\", middlewares: [test-ratelimit] }
  middlewares:
    test-ratelimit:
      ratelimit:
        average: 6
        Period: 1m
    strip:
      stripPrefix: { prefixes: [/api] }
tcp:
  routers: {}
";
        let text = translate(yaml, "t").unwrap();
        assert_eq!(
            listed(&text, "Skipped:"),
            [
                "http.routers: not middlewares",
                "http.middlewares.strip.stripPrefix: not a rateLimit",
                "tcp: not HTTP middlewares",
            ]
        );
        assert!(
            text.contains(
                "\n# from http.middlewares.test-ratelimit.ratelimit (middleware \"test-ratelimit\")\n\
                 [[rule]]\nname = \"traefik-test-ratelimit\"\n"
            ),
            "{text}"
        );
        assert_eq!(only_rule_of(&text)[2], "rate = \"6/m\"");
    }

    #[test]
    fn a_middleware_object_is_read_as_kubernetes_reads_it() {
        // The older API group too.
        let legacy = middleware("average: 5").replace("traefik.io", "traefik.containo.us");
        assert_eq!(only_rule(&legacy)[0], "key = [\"ip\"]");
        let yaml = "apiVersion: traefik.io/v1alpha1
kind: Middleware
metadata: { name: m }
spec:
  ratelimit: { average: 5 }
---
apiVersion: traefik.io/v1alpha1
kind: Middleware
metadata: { name: n }
spec:
  rateLimit: { average: 5, Burst: 3, colour: blue, sourceCriterion: { ipstrategy: {} } }
---
apiVersion: traefik.io/v2
kind: Middleware
metadata: { name: o }
";
        assert_eq!(
            problems(yaml),
            [
                "document 1: spec.ratelimit: unknown field: Kubernetes reads field names as \
                 written (rateLimit), and drops this one",
                "document 2: spec.rateLimit.Burst: unknown field: Kubernetes reads field names \
                 as written (burst), and drops this one",
                "document 2: spec.rateLimit.colour: unknown field; average, period, burst, \
                 sourceCriterion, redis",
                "document 2: spec.rateLimit.sourceCriterion.ipstrategy: unknown field: \
                 Kubernetes reads field names as written (ipStrategy), and drops this one",
                "document 3: apiVersion: unknown version; this import reads traefik.io/v1alpha1 \
                 and traefik.containo.us/v1alpha1",
            ]
        );
    }

    #[test]
    fn other_objects_and_redis_are_named_at_the_top() {
        let yaml = format!(
            "{}---\napiVersion: traefik.io/v1alpha1\nkind: IngressRoute\nmetadata: {{ name: r }}\n\
             ---\napiVersion: traefik.io/v1alpha1\nkind: Middleware\nmetadata: {{ name: s }}\n\
             spec:\n  stripPrefix: {{ prefixes: [/api] }}\n",
            middleware("average: 5\nredis: { endpoints: [\"redis:6379\"] }")
        );
        let text = translate(&yaml, "t").unwrap();
        assert_eq!(
            listed(&text, "Skipped:"),
            [
                "document 1: spec.rateLimit.redis: Traefik shares the buckets among its \
                 instances through Redis; sluice instances share theirs with [store] backend = \
                 \"redis\" (Middleware \"m\")",
                "document 2: IngressRoute \"r\": not a Traefik Middleware or dynamic \
                 configuration",
                "document 3: spec.stripPrefix: not a rateLimit (Middleware \"s\")",
                "document 3: Middleware \"s\": no rateLimit",
            ]
        );
    }

    #[test]
    fn rule_names_follow_the_middleware_and_stay_unique() {
        let one = middleware("average: 5");
        let yaml = format!(
            "{one}---\n{}",
            one.replace("name: m\n", "name: m\n  namespace: x\n")
        );
        let text = translate(&yaml, "t").unwrap();
        let names: Vec<&str> = text
            .lines()
            .filter_map(|line| line.strip_prefix("name = "))
            .collect();
        assert_eq!(names, ["\"traefik-m\"", "\"traefik-m-2\""]);
    }
}
