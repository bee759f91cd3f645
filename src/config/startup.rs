//! The settings that only take effect when sluice starts: listen
//! addresses, workers, whether the listener speaks TLS or the PROXY
//! protocol, the listener's and the upstream client's timeouts and limits,
//! the admin token's variable and the store. A reload, and `sluice
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
        server.upstream,
        server.workers,
        server.connect_timeout,
        server.upstream_timeout,
        server.header_read_timeout,
        server.max_connections,
        server.shutdown_grace,
        server.max_header_bytes,
        server.max_headers,
        server.max_uri_bytes,
        server.max_body_bytes,
        server.body_timeout,
        server.idle_timeout,
        server.send_timeout,
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
    // An https upstream's authorities go with its address: new ones for an
    // upstream that waits for a restart wait with it, rather than verifying
    // the running upstream against the next one's CA. (With the address
    // unchanged, `upstream_ca` is read again on every reload.)
    if kept.contains(&"server.upstream") {
        keep!(server.upstream_ca);
        new.server.upstream_roots = old.server.upstream_roots.clone();
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(kept, ["server.upstream", "store.max_keys"]);
        assert_eq!(new.server.upstream, old.server.upstream);
        assert_eq!(new.store.max_keys, old.store.max_keys);
        // What a reload does apply stays as the new file says.
        assert!(!new.server.normalize_path);
        assert_eq!(new.rules[0].limits[0].rate.count, 2);
    }

    #[test]
    fn upstream_ca_waits_with_an_upstream_that_needs_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let running = crate::testing::certs::TestCa::new("running").write(dir.path(), "a");
        let next = crate::testing::certs::TestCa::new("next").write(dir.path(), "b");
        let config = |upstream: &str, ca: &std::path::Path| {
            Config::from_toml(
                &format!(
                    "[server]\nupstream = \"{upstream}\"\nupstream_ca = \"{}\"\n",
                    ca.display()
                ),
                "test.toml",
            )
            .unwrap()
        };
        let old = config("https://a.internal", &running);
        // Same upstream: the new authorities apply.
        let mut new = config("https://a.internal", &next);
        assert!(keep_startup_settings(&old, &mut new).is_empty());
        assert_eq!(new.server.upstream_ca.as_deref(), Some(next.as_path()));
        // Another upstream: both wait for the restart.
        let mut new = config("https://b.internal", &next);
        let kept = keep_startup_settings(&old, &mut new);
        assert_eq!(kept, ["server.upstream", "server.upstream_ca"]);
        assert_eq!(new.server.upstream_ca.as_deref(), Some(running.as_path()));
        let roots = |config: &Config| config.server.upstream_roots.as_ref().unwrap().roots.clone();
        assert_eq!(roots(&new), roots(&old));
    }
}
