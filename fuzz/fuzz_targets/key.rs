//! Arbitrary requests and `key` lists: `KeyHasher::derive` never panics, is
//! deterministic, and keys equal what docs/configuration.md's "Keys" says is one caller: hosts
//! compared case-insensitively, query values percent-decoded (`+` as space),
//! a claim `42` the same as `"42"`, an IPv4-mapped address as its IPv4, an
//! IPv6 client by its `/ipv6_prefix` network, and request parts the key does
//! not name play no part.
#![no_main]

use std::net::{IpAddr, Ipv6Addr};

use arbitrary::{Arbitrary, Unstructured};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use sluice::config::{ClaimPath, KeySource};
use sluice::key::client_ip::canonical;
use sluice::key::jwt::Claims;
use sluice::key::{KeyHasher, MissingSource, RequestFacts};
use sluice_fuzz::json_object;

#[derive(Debug, Arbitrary)]
enum Source {
    Ip,
    Path,
    Method,
    Host,
    Global,
    /// The name of the request's n-th header, or any name.
    Header(Pick),
    /// The name of the query's n-th pair, or any name.
    Query(Pick),
    /// A top-level claim of the token (then any nested path), or any path.
    Jwt(Pick, Vec<String>),
}

#[derive(Debug, Arbitrary)]
enum Pick {
    Existing(u8),
    Named(String),
}

#[derive(Debug, Arbitrary)]
struct Input {
    sources: Vec<Source>,
    allow_missing: bool,
    ipv6_prefix: u8,
    method: Vec<u8>,
    path: String,
    query: Option<String>,
    host: Option<String>,
    client_ip: IpAddr,
    headers: Vec<(Vec<u8>, Vec<u8>)>,
    claims: Option<Json>,
}

/// A claims object; see [`json_object`].
#[derive(Debug)]
struct Json(Value);

impl<'a> Arbitrary<'a> for Json {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Json> {
        Ok(Json(Value::Object(json_object(u, 3)?)))
    }
}

fuzz_target!(|input: Input| {
    let method = Method::from_bytes(&input.method).unwrap_or(Method::GET);
    let mut headers = HeaderMap::new();
    for (name, value) in &input.headers {
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        {
            headers.append(name, value);
        }
    }
    let claims = input.claims.as_ref().map(|json| match &json.0 {
        Value::Object(map) => Claims(map.clone()),
        _ => unreachable!("Json is always an object"),
    });
    let sources: Vec<KeySource> = input
        .sources
        .iter()
        .take(8)
        .filter_map(|s| key_source(s, &headers, input.query.as_deref(), claims.as_ref()))
        .collect();
    let facts = RequestFacts {
        method: &method,
        path: &input.path,
        normalized_path: &input.path,
        query: input.query.as_deref(),
        host: input.host.as_deref(),
        headers: &headers,
        client_ip: input.client_ip,
        claims: claims.as_ref(),
        body: None,
        call: None,
    };
    let hasher = KeyHasher::new(input.ipv6_prefix);
    let derive = |facts: &RequestFacts<'_>| hasher.derive(&sources, facts, input.allow_missing);

    let key = derive(&facts);
    assert_eq!(key, derive(&facts), "not deterministic");
    assert_eq!(
        key,
        hasher.clone().derive(&sources, &facts, input.allow_missing)
    );
    if let Err(MissingSource(index)) = key {
        assert!(
            !input.allow_missing,
            "missing source {index} with allow_missing"
        );
        assert!(
            index < sources.len(),
            "missing source {index} of {}",
            sources.len()
        );
    }

    // Hosts are case-insensitive.
    let upper_host = input.host.as_deref().map(str::to_ascii_uppercase);
    let same = RequestFacts {
        host: upper_host.as_deref(),
        ..facts_copy(&facts)
    };
    assert_eq!(key, derive(&same), "host case changed the key");

    // Query values are keyed percent-decoded: spelling every byte of every
    // value as %XX changes nothing.
    let reencoded = input.query.as_deref().map(reencode_query);
    let same = RequestFacts {
        query: reencoded.as_deref(),
        ..facts_copy(&facts)
    };
    assert_eq!(
        key,
        derive(&same),
        "query {:?} vs {reencoded:?}",
        input.query
    );

    // A scalar claim keys like its JSON text as a string.
    let stringified = claims.as_ref().map(|c| Claims(stringify_scalars(&c.0)));
    let same = RequestFacts {
        claims: stringified.as_ref(),
        ..facts_copy(&facts)
    };
    assert_eq!(key, derive(&same), "claims {claims:?} vs {stringified:?}");

    // IPv4-mapped is IPv4; IPv6 is keyed by its network.
    let ip = canonical(input.client_ip);
    let network = match ip {
        IpAddr::V6(v6) => {
            let prefix = u32::from(input.ipv6_prefix.min(128));
            let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
        v4 => v4,
    };
    for ip in [ip, network] {
        let same = RequestFacts {
            client_ip: ip,
            ..facts_copy(&facts)
        };
        assert_eq!(key, derive(&same), "{} keyed unlike {ip}", input.client_ip);
    }

    // Parts no source names do not matter.
    let uses = |f: fn(&KeySource) -> bool| sources.iter().any(f);
    let empty_headers = HeaderMap::new();
    let get = Method::GET;
    let blank = RequestFacts {
        method: if uses(|s| matches!(s, KeySource::Method)) {
            facts.method
        } else {
            &get
        },
        path: if uses(|s| matches!(s, KeySource::Path)) {
            facts.path
        } else {
            "/"
        },
        // Logs read the unfolded path; no key source does.
        normalized_path: "/",
        query: if uses(|s| matches!(s, KeySource::Query(_))) {
            facts.query
        } else {
            None
        },
        host: if uses(|s| matches!(s, KeySource::Host)) {
            facts.host
        } else {
            None
        },
        headers: if uses(|s| matches!(s, KeySource::Header(_))) {
            facts.headers
        } else {
            &empty_headers
        },
        client_ip: if uses(|s| matches!(s, KeySource::Ip)) {
            facts.client_ip
        } else {
            IpAddr::from([0, 0, 0, 0])
        },
        claims: if uses(|s| matches!(s, KeySource::Jwt(_))) {
            facts.claims
        } else {
            None
        },
        body: None,
        call: None,
    };
    assert_eq!(
        key,
        derive(&blank),
        "an unnamed request part changed the key"
    );
});

fn facts_copy<'a>(facts: &RequestFacts<'a>) -> RequestFacts<'a> {
    RequestFacts { ..*facts }
}

fn key_source(
    source: &Source,
    headers: &HeaderMap,
    query: Option<&str>,
    claims: Option<&Claims>,
) -> Option<KeySource> {
    Some(match source {
        Source::Ip => KeySource::Ip,
        Source::Path => KeySource::Path,
        Source::Method => KeySource::Method,
        Source::Host => KeySource::Host,
        Source::Global => KeySource::Global,
        Source::Header(Pick::Existing(n)) => {
            let names: Vec<&HeaderName> = headers.keys().collect();
            KeySource::Header((*names.get(usize::from(*n) % names.len().max(1))?).clone())
        }
        Source::Header(Pick::Named(name)) => {
            KeySource::Header(HeaderName::from_bytes(name.as_bytes()).ok()?)
        }
        Source::Query(Pick::Existing(n)) => {
            let names: Vec<&str> = query?
                .split('&')
                .map(|p| p.split_once('=').map_or(p, |(k, _)| k))
                .collect();
            KeySource::Query(names[usize::from(*n) % names.len()].to_owned())
        }
        Source::Query(Pick::Named(name)) => KeySource::Query(name.clone()),
        Source::Jwt(first, rest) => {
            let first = match first {
                Pick::Existing(n) => {
                    let map = &claims?.0;
                    map.keys().nth(usize::from(*n) % map.len().max(1))?.clone()
                }
                Pick::Named(name) => name.clone(),
            };
            // Config guarantees a claim path never has an empty segment.
            let path: Vec<String> = std::iter::once(first)
                .chain(rest.iter().take(3).cloned())
                .collect();
            if path.iter().any(String::is_empty) {
                return None;
            }
            KeySource::Jwt(ClaimPath(path))
        }
    })
}

fn reencode_query(query: &str) -> String {
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) => {
                let encoded: String = decode(value.as_bytes())
                    .iter()
                    .map(|b| format!("%{b:02X}"))
                    .collect();
                format!("{name}={encoded}")
            }
            None => pair.to_owned(),
        })
        .collect();
    pairs.join("&")
}

/// Query decoding as docs/configuration.md's "Keys" describes it: `+` is a space, `%XX` a byte, an
/// invalid escape stays as written.
fn decode(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < raw.len()
                && raw[i + 1].is_ascii_hexdigit()
                && raw[i + 2].is_ascii_hexdigit() =>
            {
                let hex = std::str::from_utf8(&raw[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 2;
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    out
}

fn stringify_scalars(map: &Map<String, Value>) -> Map<String, Value> {
    map.iter()
        .map(|(k, v)| {
            let v = match v {
                Value::Number(_) | Value::Bool(_) => Value::String(v.to_string()),
                Value::Object(inner) => Value::Object(stringify_scalars(inner)),
                other => other.clone(),
            };
            (k.clone(), v)
        })
        .collect()
}
