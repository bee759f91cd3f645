//! The settings that only take effect when sluice starts: listen
//! addresses (`[rls] listen` too), workers, whether the listener speaks TLS or the PROXY
//! protocol, the listener's timeouts and limits, how it shuts down
//! (`shutdown_delay` and `shutdown_grace`: what a pod's termination grace
//! period is sized to, which only a restart changes), the admin token's
//! variable and the store. (Upstreams, their timeouts and authorities
//! follow every reload: docs/upstreams.md.) A reload, and `sluice
//! check --diff`, keep them as they were and name the ones the new file
//! would change (they need a restart).

use super::Config;

/// Keeps in `new` the settings that only take effect at start, and names
/// those that differ from `old`.
pub fn keep_startup_settings(old: &Config, new: &mut Config) -> Vec<&'static str> {
    let mut kept = Vec::new();
    macro_rules! keep {
        ($($section:ident . $field:ident),* $(,)?) => {$(
            if format!("{:?}", new.$section.$field) != format!("{:?}", old.$section.$field) {
                kept.push(concat!(stringify!($section), ".", stringify!($field)));
                new.$section.$field = old.$section.$field.clone();
            }
        )*};
    }
    keep!(
        server.listen,
        server.workers,
        server.header_read_timeout,
        server.max_connections,
        server.shutdown_grace,
        server.shutdown_delay,
        server.max_header_bytes,
        server.max_headers,
        server.max_uri_bytes,
        server.max_body_bytes,
        server.body_timeout,
        server.idle_timeout,
        server.send_timeout,
        server.tunnel_idle_timeout,
        server.max_requests_per_connection,
        server.proxy_protocol,
        admin.listen,
        admin.token_env,
        store.backend,
        store.max_keys,
    );
    // Whether the listener speaks TLS is decided at start; which
    // certificates it serves follows every reload (docs/edge.md).
    if new.server.tls.is_some() != old.server.tls.is_some() {
        kept.push("server.tls");
        new.server.tls = old.server.tls.clone();
    }
    // So is whether it listens on UDP too; `quic_retry` follows reloads.
    if let (Some(new), Some(old)) = (&mut new.server.tls, &old.server.tls) {
        if new.http3 != old.http3 {
            kept.push("server.tls.http3");
            new.http3 = old.http3;
        }
    }
    // The rate limit service's listener is bound at start; its rules
    // follow every reload.
    if new.rls != old.rls {
        kept.push("rls.listen");
        new.rls = old.rls.clone();
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether sluice listens on UDP is decided at start; when a retry is
    /// sent follows the reload.
    #[test]
    fn http3_needs_a_restart_and_quic_retry_does_not() {
        let tls = |more: &str| {
            let mut config = Config::from_toml(
                "[server]\nupstream = \"http://127.0.0.1:3000\"\n",
                "test.toml",
            )
            .unwrap();
            let http3 = more.contains("http3");
            let quic_retry = if more.contains("always") {
                crate::config::QuicRetry::Always
            } else {
                crate::config::QuicRetry::default()
            };
            config.server.tls = Some(crate::config::TlsListenerConfig {
                certs: Vec::new(),
                http3,
                quic_retry,
            });
            config
        };
        let old = tls("");
        let mut new = tls("http3 always");
        assert_eq!(keep_startup_settings(&old, &mut new), ["server.tls.http3"]);
        let kept = new.server.tls.unwrap();
        assert!(!kept.http3);
        assert_eq!(kept.quic_retry, crate::config::QuicRetry::Always);
    }

    #[test]
    fn startup_settings_are_kept_and_named() {
        let old = Config::from_toml(
            "[server]\nupstream = \"http://127.0.0.1:3000\"\n\
             [[rule]]\nname = \"a\"\nrate = \"1/s\"\n",
            "old.toml",
        )
        .unwrap();
        let mut new = Config::from_toml(
            "[server]\nupstream = \"http://127.0.0.1:4000\"\nnormalize_path = false\n\
             [store]\nmax_keys = 10\n[[rule]]\nname = \"a\"\nrate = \"2/s\"\n",
            "new.toml",
        )
        .unwrap();
        let kept = keep_startup_settings(&old, &mut new);
        assert_eq!(kept, ["store.max_keys"]);
        assert_eq!(new.store.max_keys, old.store.max_keys);
        // What a reload does apply stays as the new file says.
        assert!(!new.server.normalize_path);
        assert_eq!(new.rules[0].limits[0].rate.count, 2);
    }

    #[test]
    fn upstreams_follow_a_reload() {
        let config = |upstream: &str| {
            Config::from_toml(
                &format!("[server]\nupstream = \"{upstream}\"\nupstream_timeout = \"5s\"\n"),
                "test.toml",
            )
            .unwrap()
        };
        let old = config("http://a.internal");
        let mut new = config("http://b.internal:81");
        assert!(keep_startup_settings(&old, &mut new).is_empty());
        let pool = new.upstreams.default_pool();
        assert_eq!(pool.servers[0].written(), "http://b.internal:81");
        assert_eq!(pool.upstream_timeout, std::time::Duration::from_secs(5));
    }
}
