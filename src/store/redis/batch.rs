//! Admissions asked of one Redis in the same turn of a worker's event loop
//! go as one script call (`batch` in `sluice.lua`), each request still
//! decided all or nothing, in the order they came.
//!
//! Under load every worker asks for many admissions at once. One call each
//! costs, per request, a command of its own to encode and parse, a trip
//! through the connection's pipeline, a timer, and on the Redis every
//! instance shares a script invocation (its Lua state, its KEYS and ARGV
//! tables): a batch pays those once. The first request of a turn opens a
//! batch on its thread and spawns the task that sends it, which runs once
//! the tasks this turn woke have run, so the requests they bring join
//! (nothing waits for a timer: a request alone goes alone, as an `admit`
//! call of its own). Each
//! request gets its own answer, or the batch's error, through a oneshot
//! channel; the batch's one timeout bounds them all.
//!
//! A batch is per thread (no lock is shared between workers; the one a
//! batch has is only contended by its sending task) and closes once sent,
//! or at [`MOST`] requests, so that no batch holds Redis for long.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, MutexGuard};

use smallvec::SmallVec;
use tokio::sync::oneshot;

use super::link::Link;
use super::protocol::{OP_ADMIT, OP_BATCH};
use super::script::{self, Answer, Body};
use crate::store::StoreError;

/// The most requests one call decides: a batch holds Redis (and every
/// instance's calls queued behind it) for about this many admissions.
pub const MOST: u64 = 32;

type Reply = oneshot::Sender<Result<Answer, StoreError>>;

/// The batch a thread's requests join.
struct Batch {
    /// The link it goes through (its identity).
    link: usize,
    /// The instant asked for (0: the server's time); requests asking for
    /// another open a batch of their own.
    now_us: u64,
    gathering: Mutex<Gathering>,
}

#[derive(Default)]
struct Gathering {
    /// Sent (or being sent): nobody joins any more.
    closed: bool,
    /// The first request, sent as a call of its own if nobody joins it.
    first: Option<Body>,
    /// Two requests or more.
    batch: Option<Body>,
    replies: SmallVec<[Reply; 8]>,
}

thread_local! {
    static OPEN: RefCell<Option<Arc<Batch>>> = const { RefCell::new(None) };
}

impl Batch {
    fn gathering(&self) -> MutexGuard<'_, Gathering> {
        self.gathering
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Gathering {
    fn join(&mut self, request: Body, now_us: u64, reply: Reply) {
        match (self.first.take(), &mut self.batch) {
            (None, None) => self.first = Some(request),
            (Some(first), _) => {
                let mut batch = Body::batch(now_us);
                batch.append(first);
                batch.append(request);
                self.batch = Some(batch);
            }
            (None, Some(batch)) => {
                batch.append(request);
                self.closed = batch.requests() >= MOST;
            }
        }
        self.replies.push(reply);
    }
}

/// Decides the admission `request` (an `admit` call's body at `now_us`)
/// with the other admissions this thread asks for in the same turn. The
/// request joins its batch now; the future only waits for the answer, so
/// that the state a request's future carries stays small.
pub fn decide_batched(
    link: &Link,
    request: Body,
    now_us: u64,
) -> impl std::future::Future<Output = Result<Answer, StoreError>> {
    let (reply, answer) = oneshot::channel();
    let id = link.id();
    let mut request = Some((request, reply));
    OPEN.with(|open| {
        let mut open = open.borrow_mut();
        if let Some(batch) = open.as_ref() {
            if batch.link == id && batch.now_us == now_us {
                let mut gathering = batch.gathering();
                if !gathering.closed {
                    let (request, reply) = request.take().expect("not joined yet");
                    gathering.join(request, now_us, reply);
                }
            }
        }
        if let Some((request, reply)) = request.take() {
            let mut gathering = Gathering::default();
            gathering.join(request, now_us, reply);
            let batch = Arc::new(Batch {
                link: id,
                now_us,
                gathering: Mutex::new(gathering),
            });
            *open = Some(Arc::clone(&batch));
            // A current-thread runtime runs a new task after the tasks
            // already woken, which is when this turn's requests have
            // joined. A multi-thread one runs it next on this worker, so
            // it yields once first.
            let handle = tokio::runtime::Handle::current();
            let yields = handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread;
            handle.spawn(send(batch, link.clone(), yields));
        }
    });
    async move {
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                "the batch of this admission was never sent".into(),
            ))
        })
    }
}

/// Sends `batch` once the requests of this turn have joined it, and
/// answers each.
async fn send(batch: Arc<Batch>, link: Link, yields: bool) {
    if yields {
        tokio::task::yield_now().await;
    }
    let (first, gathered, replies) = {
        let mut gathering = batch.gathering();
        gathering.closed = true;
        (
            gathering.first.take(),
            gathering.batch.take(),
            std::mem::take(&mut gathering.replies),
        )
    };
    if let Some(first) = first {
        let answer = link.run(first.command(link.script_hash(), OP_ADMIT)).await;
        if let Some(reply) = replies.into_iter().next() {
            let _ = reply.send(answer);
        }
        return;
    }
    let Some(gathered) = gathered else {
        return;
    };
    let requests = gathered.requests() as usize;
    let answer: Result<Answer, StoreError> = link
        .run(gathered.command(link.script_hash(), OP_BATCH))
        .await;
    let answers = answer.and_then(|answer| {
        script::split_batch(&answer, requests).ok_or_else(|| {
            StoreError::Script(
                format!("the Redis script answered a batch of {requests} with {answer:?}").into(),
            )
        })
    });
    match answers {
        Ok(answers) => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(Ok(answer));
            }
        }
        Err(error) => {
            for reply in replies {
                let _ = reply.send(Err(error.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::future::join_all;

    use crate::limiter::{FixedWindow, Limiter};
    use crate::store::bans::{BanPolicy, BanTable};
    use crate::store::suite::{redis_store_on, token_bucket, Limit, T0};
    use crate::store::{Admission, Asks, MemoryStore, Store};
    use crate::testing::redis_server::RedisServer;
    use crate::testing::{rate, SEC};

    /// The limits of a small policy, on one store.
    struct Policy {
        /// Per caller: two limits.
        burst: Limit,
        minute: Limit,
        /// Everyone together, with a ban.
        everyone: Limit,
        bans: BanTable,
        /// A shadow rule for some callers.
        trial: Limit,
    }

    impl Policy {
        fn on(store: &Store) -> Policy {
            Policy {
                burst: Limit::new(store, token_bucket(2, 60)),
                minute: Limit::new(store, Limiter::FixedWindow(FixedWindow::new(rate(3, 60)))),
                everyone: Limit::new(store, token_bucket(6, 60)),
                bans: BanTable::default(),
                trial: Limit::new(store, token_bucket(1, 60)),
            }
        }

        /// What request number `n` asks: callers 0–3 in turn, every other
        /// one of caller 3 under the shadow rule too.
        fn asks(&self, n: u64, ban: &'static BanPolicy) -> Asks<'_> {
            let caller = 101 + n % 4;
            let mut asks = Asks::default();
            asks.push_rule(
                caller,
                false,
                None,
                [self.burst.ask(caller, 1), self.minute.ask(caller, 1)],
            );
            asks.push_rule(
                7,
                false,
                Some((&self.bans, Some(ban))),
                [self.everyone.ask(7, 1)],
            );
            if n % 8 == 3 {
                asks.push_rule(caller, true, None, [self.trial.ask(caller, 1)]);
            }
            asks
        }
    }

    static BAN: BanPolicy = BanPolicy {
        after: 2,
        within: 60 * SEC,
        duration: 10 * SEC,
    };

    fn evalsha_calls(server: &RedisServer) -> u64 {
        let stats = server.cli(&["INFO", "commandstats"]).unwrap_or_default();
        stats
            .lines()
            .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }

    #[tokio::test]
    async fn admissions_of_one_turn_go_in_one_call_and_decide_as_one_by_one() {
        let server = RedisServer::start();
        let redis = redis_store_on(vec![server.url()], false).await;
        let memory = Store::Memory(MemoryStore::new(1_000));
        let (on_redis, in_memory) = (Policy::on(&redis), Policy::on(&memory));
        const REQUESTS: u64 = 24;

        // One by one in memory...
        let mut expected = Vec::new();
        for n in 0..REQUESTS {
            let mut answer = Admission::default();
            memory
                .admit(&in_memory.asks(n, &BAN), T0, &mut answer)
                .await
                .unwrap();
            expected.push(answer);
        }
        // ... and all in one turn on Redis.
        let before = evalsha_calls(&server);
        let all_asks: Vec<Asks<'_>> = (0..REQUESTS).map(|n| on_redis.asks(n, &BAN)).collect();
        let answers = join_all(all_asks.iter().map(|asks| async {
            let mut answer = Admission::default();
            redis.admit(asks, T0, &mut answer).await.unwrap();
            answer
        }))
        .await;
        let calls = evalsha_calls(&server) - before;
        assert_eq!(calls, REQUESTS.div_ceil(super::MOST));

        for (n, (got, want)) in answers.iter().zip(&expected).enumerate() {
            assert_eq!(got.outcome, want.outcome, "request {n}");
            // The enforced rules' limits (a refused request's shadow rule
            // is not asked: memory reports a placeholder, Redis a peek).
            assert_eq!(got.decisions[..3], want.decisions[..3], "request {n}");
            if want.admitted() {
                assert_eq!(got.decisions, want.decisions, "request {n}");
            }
            assert_eq!(got.shadow_limited, want.shadow_limited, "request {n}");
            assert_eq!(got.bans_started, want.bans_started, "request {n}");
            assert_eq!(got.receipts.len(), want.receipts.len(), "request {n}");
        }
        // The everyone-rule admitted 6, refused the rest, and its second
        // strike started a ban that refused the requests after it.
        let admitted = answers.iter().filter(|a| a.admitted()).count();
        assert_eq!(admitted, expected.iter().filter(|a| a.admitted()).count());
        assert!(answers.iter().any(|a| !a.bans_started.is_empty()));
        assert!(answers
            .iter()
            .any(|a| matches!(a.outcome, crate::store::Outcome::Banned { .. })));
    }
}
