//! gRPC end to end through the real binary (docs/upstreams.md, "HTTP/2 and
//! gRPC"): a tonic server (the standard health service) behind an `h2c`
//! pool, a tonic client in front; unary and server-streaming calls,
//! metadata and trailers through, and refusals as gRPC statuses.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::StatusCode;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Request};
use tonic_health::pb::health_check_response::ServingStatus as Status;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::ServingStatus;

use crate::support::{self, write_config, SluiceProcess};

/// The tonic server: the health service, `orders` serving; every call's
/// `x-caller` metadata as the server saw it.
struct GrpcServer {
    addr: std::net::SocketAddr,
    reporter: tonic_health::server::HealthReporter,
    callers: Arc<Mutex<Vec<String>>>,
}

async fn grpc_server() -> GrpcServer {
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("orders", ServingStatus::Serving)
        .await;
    let callers = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&callers);
    let service = tonic::service::interceptor::InterceptedService::new(
        service,
        move |request: Request<()>| {
            if let Some(caller) = request.metadata().get("x-caller") {
                seen.lock()
                    .unwrap()
                    .push(caller.to_str().unwrap_or_default().to_owned());
            }
            Ok(request)
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        Server::builder()
            .add_service(service)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    GrpcServer {
        addr,
        reporter,
        callers,
    }
}

/// sluice in front of the gRPC server at `server` with `rules`, the pool
/// speaking h2c (`grpc_messages.rs` stands its own server there too).
pub(crate) fn sluice_for(
    dir: &std::path::Path,
    server: std::net::SocketAddr,
    rules: &str,
) -> SluiceProcess {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"grpc\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [[upstream]]\nname = \"grpc\"\nprotocol = \"h2c\"\nservers = [\"http://{server}\"]\n{rules}"
    );
    SluiceProcess::spawn(&write_config(dir, &config))
}

async fn client(sluice: &SluiceProcess) -> HealthClient<Channel> {
    let channel = Channel::from_shared(format!("http://{}", sluice.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

fn ask(service: &str) -> Request<HealthCheckRequest> {
    let mut request = Request::new(HealthCheckRequest {
        service: service.to_owned(),
    });
    request
        .metadata_mut()
        .insert("x-caller", "test-client".parse().unwrap());
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_and_streaming_calls_go_through_with_their_metadata_and_trailers() {
    let dir = tempfile::tempdir().unwrap();
    let server = grpc_server().await;
    let sluice = sluice_for(dir.path(), server.addr, "");
    let mut health = client(&sluice).await;
    // Unary: the answer, and its grpc-status trailer (tonic fails a call
    // whose trailers never came).
    let answer = health.check(ask("orders")).await.unwrap();
    assert_eq!(answer.get_ref().status(), Status::Serving);
    assert!(answer.metadata().get("x-request-id").is_some());
    assert_eq!(server.callers.lock().unwrap().as_slice(), ["test-client"]);
    // A status the server sets in its trailers reaches the client.
    let unknown = health.check(ask("payments")).await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");
    // Server streaming: the first status, then a change as it happens.
    let mut watch = health.watch(ask("orders")).await.unwrap().into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.status(), Status::Serving);
    server
        .reporter
        .set_service_status("orders", ServingStatus::NotServing)
        .await;
    let changed = tokio::time::timeout(Duration::from_secs(5), watch.message())
        .await
        .expect("the change streams through")
        .unwrap()
        .unwrap();
    assert_eq!(changed.status(), Status::NotServing);
    // Many calls share one HTTP/2 connection to the server.
    for _ in 0..20 {
        health.check(ask("orders")).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_call_is_resource_exhausted_with_the_pushback() {
    let dir = tempfile::tempdir().unwrap();
    let server = grpc_server().await;
    let rules =
        "[[rule]]\nname = \"checks\"\nmatch = { path = \"/grpc.health.v1.Health/Check\" }\n\
                 key = [\"global\"]\nrate = \"2/m\"\n";
    let sluice = sluice_for(dir.path(), server.addr, rules);
    let mut health = client(&sluice).await;
    for _ in 0..2 {
        health.check(ask("orders")).await.unwrap();
    }
    let refused = health.check(ask("orders")).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("rule 'checks'"), "{refused:?}");
    let metadata = refused.metadata();
    let pushback: u64 = metadata
        .get("grpc-retry-pushback-ms")
        .expect("pushback")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let retry_after: u64 = metadata
        .get("retry-after")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(pushback, retry_after * 1000);
    assert!((1..=30).contains(&retry_after), "{retry_after}");
    assert!(metadata.get("ratelimit").is_some());
    assert!(metadata.get("x-request-id").is_some());
    // The refusal never reached the server; it counts as the 429 it is.
    assert_eq!(server.callers.lock().unwrap().len(), 2);
    let text = support::get(&format!("http://{}/metrics", sluice.admin), &[])
        .await
        .body;
    let metrics = support::exposition::Exposition::parse(&text);
    assert_eq!(
        metrics.value("sluice_responses_total", &[("code_class", "4xx")]),
        1.0
    );
    // A streaming call the rule does not match goes through.
    let mut watch = health.watch(ask("orders")).await.unwrap().into_inner();
    assert!(watch.message().await.unwrap().is_some());
}

/// A call held by a delay rule is answered once admitted, as any request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_is_answered_once_admitted() {
    let dir = tempfile::tempdir().unwrap();
    let server = grpc_server().await;
    let rules = "[[rule]]\nname = \"paced\"\nkey = [\"global\"]\nrate = \"5/s\"\nburst = 1\n\
                 on_limit = \"delay\"\n";
    let sluice = sluice_for(dir.path(), server.addr, rules);
    let mut health = client(&sluice).await;
    let started = Instant::now();
    for _ in 0..3 {
        let answer = health.check(ask("orders")).await.unwrap();
        assert_eq!(answer.get_ref().status(), Status::Serving);
    }
    // 1 at once, then one every 200 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(350),
        "{:?}",
        started.elapsed()
    );
}

/// An HTTP/1.1 client reaches an HTTP/2-only server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_client_reaches_an_h2c_server() {
    let dir = tempfile::tempdir().unwrap();
    let addr = support::h2c_upstream(|request| {
        format!("{:?} {}", request.version(), request.uri().path())
    })
    .await;
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"h2\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [[upstream]]\nname = \"h2\"\nprotocol = \"h2c\"\nservers = [\"http://{addr}\"]\n"
    );
    let sluice = SluiceProcess::spawn(&write_config(dir.path(), &config));
    for path in ["/plain", "/another"] {
        let got = support::get(&format!("http://{}{path}", sluice.addr), &[]).await;
        assert_eq!(got.status, StatusCode::OK, "{got:?}");
        assert_eq!(got.body, format!("HTTP/2.0 {path}"));
    }
    let posted = support::post_json(&format!("http://{}/with-body", sluice.addr), "{}", &[]).await;
    assert_eq!(posted.body, "HTTP/2.0 /with-body");
}
