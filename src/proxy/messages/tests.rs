//! The gate on the proxy's clock: paused tokio time
//! (`start_paused`) under a [`RuntimeClock`], so holds are exact.

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use http::{HeaderValue, Request};

use super::*;
use crate::clock::RuntimeClock;
use crate::config::Config;
use crate::proxy::checks::facts_of;
use crate::proxy::checks::Checked;
use crate::store::MemoryStore;

pub(super) const NOW: Nanos = 1_800_000_000_000_000_000;
pub(super) const SECOND: Nanos = 1_000_000_000;

/// The policy of `rules`, compiled against the store its gate asks.
pub(super) fn deciding(rules: &str) -> Deciding {
    deciding_under("", rules)
}

/// [`deciding`], with `server`'s lines added to `[server]`.
pub(super) fn deciding_under(server: &str, rules: &str) -> Deciding {
    let text = format!("[server]\nupstream = \"http://127.0.0.1:1\"\n{server}\n{rules}");
    let config = Config::from_toml(&text, "test.toml").unwrap_or_else(|e| panic!("{e}"));
    let store = Arc::new(Store::Memory(MemoryStore::new(1000)));
    let metrics = Arc::new(Metrics::new());
    let policy = Arc::new(Policy::compile(Arc::new(config), &metrics, &store));
    Deciding {
        store,
        clock: ProxyClock::Runtime(RuntimeClock::new(NOW)),
        on_error: OnError::Local,
        metrics,
        policy,
    }
}

/// Identifies a WebSocket handshake with `headers` under `deciding`'s
/// policy: its gate, or `None` when no message rule applies.
fn gate_for(deciding: &Deciding, headers: &[(&str, &str)]) -> Option<MessageGate> {
    metered_for(deciding, Carrier::WebSocket, headers).map(|metered| MessageGate {
        deciding: deciding.clone(),
        rules: metered.rules,
        client_ip: metered.client_ip,
        carrier: metered.carrier,
    })
}

/// Identifies a request that carries messages on `carrier`, with
/// `headers`, under `deciding`'s policy: the rules its messages are held
/// to, or `None` when no message rule applies.
pub(super) fn metered_for(
    deciding: &Deciding,
    carrier: Carrier,
    headers: &[(&str, &str)],
) -> Option<Box<Metered>> {
    let mut request = Request::get("/chat").body(()).unwrap();
    for (name, value) in headers {
        let name = http::HeaderName::from_bytes(name.as_bytes()).unwrap();
        request
            .headers_mut()
            .append(name, HeaderValue::from_str(value).unwrap());
    }
    let checked = Checked {
        path: "/chat".into(),
        folded: None,
        host: Some("test"),
    };
    let policy = &*deciding.policy;
    let mut facts = facts_of(&request, &checked, "10.0.0.1".parse().unwrap(), policy);
    let claims = OnceCell::new();
    let mut metered = None;
    identify(
        Some(carrier),
        &mut facts,
        &claims,
        policy,
        NOW,
        &mut metered,
    )
    .unwrap();
    metered
}

pub(super) fn counter(deciding: &Deciding, rule: &str, outcome: &str) -> u64 {
    let counters = &deciding.policy.rule(rule).unwrap().counters;
    match outcome {
        "allowed" => counters.allowed.get(),
        "limited" => counters.limited.get(),
        "delayed" => counters.delayed.get(),
        "shadow_limited" => counters.shadow_limited.get(),
        _ => unreachable!("an outcome"),
    }
}

#[tokio::test(start_paused = true)]
async fn each_message_takes_from_the_handshakes_bucket_until_the_rule_refuses() {
    let deciding = deciding(
        "[[rule]]\nname = \"msgs\"\nunit = \"message\"\nkey = [\"header:x-user\"]\nrate = \"2/m\"\n",
    );
    let alice = gate_for(&deciding, &[("x-user", "alice")]).unwrap();
    let again = gate_for(&deciding, &[("x-user", "alice")]).unwrap();
    let bob = gate_for(&deciding, &[("x-user", "bob")]).unwrap();
    assert_eq!(alice.admit().await, Admission::Pass);
    // Another tunnel of the same key spends the same budget.
    assert_eq!(again.admit().await, Admission::Pass);
    assert_eq!(
        alice.admit().await,
        Admission::Refused {
            rule: Arc::from("msgs"),
            retry_after: 30 * SECOND
        }
    );
    assert_eq!(bob.admit().await, Admission::Pass);
    assert_eq!(counter(&deciding, "msgs", "allowed"), 3);
    assert_eq!(counter(&deciding, "msgs", "limited"), 1);
    // Refused messages show in the rule's heavy hitters.
    let rule = deciding.policy.rule("msgs").unwrap();
    let refused = rule
        .hitters
        .top(crate::heavy_hitters::Kind::Limited, 10, NOW);
    assert_eq!(refused.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_held_message_waits_on_the_clock_and_gives_its_units_back_if_dropped() {
    let deciding = deciding(
        "[[rule]]\nname = \"paced\"\nunit = \"message\"\nrate = \"1/s\"\n\
         on_limit = \"delay\"\nmax_delay = \"5s\"\n",
    );
    let gate = gate_for(&deciding, &[]).unwrap();
    assert_eq!(gate.admit().await, Admission::Pass);
    // The second waits a second: not before.
    let mut held = gate.admit();
    assert!(futures_poll(&mut held).is_pending());
    tokio::time::advance(Duration::from_millis(999)).await;
    assert!(futures_poll(&mut held).is_pending());
    assert_eq!(
        deciding
            .policy
            .rule("paced")
            .unwrap()
            .counters
            .queue_depth
            .get(),
        1
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(held.await, Admission::Pass);
    assert_eq!(counter(&deciding, "paced", "delayed"), 1);
    // One dropped while held (the tunnel closed) gives its slot back: the
    // next waits a second, not two.
    let mut dropped = gate.admit();
    assert!(futures_poll(&mut dropped).is_pending());
    drop(dropped);
    let started = tokio::time::Instant::now();
    assert_eq!(gate.admit().await, Admission::Pass);
    assert_eq!(started.elapsed(), Duration::from_secs(1));
    // Five held, the last for 5 s; a sixth would wait past max_delay:
    // refused at once.
    let mut held: Vec<_> = (0..5).map(|_| gate.admit()).collect();
    for one in &mut held {
        assert!(futures_poll(one).is_pending());
    }
    let started = tokio::time::Instant::now();
    assert_eq!(
        gate.admit().await,
        Admission::Refused {
            rule: Arc::from("paced"),
            retry_after: 6 * SECOND
        }
    );
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn tiers_and_overrides_are_the_handshakes_and_shadow_rules_never_refuse() {
    let deciding = deciding(
        "[[rule]]\nname = \"msgs\"\nunit = \"message\"\nkey = [\"header:x-user\"]\nrate = \"1/m\"\n\
         tiers = { by = \"header:x-plan\", pro = { rate = \"3/m\" } }\n\
         overrides = { \"vip\" = { rate = \"5/m\" } }\n\
         [[rule]]\nname = \"watch\"\nunit = \"message\"\nrate = \"1/m\"\nshadow = true\n",
    );
    let passes = |headers: &'static [(&'static str, &'static str)]| {
        let gate = gate_for(&deciding, headers).unwrap();
        async move {
            let mut passed = 0;
            while gate.admit().await == Admission::Pass {
                passed += 1;
            }
            passed
        }
    };
    assert_eq!(passes(&[("x-user", "a")]).await, 1);
    assert_eq!(passes(&[("x-user", "b"), ("x-plan", "pro")]).await, 3);
    assert_eq!(passes(&[("x-user", "vip"), ("x-plan", "pro")]).await, 5);
    // The shadow rule was over its 1 a minute from the second message on.
    assert!(counter(&deciding, "watch", "shadow_limited") >= 8);
    assert_eq!(counter(&deciding, "msgs", "limited"), 3);
}

#[tokio::test]
async fn only_a_handshake_is_metered_and_a_missing_key_refuses_it_as_missing_says() {
    let deciding = deciding(
        "[[rule]]\nname = \"skip\"\nunit = \"message\"\nkey = [\"header:x-a\"]\nmissing = \"skip\"\n\
         rate = \"1/s\"\n\
         [[rule]]\nname = \"reject\"\nunit = \"message\"\nkey = [\"header:x-b\"]\n\
         missing = \"reject\"\nrate = \"1/s\"\nmatch = { path = \"/chat\" }\n\
         [[rule]]\nname = \"elsewhere\"\nunit = \"message\"\nmatch = { path = \"/other\" }\n\
         rate = \"1/s\"\n",
    );
    let policy = &*deciding.policy;
    let request = Request::get("/chat").body(()).unwrap();
    let checked = Checked {
        path: "/chat".into(),
        folded: None,
        host: Some("test"),
    };
    let mut facts = facts_of(&request, &checked, "10.0.0.1".parse().unwrap(), policy);
    let claims = OnceCell::new();
    let mut metered = None;
    // Not a handshake: no message rule is looked at.
    identify(None, &mut facts, &claims, policy, NOW, &mut metered).unwrap();
    assert!(metered.is_none());
    // A handshake without x-b: the rejecting rule refuses it.
    let refused = identify(
        Some(Carrier::WebSocket),
        &mut facts,
        &claims,
        policy,
        NOW,
        &mut metered,
    );
    assert!(matches!(refused, Err(Unidentified::MissingKey(rule)) if &*rule.name == "reject"));
    // With x-b: only that rule applies (x-a skipped, /other unmatched).
    let gate = gate_for(&deciding, &[("x-b", "1")]).unwrap();
    let names: Vec<&str> = gate
        .rules
        .iter()
        .map(|counted| &*counted.rule(policy).name)
        .collect();
    assert_eq!(names, ["reject"]);
}

/// Polls `future` once.
pub(super) fn futures_poll<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    std::pin::Pin::new(future).poll(&mut cx)
}
