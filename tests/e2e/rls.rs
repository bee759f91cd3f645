//! The rate limit service end to end (docs/rate-limit-service.md): a tonic
//! client speaking Envoy's `envoy.service.ratelimit.v3` to the real binary,
//! on the memory store and on a real `redis-server` the test kills.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use http::{Method, StatusCode};
use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::support::{
    metric, post_json, send, sync_rounds_later, write_config, RedisServer, SluiceProcess,
};

/// The binary with `rest` after `[server]` and `[rls]`, all on port 0.
fn sluice(dir: &std::path::Path, rest: &str) -> SluiceProcess {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://127.0.0.1:9\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n[rls]\nlisten = \"127.0.0.1:0\"\n{rest}"
    );
    SluiceProcess::spawn(&write_config(dir, &config))
}

async fn client(sluice: &SluiceProcess) -> RateLimitServiceClient<Channel> {
    let addr = sluice
        .rls
        .expect("the serving line names the rate limit service");
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

/// A descriptor of `entries`, with its own `hits_addend` if given.
fn descriptor(entries: &[(&str, &str)], hits: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect(),
        hits_addend: hits.map(|value| UInt64Value { value }),
        ..Default::default()
    }
}

fn call(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits_addend: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend,
    }
}

async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .unwrap_or_else(|status| panic!("{status:?}"))
        .into_inner()
}

/// (code, limit name, requests_per_unit, unit, remaining) of a status.
fn seen(status: &DescriptorStatus) -> (Code, Option<(String, u32, Unit)>, u32) {
    (
        Code::try_from(status.code).unwrap(),
        status.current_limit.as_ref().map(|limit| {
            (
                limit.name.clone(),
                limit.requests_per_unit,
                Unit::try_from(limit.unit).unwrap(),
            )
        }),
        status.limit_remaining,
    )
}

fn limit(name: &str, per_unit: u32, unit: Unit) -> Option<(String, u32, Unit)> {
    Some((name.to_owned(), per_unit, unit))
}

fn header<'a>(response: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    response
        .response_headers_to_add
        .iter()
        .find(|h| h.key == name)
        .map(|h| h.value.as_str())
}

const EDGE_RULES: &str = r#"
[[rule]]
name = "per-ip"
rate = "100/m"
[[rule]]
name = "slow-for-one"
match = { domain = "edge", descriptor = { generic_key = "slow" } }
key = ["descriptor:remote_address"]
rate = "1/m"
[[rule]]
name = "per-address"
match = { domain = "edge" }
key = ["descriptor:remote_address"]
rate = "3/m"
[[rule]]
name = "per-user-10s"
match = { domain = "edge" }
key = ["descriptor:user"]
rate = "5/10s"
"#;

#[tokio::test]
async fn each_descriptor_is_decided_by_the_first_rule_with_exactly_its_entry_keys() {
    let dir = tempfile::tempdir().unwrap();
    let sluice = sluice(dir.path(), EDGE_RULES);
    let mut client = client(&sluice).await;
    let response = ask(
        &mut client,
        call(
            "edge",
            vec![
                descriptor(&[("remote_address", "10.0.0.1")], None),
                descriptor(
                    &[("generic_key", "slow"), ("remote_address", "10.0.0.1")],
                    None,
                ),
                descriptor(&[("user", "alice")], None),
                // No rule has exactly these keys: OK, without a limit.
                descriptor(
                    &[("generic_key", "fast"), ("remote_address", "10.0.0.1")],
                    None,
                ),
                descriptor(&[("remote_address", "10.0.0.1"), ("path", "/a")], None),
            ],
            0,
        ),
    )
    .await;
    assert_eq!(response.overall_code, Code::Ok as i32);
    let statuses: Vec<_> = response.statuses.iter().map(seen).collect();
    assert_eq!(
        statuses,
        vec![
            (Code::Ok, limit("per-address", 3, Unit::Minute), 2),
            (Code::Ok, limit("slow-for-one", 1, Unit::Minute), 0),
            // 5 per 10 s is told as 30 a minute.
            (Code::Ok, limit("per-user-10s", 30, Unit::Minute), 4),
            (Code::Ok, None, 0),
            (Code::Ok, None, 0),
        ]
    );
    let reset = response.statuses[0].duration_until_reset.unwrap();
    assert!((1..=60).contains(&reset.seconds), "{reset:?}");
    // Another domain has no rules: nothing is limited.
    let other = ask(
        &mut client,
        call(
            "internal",
            vec![descriptor(&[("remote_address", "10.0.0.1")], None)],
            0,
        ),
    )
    .await;
    assert_eq!(seen(&other.statuses[0]), (Code::Ok, None, 0));
    // The buckets are per value: another address has its own.
    let next = ask(
        &mut client,
        call(
            "edge",
            vec![
                descriptor(&[("remote_address", "10.0.0.1")], None),
                descriptor(&[("remote_address", "10.0.0.2")], None),
            ],
            0,
        ),
    )
    .await;
    assert_eq!(next.statuses[0].limit_remaining, 1);
    assert_eq!(next.statuses[1].limit_remaining, 2);
}

#[tokio::test]
async fn a_refused_call_charges_nothing_and_says_which_descriptor_is_over() {
    let dir = tempfile::tempdir().unwrap();
    let sluice = sluice(
        dir.path(),
        &format!("{EDGE_RULES}[response]\nheaders = \"both\"\n"),
    );
    let mut client = client(&sluice).await;
    let both = || {
        call(
            "edge",
            vec![
                descriptor(
                    &[("generic_key", "slow"), ("remote_address", "10.0.0.9")],
                    None,
                ),
                descriptor(&[("user", "bob")], None),
            ],
            0,
        )
    };
    let first = ask(&mut client, both()).await;
    assert_eq!(first.overall_code, Code::Ok as i32);
    assert_eq!(header(&first, "x-ratelimit-remaining"), Some("0"));
    assert_eq!(header(&first, "retry-after"), None);
    let refused = ask(&mut client, both()).await;
    assert_eq!(refused.overall_code, Code::OverLimit as i32);
    assert_eq!(refused.statuses[0].code, Code::OverLimit as i32);
    // Within its limit: OK, though the call was refused.
    assert_eq!(refused.statuses[1].code, Code::Ok as i32);
    // The same fields a 429 carries, with Retry-After.
    let retry: u64 = header(&refused, "retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(header(&refused, "x-ratelimit-limit"), Some("1"));
    assert!(
        header(&refused, "ratelimit-policy").is_some(),
        "{refused:?}"
    );
    // bob's bucket was not charged by the refused call: 5, less the first.
    let alone = ask(
        &mut client,
        call("edge", vec![descriptor(&[("user", "bob")], None)], 0),
    )
    .await;
    assert_eq!(alone.statuses[0].limit_remaining, 3);
    // Counted as proxied traffic is.
    let metrics = send(
        Method::GET,
        &format!("http://{}/metrics", sluice.admin),
        &[],
    )
    .await;
    let count = |rule: &str, outcome: &str| {
        metric(
            &metrics.body,
            &format!("sluice_requests_total{{outcome=\"{outcome}\",rule=\"{rule}\"}}"),
        )
        .unwrap_or(-1.0)
    };
    assert_eq!(count("slow-for-one", "allowed"), 1.0);
    assert_eq!(count("slow-for-one", "limited"), 1.0);
    assert_eq!(count("per-user-10s", "allowed"), 3.0);
    assert_eq!(count("per-ip", "allowed"), 0.0);
}

#[tokio::test]
async fn hits_addend_is_the_cost_and_a_descriptors_own_wins() {
    let dir = tempfile::tempdir().unwrap();
    let sluice = sluice(
        dir.path(),
        "[[rule]]\nname = \"tokens\"\nmatch.domain = \"llm\"\nkey = [\"descriptor:org\"]\nrate = \"20/m\"\n",
    );
    let mut client = client(&sluice).await;
    let org = |hits| descriptor(&[("org", "acme")], hits);
    let remaining = |response: RateLimitResponse| response.statuses[0].limit_remaining;
    assert_eq!(
        remaining(ask(&mut client, call("llm", vec![org(None)], 4)).await),
        16
    );
    assert_eq!(
        remaining(ask(&mut client, call("llm", vec![org(Some(6))], 4)).await),
        10
    );
    // 0 means 1, for the call and for a descriptor.
    assert_eq!(
        remaining(ask(&mut client, call("llm", vec![org(None)], 0)).await),
        9
    );
    assert_eq!(
        remaining(ask(&mut client, call("llm", vec![org(Some(0))], 7)).await),
        8
    );
    // More than is left: refused, nothing taken.
    let over = ask(&mut client, call("llm", vec![org(Some(9))], 0)).await;
    assert_eq!(over.overall_code, Code::OverLimit as i32);
    assert_eq!(
        remaining(ask(&mut client, call("llm", vec![org(Some(8))], 0)).await),
        0
    );
}

#[tokio::test]
async fn a_domain_rule_shares_its_buckets_with_v1_check_and_never_sees_requests() {
    let dir = tempfile::tempdir().unwrap();
    let sluice = sluice(
        dir.path(),
        "[[rule]]\nname = \"users\"\nmatch.domain = \"edge\"\nkey = [\"descriptor:user\"]\nrate = \"3/m\"\n",
    );
    let mut client = client(&sluice).await;
    let alice = || call("edge", vec![descriptor(&[("user", "alice")], None)], 0);
    assert_eq!(
        ask(&mut client, alice()).await.statuses[0].limit_remaining,
        2
    );
    let check = post_json(
        &format!("http://{}/v1/check", sluice.admin),
        r#"{"rule": "users", "key": "alice"}"#,
        &[],
    )
    .await;
    assert_eq!(check.status, StatusCode::OK, "{}", check.body);
    assert_eq!(check.json()["remaining"], 1);
    assert_eq!(
        ask(&mut client, alice()).await.statuses[0].limit_remaining,
        0
    );
    assert_eq!(
        ask(&mut client, alice()).await.overall_code,
        Code::OverLimit as i32
    );
    // A proxied request is not a descriptor: the rule does not apply (the
    // upstream is down, so it is answered 502, not 429).
    let got = send(
        Method::GET,
        &format!("http://{}/", sluice.addr),
        &[("user", "alice")],
    )
    .await;
    assert_eq!(got.status, StatusCode::BAD_GATEWAY);
}

#[tokio::test]
async fn a_malformed_call_is_an_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    let sluice = sluice(dir.path(), EDGE_RULES);
    let mut client = client(&sluice).await;
    let code = |result: Result<tonic::Response<RateLimitResponse>, tonic::Status>| {
        result.map(|_| ()).unwrap_err().code()
    };
    let empty_domain = call("", vec![descriptor(&[("user", "a")], None)], 0);
    assert_eq!(
        code(client.should_rate_limit(empty_domain).await),
        tonic::Code::InvalidArgument
    );
    let no_entries = call("edge", vec![descriptor(&[], None)], 0);
    assert_eq!(
        code(client.should_rate_limit(no_entries).await),
        tonic::Code::InvalidArgument
    );
    let none = call("edge", vec![], 0);
    assert_eq!(
        code(client.should_rate_limit(none).await),
        tonic::Code::InvalidArgument
    );
    // Garbage bytes as the message, on a raw HTTP/2 stream.
    let addr = sluice.rls.unwrap();
    for garbage in [
        &b"\xff\xff\xff\xff\x0f"[..],
        b"\x0a\xff\xff\xff\xff",
        b"\x12\x05ab",
    ] {
        assert_eq!(raw_call(addr, garbage).await, "3", "{garbage:?}");
    }
    // The service still answers.
    let fine = call("edge", vec![descriptor(&[("user", "a")], None)], 0);
    assert_eq!(ask(&mut client, fine).await.overall_code, Code::Ok as i32);
}

/// `grpc-status` of a `ShouldRateLimit` call whose message is `message`.
async fn raw_call(addr: std::net::SocketAddr, message: &[u8]) -> String {
    raw_call_with(addr, message, &[]).await
}

/// [`raw_call`] with more request headers.
async fn raw_call_with(
    addr: std::net::SocketAddr,
    message: &[u8],
    headers: &[(&str, &str)],
) -> String {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut h2, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut request = http::Request::post(format!(
        "http://{addr}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(()).unwrap();
    let (response, mut body) = h2.send_request(request, false).unwrap();
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    body.send_data(framed.into(), true).unwrap();
    let response = response.await.unwrap();
    let status = response.headers().get("grpc-status").cloned();
    let mut body = response.into_body();
    while body.data().await.is_some() {}
    let trailers = body.trailers().await.unwrap();
    status
        .or_else(|| trailers.and_then(|t| t.get("grpc-status").cloned()))
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn health_checks_say_serving() {
    let dir = tempfile::tempdir().unwrap();
    let sluice = sluice(dir.path(), EDGE_RULES);
    let channel = Channel::from_shared(format!("http://{}", sluice.rls.unwrap()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let answer = health
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.status, 1, "{service}: {answer:?}");
    }
}

#[tokio::test]
async fn a_store_that_fails_answers_per_on_error_within_its_timeout() {
    let mut redis = RedisServer::start();
    for (on_error, want) in [
        ("deny", Err(tonic::Code::Unavailable)),
        ("allow", Ok(Code::Ok)),
        // This instance's own memory decides: carol has a fresh budget.
        ("local", Ok(Code::Ok)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let sluice = sluice(
            dir.path(),
            &format!(
                "[store]\nbackend = \"redis\"\n[store.redis]\nurl = \"{}\"\ntimeout = \"200ms\"\n\
                 on_error = \"{on_error}\"\n\
                 [[rule]]\nname = \"users\"\nmatch.domain = \"edge\"\nkey = [\"descriptor:user\"]\nrate = \"1/m\"\n",
                redis.url()
            ),
        );
        let mut client = client(&sluice).await;
        let user = |name: &str| call("edge", vec![descriptor(&[("user", name)], None)], 0);
        // Redis answers: the first call takes the budget, the second is over.
        crate::support::eventually(Duration::from_secs(15), "redis answers", || {
            let mut client = client.clone();
            let request = user(&format!("warm-{on_error}"));
            async move { client.should_rate_limit(request).await.is_ok() }
        })
        .await;
        let name = format!("carol-{on_error}");
        assert_eq!(
            ask(&mut client, user(&name)).await.overall_code,
            Code::Ok as i32
        );
        assert_eq!(
            ask(&mut client, user(&name)).await.overall_code,
            Code::OverLimit as i32
        );
        redis.kill();
        let started = Instant::now();
        let answered = client
            .should_rate_limit(user(&name))
            .await
            .map(|response| Code::try_from(response.into_inner().overall_code).unwrap())
            .map_err(|status| status.code());
        assert_eq!(answered, want, "on_error = {on_error}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        redis.restart();
    }
}

/// `EVALSHA` and `EVAL` calls Redis was sent.
fn script_calls(redis: &RedisServer) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]).expect("commandstats");
    stats
        .lines()
        .filter(|line| line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:"))
        .filter_map(|line| {
            line.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[tokio::test]
async fn on_redis_a_call_is_one_script_call_at_most_and_decides_exactly() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let sluice = sluice(
        dir.path(),
        &format!(
            "[store]\nbackend = \"redis\"\n[store.redis]\nurl = \"{}\"\ntimeout = \"5s\"\n\
             [[rule]]\nname = \"users\"\nmatch.domain = \"edge\"\nkey = [\"descriptor:user\"]\nrate = \"50/h\"\n\
             [[rule]]\nname = \"paths\"\nmatch.domain = \"edge\"\nkey = [\"descriptor:path\"]\nrate = \"1000/h\"\n",
            redis.url()
        ),
    );
    let client = client(&sluice).await;
    let both = || {
        call(
            "edge",
            vec![
                descriptor(&[("user", "dave")], None),
                descriptor(&[("path", "/a")], None),
            ],
            0,
        )
    };
    crate::support::eventually(Duration::from_secs(15), "redis answers", || {
        let mut client = client.clone();
        let request = call("edge", vec![descriptor(&[("user", "warm")], None)], 0);
        async move { client.should_rate_limit(request).await.is_ok() }
    })
    .await;
    let before = script_calls(&redis);
    // 80 calls of two descriptors each, 16 at a time: 50 admitted.
    let mut admitted = 0;
    for _ in 0..5 {
        let answers = futures_util::future::join_all((0..16).map(|_| {
            let mut client = client.clone();
            let request = both();
            async move { ask(&mut client, request).await }
        }))
        .await;
        admitted += answers
            .iter()
            .filter(|a| a.overall_code == Code::Ok as i32)
            .count();
    }
    assert_eq!(admitted, 50);
    let sent = script_calls(&redis) - before;
    assert!((1..=80).contains(&sent), "{sent} script calls for 80 calls");
}

#[test]
fn check_shows_the_service_and_its_rules() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        dir.path(),
        &format!("[server]\nupstream = \"http://127.0.0.1:9\"\n[rls]\nlisten = \"127.0.0.1:8081\"\n{EDGE_RULES}"),
    );
    let output = std::process::Command::new(crate::support::binary())
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{shown}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        shown.contains("rate limit service 127.0.0.1:8081"),
        "{shown}"
    );
    let line = shown
        .lines()
        .find(|line| line.starts_with("slow-for-one"))
        .unwrap();
    assert!(
        line.contains("domain=edge descriptor.generic_key=slow")
            && line.contains("descriptor:remote_address"),
        "{line}"
    );
}

/// A `RateLimitRequest` for `user`, protobuf-encoded.
fn encoded(user: &str) -> Vec<u8> {
    use prost::Message;
    call("edge", vec![descriptor(&[("user", user)], None)], 0).encode_to_vec()
}

#[tokio::test]
async fn streams_message_sizes_and_deadlines_are_bounded() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let sluice = sluice(
        dir.path(),
        &format!(
            "[store]\nbackend = \"redis\"\n[store.redis]\nurl = \"{}\"\ntimeout = \"10s\"\n\
             on_error = \"deny\"\n\
             [[rule]]\nname = \"users\"\nmatch.domain = \"edge\"\nkey = [\"descriptor:user\"]\nrate = \"9/m\"\n",
            redis.url()
        ),
    );
    let addr = sluice.rls.unwrap();
    crate::support::eventually(Duration::from_secs(15), "redis answers", || async {
        raw_call(addr, &encoded("warm")).await == "0"
    })
    .await;
    // Streams per connection: the server's SETTINGS say 1024.
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (h2, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let h2 = h2.ready().await.unwrap();
    crate::support::eventually(Duration::from_secs(5), "the server's SETTINGS", || {
        let max = h2.current_max_send_streams();
        async move { max == 1024 }
    })
    .await;
    // A message over 64 KiB is refused before it is read whole.
    let mut huge = encoded("x");
    huge.extend(std::iter::repeat_n(0u8, 70 * 1024));
    assert_eq!(raw_call(addr, &huge).await, "11", "OUT_OF_RANGE");
    // A frozen Redis: the call's grpc-timeout answers long before the
    // store's 10 s.
    redis.freeze(true);
    let started = Instant::now();
    let status = raw_call_with(addr, &encoded("erin"), &[("grpc-timeout", "300m")]).await;
    let took = started.elapsed();
    redis.freeze(false);
    assert_eq!(status, "1", "CANCELLED: the deadline passed");
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[tokio::test]
async fn several_limits_a_ban_and_the_admin_views_work_as_for_requests() {
    let dir = tempfile::tempdir().unwrap();
    let sluice = sluice(
        dir.path(),
        "[[rule]]\nname = \"orgs\"\nmatch.domain = \"api\"\nkey = [\"descriptor:org\"]\n\
         limits = [\"5/m\", \"3/h\"]\nban = { after = 1, within = \"1m\", for = \"10m\" }\n\
         [response]\nheaders = \"none\"\n",
    );
    let mut client = client(&sluice).await;
    let org = || call("api", vec![descriptor(&[("org", "acme")], None)], 0);
    let first = ask(&mut client, org()).await;
    // The limit with least left names the descriptor's limit, as
    // X-RateLimit-* would: 2 of 3 an hour, not 4 of 5 a minute.
    assert_eq!(
        seen(&first.statuses[0]),
        (Code::Ok, limit("orgs-1h", 3, Unit::Hour), 2)
    );
    // headers = "none": nothing for Envoy to add.
    assert!(first.response_headers_to_add.is_empty(), "{first:?}");
    ask(&mut client, org()).await;
    ask(&mut client, org()).await;
    // The fourth is refused, and that strike bans acme for 10 minutes.
    assert_eq!(
        ask(&mut client, org()).await.overall_code,
        Code::OverLimit as i32
    );
    let banned = ask(&mut client, org()).await;
    assert_eq!(banned.overall_code, Code::OverLimit as i32);
    let left = banned.statuses[0].duration_until_reset.unwrap().seconds;
    assert!((590..=600).contains(&left), "{left}");
    assert_eq!(banned.statuses[0].limit_remaining, 0);
    // The ban is listed, its key labelled (a descriptor value may be a
    // credential), and counted.
    let listed = send(
        Method::GET,
        &format!("http://{}/admin/bans", sluice.admin),
        &[],
    )
    .await;
    let listed = listed.json();
    assert_eq!(listed["bans"][0]["rule"], "orgs", "{listed}");
    let shown = listed["bans"][0]["key"].as_str().unwrap().to_owned();
    assert!(shown != "acme" && !shown.contains("acme"), "{shown}");
    let metrics = send(
        Method::GET,
        &format!("http://{}/metrics", sluice.admin),
        &[],
    )
    .await;
    assert_eq!(
        metric(
            &metrics.body,
            r#"sluice_banned_requests_total{rule="orgs"}"#
        ),
        Some(1.0)
    );
    // Another org is not banned.
    let other = call("api", vec![descriptor(&[("org", "initech")], None)], 0);
    assert_eq!(ask(&mut client, other).await.overall_code, Code::Ok as i32);
}

#[tokio::test]
async fn a_reload_changes_the_domain_rules_and_keeps_their_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let rule = |rate: &str, domain: &str| {
        format!(
            "[[rule]]\nname = \"users\"\nmatch.domain = \"{domain}\"\n\
             key = [\"descriptor:user\"]\nrate = \"{rate}\"\non_change = \"keep\"\n"
        )
    };
    let sluice = sluice(dir.path(), &rule("5/m", "edge"));
    let mut client = client(&sluice).await;
    let frank = |domain: &str| call(domain, vec![descriptor(&[("user", "frank")], None)], 0);
    assert_eq!(
        ask(&mut client, frank("edge")).await.statuses[0].limit_remaining,
        4
    );
    // The rule now decides another domain with a higher rate: its bucket
    // is kept (same name, key and algorithm).
    let config = std::fs::read_to_string(dir.path().join("sluice.toml")).unwrap();
    let reloaded = config.replace(&rule("5/m", "edge"), &rule("50/m", "internal"));
    std::fs::write(dir.path().join("sluice.toml"), reloaded).unwrap();
    sluice.signal("HUP");
    crate::support::eventually(Duration::from_secs(10), "the reload", || {
        let mut client = client.clone();
        async move {
            // Another user: frank's bucket is not touched while waiting.
            let probe = call("edge", vec![descriptor(&[("user", "probe")], None)], 0);
            let answer = ask(&mut client, probe).await;
            answer.statuses[0].current_limit.is_none()
        }
    })
    .await;
    let answer = ask(&mut client, frank("internal")).await;
    assert_eq!(
        seen(&answer.statuses[0]).1,
        limit("users", 50, Unit::Minute)
    );
    // 50, less the call before the reload and this one.
    assert_eq!(answer.statuses[0].limit_remaining, 48);
}

/// The `ShouldRateLimit` request head, for raw HTTP/2 streams.
fn raw_head(addr: std::net::SocketAddr) -> http::Request<()> {
    http::Request::post(format!(
        "http://{addr}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap()
}

/// `message` as one gRPC frame.
fn framed(message: &[u8]) -> bytes::Bytes {
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    framed.into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_calls_in_flight_are_held_and_more_are_refused_at_once() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let sluice = sluice(
        dir.path(),
        &format!(
            "[store]\nbackend = \"redis\"\n[store.redis]\nurl = \"{}\"\ntimeout = \"30s\"\n\
             [[rule]]\nname = \"users\"\nmatch.domain = \"edge\"\nkey = [\"descriptor:user\"]\nrate = \"1000000/m\"\n",
            redis.url()
        ),
    );
    let addr = sluice.rls.unwrap();
    crate::support::eventually(Duration::from_secs(15), "redis answers", || async {
        raw_call(addr, &encoded("warm")).await == "0"
    })
    .await;
    let before = sluice.memory_kib("VmRSS");
    // Redis stops answering: every call that gets a place waits for it
    // (at most its 5 s), in flight. 10,100 calls on 11 connections.
    redis.freeze(true);
    let message = framed(&encoded("grace"));
    let (statuses, mut answered) = tokio::sync::mpsc::unbounded_channel::<String>();
    for streams in [1000; 10].into_iter().chain([100]) {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        // A thousand answers may arrive before their readers run: room for
        // them all under h2's bound on small unread DATA frames.
        let (h2, connection) = h2::client::Builder::new()
            .data_frame_budget(1000 * 256)
            .handshake(tcp)
            .await
            .unwrap();
        tokio::spawn(connection);
        let mut h2 = h2.ready().await.unwrap();
        for _ in 0..streams {
            h2 = h2.ready().await.unwrap();
            let (response, mut body) = h2.send_request(raw_head(addr), false).unwrap();
            body.send_data(message.clone(), true).unwrap();
            let statuses = statuses.clone();
            // Each answer is read as it comes: an HTTP/2 client that
            // leaves answers unread is sent GOAWAY.
            tokio::spawn(async move {
                let response = response.await.unwrap();
                let early = response.headers().get("grpc-status").cloned();
                let mut body = response.into_body();
                while let Some(chunk) = body.data().await {
                    let length = chunk.unwrap().len();
                    body.flow_control().release_capacity(length).unwrap();
                }
                let trailers = body.trailers().await.unwrap();
                let status = early
                    .or_else(|| trailers.and_then(|t| t.get("grpc-status").cloned()))
                    .expect("grpc-status");
                let _ = statuses.send(status.to_str().unwrap().to_owned());
            });
        }
    }
    drop(statuses);
    // The hundred over the cap are answered at once, the rest held.
    let mut refused = 0;
    while refused < 100 {
        let status = tokio::time::timeout(Duration::from_secs(4), answered.recv())
            .await
            .expect("the calls over the cap are answered at once")
            .unwrap();
        assert_eq!(status, "8", "RESOURCE_EXHAUSTED");
        refused += 1;
    }
    let held = sluice.memory_kib("VmRSS");
    eprintln!("VmRSS {before} kB before, {held} kB with 10,000 calls held");
    assert!(
        held < before + 200 * 1024,
        "10,000 calls in flight took {} MiB",
        (held - before) / 1024
    );
    // Redis answers again: every held call is answered, decided or, if its
    // 5 s ran out first, CANCELLED.
    redis.freeze(false);
    let mut decided = 0;
    while let Some(status) = tokio::time::timeout(Duration::from_secs(30), answered.recv())
        .await
        .expect("every held call is answered")
    {
        assert!(status == "0" || status == "1", "grpc-status {status}");
        decided += 1;
    }
    assert_eq!(decided, 10_000);
}

#[tokio::test]
async fn hybrid_mode_decides_calls_in_memory_and_shares_them_through_redis() {
    let redis = RedisServer::start();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let config = format!(
        "[store]\nbackend = \"redis\"\n[store.redis]\nurl = \"{}\"\nmode = \"hybrid\"\n\
         sync_interval = \"50ms\"\ninstances = 2\n\
         [[rule]]\nname = \"users\"\nmatch.domain = \"edge\"\nkey = [\"descriptor:user\"]\nrate = \"6/h\"\n",
        redis.url()
    );
    let first = sluice(dirs[0].path(), &config);
    let second = sluice(dirs[1].path(), &config);
    let mut one = client(&first).await;
    let mut two = client(&second).await;
    let grace = || call("edge", vec![descriptor(&[("user", "grace")], None)], 0);
    let admits = |answer: RateLimitResponse| answer.overall_code == Code::Ok as i32;
    // Each instance alone may take its share, 3 (docs/multi-instance.md);
    // the first takes more only because the syncs tell it that the other
    // spent nothing.
    let mut first_admitted = 0;
    for _ in 0..8 {
        if admits(ask(&mut one, grace()).await) {
            first_admitted += 1;
        }
        sync_rounds_later([first.admin, second.admin], 2.0).await;
    }
    assert!((4..=6).contains(&first_admitted), "{first_admitted}");
    // The second may take a new key's share before its sync, then learns
    // that the fleet has spent the budget.
    let mut second_admitted = 0;
    let mut refused = false;
    for _ in 0..20 {
        if admits(ask(&mut two, grace()).await) {
            second_admitted += 1;
        } else {
            refused = true;
            break;
        }
        sync_rounds_later([first.admin, second.admin], 2.0).await;
    }
    assert!(
        refused,
        "the second instance admitted {second_admitted} and never refused"
    );
    assert!(
        first_admitted + second_admitted <= 9,
        "{first_admitted} + {second_admitted}"
    );
}
