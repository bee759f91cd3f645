//! A rule's `key`: the sources its bucket key is made of, as written
//! (`ip`, `header:x-api-key`, `jwt:org.id`, ...).

use http::HeaderName;
use toml::Spanned;

use super::raw::OneOrMany;
use super::validate::Validator;
use super::{ClaimPath, KeySource};
use crate::body_scan::Pointer;

impl Validator<'_> {
    pub(super) fn key(&mut self, index: usize, field: &Spanned<OneOrMany>) -> Vec<KeySource> {
        let items = field.get_ref().items(field.span());
        if items.is_empty() {
            self.error(
                field.span().start,
                &format!("rule[{index}].key"),
                "must name at least one source; use [\"global\"] for one bucket shared by everyone",
            );
            return vec![KeySource::Global];
        }
        let mut sources: Vec<KeySource> = Vec::with_capacity(items.len());
        for (i, (text, span)) in items.into_iter().enumerate() {
            let path = format!("rule[{index}].key[{i}]");
            let source = parse_key_source(text).and_then(|source| match source {
                _ if sources.contains(&source) => Err(format!(
                    "\"{text}\" is already in this key; list each source once"
                )),
                source => Ok(source),
            });
            sources.extend(self.ok(span.start, &path, source));
        }
        sources
    }
}

pub(super) fn parse_key_source(text: &str) -> Result<KeySource, String> {
    const ALLOWED: &str = "allowed: ip, path, method, host, global, header:<name>, \
                           query:<name>, jwt:<claim>, body:<JSON pointer>, graphql:operation, \
                           graphql:type, jsonrpc:method, mcp:tool, descriptor:<entry key>";
    match text {
        "ip" => return Ok(KeySource::Ip),
        "graphql:operation" => return Ok(KeySource::GraphqlOperation),
        "graphql:type" => return Ok(KeySource::GraphqlType),
        "jsonrpc:method" => return Ok(KeySource::JsonrpcMethod),
        "mcp:tool" => return Ok(KeySource::McpTool),
        "path" => return Ok(KeySource::Path),
        "method" => return Ok(KeySource::Method),
        "host" => return Ok(KeySource::Host),
        "global" => return Ok(KeySource::Global),
        _ => {}
    }
    if let Some(name) = text.strip_prefix("header:") {
        return HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
            .map(KeySource::Header)
            .map_err(|_| {
                format!("\"{name}\" is not a valid header name (for example header:x-api-key)")
            });
    }
    if let Some(name) = text.strip_prefix("query:") {
        if name.is_empty() {
            return Err("query: needs a parameter name, for example query:api_key".to_owned());
        }
        return Ok(KeySource::Query(name.to_owned()));
    }
    if let Some(claim) = text.strip_prefix("jwt:") {
        if claim.is_empty() {
            return Err(
                "jwt: needs a claim name, for example jwt:sub (or jwt:org.id for a \
                        nested claim)"
                    .to_owned(),
            );
        }
        if claim.split('.').any(str::is_empty) {
            return Err(format!(
                "\"{text}\" has an empty claim name between dots; a nested claim is written \
                 jwt:org.id"
            ));
        }
        return Ok(KeySource::Jwt(ClaimPath(
            claim.split('.').map(str::to_owned).collect(),
        )));
    }
    if let Some(pointer) = text.strip_prefix("body:") {
        return Pointer::parse(pointer)
            .map(KeySource::Body)
            .map_err(|message| format!("body: {message} (for example body:/tenant_id)"));
    }
    if let Some(what) = text.strip_prefix("graphql:") {
        return Err(format!(
            "\"graphql:{what}\" is not a GraphQL key; use graphql:operation (the operation's \
             name) or graphql:type (query, mutation or subscription)"
        ));
    }
    if text.starts_with("jsonrpc:") || text.starts_with("mcp:") {
        return Err(format!(
            "\"{text}\" is not a JSON-RPC key; use jsonrpc:method (each call's method) or \
             mcp:tool (the tool an MCP tools/call calls)"
        ));
    }
    if let Some(key) = text.strip_prefix("descriptor:") {
        if key.is_empty() {
            return Err(
                "descriptor: needs an entry key, for example descriptor:remote_address".to_owned(),
            );
        }
        return Ok(KeySource::Descriptor(key.to_owned()));
    }
    Err(format!("unknown key source \"{text}\"; {ALLOWED}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::*;

    #[test]
    fn body_and_graphql_keys_and_the_graphql_cost_are_read() {
        let config = valid(&rule_a(
            "rate = \"100/m\"\nkey = [\"body:/tenant/id\", \"graphql:operation\", \
             \"graphql:type\"]\ncost = \"graphql\"\n",
        ));
        let rule = &config.rules[0];
        assert_eq!(
            rule.key,
            vec![
                KeySource::Body(Pointer::parse("/tenant/id").unwrap()),
                KeySource::GraphqlOperation,
                KeySource::GraphqlType,
            ]
        );
        assert_eq!((rule.cost, rule.graphql_cost), (1, true));
        assert_eq!(config.server.max_key_body_bytes, 65_536);
        let config =
            valid("[server]\nupstream = \"http://127.0.0.1:3000\"\nmax_key_body_bytes = 4096\n");
        assert_eq!(config.server.max_key_body_bytes, 4096);
    }

    #[test]
    fn bad_body_and_graphql_keys_and_costs_are_reported_where_written() {
        let lines = errors(&rule_a(
            "rate = \"1/s\"\nkey = [\"body:tenant\", \"graphql:name\", \"body:/a~2\"]\n",
        ));
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(
            lines[0].starts_with("test.toml:6:8: rule[0].key[0]: body: JSON pointer \"tenant\" must start with \"/\""),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].starts_with(
                "test.toml:6:23: rule[0].key[1]: \"graphql:name\" is not a GraphQL key"
            ),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].starts_with("test.toml:6:39: rule[0].key[2]: body:"),
            "{}",
            lines[2]
        );
        assert!(
            only_error(&rule_a("rate = \"1/s\"\ncost = \"query\"\n")).starts_with(
                "test.toml:6:8: rule[0].cost: \"query\" is not a cost; write a whole number"
            )
        );
        assert!(
            only_error(&rule_a("algorithm = \"concurrency\"\ncost = \"graphql\"\n"))
                .contains("rule[0].cost: concurrency counts requests in flight")
        );
        assert!(only_error(
            "[server]\nupstream = \"http://127.0.0.1:3000\"\nmax_key_body_bytes = 0\n"
        )
        .starts_with("test.toml:3:22: server.max_key_body_bytes: 0 is out of range"));
        assert!(only_error(&format!(
            "{UPSTREAM}[[rule]]\nname = \"a\"\nrate = \"1/s\"\nmatch.domain = \"edge\"\n\
             key = [\"descriptor:user\"]\ncost = \"graphql\"\n"
        ))
        .contains("rule[0].cost: a rule with match.domain takes no cost"));
    }

    #[test]
    fn unreadable_and_persisted_queries_are_read_and_their_errors_placed() {
        let graphql = "rate = \"100/m\"\ncost = \"graphql\"\n";
        let rule = &valid(&rule_a(graphql)).rules[0];
        assert_eq!(rule.unreadable, crate::config::Unreadable::Refuse);
        let rule = &valid(&rule_a(&format!("{graphql}unreadable = 40\n"))).rules[0];
        assert_eq!(rule.unreadable, crate::config::Unreadable::Charge(40));
        let rule = &valid(&rule_a(&format!("{graphql}unreadable = \"refuse\"\n"))).rules[0];
        assert_eq!(rule.unreadable, crate::config::Unreadable::Refuse);
        for (extra, expected) in [
            (
                "rate = \"100/m\"\nunreadable = 5\n",
                "test.toml:6:14: rule[0].unreadable: unreadable says what a request whose \
                 GraphQL cost cannot be read is charged, so it needs cost = \"graphql\"",
            ),
            (
                &*format!("{graphql}unreadable = \"free\"\n"),
                "test.toml:7:14: rule[0].unreadable: \"free\" is not what an unreadable query \
                 gets",
            ),
            (
                &*format!("{graphql}unreadable = 0\n"),
                "test.toml:7:14: rule[0].unreadable: 0 is out of range",
            ),
            (
                &*format!("{graphql}unreadable = 101\n"),
                "test.toml:7:14: rule[0].unreadable: unreadable = 101 can never fit",
            ),
        ] {
            let error = only_error(&rule_a(extra));
            assert!(error.starts_with(expected), "{error}");
        }

        let config = valid(UPSTREAM);
        assert_eq!(config.server.max_persisted_queries, 10_000);
        assert!(config.server.persisted_queries.is_empty());
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("manifest.json");
        std::fs::write(
            &manifest,
            "{\"format\": \"apollo-persisted-query-manifest\", \"version\": 1,\n \"operations\": [}",
        )
        .unwrap();
        let error = only_error(&format!(
            "[server]\nupstream = \"http://127.0.0.1:3000\"\nmax_persisted_queries = 5\n\
             persisted_queries = \"{}\"\n",
            manifest.display()
        ));
        assert!(
            error.starts_with(&format!(
                "test.toml:4:21: server.persisted_queries: {}: line 2 column ",
                manifest.display()
            )),
            "{error}"
        );
        let missing = only_error(
            "[server]\nupstream = \"http://127.0.0.1:3000\"\npersisted_queries = \"nope.json\"\n",
        );
        assert!(
            missing.starts_with("test.toml:3:21: server.persisted_queries: cannot read nope.json"),
            "{missing}"
        );
    }

    #[test]
    fn jwt_claims_may_be_nested_but_not_empty() {
        set_env("SLUICE_TEST_NESTED_SECRET", &"s".repeat(32));
        let config = valid(&format!(
            "{UPSTREAM}[identity.jwt]\nsecret_env = \"SLUICE_TEST_NESTED_SECRET\"\n\
             [[rule]]\nname = \"a\"\nrate = \"1/s\"\nkey = [\"jwt:org.id\", \"jwt:sub\"]\n"
        ));
        assert_eq!(
            config.rules[0].key,
            vec![
                KeySource::Jwt(ClaimPath(vec!["org".to_owned(), "id".to_owned()])),
                KeySource::Jwt(ClaimPath(vec!["sub".to_owned()])),
            ]
        );
        let lines = errors(&format!(
            "{UPSTREAM}[identity.jwt]\nsecret_env = \"SLUICE_TEST_NESTED_SECRET\"\n\
             [[rule]]\nname = \"a\"\nrate = \"1/s\"\nkey = [\"jwt:\", \"jwt:a..b\", \"jwt:.a\"]\n"
        ));
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(
            lines[0].starts_with("test.toml:8:8: rule[0].key[0]: jwt: needs a claim name"),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].starts_with(
                "test.toml:8:16: rule[0].key[1]: \"jwt:a..b\" has an empty claim name"
            ),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].starts_with("test.toml:8:28: rule[0].key[2]: \"jwt:.a\" has an empty"),
            "{}",
            lines[2]
        );
    }
}
