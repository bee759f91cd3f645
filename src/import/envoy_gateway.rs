//! Envoy Gateway's rate limits (`BackendTrafficPolicy`,
//! gateway.envoyproxy.io/v1alpha1: the rules of `rateLimit.global` and
//! `rateLimit.local`) as sluice rules for the requests sluice proxies
//! (docs/import-gateway-policies.md).
//!
//! A rule's client selectors all must hold, so their conditions become one
//! `match`: an `Exact` header `match.header`, a path `match.path` (Exact) or
//! `match.path_glob` (PathPrefix, which Envoy Gateway matches segment by
//! segment: `/api/**`), methods `match.method`, a CIDR `match.client`. A
//! `Distinct` header or query parameter is a key source instead, a bucket
//! per value, and Envoy does not limit a request without it (its rate
//! limit action yields no descriptor), so the rule skips such a request
//! (`missing = "skip"`); a `Distinct` CIDR is `match.client` and a bucket
//! per client IP. Global limits are envoyproxy/ratelimit's fixed windows
//! aligned to Unix time (`fixed_window`); local ones are Envoy's token
//! bucket, `limit.requests` deep and refilled continuously
//! (`token_bucket`). What sluice cannot say (regular expressions, `invert`,
//! costs from metadata or after the response, a local default bucket beside
//! selected rules) is refused, every problem at once, each at its YAML path.

use std::fmt::Write as _;

use ipnet::IpNet;
use serde_norway::Value;

use super::yaml::{index, join, Object, Reader};
use super::{
    import_objects, opening, toml_key, toml_string, ImportError, Objects, RuleNames, Unit, Written,
};

/// The `[[rule]]` tables (and comments) equivalent to the
/// `BackendTrafficPolicy` rate limits in `yaml` (one or more documents),
/// or every field that has no equivalent. `source_name` names the file in
/// the header comment and in errors.
pub fn translate(yaml: &str, source_name: &str) -> Result<String, ImportError> {
    import_objects::<Import>(yaml, source_name)
}

const API_VERSION: &str = "gateway.envoyproxy.io/v1alpha1";

/// What Envoy Gateway's rate limit rules become, read from the file.
#[derive(Default)]
struct Import {
    reader: Reader,
    /// `# ` lines for what was skipped, at the top of the output.
    skipped: Vec<String>,
    rules: Vec<Rule>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Global,
    Local,
}

impl Scope {
    fn name(self) -> &'static str {
        match self {
            Scope::Global => "global",
            Scope::Local => "local",
        }
    }
}

/// One rate limit rule, as read.
struct Rule {
    /// Its YAML path, `spec.rateLimit.global.rules[0]`.
    at: String,
    /// The policy, `BackendTrafficPolicy "policy-httproute"`.
    policy: String,
    wanted_name: String,
    scope: Scope,
    /// How many client selectors it has (a local rule without any is the
    /// route's default bucket).
    selectors: usize,
    matcher: Matcher,
    /// `header:<name>`, `query:<name>`, `ip`: a bucket per value.
    keys: Vec<(String, String)>,
    /// Some key source is a header or query parameter Envoy needs present.
    skip_missing: bool,
    requests: u64,
    unit: Unit,
    limit_at: String,
    cost: Option<(u64, String)>,
    shadow: bool,
}

/// The conditions of every selector of a rule, each with where it was
/// read.
#[derive(Default)]
struct Matcher {
    /// `("path" | "path_glob", value)`; `None` inside for `PathPrefix: /`.
    path: Option<(Option<(&'static str, String)>, String)>,
    methods: Option<(Vec<String>, String)>,
    /// Lower-cased name, value, where.
    headers: Vec<(String, String, String)>,
    client: Option<(IpNet, String)>,
}

/// Gateway API's methods (`HTTPMethod`).
const METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
];

/// Why `invert: true` cannot be imported.
const NO_INVERT: &str =
    "no equivalent: sluice's match has no negation (every field given must fit the request)";

impl Objects for Import {
    fn reader(&mut self) -> &mut Reader {
        &mut self.reader
    }

    fn object(&mut self, object: &Object) {
        if object.kind.as_deref() != Some("BackendTrafficPolicy")
            || object
                .api_version
                .as_deref()
                .is_none_or(|version| !version.starts_with("gateway.envoyproxy.io/"))
        {
            self.skip(object, "", "not an Envoy Gateway BackendTrafficPolicy");
            return;
        }
        if object.api_version.as_deref() != Some(API_VERSION) {
            self.reader.problem(
                object.path("apiVersion"),
                format!("unknown version; this import reads {API_VERSION}"),
            );
            return;
        }
        let Some((name, spec_at, spec)) = self.reader.named_spec(object, "the policy's spec")
        else {
            return;
        };
        let mut limited = false;
        for (field, value) in spec {
            let at = join(&spec_at, &field);
            match field.as_str() {
                "rateLimit" => {
                    limited = true;
                    self.rate_limit(value, &at, object, &name);
                }
                "targetRef" | "targetRefs" | "targetSelectors" => self.skip(
                    object,
                    &at,
                    "the rules apply to every request sluice proxies, not only to the targeted \
                     routes (narrow a rule with match.host or match.path_prefix)",
                ),
                "mergeType" => self.skip(
                    object,
                    &at,
                    "no merging: each policy's rules are imported as written, and sluice applies \
                     every rule whose match fits",
                ),
                _ => self.skip(object, &at, "not a rate limit"),
            }
        }
        if !limited {
            self.skip(object, "", "no rateLimit");
        }
    }

    fn write(&self, names: &mut RuleNames) -> Vec<Written> {
        self.rules
            .iter()
            .map(|rule| rule.write(&names.claim(&rule.wanted_name)))
            .collect()
    }

    /// The header comment, the skipped things, then each rule.
    fn output(&self, source_name: &str, written: &[Written]) -> String {
        let skipped = [("Skipped:", &self.skipped[..])];
        let mut out = opening("envoy-gateway", source_name, HEADER, &skipped);
        for (rule, written) in self.rules.iter().zip(written) {
            let _ = writeln!(out, "\n# from {} ({})", rule.at, rule.policy);
            if rule.scope == Scope::Global {
                let written_unit = format!("limit.unit: {}", rule.unit.name());
                if let Some(note) = rule.unit.window_note(&written_unit) {
                    let _ = writeln!(out, "# {note}");
                }
            }
            out.push_str(&written.toml);
        }
        if self.rules.is_empty() {
            out.push_str("\n# No rate limit rule: nothing to add.\n");
        }
        out
    }
}

impl Import {
    /// A comment line for something left out: `at` (or the object) and why.
    fn skip(&mut self, object: &Object, at: &str, why: &str) {
        let place = match (object.place(), at) {
            ("", "") => object.label(),
            (place, "") => format!("{place}: {}", object.label()),
            (_, at) => format!("{at} ({})", object.label()),
        };
        self.skipped.push(format!("{place}: {why}"));
    }

    fn rate_limit(&mut self, value: &Value, at: &str, object: &Object, name: &str) {
        let Some(fields) = self.reader.fields(
            value,
            at,
            "must be a mapping with global or local (or both)",
        ) else {
            return;
        };
        let mut only = None;
        let mut blocks = Vec::new();
        for (field, value) in fields {
            let field_at = join(at, &field);
            match field.as_str() {
                "type" => match self.reader.string(value, &field_at).as_deref() {
                    Some("Global") => only = Some(Scope::Global),
                    Some("Local") => only = Some(Scope::Local),
                    Some(other) => self
                        .reader
                        .problem(field_at, format!("unknown type {other:?}; Global or Local")),
                    None => {}
                },
                "global" => blocks.push((Scope::Global, value, field_at)),
                "local" => blocks.push((Scope::Local, value, field_at)),
                _ => self.reader.problem(
                    field_at,
                    "unknown field; a rateLimit has global, local and type",
                ),
            }
        }
        if let Some(scope) = only {
            // The deprecated type says which block Envoy Gateway reads.
            if !blocks.iter().any(|(block, ..)| *block == scope) {
                self.reader.problem(
                    join(at, "type"),
                    format!(
                        "says {} without a {} block: Envoy Gateway refuses the policy",
                        scope.name(),
                        scope.name()
                    ),
                );
            }
            for (_, _, block_at) in blocks.iter().filter(|(block, ..)| *block != scope) {
                self.skip(
                    object,
                    block_at,
                    &format!(
                        "with type {:?}, Envoy Gateway reads only {}",
                        scope,
                        scope.name()
                    ),
                );
            }
            blocks.retain(|(block, ..)| *block == scope);
        }
        for (scope, value, block_at) in blocks {
            self.block(scope, value, &block_at, object, name);
        }
    }

    /// `global` or `local`: its rules.
    fn block(&mut self, scope: Scope, value: &Value, at: &str, object: &Object, name: &str) {
        let Some(fields) = self
            .reader
            .fields(value, at, "must be a mapping with rules")
        else {
            return;
        };
        let first = self.rules.len();
        for (field, value) in fields {
            let field_at = join(at, &field);
            if field != "rules" {
                self.reader
                    .problem(field_at, "unknown field; a global or local block has rules");
                continue;
            }
            let items = self
                .reader
                .items(value, &field_at, "must be a list of rules");
            for (i, item) in items.iter().enumerate() {
                let rule_at = index(&field_at, i);
                let wanted_name = format!("eg-{name}-{}-{i}", scope.name());
                if let Some(rule) = self.rule(item, rule_at, scope, object, wanted_name) {
                    self.rules.push(rule);
                }
            }
        }
        if scope == Scope::Local {
            self.local_default(first);
        }
    }

    /// Envoy Gateway makes a local rule without client selectors the route's
    /// default bucket, which counts only the requests no other local rule
    /// selects: sluice applies every rule whose match fits, so that has no
    /// equivalent beside selected rules.
    fn local_default(&mut self, first: usize) {
        let rules = &self.rules[first..];
        let defaults: Vec<&Rule> = rules.iter().filter(|rule| rule.selectors == 0).collect();
        if let Some(second) = defaults.get(1) {
            self.reader.problem(
                second.at.clone(),
                format!(
                    "a second local rule without clientSelectors ({} is one): Envoy Gateway \
                     refuses the policy",
                    defaults[0].at
                ),
            );
        }
        let selected = rules.iter().find(|rule| rule.selectors > 0);
        if let (Some(default), Some(selected)) = (defaults.first(), selected) {
            self.reader.problem(
                default.at.clone(),
                format!(
                    "no equivalent: a local rule without clientSelectors is Envoy's default \
                     bucket, which counts only the requests no other local rule selects (such \
                     as {}'s), and sluice applies every rule whose match fits",
                    selected.at
                ),
            );
        }
    }

    fn rule(
        &mut self,
        item: &Value,
        at: String,
        scope: Scope,
        object: &Object,
        wanted_name: String,
    ) -> Option<Rule> {
        let fields = self.reader.fields(
            item,
            &at,
            "must be a mapping with limit and optionally clientSelectors, cost and shadowMode",
        )?;
        let mut rule = Rule {
            policy: object.label(),
            wanted_name,
            scope,
            selectors: 0,
            matcher: Matcher::default(),
            keys: Vec::new(),
            skip_missing: false,
            requests: 0,
            unit: Unit::Second,
            limit_at: join(&at, "limit"),
            cost: None,
            shadow: false,
            at,
        };
        let mut limit = None;
        for (field, value) in fields {
            let field_at = join(&rule.at, &field);
            match field.as_str() {
                "clientSelectors" => {
                    let items =
                        self.reader
                            .items(value, &field_at, "must be a list of client selectors");
                    rule.selectors = items.len();
                    for (i, selector) in items.iter().enumerate() {
                        self.selector(selector, &index(&field_at, i), &mut rule);
                    }
                }
                "limit" => limit = self.limit(value, &field_at),
                "cost" => rule.cost = self.cost(value, &field_at),
                "shadowMode" => rule.shadow = self.reader.flag(value, &field_at),
                "shared" | "xRateLimitHeaders" if value.is_null() => {}
                "shared" => self.skip(
                    object,
                    &field_at,
                    "a sluice rule's buckets count every request it matches, whichever route it \
                     is for",
                ),
                "xRateLimitHeaders" => self.skip(
                    object,
                    &field_at,
                    "sluice's rate limit headers are set for every rule ([response] headers)",
                ),
                _ => self.reader.problem(
                    field_at,
                    "unknown field; a rate limit rule has clientSelectors, limit, cost, \
                     shadowMode, shared and xRateLimitHeaders",
                ),
            }
        }
        match limit {
            Some((requests, unit)) => {
                rule.requests = requests;
                rule.unit = unit;
            }
            None if self.reader.said_within(&rule.limit_at) => return None,
            None => return self.reader.invalid(&rule.limit_at, "is required"),
        }
        Some(rule)
    }

    /// `limit`: requests per unit.
    fn limit(&mut self, value: &Value, at: &str) -> Option<(u64, Unit)> {
        let fields = self
            .reader
            .fields(value, at, "must be a mapping with requests and unit")?;
        let (mut requests, mut unit) = (None, None);
        for (field, value) in fields {
            let field_at = join(at, &field);
            match field.as_str() {
                "requests" => {
                    requests = self.reader.whole(value, &field_at, u64::from(u32::MAX));
                }
                "unit" => {
                    unit = self.reader.string(value, &field_at).and_then(|text| {
                        let unit = Unit::parse(&text, false);
                        if unit.is_none() {
                            self.reader
                                .problem(&field_at, format!("unknown unit {text:?}; {UNITS}"));
                        }
                        unit
                    });
                }
                "fromMetadata" if value.is_null() => {}
                "fromMetadata" => self.reader.problem(
                    field_at,
                    "no equivalent: the limit comes from Envoy's dynamic metadata, which sluice \
                     never sees",
                ),
                _ => self.reader.problem(
                    field_at,
                    "unknown field; a limit has requests, unit and fromMetadata",
                ),
            }
        }
        for (field, missing) in [("requests", requests.is_none()), ("unit", unit.is_none())] {
            let field_at = join(at, field);
            if missing {
                let also = (field == "unit").then(|| format!("; {UNITS}"));
                let message = format!("is required{}", also.unwrap_or_default());
                self.reader.missing(&field_at, message);
            }
        }
        Some((requests?, unit?))
    }

    /// `cost`: a fixed number on the request path only.
    fn cost(&mut self, value: &Value, at: &str) -> Option<(u64, String)> {
        let fields =
            self.reader
                .fields(value, at, "must be a mapping with request and response")?;
        let mut cost = None;
        for (field, value) in fields {
            let field_at = join(at, &field);
            match field.as_str() {
                "request" => cost = self.cost_specifier(value, &field_at),
                "response" if value.is_null() => {}
                "response" => self.reader.problem(
                    field_at,
                    "no equivalent: after the response sluice charges only what it measures or \
                     reads in it (charge), never a fixed number or Envoy's metadata",
                ),
                _ => self
                    .reader
                    .problem(field_at, "unknown field; a cost has request and response"),
            }
        }
        cost
    }

    fn cost_specifier(&mut self, value: &Value, at: &str) -> Option<(u64, String)> {
        let fields = self.reader.fields(
            value,
            at,
            "must be a mapping with from and number (or metadata)",
        )?;
        let (mut from, mut number, mut metadata) = (None, None, false);
        for (field, value) in fields {
            let field_at = join(at, &field);
            match field.as_str() {
                "from" => from = self.reader.string(value, &field_at),
                "number" => number = self.reader.whole(value, &field_at, u64::MAX),
                "metadata" => metadata = !value.is_null(),
                _ => self.reader.problem(
                    field_at,
                    "unknown field; a cost has from, number and metadata",
                ),
            }
        }
        let number_at = join(at, "number");
        match from.as_deref() {
            Some("Number") if metadata => self.reader.invalid(
                join(at, "metadata"),
                "Envoy Gateway refuses both number and metadata",
            ),
            Some("Number") => match number {
                Some(0) => self.reader.invalid(
                    number_at,
                    "no equivalent: a cost of 0 checks the limit without taking from it, \
                         and every request a sluice rule admits takes at least 1",
                ),
                Some(number) => Some((number, number_at)),
                None => {
                    self.reader
                        .missing(&number_at, "is required with from: Number");
                    None
                }
            },
            Some("Metadata") => self.reader.invalid(
                join(at, "from"),
                "no equivalent: the cost comes from Envoy's dynamic metadata, which sluice \
                     never sees",
            ),
            Some(other) => self.reader.invalid(
                join(at, "from"),
                format!("unknown source {other:?}; Number or Metadata"),
            ),
            None => self
                .reader
                .invalid(join(at, "from"), "is required: Number or Metadata"),
        }
    }

    /// One client selector: its conditions join the rule's.
    fn selector(&mut self, value: &Value, at: &str, rule: &mut Rule) {
        let Some(fields) = self.reader.fields(
            value,
            at,
            "must be a mapping with headers, methods, path, sourceCIDR or queryParams",
        ) else {
            return;
        };
        if fields.iter().all(|(_, value)| value.is_null()) {
            self.reader.problem(
                at,
                "names no condition: Envoy Gateway refuses a selector without headers, methods, \
                 path, sourceCIDR or queryParams",
            );
        }
        for (field, value) in fields {
            let field_at = join(at, &field);
            match field.as_str() {
                "headers" => {
                    let items = self
                        .reader
                        .items(value, &field_at, "must be a list of headers");
                    for (i, header) in items.iter().enumerate() {
                        self.header(header, &index(&field_at, i), rule);
                    }
                }
                "methods" => self.methods(value, &field_at, rule),
                "path" => self.path(value, &field_at, rule),
                "sourceCIDR" => self.source_cidr(value, &field_at, rule),
                "queryParams" => {
                    let items =
                        self.reader
                            .items(value, &field_at, "must be a list of query parameters");
                    for (i, param) in items.iter().enumerate() {
                        self.query_param(param, &index(&field_at, i), rule);
                    }
                }
                _ => self.reader.problem(
                    field_at,
                    "unknown field; a client selector has headers, methods, path, sourceCIDR \
                     and queryParams",
                ),
            }
        }
    }

    /// The fields shared by a header and a query parameter match: type
    /// (default Exact), name, value and whether `invert` is set.
    fn string_match(
        &mut self,
        value: &Value,
        at: &str,
        what: &str,
    ) -> Option<(String, String, Option<String>)> {
        let fields = self.reader.fields(
            value,
            at,
            &format!("must be a mapping with name and value (or type: Distinct) of a {what}"),
        )?;
        let (mut kind, mut name, mut text, mut invert) = (None, None, None, false);
        for (field, value) in fields {
            let field_at = join(at, &field);
            match field.as_str() {
                "type" => kind = self.reader.string(value, &field_at),
                "name" => name = self.reader.string(value, &field_at),
                "value" => text = self.reader.string(value, &field_at),
                "invert" => invert = self.reader.flag(value, &field_at),
                _ => self.reader.problem(
                    field_at,
                    format!("unknown field; a {what} match has type, name, value and invert"),
                ),
            }
        }
        let kind = kind.unwrap_or_else(|| "Exact".to_owned());
        if invert {
            let why = if kind == "Distinct" {
                "Envoy Gateway refuses invert with type: Distinct"
            } else {
                NO_INVERT
            };
            self.reader.problem(join(at, "invert"), why);
        }
        let name = self.reader.required(name, &join(at, "name"));
        let value_at = join(at, "value");
        match kind.as_str() {
            "Exact" if text.is_none() => {
                self.reader
                    .problem(value_at, "is required with type: Exact");
            }
            "Distinct" if text.is_some() => self.reader.problem(
                value_at,
                "Envoy Gateway refuses a value with type: Distinct (each value is its own \
                 bucket)",
            ),
            "Exact" | "Distinct" => {}
            "RegularExpression" => self.reader.problem(
                join(at, "type"),
                format!(
                    "no equivalent: sluice matches a {what}'s value exactly, not by regular \
                     expression"
                ),
            ),
            other => self.reader.problem(
                join(at, "type"),
                format!("unknown type {other:?}; Exact, RegularExpression or Distinct"),
            ),
        }
        if invert {
            return None;
        }
        Some((kind, name?, text))
    }

    fn header(&mut self, value: &Value, at: &str, rule: &mut Rule) {
        let Some((kind, name, text)) = self.string_match(value, at, "header") else {
            return;
        };
        let name_at = join(at, "name");
        let lower = name.to_ascii_lowercase();
        if lower.starts_with(':') || http::HeaderName::from_bytes(lower.as_bytes()).is_err() {
            self.reader.problem(
                name_at,
                format!("{name:?} is not a header name sluice can match (letters, digits and '-')"),
            );
            return;
        }
        match (kind.as_str(), text) {
            ("Exact", Some(text)) => {
                let value_at = join(at, "value");
                let before = rule
                    .matcher
                    .headers
                    .iter()
                    .find(|(seen, ..)| *seen == lower);
                match before {
                    Some((_, seen, _)) if *seen == text => {}
                    Some((_, seen, seen_at)) => {
                        let problem = format!(
                            "{name} must also equal {seen:?} ({seen_at}): no request's header \
                             has both values"
                        );
                        self.reader.problem(value_at, problem);
                    }
                    None => rule.matcher.headers.push((lower, text, value_at)),
                }
            }
            ("Distinct", None) => {
                rule.skip_missing = true;
                add_key(rule, format!("header:{lower}"), at);
            }
            _ => {}
        }
    }

    fn query_param(&mut self, value: &Value, at: &str, rule: &mut Rule) {
        let Some((kind, name, _)) = self.string_match(value, at, "query parameter") else {
            return;
        };
        if kind == "Exact" {
            self.reader.problem(
                at,
                "no equivalent: sluice's match has no query parameter (a Distinct one is a key \
                 source: query:<name>)",
            );
        } else if kind == "Distinct" {
            rule.skip_missing = true;
            add_key(rule, format!("query:{name}"), at);
        }
    }

    fn methods(&mut self, value: &Value, at: &str, rule: &mut Rule) {
        let items = self.reader.items(value, at, "must be a list of methods");
        let mut methods = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let item_at = index(at, i);
            let Some(fields) = self
                .reader
                .fields(item, &item_at, "must be a mapping with value")
            else {
                continue;
            };
            let mut method = None;
            for (field, value) in fields {
                let field_at = join(&item_at, &field);
                match field.as_str() {
                    "value" => method = self.reader.string(value, &field_at),
                    "invert" => {
                        if self.reader.flag(value, &field_at) {
                            self.reader.problem(field_at, NO_INVERT);
                        }
                    }
                    _ => self.reader.problem(
                        field_at,
                        "unknown field; a method match has value and invert",
                    ),
                }
            }
            let value_at = join(&item_at, "value");
            match self.reader.required(method, &value_at) {
                Some(method) if methods.contains(&method) => {}
                Some(method) if METHODS.contains(&method.as_str()) => methods.push(method),
                Some(method) => self.reader.problem(
                    value_at,
                    format!("unknown method {method:?}; {}", METHODS.join(", ")),
                ),
                None => {}
            }
        }
        if methods.is_empty() {
            return;
        }
        match &rule.matcher.methods {
            Some((seen, _)) if same_set(seen, &methods) => {}
            Some((_, seen_at)) => self.reader.problem(
                at,
                format!(
                    "methods are given in {seen_at} too: Envoy Gateway documents selectors as \
                     all having to hold, yet admits any method of either; list the methods in \
                     one selector"
                ),
            ),
            None => rule.matcher.methods = Some((methods, at.to_owned())),
        }
    }

    fn path(&mut self, value: &Value, at: &str, rule: &mut Rule) {
        let Some((kind, text)) = self.typed_value(value, at, "a path match") else {
            return;
        };
        // Kubernetes fills in the defaults.
        let text = text.unwrap_or_else(|| "/".to_owned());
        let value_at = join(at, "value");
        let field = match kind.as_deref().unwrap_or("PathPrefix") {
            "Exact" => Some(("path", text)),
            "PathPrefix" => {
                // Envoy Gateway matches a prefix segment by segment (`/api`
                // is `/api`, `/api/…`, not `/apix`), as a glob's `**` does.
                let trimmed = text.trim_end_matches('/');
                if trimmed.contains('*') {
                    self.reader.problem(
                        &value_at,
                        "contains '*', which is a character to Envoy Gateway and a wildcard \
                         to sluice's path_glob",
                    );
                    return;
                }
                (!trimmed.is_empty()).then(|| ("path_glob", format!("{trimmed}/**")))
            }
            "RegularExpression" => {
                self.reader.problem(
                    join(at, "type"),
                    "no equivalent: sluice matches paths exactly, by prefix or by glob, not by \
                     regular expression",
                );
                return;
            }
            other => {
                self.reader.problem(
                    join(at, "type"),
                    format!("unknown type {other:?}; Exact, PathPrefix or RegularExpression"),
                );
                return;
            }
        };
        match &rule.matcher.path {
            Some((seen, _)) if *seen == field => {}
            Some((_, seen_at)) => self.reader.problem(
                at,
                format!(
                    "a path is given in {seen_at} too: Envoy Gateway keeps only the last one, \
                     where it documents selectors as all having to hold; give one path"
                ),
            ),
            None => rule.matcher.path = Some((field, value_at)),
        }
    }

    /// A path or a sourceCIDR: its `type` and `value`; `invert: true` is
    /// refused.
    fn typed_value(
        &mut self,
        value: &Value,
        at: &str,
        what: &str,
    ) -> Option<(Option<String>, Option<String>)> {
        let fields = self
            .reader
            .fields(value, at, "must be a mapping with type and value")?;
        let (mut kind, mut text) = (None, None);
        for (field, value) in fields {
            let field_at = join(at, &field);
            match field.as_str() {
                "type" => kind = self.reader.string(value, &field_at),
                "value" => text = self.reader.string(value, &field_at),
                "invert" => {
                    if self.reader.flag(value, &field_at) {
                        self.reader.problem(field_at, NO_INVERT);
                    }
                }
                _ => self.reader.problem(
                    field_at,
                    format!("unknown field; {what} has type, value and invert"),
                ),
            }
        }
        Some((kind, text))
    }

    fn source_cidr(&mut self, value: &Value, at: &str, rule: &mut Rule) {
        let Some((kind, text)) = self.typed_value(value, at, "a sourceCIDR") else {
            return;
        };
        let value_at = join(at, "value");
        let net = self.reader.required(text, &value_at).and_then(|text| {
            let net = text.parse::<IpNet>().ok();
            if net.is_none() {
                self.reader.problem(
                    &value_at,
                    format!(
                        "{text:?} is not a CIDR such as \"192.168.0.0/24\" or \"2001:db8::/64\""
                    ),
                );
            }
            net.map(|net| net.trunc())
        });
        let distinct = match kind.as_deref().unwrap_or("Exact") {
            "Exact" => false,
            "Distinct" => true,
            other => {
                self.reader.problem(
                    join(at, "type"),
                    format!("unknown type {other:?}; Exact or Distinct"),
                );
                return;
            }
        };
        let Some(net) = net else {
            return;
        };
        match &rule.matcher.client {
            Some((seen, _)) if *seen == net => {}
            Some((_, seen_at)) => {
                self.reader.problem(
                    at,
                    format!(
                        "a sourceCIDR is given in {seen_at} too: Envoy Gateway keeps only the \
                         last one, where it documents selectors as all having to hold; give one"
                    ),
                );
                return;
            }
            None => rule.matcher.client = Some((net, value_at)),
        }
        if distinct {
            add_key(rule, "ip".to_owned(), at);
        }
    }
}

/// Adds a key source (once) and where it came from.
fn add_key(rule: &mut Rule, source: String, at: &str) {
    if !rule.keys.iter().any(|(seen, _)| *seen == source) {
        rule.keys.push((source, at.to_owned()));
    }
}

fn same_set(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().all(|item| b.contains(item))
}

const UNITS: &str = "Envoy Gateway's units are Second, Minute, Hour, Day, Week, Month and Year";

/// What every import says first, after the source.
const HEADER: &str = "\
# Append these rules to a sluice config. One rule per rate limit rule, for the
# requests sluice proxies; every client selector of a rule must fit (match):
# - a global rule counts fixed windows aligned to Unix time, as Envoy's rate limit
#   service (envoyproxy/ratelimit) does: algorithm = \"fixed_window\";
# - a local rule is Envoy's token bucket, limit.requests deep and refilled
#   continuously: algorithm = \"token_bucket\";
# - a Distinct header or query parameter is a bucket per value, and Envoy does not
#   limit a request without it: missing = \"skip\"; a Distinct sourceCIDR is a
#   bucket per client IP.
# Where sluice decides otherwise:
# - targetRefs are not followed: each rule applies to every request sluice proxies;
# - Envoy matches an Exact path with the query string, sluice the path alone;
# - the client IP is Envoy's as its X-Forwarded-For settings say, sluice's as
#   server.trusted_proxies says, and sluice keys IPv6 clients by their /64
#   (server.ipv6_prefix = 128 keys each address, as Envoy does);
# - a request one global rule refuses is counted by Envoy's other rules, by none
#   in sluice.
";

impl Rule {
    /// The `[[rule]]` table named `name`, with where its fields came from.
    fn write(&self, name: &str) -> Written {
        let mut toml = String::new();
        let mut sources = vec![
            ("name".to_owned(), self.at.clone()),
            ("rate".to_owned(), self.limit_at.clone()),
        ];
        let _ = writeln!(toml, "[[rule]]\nname = {}", toml_string(name));
        let mut fields = Vec::new();
        if let Some((Some((field, path)), at)) = &self.matcher.path {
            fields.push(format!("{field} = {}", toml_string(path)));
            sources.push((format!("match.{field}"), at.clone()));
        }
        if let Some((methods, at)) = &self.matcher.methods {
            let list: Vec<String> = methods.iter().map(|m| toml_string(m)).collect();
            fields.push(format!("method = [{}]", list.join(", ")));
            sources.push(("match.method".to_owned(), at.clone()));
        }
        if !self.matcher.headers.is_empty() {
            let entries: Vec<String> = self
                .matcher
                .headers
                .iter()
                .map(|(header, value, at)| {
                    sources.push((format!("match.header.{header}"), at.clone()));
                    format!("{} = {}", toml_key(header), toml_string(value))
                })
                .collect();
            fields.push(format!("header = {{ {} }}", entries.join(", ")));
        }
        if let Some((net, at)) = &self.matcher.client {
            fields.push(format!("client = [{}]", toml_string(&net.to_string())));
            sources.push(("match.client".to_owned(), at.clone()));
        }
        if !fields.is_empty() {
            let _ = writeln!(toml, "match = {{ {} }}", fields.join(", "));
        }
        let keys: Vec<String> = if self.keys.is_empty() {
            // Every request the rule matches shares one bucket.
            vec![toml_string("global")]
        } else {
            self.keys
                .iter()
                .enumerate()
                .map(|(i, (source, at))| {
                    sources.push((format!("key[{i}]"), at.clone()));
                    toml_string(source)
                })
                .collect()
        };
        let _ = writeln!(toml, "key = [{}]", keys.join(", "));
        if self.skip_missing {
            toml.push_str("missing = \"skip\"\n");
        }
        let algorithm = match self.scope {
            Scope::Global => "fixed_window",
            Scope::Local => "token_bucket",
        };
        let _ = writeln!(
            toml,
            "algorithm = \"{algorithm}\"\nrate = \"{}/{}\"",
            self.requests,
            self.unit.period()
        );
        if let Some((cost, at)) = &self.cost {
            let _ = writeln!(toml, "cost = {cost}");
            sources.push(("cost".to_owned(), at.clone()));
        }
        if self.shadow {
            toml.push_str("shadow = true\n");
        }
        Written {
            toml,
            at: self.at.clone(),
            sources,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::testing::{only, problems_of, rules_of};

    /// A policy named `p` whose `rateLimit.<scope>.rules` are `rules`
    /// (YAML list items, written from column 0).
    fn policy(scope: &str, rules: &str) -> String {
        let mut yaml = format!(
            "apiVersion: gateway.envoyproxy.io/v1alpha1\nkind: BackendTrafficPolicy\n\
             metadata:\n  name: p\nspec:\n  rateLimit:\n    {scope}:\n      rules:\n"
        );
        for line in rules.lines() {
            let _ = writeln!(yaml, "      {line}");
        }
        yaml
    }

    /// The rules `yaml` imports to, each a TOML table.
    fn rules(yaml: &str) -> Vec<toml::Table> {
        rules_of(translate(yaml, "test.yaml"))
    }

    fn only_rule(yaml: &str) -> toml::Table {
        let mut found = rules(yaml);
        assert_eq!(found.len(), 1, "{found:#?}");
        found.remove(0)
    }

    /// A rule's fields other than its name, `field = value` in
    /// alphabetical order on one line.
    fn shape(rule: &toml::Table) -> String {
        let fields: Vec<String> = rule
            .iter()
            .filter(|(field, _)| *field != "name")
            .map(|(field, value)| format!("{field} = {value}"))
            .collect();
        fields.join("; ")
    }

    /// Every problem as `path: message`.
    fn problems(yaml: &str) -> Vec<String> {
        problems_of(translate(yaml, "test.yaml"))
    }

    fn only_problem(yaml: &str) -> String {
        only(problems(yaml))
    }

    const LIMIT: &str = "  limit: { requests: 3, unit: Hour }";

    fn selected(selectors: &str) -> String {
        format!("- clientSelectors:\n{selectors}\n{LIMIT}")
    }

    #[test]
    fn an_exact_header_is_match_header_with_one_bucket_for_its_requests() {
        let yaml = policy(
            "global",
            &selected("  - headers:\n    - name: X-User-Id\n      value: one"),
        );
        let text = translate(&yaml, "eg.yaml").unwrap();
        assert!(
            text.starts_with("# Imported by `sluice import envoy-gateway` from \"eg.yaml\".\n"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "\n# from spec.rateLimit.global.rules[0] (BackendTrafficPolicy \"p\")
[[rule]]
name = \"eg-p-global-0\"
match = { header = { x-user-id = \"one\" } }
key = [\"global\"]
algorithm = \"fixed_window\"
rate = \"3/h\"
"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_distinct_header_is_a_bucket_per_value_and_skips_requests_without_it() {
        let rule = only_rule(&policy(
            "global",
            &selected("  - headers:\n    - type: Distinct\n      name: x-user-id"),
        ));
        assert_eq!(
            shape(&rule),
            r#"algorithm = "fixed_window"; key = ["header:x-user-id"]; missing = "skip"; rate = "3/h""#
        );
    }

    #[test]
    fn an_exact_cidr_is_one_shared_bucket_and_a_distinct_one_a_bucket_per_client() {
        let exact = only_rule(&policy(
            "global",
            &selected("  - sourceCIDR: { value: 10.1.2.3/8 }"),
        ));
        assert_eq!(
            shape(&exact),
            r#"algorithm = "fixed_window"; key = ["global"]; match = { client = ["10.0.0.0/8"] }; rate = "3/h""#
        );
        let distinct = only_rule(&policy(
            "global",
            &selected("  - sourceCIDR: { type: Distinct, value: \"2001:db8::/32\" }"),
        ));
        assert_eq!(
            shape(&distinct),
            r#"algorithm = "fixed_window"; key = ["ip"]; match = { client = ["2001:db8::/32"] }; rate = "3/h""#
        );
        for (value, message) in [
            ("10.0.0.1", "\"10.0.0.1\" is not a CIDR"),
            ("office", "\"office\" is not a CIDR"),
        ] {
            let yaml = policy(
                "global",
                &selected(&format!("  - sourceCIDR: {{ value: {value} }}")),
            );
            assert_eq!(
                only_problem(&yaml),
                format!(
                    "spec.rateLimit.global.rules[0].clientSelectors[0].sourceCIDR.value: {message} \
                     such as \"192.168.0.0/24\" or \"2001:db8::/64\""
                )
            );
        }
    }

    #[test]
    fn an_exact_path_is_match_path_and_a_prefix_whole_segments_below_it() {
        let path = |selector: &str| {
            let rule = only_rule(&policy("global", &selected(selector)));
            rule.get("match").map(ToString::to_string)
        };
        assert_eq!(
            path("  - path: { type: Exact, value: /api/users }").as_deref(),
            Some(r#"{ path = "/api/users" }"#)
        );
        // PathPrefix is the default type, and `/api` is not `/apix`.
        for prefix in ["/api", "/api/"] {
            assert_eq!(
                path(&format!("  - path: {{ value: {prefix} }}")).as_deref(),
                Some(r#"{ path_glob = "/api/**" }"#)
            );
        }
        assert_eq!(path("  - path: { type: PathPrefix, value: / }"), None);
        assert_eq!(
            only_problem(&policy("global", &selected("  - path: { value: /a*b }"))),
            "spec.rateLimit.global.rules[0].clientSelectors[0].path.value: contains '*', which \
             is a character to Envoy Gateway and a wildcard to sluice's path_glob"
        );
        assert_eq!(
            only_problem(&policy(
                "global",
                &selected("  - path: { type: RegularExpression, value: \"/api/users/[0-9]+\" }")
            )),
            "spec.rateLimit.global.rules[0].clientSelectors[0].path.type: no equivalent: sluice \
             matches paths exactly, by prefix or by glob, not by regular expression"
        );
        // What sluice's own check refuses is named where it came from.
        let problem = only_problem(&policy(
            "global",
            &selected("  - path: { type: Exact, value: /a//b }"),
        ));
        assert!(
            problem.starts_with(
                "spec.rateLimit.global.rules[0].clientSelectors[0].path.value: sluice would \
                 refuse the rule's match.path: "
            ),
            "{problem}"
        );
    }

    #[test]
    fn methods_are_any_of_them() {
        let rule = only_rule(&policy(
            "local",
            &selected("  - methods: [{ value: POST }, { value: PUT }, { value: POST }]"),
        ));
        assert_eq!(rule["match"].to_string(), r#"{ method = ["POST", "PUT"] }"#);
        assert_eq!(
            only_problem(&policy(
                "global",
                &selected("  - methods: [{ value: post }]")
            )),
            "spec.rateLimit.global.rules[0].clientSelectors[0].methods[0].value: unknown method \
             \"post\"; GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH"
        );
    }

    #[test]
    fn every_selector_of_a_rule_must_hold() {
        let rule = only_rule(&policy(
            "global",
            &selected(
                "  - headers: [{ name: x-plan, value: free }]\n    methods: [{ value: GET }]\n  \
                 - headers: [{ name: x-app, value: web }, { name: X-Plan, value: free }]\n    \
                 path: { value: /api }\n  - sourceCIDR: { value: 192.0.2.0/24 }",
            ),
        ));
        assert_eq!(
            rule["match"].to_string(),
            r#"{ client = ["192.0.2.0/24"], header = { x-app = "web", x-plan = "free" }, method = ["GET"], path_glob = "/api/**" }"#
        );
        // What Envoy Gateway would not AND as it documents is refused.
        let found = problems(&policy(
            "global",
            &selected(
                "  - headers: [{ name: x-plan, value: free }]\n    methods: [{ value: GET }]\n    \
                 path: { value: /a }\n    sourceCIDR: { value: 10.0.0.0/8 }\n  \
                 - headers: [{ name: x-plan, value: paid }]\n    methods: [{ value: POST }]\n    \
                 path: { value: /b }\n    sourceCIDR: { value: 10.0.0.0/16 }",
            ),
        ));
        let at = "spec.rateLimit.global.rules[0].clientSelectors";
        assert_eq!(
            found,
            [
                format!(
                    "{at}[1].headers[0].value: x-plan must also equal \"free\" \
                     ({at}[0].headers[0].value): no request's header has both values"
                ),
                format!(
                    "{at}[1].methods: methods are given in {at}[0].methods too: Envoy Gateway \
                     documents selectors as all having to hold, yet admits any method of either; \
                     list the methods in one selector"
                ),
                format!(
                    "{at}[1].path: a path is given in {at}[0].path.value too: Envoy Gateway keeps \
                     only the last one, where it documents selectors as all having to hold; give \
                     one path"
                ),
                format!(
                    "{at}[1].sourceCIDR: a sourceCIDR is given in {at}[0].sourceCIDR.value too: \
                     Envoy Gateway keeps only the last one, where it documents selectors as all \
                     having to hold; give one"
                ),
            ]
        );
    }

    #[test]
    fn a_global_unit_is_fixed_windows_of_unix_time_and_a_local_one_a_refill_period() {
        for (unit, period, noted) in [
            ("Second", "s", false),
            ("Minute", "m", false),
            ("Hour", "h", false),
            ("Day", "d", false),
            ("Week", "7d", true),
            ("Month", "30d", true),
            ("Year", "365d", true),
        ] {
            let rule = format!("- limit: {{ requests: 5, unit: {unit} }}");
            let text = translate(&policy("global", &rule), "t").unwrap();
            assert!(text.contains(&format!("rate = \"5/{period}\"\n")), "{text}");
            assert!(text.contains("algorithm = \"fixed_window\"\n"), "{text}");
            assert_eq!(
                text.contains(&format!("# limit.unit: {unit} is ")),
                noted,
                "{text}"
            );
            let local = only_rule(&policy("local", &rule));
            assert_eq!(
                shape(&local),
                format!(r#"algorithm = "token_bucket"; key = ["global"]; rate = "5/{period}""#)
            );
        }
        assert_eq!(
            only_problem(&policy("global", "- limit: { requests: 5, unit: second }")),
            "spec.rateLimit.global.rules[0].limit.unit: unknown unit \"second\"; Envoy Gateway's \
             units are Second, Minute, Hour, Day, Week, Month and Year"
        );
    }

    #[test]
    fn a_local_default_bucket_beside_selected_rules_has_no_equivalent() {
        let alone = only_rule(&policy("local", "- limit: { requests: 10, unit: Second }"));
        assert_eq!(alone["rate"].as_str(), Some("10/s"));
        let yaml = policy(
            "local",
            &format!(
                "- limit: {{ requests: 10, unit: Second }}\n{}\n\
                 - limit: {{ requests: 20, unit: Second }}",
                selected("  - headers: [{ name: x-user-id, value: one }]")
            ),
        );
        assert_eq!(
            problems(&yaml),
            [
                "spec.rateLimit.local.rules[2]: a second local rule without clientSelectors \
                 (spec.rateLimit.local.rules[0] is one): Envoy Gateway refuses the policy",
                "spec.rateLimit.local.rules[0]: no equivalent: a local rule without \
                 clientSelectors is Envoy's default bucket, which counts only the requests no \
                 other local rule selects (such as spec.rateLimit.local.rules[1]'s), and sluice \
                 applies every rule whose match fits",
            ]
        );
        // A global rule without selectors is an ordinary rule beside others.
        let yaml = policy(
            "global",
            &format!(
                "- limit: {{ requests: 10, unit: Second }}\n{}",
                selected("  - headers: [{ name: x-user-id, value: one }]")
            ),
        );
        assert_eq!(rules(&yaml).len(), 2);
    }

    #[test]
    fn a_fixed_request_cost_is_cost_and_other_costs_have_no_equivalent() {
        let rule = only_rule(&policy(
            "global",
            "- limit: { requests: 10, unit: Minute }\n  cost: { request: { from: Number, number: 4 } }",
        ));
        assert_eq!(rule["cost"].as_integer(), Some(4));
        let at = "spec.rateLimit.global.rules[0].cost";
        for (cost, problem) in [
            (
                "{ request: { from: Number, number: 0 } }",
                format!(
                    "{at}.request.number: no equivalent: a cost of 0 checks the limit without \
                     taking from it, and every request a sluice rule admits takes at least 1"
                ),
            ),
            (
                "{ request: { from: Metadata, metadata: { namespace: n, key: k } } }",
                format!(
                    "{at}.request.from: no equivalent: the cost comes from Envoy's dynamic \
                     metadata, which sluice never sees"
                ),
            ),
            (
                "{ response: { from: Number, number: 1 } }",
                format!(
                    "{at}.response: no equivalent: after the response sluice charges only what \
                     it measures or reads in it (charge), never a fixed number or Envoy's metadata"
                ),
            ),
        ] {
            let yaml = policy(
                "global",
                &format!("- limit: {{ requests: 10, unit: Minute }}\n  cost: {cost}"),
            );
            assert_eq!(only_problem(&yaml), problem);
        }
        // A cost no bucket can hold: sluice's check says so, at the number.
        let problem = only_problem(&policy(
            "global",
            "- limit: { requests: 3, unit: Minute }\n  cost: { request: { from: Number, number: 4 } }",
        ));
        assert!(
            problem.starts_with(&format!(
                "{at}.request.number: sluice would refuse the rule's cost: 4 can never fit"
            )),
            "{problem}"
        );
    }

    #[test]
    fn shadow_mode_is_a_shadow_rule() {
        let rule = only_rule(&policy(
            "global",
            "- limit: { requests: 3, unit: Hour }\n  shadowMode: true",
        ));
        assert_eq!(rule["shadow"].as_bool(), Some(true));
        let rule = only_rule(&policy(
            "global",
            "- limit: { requests: 3, unit: Hour }\n  shadowMode: false",
        ));
        assert_eq!(rule.get("shadow"), None);
    }

    #[test]
    fn invert_and_regular_expressions_have_no_equivalent() {
        let yaml = policy(
            "global",
            &selected(
                "  - headers:\n    - { name: x-user-id, value: admin, invert: true }\n    \
                 - { type: RegularExpression, name: x-org, value: \"te.*\" }\n    \
                 - { type: Distinct, name: x-user, invert: true }\n    \
                 methods: [{ value: GET, invert: true }]\n    \
                 path: { value: /admin, invert: true }\n    \
                 sourceCIDR: { value: 10.0.0.0/8, invert: true }\n    \
                 queryParams: [{ name: page, value: \"1\" }]",
            ),
        );
        let at = "spec.rateLimit.global.rules[0].clientSelectors[0]";
        let no_negation =
            "no equivalent: sluice's match has no negation (every field given must fit the request)";
        assert_eq!(
            problems(&yaml),
            [
                format!("{at}.headers[0].invert: {no_negation}"),
                format!(
                    "{at}.headers[1].type: no equivalent: sluice matches a header's value \
                     exactly, not by regular expression"
                ),
                format!("{at}.headers[2].invert: Envoy Gateway refuses invert with type: Distinct"),
                format!("{at}.methods[0].invert: {no_negation}"),
                format!("{at}.path.invert: {no_negation}"),
                format!("{at}.sourceCIDR.invert: {no_negation}"),
                format!(
                    "{at}.queryParams[0]: no equivalent: sluice's match has no query parameter \
                     (a Distinct one is a key source: query:<name>)"
                ),
            ]
        );
    }

    #[test]
    fn a_distinct_query_parameter_is_a_bucket_per_value() {
        let rule = only_rule(&policy(
            "global",
            &selected(
                "  - queryParams: [{ type: Distinct, name: api_key }]\n    \
                 headers: [{ type: Distinct, name: x-tenant }]\n    \
                 sourceCIDR: { type: Distinct, value: 0.0.0.0/0 }",
            ),
        ));
        assert_eq!(
            shape(&rule),
            r#"algorithm = "fixed_window"; key = ["query:api_key", "header:x-tenant", "ip"]; match = { client = ["0.0.0.0/0"] }; missing = "skip"; rate = "3/h""#
        );
    }

    #[test]
    fn other_objects_and_fields_that_shape_no_limit_are_named_at_the_top() {
        let yaml = "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: r }
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: p, namespace: shop }
spec:
  targetRefs: [{ group: gateway.networking.k8s.io, kind: HTTPRoute, name: r }]
  mergeType: StrategicMerge
  retry: { numRetries: 3 }
  rateLimit:
    global:
      rules:
      - limit: { requests: 3, unit: Hour }
        shared: true
        xRateLimitHeaders: Off
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: q }
spec:
  timeout: { http: { requestTimeout: 1s } }
";
        let text = translate(yaml, "t").unwrap();
        let skipped: Vec<&str> = text
            .lines()
            .skip_while(|line| *line != "# Skipped:")
            .skip(1)
            .take_while(|line| line.starts_with("# - "))
            .collect();
        let policy = "BackendTrafficPolicy \"shop/p\"";
        assert_eq!(
            skipped,
            [
                "# - document 1: HTTPRoute \"r\": not an Envoy Gateway BackendTrafficPolicy"
                    .to_owned(),
                format!(
                    "# - document 2: spec.targetRefs ({policy}): the rules apply to every request \
                     sluice proxies, not only to the targeted routes (narrow a rule with \
                     match.host or match.path_prefix)"
                ),
                format!(
                    "# - document 2: spec.mergeType ({policy}): no merging: each policy's rules \
                     are imported as written, and sluice applies every rule whose match fits"
                ),
                format!("# - document 2: spec.retry ({policy}): not a rate limit"),
                format!(
                    "# - document 2: spec.rateLimit.global.rules[0].shared ({policy}): a sluice \
                     rule's buckets count every request it matches, whichever route it is for"
                ),
                format!(
                    "# - document 2: spec.rateLimit.global.rules[0].xRateLimitHeaders ({policy}): \
                     sluice's rate limit headers are set for every rule ([response] headers)"
                ),
                "# - document 3: spec.timeout (BackendTrafficPolicy \"q\"): not a rate limit"
                    .to_owned(),
                "# - document 3: BackendTrafficPolicy \"q\": no rateLimit".to_owned(),
            ]
        );
        assert!(
            text.contains(
                "\n# from document 2: spec.rateLimit.global.rules[0] (BackendTrafficPolicy \
                 \"shop/p\")\n[[rule]]\nname = \"eg-p-global-0\"\n"
            ),
            "{text}"
        );
        // Nothing to limit: a comment says so.
        let text = translate(
            "apiVersion: v1\nkind: Service\nmetadata: { name: s }\n",
            "t",
        )
        .unwrap();
        assert!(text.contains("# - Service \"s\": not an Envoy Gateway BackendTrafficPolicy\n"));
        assert!(
            text.ends_with("\n# No rate limit rule: nothing to add.\n"),
            "{text}"
        );
    }

    #[test]
    fn the_deprecated_type_says_which_block_envoy_gateway_reads() {
        let yaml = "apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: p }
spec:
  rateLimit:
    type: Global
    global:
      rules: [{ limit: { requests: 3, unit: Hour } }]
    local:
      rules: [{ limit: { requests: 9, unit: Hour } }]
";
        let text = translate(yaml, "t").unwrap();
        assert!(
            text.contains(
                "# - spec.rateLimit.local (BackendTrafficPolicy \"p\"): with type Global, Envoy \
                 Gateway reads only global\n"
            ),
            "{text}"
        );
        assert_eq!(rules(yaml).len(), 1);
        let yaml = yaml.replace("type: Global", "type: Local").replace(
            "    global:\n      rules: [{ limit: { requests: 3, unit: Hour } }]\n",
            "",
        );
        assert_eq!(only_rule(&yaml)["algorithm"].as_str(), Some("token_bucket"));
        let yaml = "apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: p }
spec:
  rateLimit:
    type: Local
    global:
      rules: [{ limit: { requests: 3, unit: Hour } }]
";
        assert_eq!(
            problems(yaml),
            [
                "spec.rateLimit.type: says local without a local block: Envoy Gateway refuses \
                 the policy"
            ]
        );
    }

    #[test]
    fn rule_names_follow_the_policy_and_stay_unique() {
        let one = policy(
            "global",
            "- limit: { requests: 1, unit: Hour }\n- limit: { requests: 2, unit: Hour }",
        );
        let yaml = format!(
            "{one}---\n{}",
            one.replace("name: p\n", "name: p\n  namespace: other\n")
        );
        let names: Vec<String> = rules(&yaml)
            .iter()
            .map(|rule| rule["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            names,
            [
                "eg-p-global-0",
                "eg-p-global-1",
                "eg-p-global-0-2",
                "eg-p-global-1-2"
            ]
        );
    }

    #[test]
    fn every_problem_is_named_at_once_and_nothing_is_printed() {
        let yaml = "apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {}
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: { name: p }
spec:
  rateLimit:
    burst: 3
    global:
      rules:
      - limit: { requests: -1, unit: Hour, fromMetadata: { namespace: n, key: k } }
        clientSelectors: [{}]
        colour: blue
      - clientSelectors: [{ headers: [{ name: x }] }]
      - limit: { requests: 5 }
---
apiVersion: gateway.envoyproxy.io/v1beta1
kind: BackendTrafficPolicy
metadata: { name: later }
";
        let at = "document 2: spec.rateLimit";
        assert_eq!(
            problems(yaml),
            [
                "document 1: metadata.name: is required".to_owned(),
                format!("{at}.burst: unknown field; a rateLimit has global, local and type"),
                format!("{at}.global.rules[0].limit.requests: must be a whole number from 0 to 4294967295"),
                format!(
                    "{at}.global.rules[0].limit.fromMetadata: no equivalent: the limit comes \
                     from Envoy's dynamic metadata, which sluice never sees"
                ),
                format!(
                    "{at}.global.rules[0].clientSelectors[0]: names no condition: Envoy Gateway \
                     refuses a selector without headers, methods, path, sourceCIDR or queryParams"
                ),
                format!(
                    "{at}.global.rules[0].colour: unknown field; a rate limit rule has \
                     clientSelectors, limit, cost, shadowMode, shared and xRateLimitHeaders"
                ),
                format!("{at}.global.rules[1].clientSelectors[0].headers[0].value: is required with type: Exact"),
                format!("{at}.global.rules[1].limit: is required"),
                format!(
                    "{at}.global.rules[2].limit.unit: is required; Envoy Gateway's units are \
                     Second, Minute, Hour, Day, Week, Month and Year"
                ),
                "document 3: apiVersion: unknown version; this import reads \
                 gateway.envoyproxy.io/v1alpha1"
                    .to_owned(),
            ]
        );
        let error = translate("a: [", "bad.yaml").unwrap_err();
        assert!(
            error.to_string().starts_with("bad.yaml: not valid YAML: "),
            "{error}"
        );
        assert_eq!(
            translate("- 1\n", "list.yaml").unwrap_err().to_string(),
            "list.yaml: must be a mapping: a Kubernetes object, or Traefik's dynamic configuration"
        );
    }

    #[test]
    fn a_list_of_objects_is_read_item_by_item() {
        let yaml = format!(
            "apiVersion: v1\nkind: List\nitems:\n{}",
            policy("global", "- limit: { requests: 3, unit: Hour }")
                .lines()
                .enumerate()
                .map(|(i, line)| if i == 0 {
                    format!("- {line}\n")
                } else {
                    format!("  {line}\n")
                })
                .collect::<String>()
        );
        let text = translate(&yaml, "t").unwrap();
        assert!(
            text.contains(
                "\n# from items[0].spec.rateLimit.global.rules[0] (BackendTrafficPolicy \"p\")\n"
            ),
            "{text}"
        );
    }
}
