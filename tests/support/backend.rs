//! A server of an upstream pool as a process of its own
//! (`tests/fixtures/backend.py`), so that a test can kill it, stop it and
//! start it again on the same port.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// One backend process on loopback.
pub struct Backend {
    pub name: String,
    pub addr: SocketAddr,
    /// While this file exists, `/healthz` answers 503.
    pub health_file: PathBuf,
    child: Option<Child>,
}

impl Backend {
    /// Starts backend `name` on a free port; `dir` holds its health file.
    pub fn start(name: &str, dir: &Path) -> Backend {
        let port = super::closed_port().port();
        let mut backend = Backend {
            name: name.to_owned(),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            health_file: dir.join(format!("{name}.unhealthy")),
            child: None,
        };
        backend.restart();
        backend
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Starts it (again) on its port, and waits until it listens.
    pub fn restart(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/backend.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(self.addr.port().to_string())
            .arg(&self.name)
            .arg(&self.health_file)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs the test backend");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(
            line.trim(),
            "listening",
            "backend {} did not start",
            self.name
        );
        self.child = Some(child);
    }

    /// SIGKILL, and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`): a hung server, or one back.
    pub fn pause(&self, stop: bool) {
        let child = self.child.as_ref().expect("running");
        let signal = if stop { "-STOP" } else { "-CONT" };
        let _ = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status();
    }

    /// Makes `/healthz` fail (`true`) or pass.
    pub fn set_unhealthy(&self, unhealthy: bool) {
        if unhealthy {
            std::fs::write(&self.health_file, b"").unwrap();
        } else {
            let _ = std::fs::remove_file(&self.health_file);
        }
    }

    /// How many requests it served (health checks not counted).
    pub async fn served(&self) -> u64 {
        let got = super::get(&format!("{}/count", self.url()), &[]).await;
        got.body
            .parse()
            .unwrap_or_else(|_| panic!("count: {}", got.body))
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too.
        self.kill();
    }
}
