//! The idle connections of one upstream server that sluice speaks
//! HTTP/1.1 on, each boxed for its whole life, reused warmest first.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::exchange::Conn;
use super::stream::UpstreamStream;
use super::{too_old, MAX_IDLE};
use crate::clock::{Clock, Nanos, ProxyClock};

/// How often idle connections are looked over, so that those the upstream
/// closed (or that grew too old) give their descriptors back even while no
/// request comes to take them.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// The idle connections of one upstream server.
#[derive(Debug)]
pub struct IdleConns<S> {
    /// Most recently returned last: the warmest is reused first. One short
    /// lock at checkout and one at return, never held across an await.
    idle: Mutex<Vec<(Box<Conn<S>>, Nanos)>>,
    /// Dates them.
    clock: ProxyClock,
}

impl<S: UpstreamStream> IdleConns<S> {
    /// An empty idle list, swept every [`SWEEP_EVERY`] while it lives (when
    /// made inside a tokio runtime).
    pub fn new(clock: ProxyClock) -> Arc<IdleConns<S>> {
        let idle = Arc::new(IdleConns {
            idle: Mutex::default(),
            clock,
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&idle);
            runtime.spawn(async move {
                let mut ticks = tokio::time::interval(SWEEP_EVERY);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                ticks.tick().await;
                loop {
                    ticks.tick().await;
                    match weak.upgrade() {
                        Some(idle) => idle.sweep(),
                        None => return,
                    }
                }
            });
        }
        idle
    }

    /// An idle connection still open, if there is one.
    pub fn checkout(&self) -> Option<Box<Conn<S>>> {
        loop {
            let (mut conn, since) = self.lock().pop()?;
            if reusable(&mut conn, since, self.clock.now()) {
                return Some(conn);
            }
        }
    }

    /// Keeps `conn` for a later exchange. Its last response must have been
    /// read to the end with nothing after it.
    pub fn put_back(&self, conn: Box<Conn<S>>) {
        let mut idle = self.lock();
        if idle.len() < MAX_IDLE {
            idle.push((conn, self.clock.now()));
        }
    }

    /// Closes the idle connections the upstream closed, and those too old.
    pub fn sweep(&self) {
        let now = self.clock.now();
        self.lock()
            .retain_mut(|(conn, since)| reusable(conn, *since, now));
    }

    /// Closes every idle connection (new authorities for an https
    /// upstream: the next exchanges go over connections verified by them).
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Idle connections kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Box<Conn<S>>, Nanos)>> {
        // The vector is consistent after any panic (push/pop/retain only).
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Whether an idle connection, idle since `since`, may carry an exchange
/// at `now`.
fn reusable<S: UpstreamStream>(conn: &mut Conn<S>, since: Nanos, now: Nanos) -> bool {
    !too_old(since, now) && conn.stream.idle_and_open()
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::net::{TcpListener, TcpStream};

    /// Real loopback connections: the upstream closes one of two idle
    /// connections, and a sweep closes that one and keeps the other.
    #[tokio::test]
    async fn a_sweep_drops_the_idle_connections_the_upstream_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let idle = IdleConns::new(ProxyClock::default());
        let closed = TcpStream::connect(address).await.unwrap();
        let (upstream_side, _) = listener.accept().await.unwrap();
        let open = TcpStream::connect(address).await.unwrap();
        let (_kept, _) = listener.accept().await.unwrap();
        idle.put_back(Conn::new(closed));
        idle.put_back(Conn::new(open));
        assert_eq!(idle.len(), 2);

        drop(upstream_side);
        // The close reaches the runtime's reactor within a few turns.
        let mut swept = false;
        for _ in 0..100 {
            idle.sweep();
            if idle.len() == 1 {
                swept = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(swept, "the closed connection was kept");
        // The one left is the open one, and it is handed out.
        assert!(idle.checkout().is_some());
        assert!(idle.checkout().is_none());
    }
}
