//! A rule's `match`: paths, prefixes and globs written the way requests
//! look after normalisation, methods, hosts, header values and the
//! client's networks.

use std::str::FromStr;

use http::uri::Authority;
use http::{HeaderName, HeaderValue, Method};

use super::raw::{OneOrMany, RawConfig, RawMatch, Start};
use super::validate::Validator;
use super::{joined, MatchConfig, PathsAlike};
use crate::key::fold::fold_pattern;
use crate::key::path::normalize;

impl Validator<'_> {
    /// A `match` table, its fields named under `base` (`rule[0].match`).
    pub(super) fn matcher(&mut self, base: &str, raw: &RawMatch) -> MatchConfig {
        MatchConfig {
            path: self.list(raw.path.as_ref(), &format!("{base}.path"), |p| {
                check_path(p, false).map(|()| p.to_owned())
            }),
            path_prefix: self.list(
                raw.path_prefix.as_ref(),
                &format!("{base}.path_prefix"),
                |p| check_path(p, false).map(|()| p.to_owned()),
            ),
            path_glob: self.list(raw.path_glob.as_ref(), &format!("{base}.path_glob"), |p| {
                check_path(p, true).map(|()| p.to_owned())
            }),
            method: self.list(raw.method.as_ref(), &format!("{base}.method"), parse_method),
            host: self.list(raw.host.as_ref(), &format!("{base}.host"), parse_host),
            header: self.headers(base, raw),
            client: self.cidrs(raw.client.as_ref(), &format!("{base}.client")),
            domain: raw.domain.as_ref().map(|field| {
                if field.get_ref().is_empty() {
                    self.error(
                        field.span().start,
                        &format!("{base}.domain"),
                        "must not be empty: Envoy sends the domain of its rate limit \
                         configuration, such as \"edge\"",
                    );
                }
                field.get_ref().clone()
            }),
            descriptor: self.descriptor(base, raw),
        }
    }

    /// A warning for each path pattern of a rule's or a route's `match`
    /// that `alike` folds (upper case, a trailing slash, `;` parameters):
    /// it fits every path that folds as it does, which the operator may
    /// not expect (docs/configuration.md, "Paths an upstream treats alike").
    pub(super) fn folded_patterns(&mut self, raw: &RawConfig, alike: PathsAlike) {
        let rules = raw.rule.iter().map(|rule| (rule.matcher.as_ref(), "rule"));
        let routes = raw
            .route
            .iter()
            .map(|route| (route.matcher.as_ref(), "route"));
        let mut counts = [0, 0];
        for (matcher, table) in rules.chain(routes) {
            let count = &mut counts[usize::from(table == "route")];
            if let Some(matcher) = matcher {
                self.folded_match(&format!("{table}[{count}].match"), matcher, alike);
            }
            *count += 1;
        }
    }

    /// [`Validator::folded_patterns`] of one `match`, named `base`.
    fn folded_match(&mut self, base: &str, raw: &RawMatch, alike: PathsAlike) {
        let fields = [
            ("path", &raw.path, alike),
            (
                "path_prefix",
                &raw.path_prefix,
                alike.keeping_trailing_slash(),
            ),
            ("path_glob", &raw.path_glob, alike),
        ];
        let names = joined(alike_names(alike), ", ");
        for (field, value, folding) in fields {
            let Some(value) = value else { continue };
            let items = (value.get_ref()).items_at(value.span(), &format!("{base}.{field}"));
            for (written, span, path) in items {
                let Ok(normal) = normalize(written) else {
                    continue;
                };
                let folded = fold_pattern(written, folding);
                if folded == normal || check_path(written, field == "path_glob").is_err() {
                    continue;
                }
                let bare = match field {
                    "path_prefix" if alike.trailing_slash && folded.len() > 1 => {
                        folded.strip_suffix('/')
                    }
                    _ => None,
                };
                let also = bare.map_or(String::new(), |bare| format!(", and also fits \"{bare}\""));
                self.warn(
                    span.start,
                    &path,
                    format_args!(
                        "\"{written}\" is matched as \"{folded}\"{also}: request paths are folded \
                         alike (server.paths_alike = [{names}], what the upstream serves alike), so \
                         every spelling that folds to it fits; write \"{folded}\" to say so, or \
                         change server.paths_alike"
                    ),
                );
            }
        }
    }

    /// `match.header`: names lower-cased and checked, each with the values
    /// it may equal; sorted by name.
    fn headers(&mut self, base: &str, raw: &RawMatch) -> Vec<(HeaderName, Vec<HeaderValue>)> {
        let Some(table) = &raw.header else {
            return Vec::new();
        };
        if table.value.is_empty() {
            // Only an inline `header = {}` is empty, and it has a span.
            self.warn(
                table.start_or(0),
                &format!("{base}.header"),
                "an empty table restricts nothing; remove it",
            );
        }
        let mut headers: Vec<(HeaderName, Vec<HeaderValue>)> = Vec::new();
        for (written, values) in &table.value {
            let path = format!("{base}.header.{written}");
            let at = values.span().start;
            let name = parse_header_name(written).and_then(|name| match name {
                _ if headers.iter().any(|(seen, _)| *seen == name) => Err(format!(
                    "names header {name} a second time (header names ignore case); list every \
                     value it may equal in one entry: {name} = [\"a\", \"b\"]"
                )),
                _ if matches!(values.get_ref(), OneOrMany::Many(list) if list.is_empty()) => Err(
                    "lists no value, so no request would fit; write the values the header may \
                     equal, or remove the entry"
                        .to_owned(),
                ),
                name => Ok(name),
            });
            let Some(name) = self.ok(at, &path, name) else {
                continue;
            };
            let values = self.list(Some(values), &path, parse_header_value);
            headers.push((name, values));
        }
        headers.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        headers
    }

    /// `match.descriptor`: entry keys and the value each must have, sorted
    /// by key; only beside `match.domain`.
    fn descriptor(&mut self, base: &str, raw: &RawMatch) -> Vec<(String, String)> {
        let Some(field) = &raw.descriptor else {
            return Vec::new();
        };
        let path = format!("{base}.descriptor");
        if raw.domain.is_none() {
            self.error(
                field.span().start,
                &path,
                "only a rule for rate limit service calls has descriptors: add \
                 match.domain (the domain Envoy sends), or remove match.descriptor",
            );
        }
        if field.get_ref().is_empty() {
            self.error(
                field.span().start,
                &path,
                "names no entry; write the entries a descriptor must carry, such as \
                 descriptor = { generic_key = \"slow\" }",
            );
        }
        for key in field.get_ref().keys() {
            if key.is_empty() {
                self.error(field.span().start, &path, "an entry key must not be empty");
            }
        }
        // A BTreeMap: sorted by key already.
        field
            .get_ref()
            .iter()
            .map(|(key, value)| (key.clone(), value.get_ref().clone()))
            .collect()
    }
}

/// A path, prefix or glob in `match`: written the way requests look after
/// normalisation, since that is what it is compared with (folded alike:
/// [`Validator::folded_patterns`]).
fn check_path(path: &str, glob: bool) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!(
            "\"{path}\" must start with '/', for example \"/api/search\""
        ));
    }
    if path.contains('?') {
        return Err(format!(
            "\"{path}\": the query is not part of the path; remove it from '?'"
        ));
    }
    if path.contains('#') {
        return Err(format!(
            "\"{path}\": a fragment never reaches the server; remove it from '#'"
        ));
    }
    if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "\"{path}\" contains a space or control character; percent-encode it"
        ));
    }
    let segments: Vec<&str> = path[1..].split('/').collect();
    let last = segments.len() - 1;
    for (i, segment) in segments.iter().enumerate() {
        if segment.is_empty() && i != last {
            return Err(format!(
                "\"{path}\" contains \"//\", which requests have collapsed to \"/\" before matching"
            ));
        }
        if matches!(*segment, "." | "..") {
            return Err(format!(
                "\"{path}\" contains a \"{segment}\" segment, which requests have resolved before \
                 matching; write the resolved path"
            ));
        }
        let bare = segment.split(';').next().unwrap_or_default();
        if bare != *segment && matches!(bare, "." | "..") {
            return Err(format!(
                "\"{path}\" contains a \"{segment}\" segment, a \"{bare}\" with ';' parameters, \
                 which an upstream that removes parameters resolves; write the resolved path"
            ));
        }
        if glob && segment.contains('*') && !matches!(*segment, "*" | "**") {
            return Err(format!(
                "\"{path}\": '*' and '**' must be a whole segment (\"/api/*/report\", \"/static/**\")"
            ));
        }
    }
    let bytes = path.as_bytes();
    for (i, _) in path.match_indices('%') {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        let Some(value) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) else {
            return Err(format!(
                "\"{path}\" has a '%' not followed by two hex digits"
            ));
        };
        if value.is_ascii_alphanumeric() || matches!(value, b'-' | b'.' | b'_' | b'~') {
            return Err(format!(
                "\"{path}\": %{:02X} is '{}', which requests have decoded before matching; write '{}'",
                value, value as char, value as char
            ));
        }
    }
    Ok(())
}

/// The kinds of `alike` as the config writes them, quoted.
fn alike_names(alike: PathsAlike) -> impl Iterator<Item = String> {
    alike.names().into_iter().map(|name| format!("\"{name}\""))
}

fn parse_method(text: &str) -> Result<Method, String> {
    let upper = text.to_ascii_uppercase();
    if upper.is_empty() {
        return Err("a method must not be empty (for example \"GET\")".to_owned());
    }
    Method::from_bytes(upper.as_bytes())
        .map_err(|_| format!("\"{text}\" is not an HTTP method (for example \"GET\" or \"POST\")"))
}

/// A header name in `match.header`, compared case-insensitively.
fn parse_header_name(text: &str) -> Result<HeaderName, String> {
    if text.starts_with(':') {
        return Err(format!(
            "\"{text}\" is an HTTP/2 pseudo-header, not a header; match the host with \
             match.host, the path with match.path and the method with match.method"
        ));
    }
    HeaderName::from_bytes(text.to_ascii_lowercase().as_bytes()).map_err(|_| {
        format!(
            "\"{text}\" is not a header name: write letters, digits and '-', such as \
             \"x-plan\""
        )
    })
}

/// A value `match.header` compares a request's header with, byte for byte.
fn parse_header_value(text: &str) -> Result<HeaderValue, String> {
    if text.trim_matches([' ', '\t']) != text {
        return Err(format!(
            "\"{text}\" starts or ends with a space, which a request's header value never \
             does (the space around it is not part of it); remove the space"
        ));
    }
    HeaderValue::from_bytes(text.as_bytes()).map_err(|_| {
        format!(
            "\"{}\" contains a control character, which no header value may carry",
            text.escape_debug()
        )
    })
}

fn parse_host(text: &str) -> Result<String, String> {
    let help = "write a host name such as \"api.example.com\" (a port is ignored)";
    if text.is_empty() || text.contains('@') || text.contains('/') {
        return Err(format!("\"{text}\" is not a host; {help}"));
    }
    let authority =
        Authority::from_str(text).map_err(|_| format!("\"{text}\" is not a host; {help}"))?;
    // Matched as requests' hosts are: without the trailing dot.
    let host = crate::key::host_name(authority.host());
    if host.is_empty() {
        return Err(format!("\"{text}\" is not a host; {help}"));
    }
    Ok(host.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use crate::config::testing::*;

    #[test]
    fn match_paths_must_be_written_normalised() {
        for (path, message) in [
            ("/a//b", "\"//\""),
            ("/a/./b", "\".\" segment"),
            ("/a?x=1", "query"),
            ("/a#x", "fragment"),
            ("/a b", "space"),
            ("/%zz", "two hex digits"),
            ("/%62", "%62 is 'b'"),
            ("/a/..;/b", "a \"..\" with ';' parameters"),
            ("/a/.;v=1", "a \".\" with ';' parameters"),
        ] {
            let line = only_error(&format!(
                "{UPSTREAM}[[rule]]\nname = \"a\"\nrate = \"1/s\"\nmatch.path = \"{path}\"\n"
            ));
            assert!(
                line.starts_with("test.toml:6:14: rule[0].match.path: "),
                "{line}"
            );
            assert!(line.contains(message), "{path}: {line}");
        }
        let config = valid(&format!(
            "{UPSTREAM}[[rule]]\nname = \"a\"\nrate = \"1/s\"\nmatch.path = [\"/\", \"/a/\", \"/a%2Fb\"]\n"
        ));
        assert_eq!(config.rules[0].matcher.path, vec!["/", "/a/", "/a%2Fb"]);
    }

    #[test]
    fn paths_alike_lists_what_the_upstream_serves_alike() {
        use crate::config::PathsAlike;
        let alike = |line: &str| valid(&format!("{UPSTREAM}{line}\n")).server.paths_alike;
        assert_eq!(alike(""), PathsAlike::ALL);
        assert_eq!(alike("paths_alike = []"), PathsAlike::NONE);
        assert_eq!(alike("paths_alike = \"case\"").names(), ["case"]);
        assert_eq!(
            alike("paths_alike = [\"params\", \"trailing_slash\"]").names(),
            ["trailing_slash", "params"]
        );
        let line = only_error(&format!("{UPSTREAM}paths_alike = [\"case\", \"slash\"]\n"));
        assert_eq!(
            line,
            "test.toml:3:24: server.paths_alike[1]: \"slash\" is not allowed; use any of \
             \"case\", \"trailing_slash\", \"params\" (what the upstream serves alike), or [] \
             to match paths as written"
        );
    }

    #[test]
    fn check_warns_where_a_path_pattern_is_matched_folded() {
        let text = format!(
            "{UPSTREAM}[[rule]]\nname = \"a\"\nrate = \"1/s\"\n\
             match = {{ path = [\"/login\", \"/Login/\"], path_prefix = [\"/api/\", \"/API;v=1/\"] }}\n\
             [[rule]]\nname = \"b\"\nrate = \"1/s\"\nmatch.path_glob = \"/Static/*/\"\n\
             [[upstream]]\nname = \"p\"\nservers = [\"http://127.0.0.1:1\"]\n\
             [[route]]\nmatch = {{ path = \"/Pool\" }}\nupstream = \"p\"\n"
        );
        let warnings = valid(&text).warnings;
        assert_eq!(warnings.len(), 4, "{warnings:#?}");
        assert!(
            warnings[0].starts_with(
                "test.toml:6:29: rule[0].match.path[1]: \"/Login/\" is matched as \"/login\": \
                 request paths are folded alike (server.paths_alike = [\"case\", \
                 \"trailing_slash\", \"params\"]"
            ),
            "{warnings:#?}"
        );
        // A prefix keeps its slash, and fits the path without it.
        assert!(
            warnings[1].starts_with(
                "test.toml:6:65: rule[0].match.path_prefix[1]: \"/API;v=1/\" is matched as \
                 \"/api/\", and also fits \"/api\":"
            ),
            "{warnings:#?}"
        );
        assert!(
            warnings[2]
                .contains("rule[1].match.path_glob: \"/Static/*/\" is matched as \"/static/*\""),
            "{warnings:#?}"
        );
        assert!(
            warnings[3].contains("route[0].match.path: \"/Pool\" is matched as \"/pool\""),
            "{warnings:#?}"
        );
        // Matched as written: nothing to say.
        let as_written = text.replacen("[server]\n", "[server]\npaths_alike = []\n", 1);
        assert_eq!(valid(&as_written).warnings, Vec::<String>::new());
    }

    fn rule_with(matcher: &str) -> String {
        format!("{UPSTREAM}[[rule]]\nname = \"a\"\nrate = \"1/s\"\n{matcher}\n")
    }

    #[test]
    fn header_names_are_lower_cased_and_sorted_each_with_its_values() {
        let config = valid(&rule_with(
            "match.header = { \"X-Plan\" = [\"free\", \"trial\"], \"x-app\" = \"web\" }",
        ));
        let header: Vec<(&str, Vec<&[u8]>)> = config.rules[0]
            .matcher
            .header
            .iter()
            .map(|(name, values)| (name.as_str(), values.iter().map(|v| v.as_bytes()).collect()))
            .collect();
        assert_eq!(
            header,
            vec![
                ("x-app", vec![&b"web"[..]]),
                ("x-plan", vec![&b"free"[..], &b"trial"[..]])
            ]
        );
        // The dotted form and a value outside ASCII.
        let config = valid(&rule_with("match.header.x-region = \"zürich\""));
        assert_eq!(config.rules[0].matcher.header[0].0.as_str(), "x-region");
        assert_eq!(
            config.rules[0].matcher.header[0].1[0].as_bytes(),
            "zürich".as_bytes()
        );
    }

    #[test]
    fn a_header_entry_that_could_never_fit_is_an_error_at_its_line() {
        for (matcher, path, message) in [
            (
                "match.header = { \"x plan\" = \"free\" }",
                "rule[0].match.header.x plan",
                "is not a header name",
            ),
            (
                "match.header = { \":authority\" = \"a\" }",
                "rule[0].match.header.:authority",
                "match.host",
            ),
            (
                "match.header = { \"x-plan\" = [] }",
                "rule[0].match.header.x-plan",
                "lists no value",
            ),
            (
                "match.header = { \"x-plan\" = \" free\" }",
                "rule[0].match.header.x-plan",
                "starts or ends with a space",
            ),
            (
                "match.header = { \"x-plan\" = [\"free\", \"a\\u0007\"] }",
                "rule[0].match.header.x-plan[1]",
                "control character",
            ),
            (
                "match.header = { \"X-Plan\" = \"a\", \"x-plan\" = \"b\" }",
                "rule[0].match.header.x-plan",
                "a second time",
            ),
        ] {
            let line = only_error(&rule_with(matcher));
            assert!(line.starts_with("test.toml:6:"), "{matcher}: {line}");
            assert!(line.contains(&format!(" {path}: ")), "{matcher}: {line}");
            assert!(line.contains(message), "{matcher}: {line}");
        }
    }

    #[test]
    fn client_networks_are_cidrs_or_addresses() {
        let config = valid(&rule_with(
            "match.client = [\"10.0.0.0/8\", \"192.0.2.7\", \"2001:db8::/32\"]",
        ));
        let nets: Vec<String> = config.rules[0]
            .matcher
            .client
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(nets, ["10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32"]);
        let line = only_error(&rule_with("match.client = [\"10.0.0.0/8\", \"office\"]"));
        assert!(
            line.starts_with("test.toml:6:31: rule[0].match.client[1]: \"office\" is not a CIDR"),
            "{line}"
        );
    }

    #[test]
    fn a_rule_for_rate_limit_service_calls_matches_no_header_or_client() {
        for (matcher, field) in [
            (
                "match = { domain = \"edge\", header = { \"x-plan\" = \"free\" } }",
                "header",
            ),
            (
                "match = { domain = \"edge\", client = \"10.0.0.0/8\" }",
                "client",
            ),
        ] {
            let text = format!(
                "{UPSTREAM}[[rule]]\nname = \"a\"\nrate = \"1/s\"\nkey = \"descriptor:k\"\n{matcher}\n"
            );
            let line = only_error(&text);
            assert!(
                line.contains(&format!("rule[0].match.{field}: a rule with match.domain")),
                "{line}"
            );
        }
    }
}
