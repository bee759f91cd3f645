//! `sluice demo`: a self-contained tour. Starts a built-in upstream and
//! sluice with `config/demo.toml` (compiled in, so it works from any
//! directory) on free 127.0.0.1 ports, sends a few bursts, prints a table of
//! what was allowed and limited with the headers seen and where the status
//! page is, and keeps serving until Ctrl-C with `curl` lines to try (or
//! exits with `--once`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use crate::config::Config;
use crate::server::Server;

/// The demo config, as shipped in `config/demo.toml`.
pub const DEMO_CONFIG: &str = include_str!("../config/demo.toml");

/// Errors the tour can hit.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("the built-in demo config is invalid:\n{0}")]
    Config(#[from] crate::config::ConfigErrors),
    #[error("could not bind a local port: {0}")]
    Bind(#[from] std::io::Error),
    #[error("a demo request failed: {0}")]
    Request(#[from] hyper_util::client::legacy::Error),
    #[error("could not build a demo request: {0}")]
    Build(#[from] http::Error),
}

/// The tour: how many times each request is sent, its path, its API key
/// and what it shows.
type Step = (usize, &'static str, Option<&'static str>, &'static str);

const TOUR: &[Step] = &[
    (
        3,
        "/api/export",
        None,
        "paced: one per 200 ms (leaky bucket)",
    ),
    (
        5,
        "/api/search?q=rust",
        Some("alice"),
        "alice searches (3 per 10s per API key)",
    ),
    (
        2,
        "/api/search?q=tokio",
        Some("bob"),
        "bob has his own bucket",
    ),
    (
        8,
        "/api/orders",
        None,
        "everything from this IP (15 per 10s)",
    ),
];

/// Runs the tour; with `once`, returns after it, otherwise calls
/// `tour_done` and serves until Ctrl-C. (The caller quiets the log until
/// `tour_done`, so that refusals are not logged into the tour's table.)
pub async fn run(once: bool, tour_done: impl FnOnce()) -> Result<(), DemoError> {
    let upstream = start_upstream().await?;
    let mut config = Config::from_toml(DEMO_CONFIG, "config/demo.toml")?;
    config.server.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.admin.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    let default = config.upstreams.default;
    config.upstreams.pools[default].servers = vec![crate::config::ServerUrl {
        url: format!("http://{upstream}")
            .parse()
            .map_err(http::Error::from)?,
        weight: 1,
    }];
    config.server.shutdown_grace = Duration::from_secs(2);
    let server = Server::bind(config).await?;
    let proxy = server.local_addr()?;
    let admin = server.admin_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));

    println!("built-in upstream  http://{upstream}");
    println!("sluice             http://{proxy}   (config/demo.toml)");
    println!("status page        http://{admin}/   (open it in a browser)");
    println!("metrics            http://{admin}/metrics\n");
    tour(proxy).await?;

    if !once {
        tour_done();
        println!("\nsluice keeps serving, and logs each request it refuses from now on. Try:");
        for line in try_by_hand(proxy, admin) {
            println!("  {line}");
        }
        println!("Ctrl-C to stop.");
        let _ = tokio::signal::ctrl_c().await;
    }
    let _ = stop.send(());
    let _ = serving.await;
    Ok(())
}

/// Commands that show each rule of the demo config at work.
fn try_by_hand(proxy: SocketAddr, admin: SocketAddr) -> [String; 5] {
    [
        format!("curl -i http://{proxy}/api/search -H 'x-api-key: alice'   # 3 per 10s per API key"),
        format!("curl -i http://{proxy}/api/search -H 'x-api-key: carol'   # a new key, a new bucket"),
        format!("curl -i http://{proxy}/api/export                         # paced: X-Sluice-Delay-Ms"),
        format!(
            "for i in $(seq 16); do curl -s -o /dev/null -w '%{{http_code}} ' http://{proxy}/api/orders; done; echo"
        ),
        format!("curl -s http://{admin}/admin/top                          # who was limited most"),
    ]
}

async fn tour(proxy: SocketAddr) -> Result<(), DemoError> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    println!(
        "{:>2}  {:<22} {:<9} {:>6} {:>5} {:>9} {:>11} {:>6}  {:<37} note",
        "#", "request", "status", "limit", "left", "reset in", "retry-after", "held", "RateLimit"
    );
    let mut number = 0;
    for &(count, path, api_key, note) in TOUR {
        for _ in 0..count {
            number += 1;
            let mut request = Request::get(format!("http://{proxy}{path}"));
            if let Some(key) = api_key {
                request = request.header("x-api-key", key);
            }
            let response = client.request(request.body(Empty::new())?).await?;
            let headers = response.headers();
            let text = |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-")
                    .to_owned()
            };
            let now = std::time::UNIX_EPOCH
                .elapsed()
                .unwrap_or_default()
                .as_secs();
            let reset_in = match text("x-ratelimit-reset").parse::<u64>() {
                Ok(reset) => format!("{}s", reset.saturating_sub(now)),
                Err(_) => "-".to_owned(),
            };
            let held = headers
                .get("x-sluice-delay-ms")
                .and_then(|v| v.to_str().ok())
                .map_or_else(|| "-".to_owned(), |ms| format!("{ms}ms"));
            let status = response.status();
            println!(
                "{:>2}  {:<22} {:<9} {:>6} {:>5} {:>9} {:>11} {:>6}  {:<37} {}",
                number,
                format!(
                    "{}{}",
                    path.split('?').next().unwrap_or(path),
                    api_key.map(|k| format!(" [{k}]")).unwrap_or_default()
                ),
                format!(
                    "{} {}",
                    status.as_u16(),
                    if status.is_success() { "ok" } else { "limit" }
                ),
                text("x-ratelimit-limit"),
                text("x-ratelimit-remaining"),
                reset_in,
                text("retry-after"),
                held,
                text("ratelimit"),
                note
            );
            // Drain the body so the connection goes back to the pool.
            let _ = response.into_body().collect().await;
        }
    }
    Ok(())
}

/// A tiny upstream that answers every request with 200 and a JSON line.
async fn start_upstream() -> Result<SocketAddr, std::io::Error> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = service_fn(|request: Request<Incoming>| async move {
                    let body = format!(
                        "{{\"upstream\":\"demo\",\"path\":\"{}\"}}\n",
                        request.uri().path()
                    );
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(address)
}
