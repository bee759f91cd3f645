//! A rule's `match`: paths, prefixes and globs written the way requests
//! look after normalisation, methods and hosts.

use std::str::FromStr;

use http::uri::Authority;
use http::Method;

use super::raw::RawMatch;
use super::validate::Validator;
use super::MatchConfig;

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
/// normalisation, since that is what it is compared with.
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

fn parse_method(text: &str) -> Result<Method, String> {
    let upper = text.to_ascii_uppercase();
    if upper.is_empty() {
        return Err("a method must not be empty (for example \"GET\")".to_owned());
    }
    Method::from_bytes(upper.as_bytes())
        .map_err(|_| format!("\"{text}\" is not an HTTP method (for example \"GET\" or \"POST\")"))
}

fn parse_host(text: &str) -> Result<String, String> {
    let help = "write a host name such as \"api.example.com\" (a port is ignored)";
    if text.is_empty() || text.contains('@') || text.contains('/') {
        return Err(format!("\"{text}\" is not a host; {help}"));
    }
    let authority =
        Authority::from_str(text).map_err(|_| format!("\"{text}\" is not a host; {help}"))?;
    let host = authority.host();
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
}
