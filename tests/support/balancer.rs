//! A load balancer on loopback in front of sluice instances, as a
//! Kubernetes Service is in front of pods: each new client connection goes
//! to the next instance in rotation (round robin over TCP, as kube-proxy
//! does) and is relayed byte for byte. An instance leaves the rotation once
//! its admin `/readyz` answers anything but 200 (or nothing): polled every
//! `poll`, acted on `lag` later, as the removal of a pod's endpoint lags
//! its failed readiness probe. Connections already relayed to an instance
//! stay with it, as they do through kube-proxy.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// One instance behind the balancer.
#[derive(Debug)]
struct Backend {
    addr: SocketAddr,
    admin: SocketAddr,
    in_rotation: AtomicBool,
    /// When it was taken out of rotation.
    removed_at: Mutex<Option<Instant>>,
    /// Client connections relayed to it so far.
    relayed: AtomicU64,
    /// What went wrong relaying to it: a refused connect, an error while
    /// copying (for a test's failure message).
    trouble: Mutex<Vec<String>>,
}

/// The balancer; its tasks end when it is dropped.
pub struct Balancer {
    pub addr: SocketAddr,
    backends: Arc<Vec<Backend>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Balancer {
    /// Balances over `instances`, each its traffic and admin address.
    pub async fn start(
        instances: &[(SocketAddr, SocketAddr)],
        poll: Duration,
        lag: Duration,
    ) -> Balancer {
        let backends: Arc<Vec<Backend>> = Arc::new(
            instances
                .iter()
                .map(|&(addr, admin)| Backend {
                    addr,
                    admin,
                    in_rotation: AtomicBool::new(true),
                    removed_at: Mutex::default(),
                    relayed: AtomicU64::new(0),
                    trouble: Mutex::default(),
                })
                .collect(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut tasks = vec![tokio::spawn(relay(listener, Arc::clone(&backends)))];
        for index in 0..backends.len() {
            tasks.push(tokio::spawn(probe(Arc::clone(&backends), index, poll, lag)));
        }
        Balancer {
            addr,
            backends,
            tasks,
        }
    }

    /// Whether instance `index` still gets new connections.
    pub fn in_rotation(&self, index: usize) -> bool {
        self.backends[index].in_rotation.load(Ordering::SeqCst)
    }

    /// When instance `index` was taken out of rotation, if it was.
    pub fn removed_at(&self, index: usize) -> Option<Instant> {
        *self.backends[index].removed_at.lock().unwrap()
    }

    /// Client connections relayed to instance `index` so far.
    pub fn relayed(&self, index: usize) -> u64 {
        self.backends[index].relayed.load(Ordering::SeqCst)
    }

    /// What went wrong relaying to instance `index`, if anything.
    pub fn trouble(&self, index: usize) -> Vec<String> {
        self.backends[index].trouble.lock().unwrap().clone()
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Accepts client connections and relays each to the next instance in
/// rotation. One that cannot be relayed (no instance left, or the
/// instance refuses) is closed, as kube-proxy's would be reset.
async fn relay(listener: TcpListener, backends: Arc<Vec<Backend>>) {
    let next = Arc::new(AtomicUsize::new(0));
    while let Ok((mut client, _)) = listener.accept().await {
        let backends = Arc::clone(&backends);
        let next = Arc::clone(&next);
        tokio::spawn(async move {
            let Some(backend) = pick(&backends, &next) else {
                return;
            };
            backend.relayed.fetch_add(1, Ordering::SeqCst);
            let note = |what: String| backend.trouble.lock().unwrap().push(what);
            let mut upstream = match TcpStream::connect(backend.addr).await {
                Ok(upstream) => upstream,
                Err(error) => return note(format!("connect: {error}")),
            };
            let _ = upstream.set_nodelay(true);
            let _ = client.set_nodelay(true);
            if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
                note(format!("relaying: {error}"));
            }
        });
    }
}

/// Round robin over the instances in rotation: from the next one on, the
/// first in rotation (one turn taken per pick, so that picks made at once
/// each see every instance).
fn pick<'a>(backends: &'a [Backend], next: &AtomicUsize) -> Option<&'a Backend> {
    let first = next.fetch_add(1, Ordering::SeqCst);
    (first..first + backends.len())
        .map(|index| &backends[index % backends.len()])
        .find(|backend| backend.in_rotation.load(Ordering::SeqCst))
}

/// Polls instance `index`'s `/readyz` every `poll`; the first answer that
/// is not 200 takes it out of rotation `lag` later, for good.
async fn probe(backends: Arc<Vec<Backend>>, index: usize, poll: Duration, lag: Duration) {
    let backend = &backends[index];
    let mut ticks = tokio::time::interval(poll);
    loop {
        ticks.tick().await;
        if !ready(backend.admin).await {
            tokio::time::sleep(lag).await;
            backend.in_rotation.store(false, Ordering::SeqCst);
            *backend.removed_at.lock().unwrap() = Some(Instant::now());
            return;
        }
    }
}

/// Whether `GET /readyz` on `admin` answers 200 (within a second).
async fn ready(admin: SocketAddr) -> bool {
    let asked = async {
        let mut stream = TcpStream::connect(admin).await.ok()?;
        stream
            .write_all(b"GET /readyz HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        Some(answer.starts_with(b"HTTP/1.1 200"))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), asked).await,
        Ok(Some(true))
    )
}
