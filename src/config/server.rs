//! The process-wide tables: `[server]`, `[admin]`, `[store]`, `[response]`,
//! and the address lists of `[access]` and `server.trusted_proxies`.

use std::net::IpAddr;
use std::time::Duration;

use http::uri::Scheme;
use http::{StatusCode, Uri};
use ipnet::IpNet;
use toml::Spanned;

use super::keys::parse_key_source;
use super::raw::{OneOrMany, RawConfig, RawServer, RawTls};
use super::validate::{non_empty, Validator};
use super::{
    AccessLogTarget, AdminConfig, CertPair, ForwardedHeader, HeaderStyle, KeySource, PathsAlike,
    QuicRetry, ResponseConfig, ServerConfig, TlsListenerConfig,
};
use crate::key::graphql::persisted::Manifest;

impl Validator<'_> {
    pub(super) fn server(&mut self, raw: Option<&RawServer>) -> ServerConfig {
        let empty = RawServer::default();
        let raw = raw.unwrap_or(&empty);
        let secs = Duration::from_secs;
        let trusted_proxies = self.cidrs(raw.trusted_proxies.as_ref(), "server.trusted_proxies");
        if let Some(field) = &raw.trusted_proxies {
            for net in &trusted_proxies {
                if net.prefix_len() == 0 {
                    self.warn(
                        field.span().start,
                        "server.trusted_proxies",
                        format_args!(
                            "{net} trusts every peer, so any client can choose its own IP \
                             with a forwarding header"
                        ),
                    );
                }
            }
        }
        let proxy_protocol = self.proxy_protocol(raw, &trusted_proxies);
        let upstream_ca = non_empty(&raw.upstream_ca).map(|ca| self.file_path(ca.get_ref()));
        // Each reader takes `raw.<key>` and names it `server.<key>`.
        macro_rules! read {
            ($how:ident, $key:ident, $($arg:expr),+) => {
                self.$how(raw.$key.as_ref(), concat!("server.", stringify!($key)), $($arg),+)
            };
        }
        let at_least_1 = 1..=u32::MAX as u64;
        ServerConfig {
            listen: read!(socket_addr, listen, "0.0.0.0:8080"),
            workers: read!(int, workers, 0, 0..=1024) as usize,
            trusted_proxies,
            connect_timeout: read!(timeout, connect_timeout, secs(2)),
            upstream_timeout: read!(timeout, upstream_timeout, secs(60)),
            header_read_timeout: read!(timeout, header_read_timeout, secs(10)),
            max_connections: read!(int, max_connections, 10_000, at_least_1.clone()) as usize,
            shutdown_grace: read!(duration, shutdown_grace, secs(30)),
            shutdown_delay: read!(duration, shutdown_delay, Duration::ZERO),
            normalize_path: raw.normalize_path.as_ref().is_none_or(|v| *v.get_ref()),
            paths_alike: self.paths_alike(raw.paths_alike.as_ref()),
            max_header_bytes: read!(int, max_header_bytes, 32_768, at_least_1.clone()) as usize,
            max_headers: read!(int, max_headers, 100, at_least_1.clone()) as usize,
            max_uri_bytes: read!(int, max_uri_bytes, 8_192, at_least_1) as usize,
            max_body_bytes: read!(int, max_body_bytes, 0, 0..=i64::MAX as u64),
            // At most 64 MiB: it is read into memory for each request a
            // body-keyed rule matches.
            max_key_body_bytes: read!(int, max_key_body_bytes, 65_536, 1..=64 << 20) as usize,
            body_timeout: read!(timeout, body_timeout, secs(60)),
            idle_timeout: read!(timeout, idle_timeout, secs(60)),
            send_timeout: read!(timeout, send_timeout, secs(60)),
            tunnel_idle_timeout: read!(timeout, tunnel_idle_timeout, secs(300)),
            max_requests_per_connection: read!(
                int,
                max_requests_per_connection,
                10_000,
                1..=u32::MAX as u64
            ) as u32,
            max_message_bytes: read!(int, max_message_bytes, 1 << 20, 1..=i64::MAX as u64),
            max_persisted_queries: read!(int, max_persisted_queries, 10_000, 0..=u32::MAX as u64)
                as usize,
            persisted_queries: self.persisted_queries(raw.persisted_queries.as_ref()),
            forwarded_header: read!(
                choice,
                forwarded_header,
                &[
                    ("x-forwarded-for", ForwardedHeader::XForwardedFor),
                    ("forwarded", ForwardedHeader::Forwarded),
                ],
                ForwardedHeader::XForwardedFor
            ),
            ipv6_prefix: read!(int, ipv6_prefix, 64, 1..=128) as u8,
            proxy_protocol,
            upstream_ca,
            access_log: self.access_log(raw.access_log.as_ref()),
            access_log_keys: self.access_log_keys(raw.access_log_keys.as_ref()),
            tls: raw.tls.as_ref().map(|tls| self.tls(tls)),
        }
    }

    /// `server.paths_alike`: the kinds of paths the upstream serves alike;
    /// every kind without the key, none with `[]`.
    fn paths_alike(&mut self, field: Option<&Spanned<OneOrMany>>) -> PathsAlike {
        let Some(field) = field else {
            return PathsAlike::ALL;
        };
        let mut alike = PathsAlike::NONE;
        for (name, span, path) in field.get_ref().items_at(field.span(), "server.paths_alike") {
            match alike.with(name) {
                Some(with) => alike = with,
                None => self.error(
                    span.start,
                    &path,
                    format!(
                        "\"{name}\" is not allowed; use any of {} (what the upstream serves \
                         alike), or [] to match paths as written",
                        super::joined(PathsAlike::NAMES.iter().map(|n| format!("\"{n}\"")), ", ")
                    ),
                ),
            }
        }
        alike
    }

    /// `server.persisted_queries`: an Apollo persisted query manifest, read
    /// now (a file that cannot be read or is not a manifest is an error
    /// where it is named, with the place in the file).
    fn persisted_queries(&mut self, field: Option<&Spanned<String>>) -> std::sync::Arc<Manifest> {
        let Some(field) = field.filter(|field| !field.get_ref().is_empty()) else {
            return Default::default();
        };
        let path = self.file_path(field.get_ref());
        let read = std::fs::read_to_string(&path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))
            .and_then(|text| {
                Manifest::parse(&text).map_err(|error| format!("{}: {error}", path.display()))
            });
        let read = self.ok(field.span().start, "server.persisted_queries", read);
        read.map(std::sync::Arc::new).unwrap_or_default()
    }

    /// `server.proxy_protocol`: a header is believed only from a trusted
    /// proxy, so with none every connection would be closed.
    fn proxy_protocol(&mut self, raw: &RawServer, trusted_proxies: &[IpNet]) -> bool {
        let Some(field) = &raw.proxy_protocol else {
            return false;
        };
        let on = *field.get_ref();
        if on && trusted_proxies.is_empty() {
            self.error(
                field.span().start,
                "server.proxy_protocol",
                "needs trusted_proxies: a PROXY protocol header is believed only from the \
                 balancers listed there, and every other connection is closed; list your load \
                 balancers' addresses, for example trusted_proxies = [\"10.0.0.0/8\"]",
            );
        }
        on
    }

    /// `server.access_log_keys`: key sources as a rule's `key` names them,
    /// each once; a `descriptor:` entry is never a request's.
    fn access_log_keys(&mut self, field: Option<&Spanned<OneOrMany>>) -> Vec<KeySource> {
        let Some(field) = field else {
            return Vec::new();
        };
        let mut sources: Vec<KeySource> = Vec::new();
        for (i, (text, span)) in field.get_ref().items(field.span()).into_iter().enumerate() {
            let source = parse_key_source(text).and_then(|source| match source {
                KeySource::Descriptor(_) => Err(format!(
                    "\"{text}\" is a rate limit service entry, which no request carries; \
                     name a source a request has (header:<name>, query:<name>, jwt:<claim>, ...)"
                )),
                _ if sources.contains(&source) => Err(format!(
                    "\"{text}\" is already listed; list each source once"
                )),
                source => Ok(source),
            });
            let path = format!("server.access_log_keys[{i}]");
            sources.extend(self.ok(span.start, &path, source));
        }
        sources
    }

    /// `server.access_log`: `"off"`, `"stdout"` or a file path.
    fn access_log(&mut self, raw: Option<&Spanned<String>>) -> AccessLogTarget {
        let at = raw.map_or(0, |field| field.span().start);
        match raw.map(|field| field.get_ref().as_str()) {
            None | Some("off") => AccessLogTarget::Off,
            Some("stdout") => AccessLogTarget::Stdout,
            Some("") => self.invalid(
                at,
                "server.access_log",
                "give \"off\", \"stdout\" or a file path",
            ),
            Some(path) => {
                let file = self.file_path(path);
                // The file is made if missing; its directory must be there.
                let directory = match file.parent() {
                    Some(dir) if !dir.as_os_str().is_empty() => dir,
                    _ => std::path::Path::new("."),
                };
                if !directory.is_dir() {
                    self.error(
                        at,
                        "server.access_log",
                        format!(
                            "the directory {} does not exist (the file is created in it)",
                            directory.display()
                        ),
                    );
                }
                AccessLogTarget::File(file)
            }
        }
    }

    /// `[server.tls]`: every entry of `certs` names a certificate and a key.
    fn tls(&mut self, raw: &Spanned<RawTls>) -> TlsListenerConfig {
        let mut certs = Vec::new();
        let Some(entries) = &raw.get_ref().certs else {
            self.error(
                raw.span().start,
                "server.tls.certs",
                "is required: certs = [{ cert = \"tls/api.pem\", key = \"tls/api.key\" }]",
            );
            return TlsListenerConfig {
                certs,
                http3: false,
                quic_retry: QuicRetry::default(),
            };
        };
        if entries.get_ref().is_empty() {
            self.error(
                entries.span().start,
                "server.tls.certs",
                "name at least one certificate: { cert = \"tls/api.pem\", key = \"tls/api.key\" }",
            );
        }
        for entry in entries.get_ref() {
            let pair = entry.get_ref();
            let (Some(cert), Some(key)) = (&pair.cert, &pair.key) else {
                self.error(
                    entry.span().start,
                    "server.tls.certs",
                    "each entry needs both cert (a PEM chain) and key (its PEM private key)",
                );
                continue;
            };
            let pair = CertPair {
                cert: self.file_path(cert.get_ref()),
                key: self.file_path(key.get_ref()),
            };
            // Read now, so `check` and a reload refuse a pair that would
            // not serve (docs/edge.md, "TLS and certificate rotation").
            if let Err(error) = crate::tls::read_certs(&pair.cert) {
                self.error(cert.span().start, "server.tls.certs", error);
            } else if let Err(error) = crate::tls::read_key(&pair.key) {
                self.error(key.span().start, "server.tls.certs", error);
            } else if let Err(error) = crate::tls::certified_key(&pair.cert, &pair.key) {
                self.error(key.span().start, "server.tls.certs", error);
            }
            certs.push(pair);
        }
        let raw = raw.get_ref();
        TlsListenerConfig {
            certs,
            http3: raw.http3.as_ref().is_some_and(|on| *on.get_ref()),
            quic_retry: self.quic_retry(raw.quic_retry.as_ref()),
        }
    }

    /// `server.tls.quic_retry`: `"always"`, `"never"` or a number of
    /// handshakes in progress.
    fn quic_retry(&mut self, field: Option<&Spanned<toml::Value>>) -> QuicRetry {
        let Some(field) = field else {
            return QuicRetry::default();
        };
        match field.get_ref() {
            toml::Value::String(word) if word == "always" => return QuicRetry::Always,
            toml::Value::String(word) if word == "never" => return QuicRetry::Never,
            toml::Value::Integer(n) => {
                if let Ok(n) = u32::try_from(*n) {
                    return QuicRetry::Busy(n);
                }
            }
            _ => {}
        }
        self.error(
            field.span().start,
            "server.tls.quic_retry",
            "give \"always\", \"never\" or a number of handshakes in progress (0 or more) \
             beyond which a Retry is sent",
        );
        QuicRetry::default()
    }

    pub(super) fn admin(&mut self, raw: &RawConfig) -> AdminConfig {
        let admin = raw.admin.as_ref();
        let listen = self.socket_addr(
            admin.and_then(|a| a.listen.as_ref()),
            "admin.listen",
            "127.0.0.1:9090",
        );
        let token_env = match admin.and_then(|a| a.token_env.as_ref()) {
            None => "SLUICE_ADMIN_TOKEN".to_owned(),
            Some(field) => {
                let name = field.get_ref();
                let valid = name
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !valid {
                    self.error(
                        field.span().start,
                        "admin.token_env",
                        format!(
                            "\"{name}\" is not an environment variable name; use letters, digits \
                             and '_', not starting with a digit (default \"SLUICE_ADMIN_TOKEN\")"
                        ),
                    );
                }
                name.clone()
            }
        };
        let reveal_keys = admin
            .and_then(|a| a.reveal_keys.as_ref())
            .is_some_and(|field| *field.get_ref());
        AdminConfig {
            listen,
            token_env,
            reveal_keys,
        }
    }

    pub(super) fn response(&mut self, raw: &RawConfig) -> ResponseConfig {
        let response = raw.response.as_ref();
        let status = response.and_then(|r| r.status.as_ref()).and_then(|field| {
            let code = u16::try_from(*field.get_ref())
                .ok()
                .filter(|code| (400..=599).contains(code));
            let status = code
                .and_then(|code| StatusCode::from_u16(code).ok())
                .ok_or_else(|| {
                    format!(
                    "{} is not a 4xx or 5xx status code; limited requests need an error status \
                     (default 429)",
                    field.get_ref()
                )
                });
            self.ok(field.span().start, "response.status", status)
        });
        let status = status.unwrap_or(StatusCode::TOO_MANY_REQUESTS);
        ResponseConfig {
            status,
            headers: self.choice(
                response.and_then(|r| r.headers.as_ref()),
                "response.headers",
                &[
                    ("legacy", HeaderStyle::Legacy),
                    ("ietf", HeaderStyle::Ietf),
                    ("both", HeaderStyle::Both),
                    ("none", HeaderStyle::None),
                ],
                HeaderStyle::Both,
            ),
            on_success: response
                .and_then(|r| r.on_success.as_ref())
                .is_none_or(|v| *v.get_ref()),
        }
    }

    pub(super) fn cidrs(&mut self, field: Option<&Spanned<OneOrMany>>, path: &str) -> Vec<IpNet> {
        let Some(field) = field else {
            return Vec::new();
        };
        let mut nets = Vec::new();
        for (text, span, path) in field.get_ref().items_at(field.span(), path) {
            match parse_cidr(text) {
                Ok(net) => {
                    let trunc = net.trunc();
                    if trunc != net {
                        self.warn(
                            span.start,
                            &path,
                            format_args!("{net} has host bits set; it is read as {trunc}"),
                        );
                    }
                    nets.push(trunc);
                }
                Err(message) => self.error(span.start, &path, message),
            }
        }
        nets
    }
}

/// A server's URL: `http://` or `https://`, a host and maybe a port, no
/// path, query or user information.
pub(super) fn parse_upstream(text: &str) -> Result<Uri, String> {
    const HELP: &str = "write http://HOST[:PORT] or https://HOST[:PORT], for example \
                        \"http://127.0.0.1:3000\"";
    let uri: Uri = text
        .parse()
        .map_err(|_| format!("\"{text}\" is not a URI; {HELP}"))?;
    let scheme = match uri.scheme_str() {
        Some("http") => Scheme::HTTP,
        Some("https") => Scheme::HTTPS,
        _ => {
            return Err(format!(
                "\"{text}\" must start with http:// or https://; {HELP}"
            ))
        }
    };
    let authority = match uri.authority() {
        Some(authority) if !authority.host().is_empty() => authority.clone(),
        _ => return Err(format!("\"{text}\" has no host; {HELP}")),
    };
    if authority.as_str().contains('@') {
        return Err(format!(
            "\"{text}\" must not contain user information; {HELP}"
        ));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(format!(
            "\"{text}\" must not have a path or query: each request keeps its own path; {HELP}"
        ));
    }
    if scheme == Scheme::HTTPS && crate::tls::server_name(authority.host()).is_err() {
        // The name the certificate is verified against (and sent as SNI).
        return Err(format!(
            "\"{}\" is neither a DNS name nor an IP address, so no certificate can be \
             verified for it; {HELP}",
            authority.host()
        ));
    }
    Uri::builder()
        .scheme(scheme)
        .authority(authority)
        .path_and_query("/")
        .build()
        .map_err(|err| format!("\"{text}\" is not a usable upstream ({err}); {HELP}"))
}

fn parse_cidr(text: &str) -> Result<IpNet, String> {
    if let Ok(net) = text.parse::<IpNet>() {
        return Ok(net);
    }
    text.parse::<IpAddr>().map(IpNet::from).map_err(|_| {
        format!(
            "\"{text}\" is not a CIDR or an IP address; write for example \"10.0.0.0/8\", \
             \"2001:db8::/32\" or \"192.0.2.7\""
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::*;
    use crate::config::Config;

    /// A self-signed pair for `name` written as `dir/<stem>.pem|.key`.
    fn write_pair(dir: &std::path::Path, stem: &str, name: &str) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.join(format!("{stem}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{stem}.key")), key.serialize_pem()).unwrap();
    }

    /// `check`'s lines for `text` read as `dir/sluice.toml`.
    fn tls_outcome(dir: &std::path::Path, text: &str) -> Result<Config, Vec<String>> {
        let origin = dir.join("sluice.toml").display().to_string();
        Config::from_toml(text, &origin)
            .map_err(|errors| errors.to_string().lines().map(str::to_owned).collect())
    }

    #[test]
    fn tls_pairs_are_read_from_the_config_directory() {
        let dir = tempfile::tempdir().unwrap();
        write_pair(dir.path(), "api", "api.test");
        let config = tls_outcome(
            dir.path(),
            &format!(
                "{UPSTREAM}[server.tls]\ncerts = [{{ cert = \"api.pem\", key = \"api.key\" }}]\n"
            ),
        )
        .unwrap();
        let tls = config.server.tls.unwrap();
        assert_eq!(tls.certs.len(), 1);
        assert_eq!(tls.certs[0].cert, dir.path().join("api.pem"));
        assert_eq!(tls.certs[0].key, dir.path().join("api.key"));
    }

    #[test]
    fn an_unreadable_or_mismatched_tls_pair_is_an_error_at_its_file() {
        let dir = tempfile::tempdir().unwrap();
        write_pair(dir.path(), "one", "one.test");
        write_pair(dir.path(), "two", "two.test");
        let table = "[server.tls]\ncerts = [\n";
        for (entry, column, says) in [
            (
                "{ cert = \"none.pem\", key = \"one.key\" }",
                12,
                "cannot read",
            ),
            (
                "{ cert = \"one.key\", key = \"one.key\" }",
                12,
                "holds no PEM certificate",
            ),
            (
                "{ cert = \"one.pem\", key = \"none.key\" }",
                29,
                "cannot read",
            ),
            (
                "{ cert = \"one.pem\", key = \"two.key\" }",
                29,
                "does not belong to the certificate",
            ),
        ] {
            let errors =
                tls_outcome(dir.path(), &format!("{UPSTREAM}{table}  {entry},\n]\n")).unwrap_err();
            assert_eq!(errors.len(), 1, "{errors:#?}");
            let prefix = format!("sluice.toml:5:{column}: server.tls.certs: ");
            assert!(
                errors[0].contains(&prefix) && errors[0].contains(says),
                "{entry}: {errors:#?}"
            );
        }
    }

    #[test]
    fn tls_needs_a_certificate_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        for (table, says) in [
            ("[server.tls]\n", "server.tls.certs: is required"),
            (
                "[server.tls]\ncerts = []\n",
                "name at least one certificate",
            ),
            (
                "[server.tls]\ncerts = [{ cert = \"a.pem\" }]\n",
                "needs both cert (a PEM chain) and key",
            ),
        ] {
            let errors = tls_outcome(dir.path(), &format!("{UPSTREAM}{table}")).unwrap_err();
            assert!(errors.iter().any(|line| line.contains(says)), "{errors:#?}");
        }
    }

    #[test]
    fn http3_and_quic_retry_are_read_and_a_wrong_retry_is_an_error_at_its_place() {
        let dir = tempfile::tempdir().unwrap();
        write_pair(dir.path(), "api", "api.test");
        let table = "[server.tls]\ncerts = [{ cert = \"api.pem\", key = \"api.key\" }]\n";
        let read = |more: &str| tls_outcome(dir.path(), &format!("{UPSTREAM}{table}{more}"));
        let tls = read("").unwrap().server.tls.unwrap();
        assert_eq!((tls.http3, tls.quic_retry), (false, QuicRetry::Busy(100)));
        for (more, retry) in [
            ("quic_retry = \"always\"\n", QuicRetry::Always),
            ("quic_retry = \"never\"\n", QuicRetry::Never),
            ("quic_retry = 0\n", QuicRetry::Busy(0)),
            ("quic_retry = 250\n", QuicRetry::Busy(250)),
        ] {
            let tls = read(&format!("http3 = true\n{more}"))
                .unwrap()
                .server
                .tls
                .unwrap();
            assert_eq!((tls.http3, tls.quic_retry), (true, retry), "{more}");
        }
        for wrong in ["\"sometimes\"", "-1", "1.5", "true"] {
            let errors = read(&format!("quic_retry = {wrong}\n")).unwrap_err();
            let line = UPSTREAM.lines().count() + 3;
            let at = format!("sluice.toml:{line}:14: server.tls.quic_retry: give \"always\"");
            assert!(
                errors.iter().any(|error| error.contains(&at)),
                "{wrong}: {errors:#?}"
            );
        }
    }

    #[test]
    fn upstream_is_required() {
        assert_eq!(
            only_error("[server]\nlisten = \"0.0.0.0:80\"\n"),
            "test.toml:1:1: server.upstream: is required: the address of the protected service, \
             for example upstream = \"http://127.0.0.1:3000\", or the name of an [[upstream]] \
             pool"
        );
        assert!(only_error("").starts_with("test.toml:1:1: server.upstream: is required"));
    }

    #[test]
    fn upstream_is_scheme_and_authority_only() {
        for (upstream, message) in [
            ("127.0.0.1:3000", "must start with http:// or https://"),
            ("ftp://h", "must start with http:// or https://"),
            ("https://h/api", "must not have a path or query"),
            ("http://h/api", "must not have a path or query"),
            ("http://h/?a=1", "must not have a path or query"),
            ("http://u:p@h", "must not contain user information"),
            ("http:///x", "not a URI"),
            ("not a uri", "not a URI"),
        ] {
            let line = only_error(&format!("[server]\nupstream = \"{upstream}\"\n"));
            assert!(
                line.starts_with("test.toml:2:12: server.upstream: "),
                "{line}"
            );
            assert!(line.contains(message), "{upstream}: {line}");
        }
        let config = valid("[server]\nupstream = \"http://Svc:8000/\"\n");
        assert_eq!(
            config.upstreams.default_pool().servers[0].url.host(),
            Some("Svc")
        );
        assert_eq!(
            config.upstreams.default_pool().servers[0].url.port_u16(),
            Some(8000)
        );
        assert_eq!(config.upstreams.default_pool().servers[0].url.path(), "/");
    }

    #[test]
    fn an_https_upstream_is_verified_against_upstream_ca() {
        let dir = tempfile::tempdir().unwrap();
        let ca = crate::testing::certs::TestCa::new("upstream CA").write(dir.path(), "ca");
        let config = valid(&format!(
            "[server]\nupstream = \"https://api.internal:8443\"\nupstream_ca = \"{}\"\n",
            ca.display()
        ));
        assert_eq!(
            config.upstreams.default_pool().servers[0].url.scheme_str(),
            Some("https")
        );
        assert_eq!(
            config.upstreams.default_pool().servers[0].url.host(),
            Some("api.internal")
        );
        assert_eq!(config.server.upstream_ca.as_deref(), Some(ca.as_path()));
        let roots = config
            .upstreams
            .default_pool()
            .roots
            .clone()
            .expect("loaded");
        assert_eq!(roots.len(), 1);
        assert!(
            !config.warnings.iter().any(|w| w.contains("upstream")),
            "{:?}",
            config.warnings
        );
        // An IP address is verified as one (no SNI).
        let config = valid(&format!(
            "[server]\nupstream = \"https://[::1]\"\nupstream_ca = \"{}\"\n",
            ca.display()
        ));
        assert_eq!(
            config.upstreams.default_pool().servers[0].url.port_u16(),
            None
        );
    }

    #[test]
    fn without_upstream_ca_an_https_upstream_uses_the_systems_roots() {
        let config = valid("[server]\nupstream = \"https://api.example.com\"\n");
        let roots = config
            .upstreams
            .default_pool()
            .roots
            .clone()
            .expect("the system's roots");
        assert!(roots.len() > 1, "{roots:?}");
        // An http:// upstream verifies nothing.
        assert!(valid(UPSTREAM).upstreams.default_pool().roots.is_none());
    }

    #[test]
    fn an_upstream_ca_that_cannot_serve_is_an_error_where_it_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let not_pem = dir.path().join("ca.der");
        std::fs::write(&not_pem, [0x30, 0x82, 0x01, 0x0a]).unwrap();
        let key_only = dir.path().join("key.pem");
        let key = crate::testing::certs::TestCa::new("c").leaf(&["a"]).key_pem;
        std::fs::write(&key_only, key).unwrap();
        let missing = dir.path().join("missing.pem");
        for (file, message) in [
            (&missing, "cannot read"),
            (&not_pem, "holds no PEM certificate"),
            (&key_only, "holds no PEM certificate"),
        ] {
            let line = only_error(&format!(
                "[server]\nupstream = \"https://api.internal\"\nupstream_ca = \"{}\"\n",
                file.display()
            ));
            assert!(
                line.starts_with("test.toml:3:15: server.upstream_ca: "),
                "{line}"
            );
            assert!(line.contains(message), "{line}");
        }
    }

    #[test]
    fn upstream_ca_beside_an_http_upstream_is_unused() {
        let config = valid(&format!("{UPSTREAM}upstream_ca = \"/nowhere/ca.pem\"\n"));
        assert!(config.upstreams.default_pool().roots.is_none());
        assert!(
            config.warnings.contains(
                &"test.toml:3:15: server.upstream_ca: is unused: the upstream is http://, which \
                  is not TLS"
                    .to_owned()
            ),
            "{:?}",
            config.warnings
        );
    }

    #[test]
    fn warns_when_every_peer_is_trusted() {
        let config = valid(&format!(
            "{UPSTREAM}trusted_proxies = [\"0.0.0.0/0\", \"::/0\", \"10.1.2.3/8\"]\n[[rule]]\nname = \"a\"\nrate = \"1/s\"\n"
        ));
        assert_eq!(
            config.server.trusted_proxies[2],
            "10.0.0.0/8".parse::<IpNet>().unwrap()
        );
        let warnings = config.warnings.join("\n");
        assert!(
            warnings.contains("0.0.0.0/0 trusts every peer"),
            "{warnings}"
        );
        assert!(warnings.contains("::/0 trusts every peer"), "{warnings}");
        assert!(
            warnings.contains("10.1.2.3/8 has host bits set; it is read as 10.0.0.0/8"),
            "{warnings}"
        );
    }

    #[test]
    fn proxy_protocol_needs_trusted_proxies() {
        for trusted in ["", "trusted_proxies = []\n"] {
            let line = only_error(&format!("{UPSTREAM}{trusted}proxy_protocol = true\n"));
            let at = if trusted.is_empty() { 3 } else { 4 };
            assert!(
                line.starts_with(&format!(
                    "test.toml:{at}:18: server.proxy_protocol: needs trusted_proxies"
                )),
                "{line}"
            );
        }
        let config = valid(&format!(
            "{UPSTREAM}trusted_proxies = [\"10.0.0.0/8\"]\nproxy_protocol = true\n"
        ));
        assert!(config.server.proxy_protocol);
        let config = valid(&format!("{UPSTREAM}proxy_protocol = false\n"));
        assert!(!config.server.proxy_protocol);
        assert!(!valid(UPSTREAM).server.proxy_protocol);
    }

    #[test]
    fn admin_and_server_need_their_own_addresses() {
        let line = only_error(&format!(
            "{UPSTREAM}listen = \"127.0.0.1:9000\"\n[admin]\nlisten = \"127.0.0.1:9000\"\n"
        ));
        assert!(
            line.starts_with("test.toml:5:10: admin.listen: 127.0.0.1:9000 is also server.listen"),
            "{line}"
        );
    }

    #[test]
    fn the_access_log_is_off_stdout_or_a_file_in_a_directory_that_exists() {
        let target = |value: &str| {
            valid(&format!("{UPSTREAM}access_log = \"{value}\"\n"))
                .server
                .access_log
        };
        assert_eq!(valid(UPSTREAM).server.access_log, AccessLogTarget::Off);
        assert_eq!(target("off"), AccessLogTarget::Off);
        assert_eq!(target("stdout"), AccessLogTarget::Stdout);
        let dir = std::env::temp_dir();
        let file = dir.join("sluice-access.log");
        assert_eq!(
            target(&file.display().to_string()),
            AccessLogTarget::File(file)
        );
        // Relative to the config file's directory ("test.toml" has none).
        assert_eq!(
            target("access.log"),
            AccessLogTarget::File("access.log".into())
        );
        let line = only_error(&format!("{UPSTREAM}access_log = \"\"\n"));
        assert!(
            line.starts_with("test.toml:3:14: server.access_log: give \"off\", \"stdout\""),
            "{line}"
        );
        let line = only_error(&format!(
            "{UPSTREAM}access_log = \"/nonexistent-sluice-dir/access.log\"\n"
        ));
        assert_eq!(
            line,
            "test.toml:3:14: server.access_log: the directory /nonexistent-sluice-dir \
             does not exist (the file is created in it)"
        );
    }

    #[test]
    fn access_log_keys_are_key_sources_each_once() {
        let config = valid(&format!(
            "{UPSTREAM}access_log_keys = [\"header:X-Tenant\", \"jwt:org.id\"]\n"
        ));
        let names: Vec<String> = (config.server.access_log_keys.iter())
            .map(ToString::to_string)
            .collect();
        assert_eq!(names, ["header:x-tenant", "jwt:org.id"]);
        assert!(valid(UPSTREAM).server.access_log_keys.is_empty());
        let line = only_error(&format!(
            "{UPSTREAM}access_log_keys = [\"ip\", \"cookie:a\"]\n"
        ));
        assert!(
            line.starts_with(
                "test.toml:3:26: server.access_log_keys[1]: unknown key source \"cookie:a\""
            ),
            "{line}"
        );
        let line = only_error(&format!("{UPSTREAM}access_log_keys = [\"ip\", \"ip\"]\n"));
        assert!(line.contains("already listed"), "{line}");
        let line = only_error(&format!("{UPSTREAM}access_log_keys = \"descriptor:a\"\n"));
        assert!(line.contains("no request carries"), "{line}");
    }

    #[test]
    fn zero_timeouts_are_refused() {
        let line = only_error(&format!("{UPSTREAM}idle_timeout = \"0s\"\n"));
        assert_eq!(
            line,
            "test.toml:3:16: server.idle_timeout: must be longer than zero (default \"60s\")"
        );
    }

    #[test]
    fn tunnel_idle_timeout_is_five_minutes_unless_set_to_a_duration() {
        let config = |rest: &str| Config::from_toml(&format!("{UPSTREAM}{rest}"), "test.toml");
        let server = |rest| config(rest).unwrap().server;
        assert_eq!(server("").tunnel_idle_timeout, Duration::from_secs(300));
        assert_eq!(
            server("tunnel_idle_timeout = \"90s\"\n").tunnel_idle_timeout,
            Duration::from_secs(90)
        );
        let line = only_error(&format!("{UPSTREAM}tunnel_idle_timeout = \"0s\"\n"));
        assert_eq!(
            line,
            "test.toml:3:23: server.tunnel_idle_timeout: must be longer than zero \
             (default \"300s\")"
        );
        let line = only_error(&format!("{UPSTREAM}tunnel_idle_timeout = \"5 minutes\"\n"));
        assert!(
            line.starts_with("test.toml:3:23: server.tunnel_idle_timeout: "),
            "{line}"
        );
    }

    #[test]
    fn max_requests_per_connection_is_ten_thousand_unless_set_to_a_positive_count() {
        let config = |rest: &str| Config::from_toml(&format!("{UPSTREAM}{rest}"), "test.toml");
        let server = |rest| config(rest).unwrap().server;
        assert_eq!(server("").max_requests_per_connection, 10_000);
        assert_eq!(
            server("max_requests_per_connection = 1\n").max_requests_per_connection,
            1
        );
        let line = only_error(&format!("{UPSTREAM}max_requests_per_connection = 0\n"));
        assert_eq!(
            line,
            "test.toml:3:31: server.max_requests_per_connection: 0 is out of range: must be at \
             least 1 (default 10000)"
        );
        let line = only_error(&format!(
            "{UPSTREAM}max_requests_per_connection = \"many\"\n"
        ));
        assert!(line.starts_with("test.toml:3:31: "), "{line}");
    }
}
