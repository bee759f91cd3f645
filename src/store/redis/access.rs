//! How a link reaches Redis: TLS for `rediss://` nodes, verified against
//! `[store.redis] ca` or the system's roots, and the AUTH password from the
//! variable `password_env` names, set on every node, a Cluster's included
//! (docs/edge.md, "Managed Redis: TLS and AUTH").
//!
//! The password lives here and in the `redis` crate's connection info, whose
//! `Debug` redacts it; nothing that sluice prints holds it.

use std::path::PathBuf;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::{
    Client, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo, RedisError,
    TlsCertificates,
};

/// The password and the authorities a link connects with.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// AUTH's password (with the URL's user name, if any); it wins over a
    /// password written in the URL.
    pub password: Option<Password>,
    /// The PEM file of the authorities a `rediss://` node is verified
    /// against; `None`: the system's roots.
    pub ca: Option<PathBuf>,
}

/// A Redis password: shown as `***`, never as itself.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(Box<str>);

impl Password {
    pub fn new(password: impl Into<Box<str>>) -> Password {
        Password(password.into())
    }

    /// The password in the environment variable `name`.
    pub fn from_env(name: &str) -> Result<Password, String> {
        match std::env::var(name) {
            Ok(password) if !password.is_empty() => Ok(Password::new(password)),
            Ok(_) => Err(format!("the environment variable {name} is empty")),
            Err(std::env::VarError::NotPresent) => {
                Err(format!("the environment variable {name} is not set"))
            }
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(format!("the environment variable {name} is not UTF-8 text"))
            }
        }
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(***)")
    }
}

impl Access {
    /// A client of the one Redis at `url`.
    pub(super) fn client(&self, url: &str) -> Result<Client, RedisError> {
        let info = self.with_password(url.into_connection_info()?);
        if is_tls(&info) {
            crate::tls::install_provider();
            Client::build_with_tls(info, self.certificates()?)
        } else {
            Client::open(info)
        }
    }

    /// A client of the Redis Cluster that `urls` are nodes of; `configure`
    /// sets its timeouts. Every node it learns of is reached like the ones
    /// named: over TLS when they are `rediss://`, with the same password.
    pub(super) fn cluster_client(
        &self,
        urls: &[String],
        configure: impl FnOnce(ClusterClientBuilder) -> ClusterClientBuilder,
    ) -> Result<ClusterClient, RedisError> {
        let nodes = urls
            .iter()
            .map(|url| url.as_str().into_connection_info())
            .collect::<Result<Vec<_>, _>>()?;
        let tls = nodes.first().is_some_and(is_tls);
        let mut builder = configure(ClusterClient::builder(nodes));
        if let Some(password) = &self.password {
            builder = builder.password(&*password.0);
        }
        if tls {
            crate::tls::install_provider();
            builder = builder.certs(self.certificates()?);
        }
        builder.build()
    }

    fn with_password(&self, info: ConnectionInfo) -> ConnectionInfo {
        let Some(password) = &self.password else {
            return info;
        };
        let settings = info.redis_settings().clone().set_password(&*password.0);
        info.set_redis_settings(settings)
    }

    /// The authorities: those in `ca`, or (none given) the system's roots,
    /// which the client loads itself.
    fn certificates(&self) -> Result<TlsCertificates, RedisError> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|error| {
                RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "cannot read the CA file",
                    format!("{}: {error}", path.display()),
                ))
            })
        };
        let root_cert = self.ca.as_ref().map(read).transpose()?;
        Ok(TlsCertificates {
            client_tls: None,
            root_cert,
        })
    }
}

fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
}

/// Whether Redis refused to let the link in: a wrong password or user
/// (`WRONGPASS`, the client's "authentication failed"), or none given to a
/// server that wants one (`NOAUTH`). A Cluster's client reports it inside
/// an error of its own, hence the text.
pub fn auth_refused(error: &RedisError) -> bool {
    if error.kind() == ErrorKind::AuthenticationFailed
        || matches!(error.code(), Some("NOAUTH" | "WRONGPASS"))
    {
        return true;
    }
    let text = error.to_string();
    ["authentication failed", "NOAUTH", "WRONGPASS"]
        .iter()
        .any(|sign| text.contains(sign))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Access, Password};
    use crate::store::admission::StoreError;
    use crate::store::redis::Link;
    use crate::testing::certs::TestCa;
    use crate::testing::redis_server::{RedisOptions, RedisServer};

    /// A TLS-only server wanting `password`, and the file of its CA.
    fn tls_server(name: &str, password: &str) -> (RedisServer, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("sluice-access-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = TestCa::new("redis test CA");
        let ca_file = ca.write(&dir, "ca");
        let (cert, key) = ca.write_leaf(&dir, "redis", &["127.0.0.1", "localhost"]);
        let options = RedisOptions::tls(&cert, &key, &ca_file).with_password(password);
        (RedisServer::start_with(options), ca_file)
    }

    /// `PING` through a link to `url`, until it answers or `within` passes.
    async fn ping(url: &str, access: &Access, within: Duration) -> Result<(), StoreError> {
        let link = Link::new(url, access, Duration::from_secs(2), "access:seed".into())
            .expect("a Redis URL");
        link.start();
        let deadline = Instant::now() + within;
        loop {
            match link.run::<String>(redis::cmd("PING")).await {
                Ok(_) => return Ok(()),
                Err(error) if Instant::now() >= deadline => return Err(error),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    #[tokio::test]
    async fn a_tls_server_is_reached_with_its_ca_and_the_password_and_only_then() {
        let (server, ca) = tls_server("single", "s3cret-pass");
        let good = Access {
            password: Some(Password::new("s3cret-pass")),
            ca: Some(ca.clone()),
        };
        ping(&server.url(), &good, Duration::from_secs(10))
            .await
            .expect("the right password and CA get in");
        // The password in the URL, for a server's default user.
        let in_url = server
            .url()
            .replace("rediss://", "rediss://default:s3cret-pass@");
        let ca_only = Access {
            password: None,
            ca: Some(ca.clone()),
        };
        ping(&in_url, &ca_only, Duration::from_secs(10))
            .await
            .expect("the URL's password gets in");
        // password_env wins over the URL's.
        let wrong_in_url = server.url().replace("rediss://", "rediss://default:wrong@");
        ping(&wrong_in_url, &good, Duration::from_secs(10))
            .await
            .expect("the environment's password wins");
        for (what, access) in [
            (
                "a wrong password",
                Access {
                    password: Some(Password::new("not-it")),
                    ca: Some(ca.clone()),
                },
            ),
            ("no password", ca_only.clone()),
        ] {
            let error = ping(&server.url(), &access, Duration::from_millis(600))
                .await
                .expect_err(what);
            assert!(error.is_transient(), "{what}: {error}");
        }
        // Another CA: no connection at all, not one without verification.
        let dir = ca.parent().unwrap();
        let other = TestCa::new("another CA").write(dir, "other");
        let wrong_ca = Access {
            password: Some(Password::new("s3cret-pass")),
            ca: Some(other),
        };
        let error = ping(&server.url(), &wrong_ca, Duration::from_millis(600))
            .await
            .expect_err("a server the CA did not sign");
        assert!(error.is_transient(), "{error}");
        // The system's roots do not know the test CA either.
        let system = Access {
            password: Some(Password::new("s3cret-pass")),
            ca: None,
        };
        ping(&server.url(), &system, Duration::from_millis(600))
            .await
            .expect_err("a server no system root signed");
    }

    #[test]
    fn a_password_is_never_debug_printed() {
        let access = Access {
            password: Some(Password::new("hunter2")),
            ca: None,
        };
        assert!(!format!("{access:?}").contains("hunter2"));
    }
}
