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
        match &self.password {
            Some(password) => {
                let settings = info.redis_settings().clone().set_password(&*password.0);
                info.set_redis_settings(settings)
            }
            None => info,
        }
    }

    /// The authorities: those in `ca`, or (none given) the system's roots,
    /// which the client loads itself.
    fn certificates(&self) -> Result<TlsCertificates, RedisError> {
        let root_cert = match &self.ca {
            Some(path) => Some(std::fs::read(path).map_err(|error| {
                RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "cannot read the CA file",
                    format!("{}: {error}", path.display()),
                ))
            })?),
            None => None,
        };
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
