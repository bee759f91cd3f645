//! `[tracing]` and OpenTelemetry's standard variables, resolved into one
//! [`Tracing`]: the file wins over a variable, except that
//! `OTEL_SDK_DISABLED=true` turns tracing off whatever the file says
//! (docs/observability.md, "Settings and where they come from").
//!
//! The variables are read through a lookup function, so tests hand it a
//! map; [`super::Config::from_toml`] hands it the process environment.

use std::fmt;
use std::time::Duration;

use super::raw::RawConfig;
use super::validate::Validator;

/// Whose sampled flag is followed (`parent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParentRule {
    Always,
    /// Only a peer in `trusted_proxies`'s.
    Trusted,
    /// None; a trusted peer's parent is still the request's, its trace id
    /// deciding by `sample` (docs/observability.md, "Sampling").
    Never,
}

/// Which trace headers are read and written (`propagators`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Propagators {
    /// W3C `traceparent` / `tracestate`.
    pub tracecontext: bool,
    /// B3, written as the single `b3` header (read in either form).
    pub b3: bool,
    /// B3, written as the `X-B3-*` headers (read in either form).
    pub b3multi: bool,
}

impl Propagators {
    /// Whether any form of B3 is read.
    pub fn reads_b3(&self) -> bool {
        self.b3 || self.b3multi
    }
}

/// Where the exporter sends spans and how it batches them.
#[derive(Clone, PartialEq)]
pub struct TracingExport {
    /// The collector's traces URL (`…/v1/traces`), `http://`.
    pub endpoint: http::Uri,
    /// Sent with every export (`OTEL_EXPORTER_OTLP_HEADERS`): may hold a
    /// collector's API key, so never shown.
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    /// The resource's attributes: `service.name`, `service.version` and
    /// `OTEL_RESOURCE_ATTRIBUTES`' (the instance id is the exporter's).
    pub resource: Vec<(String, String)>,
    /// Spans waiting to be exported at most (more are dropped, counted).
    pub queue: usize,
    /// Spans per export at most.
    pub batch: usize,
    /// How long a span waits for its batch to fill at most.
    pub delay: Duration,
    /// How long one export may take.
    pub timeout: Duration,
}

impl fmt::Debug for TracingExport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("TracingExport")
            .field("endpoint", &self.endpoint)
            .field("headers", &format_args!("{names:?} (values hidden)"))
            .field("resource", &self.resource)
            .field("queue", &self.queue)
            .field("batch", &self.batch)
            .field("delay", &self.delay)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Tracing as the file and the variables set it.
#[derive(Debug, Clone)]
pub enum Tracing {
    /// Off, and why (shown by `check`).
    Off(&'static str),
    On(Box<TracingConfig>),
}

/// Tracing's effective settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingConfig {
    /// The share of requests without a followed parent that are traced.
    pub sample: f64,
    pub parent: ParentRule,
    pub propagators: Propagators,
    pub export: TracingExport,
    /// Each setting as `check` shows it, with where it came from.
    pub shown: Vec<Shown>,
}

/// One effective setting, shown: its name, its value (a header's value
/// masked) and where it came from (`[tracing]`, a variable, or the
/// default).
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    pub name: &'static str,
    pub value: String,
    pub from: String,
}

/// `[tracing]` as validated, before the variables are read.
#[derive(Debug, Clone, Default)]
pub(super) struct FileTracing {
    pub present: bool,
    /// The collector's base URL, without `/v1/traces`.
    pub otlp: Option<String>,
    pub sample: Option<f64>,
    pub parent: Option<ParentRule>,
    pub propagators: Option<Propagators>,
}

const FROM_FILE: &str = "[tracing]";
const DEFAULT: &str = "default";
/// OpenTelemetry's default collector, when only `[tracing]` is there.
const DEFAULT_ENDPOINT: &str = "http://localhost:4318";
const TRACES_PATH: &str = "/v1/traces";

/// Resolves tracing from the file's section and the variables `env`
/// finds; a variable sluice cannot use is a warning (pushed to
/// `warnings`) and left out, as OpenTelemetry's SDKs do.
pub(super) fn resolve(
    file: &FileTracing,
    env: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> Tracing {
    let mut read = Reading {
        env,
        warnings,
        shown: Vec::new(),
    };
    if read
        .var("OTEL_SDK_DISABLED")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    {
        return Tracing::Off("OTEL_SDK_DISABLED=true");
    }
    let traces_endpoint = read.var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    let endpoint = read.var("OTEL_EXPORTER_OTLP_ENDPOINT");
    if !file.present && traces_endpoint.is_none() && endpoint.is_none() {
        return Tracing::Off("no [tracing] and no OTEL_EXPORTER_OTLP_*ENDPOINT");
    }
    if read
        .var("OTEL_TRACES_EXPORTER")
        .is_some_and(|v| v.trim() == "none")
    {
        return Tracing::Off("OTEL_TRACES_EXPORTER=none");
    }
    let Some(endpoint) = read.endpoint(file, traces_endpoint, endpoint) else {
        return Tracing::Off("the collector's URL cannot be used");
    };
    let headers = read.headers();
    let (sample, parent) = read.sampling(file);
    // Propagators.
    let (propagators, from) = match (file.propagators, read.var("OTEL_PROPAGATORS")) {
        (Some(propagators), _) => (propagators, FROM_FILE),
        (None, Some(list)) => (env_propagators(&list, read.warnings), "OTEL_PROPAGATORS"),
        (None, None) => (env_propagators("tracecontext", read.warnings), DEFAULT),
    };
    read.show("propagators", propagator_names(propagators), from);
    let resource = read.resource();
    let export = read.export(endpoint, headers, resource);
    Tracing::On(Box::new(TracingConfig {
        sample,
        parent,
        propagators,
        export,
        shown: read.shown,
    }))
}

/// The variables as [`resolve`] reads them: what they set, shown with
/// where it came from, and what they set wrong, as warnings.
struct Reading<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    warnings: &'a mut Vec<String>,
    shown: Vec<Shown>,
}

impl Reading<'_> {
    /// A variable, unless unset or blank.
    fn var(&self, name: &str) -> Option<String> {
        (self.env)(name).filter(|value| !value.trim().is_empty())
    }

    fn show(&mut self, name: &'static str, value: String, from: &str) {
        self.shown.push(Shown {
            name,
            value,
            from: from.to_owned(),
        });
    }

    /// Where spans go (`None`: nowhere sluice can send them, warned).
    fn endpoint(
        &mut self,
        file: &FileTracing,
        traces_endpoint: Option<String>,
        endpoint: Option<String>,
    ) -> Option<http::Uri> {
        let (url, from) = match (&file.otlp, &traces_endpoint, &endpoint) {
            (Some(base), _, _) => (join_traces(base), FROM_FILE),
            (None, Some(full), _) => (full.trim().to_owned(), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            (None, None, Some(base)) => (join_traces(base), "OTEL_EXPORTER_OTLP_ENDPOINT"),
            (None, None, None) => (join_traces(DEFAULT_ENDPOINT), DEFAULT),
        };
        let endpoint = match collector_url(&url) {
            Ok(uri) => uri,
            Err(why) => {
                self.warnings.push(format!("{from}: {why}; tracing is off"));
                return None;
            }
        };
        self.show("endpoint", endpoint.to_string(), from);
        if let Some(protocol) = self.var("OTEL_EXPORTER_OTLP_PROTOCOL") {
            if protocol.trim() != "http/protobuf" {
                self.warnings.push(format!(
                    "OTEL_EXPORTER_OTLP_PROTOCOL: sluice exports with http/protobuf only, not {:?}",
                    protocol.trim()
                ));
            }
        }
        Some(endpoint)
    }

    /// Headers: the traces variable's win over the general one's, by name.
    fn headers(&mut self) -> Vec<(http::HeaderName, http::HeaderValue)> {
        let mut headers: Vec<(http::HeaderName, http::HeaderValue)> = Vec::new();
        for name in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ] {
            let Some(list) = self.var(name) else { continue };
            for (key, value) in pairs(&list) {
                let parsed = (
                    http::HeaderName::from_bytes(key.as_bytes()),
                    http::HeaderValue::from_str(&value),
                );
                let (Ok(key), Ok(mut value)) = parsed else {
                    self.warnings.push(format!(
                        "{name}: {key:?} is not a header that can be sent; left out"
                    ));
                    continue;
                };
                value.set_sensitive(true);
                headers.retain(|(existing, _)| *existing != key);
                self.show("header", format!("{key}: (hidden)"), name);
                headers.push((key, value));
            }
        }
        headers
    }

    /// Sampling: the file's keys, else the sampler variables.
    fn sampling(&mut self, file: &FileTracing) -> (f64, ParentRule) {
        let (env_sample, env_parent) = self.sampler();
        let (sample, from) = match (file.sample, env_sample) {
            (Some(sample), _) => (sample, FROM_FILE),
            (None, Some(sample)) => (sample, "OTEL_TRACES_SAMPLER"),
            (None, None) => (1.0, DEFAULT),
        };
        self.show("sample", sample.to_string(), from);
        let (parent, from) = match (file.parent, env_parent) {
            (Some(parent), _) => (parent, FROM_FILE),
            (None, Some(parent)) => (parent, "OTEL_TRACES_SAMPLER"),
            (None, None) => (ParentRule::Trusted, DEFAULT),
        };
        self.show("parent", parent_name(parent).to_owned(), from);
        (sample, parent)
    }

    /// The sample and parent rule the sampler variables set, if any.
    fn sampler(&mut self) -> (Option<f64>, Option<ParentRule>) {
        let sampler = self.var("OTEL_TRACES_SAMPLER").map(|s| s.trim().to_owned());
        let sampler_arg =
            self.var("OTEL_TRACES_SAMPLER_ARG")
                .and_then(|arg| match arg.trim().parse::<f64>() {
                    Ok(ratio) if (0.0..=1.0).contains(&ratio) => Some(ratio),
                    _ => {
                        self.warnings.push(format!(
                            "OTEL_TRACES_SAMPLER_ARG: {:?} is not a ratio from 0 to 1; 1 is used",
                            arg.trim()
                        ));
                        None
                    }
                });
        match sampler.as_deref() {
            None => (None, None),
            Some("always_on" | "parentbased_always_on") => (Some(1.0), None),
            Some("always_off" | "parentbased_always_off") => (Some(0.0), None),
            Some("traceidratio") => (Some(sampler_arg.unwrap_or(1.0)), Some(ParentRule::Never)),
            Some("parentbased_traceidratio") => (Some(sampler_arg.unwrap_or(1.0)), None),
            Some(other) => {
                self.warnings.push(format!(
                    "OTEL_TRACES_SAMPLER: {other:?} is not one sluice has (always_on, always_off, \
                     traceidratio, parentbased_*); the defaults are used"
                ));
                (None, None)
            }
        }
    }

    /// The resource: `service.name` and `service.version` first.
    fn resource(&mut self) -> Vec<(String, String)> {
        let mut resource: Vec<(String, String)> = Vec::new();
        if let Some(list) = self.var("OTEL_RESOURCE_ATTRIBUTES") {
            for (key, value) in pairs(&list) {
                resource.retain(|(existing, _)| *existing != key);
                resource.push((key, value));
            }
        }
        let named = self
            .var("OTEL_SERVICE_NAME")
            .map(|name| name.trim().to_owned());
        let in_resource = resource
            .iter()
            .find(|(key, _)| key == "service.name")
            .map(|(_, value)| value.clone());
        let (service, from) = match (named, in_resource) {
            (Some(name), _) => (name, "OTEL_SERVICE_NAME"),
            (None, Some(name)) => (name, "OTEL_RESOURCE_ATTRIBUTES"),
            (None, None) => ("sluice".to_owned(), DEFAULT),
        };
        self.show("service.name", service.clone(), from);
        resource.retain(|(key, _)| key != "service.name" && key != "service.version");
        let others = super::joined(
            resource.iter().map(|(key, value)| format!("{key}={value}")),
            ",",
        );
        if !others.is_empty() {
            self.show("resource", others, "OTEL_RESOURCE_ATTRIBUTES");
        }
        let version = (
            "service.version".to_owned(),
            env!("CARGO_PKG_VERSION").to_owned(),
        );
        resource.splice(0..0, [("service.name".to_owned(), service), version]);
        resource
    }

    /// The export, batched as OpenTelemetry's defaults but for a 10 s export
    /// timeout.
    fn export(
        &mut self,
        endpoint: http::Uri,
        headers: Vec<(http::HeaderName, http::HeaderValue)>,
        resource: Vec<(String, String)>,
    ) -> TracingExport {
        let count = |n: u64| n.to_string();
        let millis = |n: u64| format!("{n}ms");
        let queue = self.number("OTEL_BSP_MAX_QUEUE_SIZE", 2048, 1, &count);
        let batch = self.number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, 1, &count);
        let delay = self.number("OTEL_BSP_SCHEDULE_DELAY", 5000, 0, &millis);
        let timeout = self.number("OTEL_BSP_EXPORT_TIMEOUT", 10_000, 1, &millis);
        for (name, (_, from, value)) in [
            ("queue", &queue),
            ("batch", &batch),
            ("delay", &delay),
            ("timeout", &timeout),
        ] {
            self.show(name, value.clone(), from);
        }
        TracingExport {
            endpoint,
            headers,
            resource,
            queue: queue.0 as usize,
            // A batch never holds more than the queue can.
            batch: batch.0.min(queue.0) as usize,
            delay: Duration::from_millis(delay.0),
            timeout: Duration::from_millis(timeout.0),
        }
    }

    /// A whole number of at least `min` (else `default`, warned), where it
    /// came from, and as shown.
    fn number(
        &mut self,
        name: &'static str,
        default: u64,
        min: u64,
        shown_as: &dyn Fn(u64) -> String,
    ) -> (u64, &'static str, String) {
        let Some(value) = self.var(name) else {
            return (default, DEFAULT, shown_as(default));
        };
        match value.trim().parse::<u64>() {
            Ok(n) if n >= min => (n, name, shown_as(n)),
            _ => {
                self.warnings.push(format!(
                    "{name}: {:?} is not a whole number of at least {min}; {default} is used",
                    value.trim()
                ));
                (default, DEFAULT, shown_as(default))
            }
        }
    }
}

/// `base` + `/v1/traces`, as the OTLP specification joins an
/// `OTEL_EXPORTER_OTLP_ENDPOINT`.
fn join_traces(base: &str) -> String {
    format!("{}{TRACES_PATH}", base.trim().trim_end_matches('/'))
}

/// A collector's URL: `http://host[:port]/path` (https is not supported:
/// run the collector, or an agent of it, where sluice reaches it in
/// plain HTTP, as a sidecar or on the node).
pub(super) fn collector_url(url: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = url.parse().map_err(|_| format!("{url:?} is not a URL"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(format!(
                "{url:?}: sluice exports over plain HTTP only; reach the collector through a \
                 local agent or sidecar on http://"
            ))
        }
        _ => return Err(format!("{url:?} is not an http:// URL")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{url:?} names no host"));
    }
    Ok(uri)
}

/// `key=value,key2=value2`, values percent-decoded (the W3C Baggage form
/// the OTLP headers and resource variables use); pairs without `=` are
/// left out.
fn pairs(list: &str) -> Vec<(String, String)> {
    list.split(',')
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            let key = key.trim();
            (!key.is_empty()).then(|| (key.to_owned(), percent_decode(value.trim())))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((high * 16 + low) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn env_propagators(list: &str, warnings: &mut Vec<String>) -> Propagators {
    let mut propagators = Propagators::default();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match name {
            "tracecontext" => propagators.tracecontext = true,
            "b3" => propagators.b3 = true,
            "b3multi" => propagators.b3multi = true,
            // Baggage passes through untouched whatever is set.
            "baggage" | "none" => {}
            other => warnings.push(format!(
                "OTEL_PROPAGATORS: {other:?} is not one sluice has (tracecontext, b3, b3multi); \
                 left out"
            )),
        }
    }
    propagators
}

/// `parent`'s values, as written.
const PARENTS: [(&str, ParentRule); 3] = [
    ("always", ParentRule::Always),
    ("trusted", ParentRule::Trusted),
    ("never", ParentRule::Never),
];

pub(super) fn parent_name(parent: ParentRule) -> &'static str {
    PARENTS
        .iter()
        .find(|(_, rule)| *rule == parent)
        .map_or("", |(name, _)| name)
}

fn propagator_names(propagators: Propagators) -> String {
    let names: Vec<&str> = [
        (propagators.tracecontext, "tracecontext"),
        (propagators.b3, "b3"),
        (propagators.b3multi, "b3multi"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(",")
    }
}

impl Validator<'_> {
    /// Tracing as `[tracing]` and the process's variables set it; a
    /// variable sluice cannot use is a warning, after the file's.
    pub(super) fn tracing(&mut self, raw: &RawConfig) -> Tracing {
        let file = self.tracing_file(raw);
        let env = |name: &str| std::env::var(name).ok();
        let mut warnings = Vec::new();
        let tracing = resolve(&file, &env, &mut warnings);
        (self.warnings).extend(warnings.into_iter().map(|warning| (usize::MAX, 0, warning)));
        tracing
    }

    /// `[tracing]` as written, each value checked where it is.
    fn tracing_file(&mut self, raw: &RawConfig) -> FileTracing {
        let Some(section) = &raw.tracing else {
            return FileTracing::default();
        };
        let otlp = section.otlp.as_ref().and_then(|otlp| {
            let base = collector_url(&join_traces(otlp.get_ref())).map(|_| otlp.get_ref().clone());
            self.ok(otlp.span().start, "tracing.otlp", base)
        });
        let sample = section.sample.as_ref().and_then(|sample| {
            let ratio = Some(*sample.get_ref()).filter(|ratio| (0.0..=1.0).contains(ratio));
            let why = || {
                format!(
                    "{} is not a share from 0 to 1 (0.01 traces 1 request in 100)",
                    sample.get_ref()
                )
            };
            self.ok(sample.span().start, "tracing.sample", ratio.ok_or_else(why))
        });
        let parent = (section.parent.as_ref()).map(|parent| {
            self.choice(
                Some(parent),
                "tracing.parent",
                &PARENTS,
                ParentRule::Trusted,
            )
        });
        let propagators = section.propagators.as_ref().map(|field| {
            let mut propagators = Propagators::default();
            for (name, span) in field.get_ref().items(field.span()) {
                match name {
                    "tracecontext" => propagators.tracecontext = true,
                    "b3" => propagators.b3 = true,
                    "b3multi" => propagators.b3multi = true,
                    other => self.error(
                        span.start,
                        "tracing.propagators",
                        format!("\"{other}\" is not allowed; use \"tracecontext\", \"b3\" or \"b3multi\""),
                    ),
                }
            }
            propagators
        });
        FileTracing {
            present: true,
            otlp,
            sample,
            parent,
            propagators,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(file: &FileTracing, vars: &[(&str, &str)]) -> (Tracing, Vec<String>) {
        let env = |name: &str| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        };
        let mut warnings = Vec::new();
        (resolve(file, &env, &mut warnings), warnings)
    }

    fn on(tracing: Tracing) -> TracingConfig {
        match tracing {
            Tracing::On(on) => *on,
            Tracing::Off(why) => panic!("off: {why}"),
        }
    }

    #[test]
    fn off_unless_the_file_or_an_endpoint_variable_asks() {
        let nothing = FileTracing::default();
        assert!(matches!(resolved(&nothing, &[]).0, Tracing::Off(_)));
        let sampler_only = [("OTEL_TRACES_SAMPLER", "always_on")];
        assert!(matches!(
            resolved(&nothing, &sampler_only).0,
            Tracing::Off(_)
        ));
        let endpoint = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")];
        let config = on(resolved(&nothing, &endpoint).0);
        assert_eq!(config.export.endpoint, "http://c:4318/v1/traces");
        let file = FileTracing {
            present: true,
            ..FileTracing::default()
        };
        let config = on(resolved(&file, &[]).0);
        assert_eq!(config.export.endpoint, "http://localhost:4318/v1/traces");
        assert_eq!((config.sample, config.parent), (1.0, ParentRule::Trusted));
        assert!(config.propagators.tracecontext && !config.propagators.reads_b3());
        let disabled = [("OTEL_SDK_DISABLED", "TRUE"), endpoint[0]];
        assert!(matches!(resolved(&file, &disabled).0, Tracing::Off(_)));
        let none = [("OTEL_TRACES_EXPORTER", "none")];
        assert!(matches!(resolved(&file, &none).0, Tracing::Off(_)));
    }

    #[test]
    fn the_file_wins_over_each_variable() {
        let file = FileTracing {
            present: true,
            otlp: Some("http://file:4318/".to_owned()),
            sample: Some(0.5),
            parent: Some(ParentRule::Always),
            propagators: Some(Propagators {
                b3: true,
                ..Propagators::default()
            }),
        };
        let vars = [
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://env:4318/v1/traces",
            ),
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.1"),
            ("OTEL_PROPAGATORS", "b3multi"),
        ];
        let config = on(resolved(&file, &vars).0);
        assert_eq!(config.export.endpoint, "http://file:4318/v1/traces");
        assert_eq!((config.sample, config.parent), (0.5, ParentRule::Always));
        assert!(config.propagators.b3 && !config.propagators.b3multi);
        // Without the file's keys, the variables decide.
        let bare = FileTracing {
            present: true,
            ..FileTracing::default()
        };
        let config = on(resolved(&bare, &vars).0);
        assert_eq!(config.export.endpoint, "http://env:4318/v1/traces");
        assert_eq!((config.sample, config.parent), (0.1, ParentRule::Never));
        assert!(config.propagators.b3multi && !config.propagators.tracecontext);
    }

    #[test]
    fn headers_and_resource_are_read_decoded_and_header_values_never_shown() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s%3Dcret,x-a=1"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-a=2"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "team=edge%20ops,service.name=from-resource",
            ),
        ];
        let config = on(resolved(&FileTracing::default(), &vars).0);
        let headers: Vec<(&str, &[u8])> = config
            .export
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_bytes()))
            .collect();
        assert_eq!(headers, [("api-key", &b"s=cret"[..]), ("x-a", &b"2"[..])]);
        assert_eq!(
            config.export.resource[..3],
            [
                ("service.name".to_owned(), "from-resource".to_owned()),
                (
                    "service.version".to_owned(),
                    env!("CARGO_PKG_VERSION").to_owned()
                ),
                ("team".to_owned(), "edge ops".to_owned()),
            ]
        );
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("s=cret") && !shown.contains("s%3Dcret"),
            "{shown}"
        );
    }

    #[test]
    fn a_variable_that_cannot_be_used_is_a_warning_and_left_out() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_TRACES_SAMPLER", "jaeger_remote"),
            ("OTEL_PROPAGATORS", "xray,b3"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ];
        let (tracing, warnings) = resolved(&FileTracing::default(), &vars);
        let config = on(tracing);
        assert_eq!(config.sample, 1.0);
        assert!(config.propagators.b3 && !config.propagators.tracecontext);
        assert_eq!(config.export.queue, 2048);
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        let https = [("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318")];
        let (tracing, warnings) = resolved(&FileTracing::default(), &https);
        assert!(matches!(tracing, Tracing::Off(_)));
        assert!(warnings[0].contains("plain HTTP"), "{warnings:?}");
    }

    #[test]
    fn the_files_mistakes_are_errors_where_they_are_written() {
        let text = "[tracing]\notlp = \"https://collector:4318\"\nsample = 2\nparent = \"sometimes\"\npropagators = [\"tracecontext\", \"jaeger\"]\n";
        let errors = super::super::Config::from_toml(text, "t.toml")
            .unwrap_err()
            .to_string();
        for expected in [
            "t.toml:2:8: tracing.otlp: \"https://collector:4318/v1/traces\": sluice exports over plain HTTP only",
            "t.toml:3:10: tracing.sample: 2 is not a share from 0 to 1",
            "t.toml:4:10: tracing.parent: \"sometimes\" is not allowed",
            "t.toml:5:32: tracing.propagators: \"jaeger\" is not allowed",
        ] {
            assert!(errors.contains(expected), "{expected}\nin:\n{errors}");
        }
    }
}
