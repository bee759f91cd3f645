//! Checks: what must be refused before any limiter work. Broken framing,
//! a bad Host, an oversized target or declared body, a path that cannot be
//! normalised: each is answered with its [`Refusal`] and never reaches
//! identify. `POST /admin/explain` runs the same checks.

use std::borrow::Cow;
use std::net::IpAddr;

use http::header;
use http::Request;

use super::client_request::ClientBody;
use super::fields;
use super::refusal::Refusal;
use super::{AnswerWritten, Context};
use crate::key::fold::fold;
use crate::key::path;
use crate::key::RequestFacts;
use crate::policy::Policy;

/// What [`check`] found in a request it lets through.
pub struct Checked<'r> {
    /// The normalised path (what the upstream receives).
    pub path: Cow<'r, str>,
    /// `path` folded as `server.paths_alike` says, when that changes it
    /// (a path already folded is not copied): [`Checked::folded_path`].
    pub folded: Option<String>,
    /// The host the client addressed ([`host_of`]), read once with Host's
    /// check.
    pub host: Option<&'r str>,
}

impl Checked<'_> {
    /// The path rules match and `path` keys are built on: the normalised
    /// path folded as `server.paths_alike` says.
    #[inline]
    pub fn folded_path(&self) -> &str {
        self.folded.as_deref().unwrap_or(&self.path)
    }
}

/// Checks, the request path's phase: [`check`], and a refusal answered
/// and recorded.
#[inline(always)]
pub fn phase<'r>(
    cx: &mut Context<'_, '_>,
    request: &'r Request<ClientBody>,
) -> Result<Checked<'r>, AnswerWritten> {
    check(request, cx.policy).map_err(|refusal| cx.refuse_unchecked(request, refusal))
}

/// The facts rules match and key on, read from `request` (what
/// [`check`] found in it: `checked`) sent by `peer`: the
/// client IP is resolved through the trusted proxies.
pub fn facts_of<'r, B>(
    request: &'r Request<B>,
    checked: &'r Checked<'r>,
    peer: IpAddr,
    policy: &Policy,
) -> RequestFacts<'r> {
    RequestFacts {
        method: request.method(),
        path: checked.folded_path(),
        normalized_path: &checked.path,
        query: request.uri().query(),
        host: checked.host,
        headers: request.headers(),
        client_ip: policy.client_ip.resolve(peer, request.headers()),
        claims: None,
        body: None,
        call: None,
    }
}

/// Refuses what must not reach any limiter: broken framing, a bad Host, an
/// oversized target or body, a path that cannot be normalised (nor folded:
/// `/..;/x` with "params" alike). Returns the normalised path, folded, and
/// the host. Shared with `POST /admin/explain`, which
/// reports the refusal's status and detail.
#[inline(always)]
pub fn check<'r, B>(request: &'r Request<B>, policy: &Policy) -> Result<Checked<'r>, Refusal> {
    if let Some(refusal) = bad_framing(request) {
        return Err(refusal);
    }
    let host_field = checked_host(request)?;
    if let Some(refusal) = oversized(request, policy) {
        return Err(refusal);
    }
    let path = path::normalize(request.uri().path()).map_err(Refusal::BadPath)?;
    let folded = match fold(&path, policy.paths_alike).map_err(Refusal::BadPath)? {
        Cow::Borrowed(_) => None,
        Cow::Owned(folded) => Some(folded),
    };
    let host = request
        .uri()
        .host()
        .or(host_field)
        .map(crate::key::host_name);
    Ok(Checked { path, folded, host })
}

/// A request target longer than `max_uri_bytes` (414), or a declared body
/// larger than `max_body_bytes` (413), answered before any limiter work.
#[inline]
fn oversized<B>(request: &Request<B>, policy: &Policy) -> Option<Refusal> {
    let uri = request.uri();
    let target = uri.path_and_query().map_or(0, |pq| pq.as_str().len())
        + uri.authority().map_or(0, |a| a.as_str().len());
    if target > policy.max_uri_bytes {
        return Some(Refusal::UriTooLong);
    }
    if policy.max_body_bytes > 0 {
        // hyper has already rejected malformed or conflicting lengths.
        let declared = fields::get(request.headers(), &http::header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if declared.is_some_and(|length| length > policy.max_body_bytes) {
            return Some(Refusal::BodyTooLarge);
        }
    }
    None
}

/// RFC 9112 §3.2: an HTTP/1.1 request must carry exactly one Host line with
/// a valid value, else 400 (hyper does not check). HTTP/1.0 may omit it, and
/// HTTP/2 carries `:authority`. With an absolute-form target the target's
/// authority is what sluice routes and keys by ([`host_of`]); Host must
/// still be there. The host it names, without its port, comes with it:
/// found while checking, it is not looked for again.
#[inline]
fn checked_host<B>(request: &Request<B>) -> Result<Option<&str>, Refusal> {
    let headers = request.headers();
    let host = fields::get(headers, &http::header::HOST);
    // A map in which no name repeats cannot hold two Host lines: the second
    // lookup is only needed when some name does.
    if headers.len() != headers.keys_len()
        && headers.get_all(http::header::HOST).iter().nth(1).is_some()
    {
        return Err(Refusal::BadHost(
            "the request carries more than one Host header",
        ));
    }
    let Some(value) = host else {
        return match request.version() {
            http::Version::HTTP_11 => Err(Refusal::BadHost(
                "an HTTP/1.1 request must carry a Host header",
            )),
            _ => Ok(None),
        };
    };
    let bytes = value.as_bytes();
    match host_end(bytes).map(|end| std::str::from_utf8(&bytes[..end])) {
        Some(Ok(name)) => Ok(Some(name)),
        _ => Err(Refusal::BadHost(
            "the Host header is not a valid host or host:port",
        )),
    }
}

/// `uri-host [ ":" port ]` (RFC 3986): an IP literal in brackets, or a
/// registered name or IPv4 address — but not the list separator `,` that
/// would make it several hosts — then digits after a colon. Empty is allowed
/// (for a target without an authority, RFC 9112 §3.2). Checked byte by byte
/// through a table: it runs on every request, and parsing an `Authority`
/// would copy. Where the host ends (its port after it), or `None` when the
/// value is not valid; a valid one is ASCII.
fn host_end(value: &[u8]) -> Option<usize> {
    let end = match value {
        [] => return Some(0),
        [b'[', rest @ ..] => {
            let end = rest.iter().position(|&b| b == b']')?;
            let literal = &rest[..end];
            if literal.is_empty()
                || !literal
                    .iter()
                    .all(|b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.'))
            {
                return None;
            }
            end + 2
        }
        _ => {
            // `:` is not a reg-name byte, so the name ends at the port, or at
            // the first byte that makes the value invalid.
            let end = value
                .iter()
                .position(|&b| !REG_NAME[usize::from(b)])
                .unwrap_or(value.len());
            if end == 0 {
                return None;
            }
            end
        }
    };
    match &value[end..] {
        [] => Some(end),
        [b':', digits @ ..] if digits.iter().all(u8::is_ascii_digit) => Some(end),
        _ => None,
    }
}

/// Which bytes a registered name may hold: unreserved / pct-encoded /
/// sub-delims of RFC 3986, without `,`.
static REG_NAME: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        let b = byte as u8;
        table[byte] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'%'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b';'
                    | b'='
            );
        byte += 1;
    }
    table
};

/// The host the client addressed, without port and trailing dot
/// ([`crate::key::host_name`]): the URI's authority (absolute-form, HTTP/2
/// `:authority`) or the Host header.
pub fn host_of<B>(request: &Request<B>) -> Option<&str> {
    addressed_host(request, request.headers().get(http::header::HOST))
}

/// [`host_of`], given the request's Host field.
fn addressed_host<'r, B>(
    request: &'r Request<B>,
    host_field: Option<&'r http::HeaderValue>,
) -> Option<&'r str> {
    let host = match request.uri().host() {
        Some(host) => host,
        None => strip_port(host_field?.to_str().ok()?),
    };
    Some(crate::key::host_name(host))
}

/// The host of a `Host` value: `[v6]` of `[v6]:port`, `name` of
/// `name:port`. By bytes: it runs on every request, and `str`'s pattern
/// search cost it several times as much (docs/benchmarks-history.md, "The
/// request lent, not moved").
fn strip_port(host: &str) -> &str {
    let bytes = host.as_bytes();
    let end = if bytes.first() == Some(&b'[') {
        bytes
            .iter()
            .position(|&b| b == b']')
            .map_or(bytes.len(), |close| close + 1)
    } else {
        bytes
            .iter()
            .rposition(|&b| b == b':')
            .unwrap_or(bytes.len())
    };
    // Both ends are at an ASCII byte or the end: a char boundary.
    &host[..end]
}

/// A request whose framing hyper accepted but a proxy must not guess at:
/// `Transfer-Encoding` other than exactly one `chunked` (`chunked, chunked`,
/// `gzip, chunked`, two TE lines). hyper has already answered 400 to the
/// rest (RFC 9112 §6.1, §6.3); see the module docs.
fn bad_framing<B>(request: &Request<B>) -> Option<Refusal> {
    let headers = request.headers();
    if !fields::has(headers, &header::TRANSFER_ENCODING) {
        return None;
    }
    (!fields::only_chunked(headers)).then_some(Refusal::BadFraming(
        "Transfer-Encoding must be exactly \"chunked\"",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_one_host_with_an_optional_port() {
        for good in [
            "example.com",
            "example.com:8080",
            "[::1]:80",
            "10.0.0.1",
            "a-b_c~d%20!$&'()*+;=",
            "a:",
            "",
        ] {
            let end = host_end(good.as_bytes());
            assert!(end.is_some(), "{good}");
            // Where the check finds the host is where `host_of` cuts it.
            assert_eq!(&good[..end.unwrap()], strip_port(good), "{good}");
        }
        for bad in [
            "a, b", "a,b", "a b", "user@a", "a/b", "a:port", "[::1", "a\tb", ":80", "a:1:2", "[]",
            "[::1]x", "[::1]:8x", "h\u{e9}",
        ] {
            assert!(host_end(bad.as_bytes()).is_none(), "{bad}");
        }
    }

    #[test]
    fn the_addressed_host_loses_its_port_and_trailing_dot_but_keeps_its_case() {
        let with_host = |target: &str, host: &str| {
            let request = Request::get(target).header("host", host).body(()).unwrap();
            host_of(&request).map(str::to_owned)
        };
        assert_eq!(
            with_host("/", "API.Example.com.:443").as_deref(),
            Some("API.Example.com")
        );
        assert_eq!(
            with_host("/", "api.example.com..").as_deref(),
            Some("api.example.com")
        );
        assert_eq!(with_host("/", "[::1]:80").as_deref(), Some("[::1]"));
        // The checks find the same host as they check the field.
        let policy = crate::policy::testing::compile("");
        for (target, host) in [
            ("/", "API.Example.com.:443"),
            ("/", "[::1]:80"),
            ("/", "10.0.0.1"),
            ("/", ""),
            ("http://API.Example.com.:8080/x", "ignored"),
        ] {
            let request = Request::get(target).header("host", host).body(()).unwrap();
            let checked = check(&request, &policy).ok().unwrap();
            assert_eq!(checked.host, host_of(&request), "{target} {host}");
        }
        // An absolute-form target's authority names the host.
        assert_eq!(
            with_host("http://API.Example.com.:8080/x", "ignored").as_deref(),
            Some("API.Example.com")
        );
    }

    #[test]
    fn ports_are_stripped_from_hosts() {
        assert_eq!(strip_port("example.com:8080"), "example.com");
        assert_eq!(strip_port("example.com"), "example.com");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
        assert_eq!(strip_port("[::1"), "[::1");
        assert_eq!(strip_port("a:b:8080"), "a:b");
        assert_eq!(strip_port(""), "");
    }
}
