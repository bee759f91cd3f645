//! A real `redis-server` on an ephemeral loopback port, started and owned
//! by one test: killed when dropped, and able to be stopped, frozen
//! (SIGSTOP) and restarted (empty) on the same port; in clear or over TLS
//! only, with or without a password ([`RedisOptions`]). Shared by the unit
//! tests and the integration tests (`tests/support` includes this file).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` process of the test's own.
pub struct RedisServer {
    pub port: u16,
    /// The watchdog shell and the server's pid.
    child: Option<(Child, u32)>,
    dir: PathBuf,
    /// Runs as a node of a Redis Cluster.
    cluster_node: bool,
    options: RedisOptions,
}

/// How a test's server is reached: in clear (the default) or over TLS
/// only, with or without a password.
#[derive(Debug, Clone, Default)]
pub struct RedisOptions {
    /// Speak TLS only (`--port 0 --tls-port`), with these files.
    pub tls: Option<RedisTls>,
    /// `requirepass`: AUTH is needed before any command.
    pub password: Option<String>,
}

/// The PEM files of a TLS server: its certificate and key, and the CA
/// that signed it (which `redis-cli` verifies the server against; clients
/// need no certificate of their own).
#[derive(Debug, Clone)]
pub struct RedisTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl RedisOptions {
    /// TLS with the files `cert`, `key` and `ca`.
    pub fn tls(cert: &Path, key: &Path, ca: &Path) -> RedisOptions {
        RedisOptions {
            tls: Some(RedisTls {
                cert: cert.to_owned(),
                key: key.to_owned(),
                ca: ca.to_owned(),
            }),
            password: None,
        }
    }

    /// The same, with AUTH's `password`.
    pub fn with_password(mut self, password: &str) -> RedisOptions {
        self.password = Some(password.to_owned());
        self
    }

    /// `redis-cli`'s arguments to reach such a server (TLS, password).
    fn cli_args(&self) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        if let Some(tls) = &self.tls {
            args.extend(["--tls".into(), "--cacert".into(), tls.ca.clone().into()]);
        }
        if let Some(password) = &self.password {
            args.extend(["-a".into(), password.into(), "--no-auth-warning".into()]);
        }
        args
    }

    /// `redis-server`'s arguments for the listening port and AUTH.
    fn server_args(&self, port: u16, cluster_node: bool) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        match &self.tls {
            None => args.extend(["--port".into(), port.to_string().into()]),
            Some(tls) => {
                args.extend(["--port".into(), "0".into(), "--tls-port".into()]);
                args.push(port.to_string().into());
                for (flag, path) in [
                    ("--tls-cert-file", &tls.cert),
                    ("--tls-key-file", &tls.key),
                    ("--tls-ca-cert-file", &tls.ca),
                ] {
                    args.extend([flag.into(), path.clone().into()]);
                }
                args.extend(["--tls-auth-clients".into(), "no".into()]);
                if cluster_node {
                    // The cluster bus and the addresses CLUSTER SLOTS
                    // gives are the TLS ones.
                    args.extend(["--tls-cluster".into(), "yes".into()]);
                }
            }
        }
        if let Some(password) = &self.password {
            args.extend(["--requirepass".into(), password.into()]);
        }
        args
    }
}

/// Runs redis-server under a shell that kills it once its standard input
/// closes: when the test process ends, however it ends, no server is left
/// behind. Prints the server's pid first.
const WATCHDOG: &str =
    "redis-server \"$@\" >/dev/null 2>&1 & echo $!; cat >/dev/null; kill -9 $! 2>/dev/null; wait";

impl RedisServer {
    /// Starts one on a free port and waits until it answers. Panics with a
    /// clear message when `redis-server` is not installed (`.ci/run`
    /// installs it).
    pub fn start() -> RedisServer {
        RedisServer::start_with(RedisOptions::default())
    }

    /// [`RedisServer::start`], reached as `options` say (TLS, password).
    pub fn start_with(options: RedisOptions) -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        RedisServer::on_port(port, false, options)
    }

    fn on_port(port: u16, cluster_node: bool, options: RedisOptions) -> RedisServer {
        let dir = std::env::temp_dir().join(format!("sluice-redis-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a directory for redis-server");
        let mut server = RedisServer {
            port,
            child: None,
            dir,
            cluster_node,
            options,
        };
        server.restart();
        server
    }

    /// `redis://127.0.0.1:<port>`, or `rediss://` over TLS (never with
    /// the password: a test writes it where it means to).
    pub fn url(&self) -> String {
        let scheme = if self.options.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Starts the server again (empty: nothing is persisted) on the same
    /// port, and waits until it answers.
    pub fn restart(&mut self) {
        self.kill();
        assert!(
            Command::new("redis-server")
                .arg("--version")
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|status| status.success()),
            "redis-server is not installed (apt-get install redis-server)"
        );
        let mut child = Command::new("sh")
            .args(["-c", WATCHDOG, "sh"])
            .args(self.options.server_args(self.port, self.cluster_node))
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--logfile", ""])
            .args(if self.cluster_node {
                &["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"][..]
            } else {
                &[]
            })
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh runs");
        let mut pid = String::new();
        BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut pid)
            .expect("the watchdog prints the pid");
        let pid = pid.trim().parse().expect("a pid");
        self.child = Some((child, pid));
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.cli(&["PING"]).as_deref() != Some("PONG") {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server (as a crash would).
    pub fn kill(&mut self) {
        if let Some((mut child, pid)) = self.child.take() {
            signal("-KILL", pid);
            drop(child.stdin.take());
            let _ = child.wait();
        }
    }

    /// Freezes (`true`, SIGSTOP) or thaws (`false`, SIGCONT) the server: it
    /// keeps its connections and answers nothing while frozen.
    pub fn freeze(&self, frozen: bool) {
        if let Some((_, pid)) = &self.child {
            signal(if frozen { "-STOP" } else { "-CONT" }, *pid);
        }
    }

    /// Runs `redis-cli` against the server; its trimmed output.
    pub fn cli(&self, args: &[&str]) -> Option<String> {
        let output = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(self.options.cli_args())
            .args(args)
            .stderr(Stdio::null())
            .output()
            .ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.freeze(false);
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn signal(signal: &str, pid: u32) {
    let _ = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status();
}

/// A Redis Cluster of three primaries (no replicas), each a
/// [`RedisServer`] of the test's own, its 16,384 slots spread evenly by
/// `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        RedisCluster::start_with(RedisOptions::default())
    }

    /// [`RedisCluster::start`], every node reached as `options` say.
    pub fn start_with(options: RedisOptions) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::on_port(cluster_port(), true, options.clone()))
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        let created = Command::new("redis-cli")
            .args(options.cli_args())
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli is installed (apt-get install redis-tools)");
        assert!(created.success(), "redis-cli --cluster create failed");
        let deadline = Instant::now() + Duration::from_secs(20);
        for node in &nodes {
            while !node
                .cli(&["CLUSTER", "INFO"])
                .is_some_and(|info| info.contains("cluster_state:ok"))
            {
                assert!(Instant::now() < deadline, "the cluster did not form");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        RedisCluster { nodes }
    }

    /// Every node's `redis://` (or `rediss://`) URL.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

/// A free port whose cluster bus port (10,000 above it) is free too.
fn cluster_port() -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().expect("an address").port();
        if port <= 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// One `redis-server` for the whole test process, started on first use
/// (tests that share it keep their keys apart by name): its URL.
pub fn shared_urls() -> Vec<String> {
    static SERVER: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    SERVER
        .get_or_init(|| {
            // Kept running until the test process ends (its watchdog stops it).
            let server = std::mem::ManuallyDrop::new(RedisServer::start());
            vec![server.url()]
        })
        .clone()
}
