//! Upstream pools on the real binary (docs/upstreams.md): servers are
//! processes of their own on loopback (`tests/fixtures/backend.py`) that
//! the tests kill, stop and start again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};

use crate::support::backend::Backend;
use crate::support::{self, assert_problem, get, send, write_config, SluiceProcess};

/// A config with `pools` (the `[[upstream]]` and `[[route]]` tables) and
/// `rest` after them; `[server] upstream` names `default`.
fn config(default: &str, pools: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"{default}\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n{pools}"
    )
}

/// sluice on `toml`, its file kept in `dir`.
fn start(dir: &std::path::Path, toml: &str) -> SluiceProcess {
    SluiceProcess::spawn(&write_config(dir, toml))
}

fn url(sluice: &SluiceProcess, path: &str) -> String {
    format!("http://{}{path}", sluice.addr)
}

/// `/admin/upstreams`.
async fn upstreams(sluice: &SluiceProcess) -> serde_json::Value {
    get(&format!("http://{}/admin/upstreams", sluice.admin), &[])
        .await
        .json()
}

/// The admin view of the server at `addr` in pool `pool`.
async fn server_view(sluice: &SluiceProcess, pool: &str, addr: &str) -> serde_json::Value {
    let view = upstreams(sluice).await;
    let pool = view["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == pool)
        .unwrap_or_else(|| panic!("no pool {pool} in {view}"))
        .clone();
    pool["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["address"] == addr)
        .unwrap_or_else(|| panic!("no server {addr} in {pool}"))
        .clone()
}

/// The backend each of `count` GETs of `path` reached, counted by name.
async fn spread(sluice: &SluiceProcess, path: &str, count: usize) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for _ in 0..count {
        let got = get(&url(sluice, path), &[]).await;
        assert_eq!(got.status, StatusCode::OK, "{got:?}");
        *seen.entry(got.body).or_default() += 1;
    }
    seen
}

async fn metric(sluice: &SluiceProcess, name: &str, labels: &[(&str, &str)]) -> f64 {
    let text = get(&format!("http://{}/metrics", sluice.admin), &[])
        .await
        .body;
    support::exposition::Exposition::parse(&text).value(name, labels)
}

fn servers(backends: &[&Backend]) -> String {
    let urls: Vec<String> = backends
        .iter()
        .map(|b| format!("\"{}\"", b.url()))
        .collect();
    urls.join(", ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_spread_over_a_pool_by_weight_and_in_turn() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        Backend::start("a", dir.path()),
        Backend::start("b", dir.path()),
        Backend::start("c", dir.path()),
    );
    let pools = format!(
        "[[upstream]]\nname = \"even\"\nservers = [{}]\n\
         [[upstream]]\nname = \"turns\"\nbalance = \"round_robin\"\n\
         servers = [\"{}\", {{ url = \"{}\", weight = 2 }}]\n\
         [[route]]\nmatch = {{ path_prefix = \"/turns\" }}\nupstream = \"turns\"\n",
        servers(&[&a, &b, &c]),
        a.url(),
        b.url()
    );
    let sluice = start(dir.path(), &config("even", &pools));
    // Least request over three equal servers: each gets about a third.
    let even = spread(&sluice, "/", 300).await;
    for name in ["a", "b", "c"] {
        let share = even.get(name).copied().unwrap_or(0);
        assert!((60..=140).contains(&share), "{even:?}");
    }
    // Round robin with weights 1 and 2: exactly one in three to a.
    let turns = spread(&sluice, "/turns", 90).await;
    assert_eq!(turns.get("a"), Some(&30), "{turns:?}");
    assert_eq!(turns.get("b"), Some(&60), "{turns:?}");
    assert_eq!(turns.get("c"), None, "{turns:?}");
    // The admin view counts them per server.
    let view = server_view(&sluice, "turns", &a.addr.to_string()).await;
    assert_eq!(view["state"], "in");
    assert_eq!(view["weight"], 1);
    assert!(view["requests"].as_u64().unwrap() >= 30, "{view}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hash_key_stays_on_its_server_and_only_a_leaving_servers_keys_move() {
    let dir = tempfile::tempdir().unwrap();
    let backends: Vec<Backend> = ["a", "b", "c"]
        .iter()
        .map(|n| Backend::start(n, dir.path()))
        .collect();
    let refs: Vec<&Backend> = backends.iter().collect();
    let pools = format!(
        "[[upstream]]\nname = \"api\"\nbalance = \"hash:header:x-user\"\nretries = 0\n\
         eject = {{ after = 1, for = \"1m\" }}\nservers = [{}]\n",
        servers(&refs)
    );
    let sluice = start(dir.path(), &config("api", &pools));
    let users: Vec<String> = (0..60).map(|i| format!("user-{i}")).collect();
    let mut home = HashMap::new();
    for user in &users {
        let first = get(&url(&sluice, "/"), &[("x-user", user)]).await.body;
        for _ in 0..3 {
            let again = get(&url(&sluice, "/"), &[("x-user", user)]).await.body;
            assert_eq!(again, first, "{user} moved");
        }
        home.insert(user.clone(), first);
    }
    let mut per_server: HashMap<&str, usize> = HashMap::new();
    for server in home.values() {
        *per_server.entry(server).or_default() += 1;
    }
    assert_eq!(per_server.len(), 3, "{per_server:?}");
    // b dies: its first failure takes it out (after = 1); then its users
    // go elsewhere and nobody else's user moves.
    let mut backends = backends;
    backends[1].kill();
    let moved_user = home.iter().find(|(_, s)| *s == "b").unwrap().0.clone();
    let _ = get(&url(&sluice, "/"), &[("x-user", &moved_user)]).await;
    for user in &users {
        let now = get(&url(&sluice, "/"), &[("x-user", user)]).await;
        assert_eq!(now.status, StatusCode::OK, "{user}: {now:?}");
        if home[user] == "b" {
            assert_ne!(now.body, "b");
        } else {
            assert_eq!(
                now.body, home[user],
                "{user} moved though its server stayed"
            );
        }
    }
    // A request without the header is still served (by least request).
    assert_eq!(get(&url(&sluice, "/"), &[]).await.status, StatusCode::OK);
}

/// A closed loop of GETs while one of three servers is killed: no client
/// sees an error (the first failures are retried, then the server is out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_costs_clients_nothing_and_comes_back_when_it_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut backends: Vec<Backend> = ["a", "b", "c"]
        .iter()
        .map(|n| Backend::start(n, dir.path()))
        .collect();
    let refs: Vec<&Backend> = backends.iter().collect();
    let pools = format!(
        "[[upstream]]\nname = \"api\"\neject = {{ after = 3, for = \"3s\" }}\nservers = [{}]\n",
        servers(&refs)
    );
    let sluice = start(dir.path(), &config("api", &pools));
    let mut statuses: HashMap<u16, usize> = HashMap::new();
    let loops = 4;
    let mut clients = Vec::new();
    let target = url(&sluice, "/");
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for _ in 0..loops {
        let target = target.clone();
        let answered = answered.clone();
        clients.push(tokio::spawn(async move {
            let mut seen: HashMap<u16, usize> = HashMap::new();
            for _ in 0..100 {
                *seen
                    .entry(get(&target, &[]).await.status.as_u16())
                    .or_default() += 1;
                answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            seen
        }));
    }
    // The loop under way before a server is killed.
    support::eventually(
        Duration::from_secs(10),
        "the clients never got going",
        || async { answered.load(std::sync::atomic::Ordering::SeqCst) >= 4 * loops },
    )
    .await;
    backends[2].kill();
    let killed_at = Instant::now();
    for client in clients {
        for (status, count) in client.await.unwrap() {
            *statuses.entry(status).or_default() += count;
        }
    }
    assert_eq!(statuses, HashMap::from([(200, 400)]), "{statuses:?}");
    let addr = backends[2].addr.to_string();
    let view = server_view(&sluice, "api", &addr).await;
    assert_eq!(view["state"], "out", "{view}");
    assert_eq!(view["out_because"][0]["reason"], "ejected", "{view}");
    assert!(view["failures"].as_u64().unwrap() >= 3, "{view}");
    let api = [("upstream", "api")];
    assert!(metric(&sluice, "sluice_upstream_retries_total", &api).await >= 1.0);
    assert!(metric(&sluice, "sluice_upstream_ejections_total", &api).await >= 1.0);
    assert_eq!(
        metric(
            &sluice,
            "sluice_upstream_servers",
            &[("upstream", "api"), ("state", "out")]
        )
        .await,
        1.0
    );
    // Refused connections, and resets of the exchanges in flight at the kill.
    let mut failed = 0.0;
    for kind in ["connect", "other"] {
        let labels = [("upstream", "api"), ("kind", kind)];
        failed += metric(&sluice, "sluice_upstream_errors_total", &labels).await;
    }
    assert!(failed >= 3.0, "{failed}");
    assert!(killed_at.elapsed() < Duration::from_secs(30));
    // Back on its port: once the ejection ends it serves again.
    backends[2].restart();
    support::eventually(Duration::from_secs(10), "c serves again", || async {
        let seen = spread(&sluice, "/", 12).await;
        seen.contains_key("c")
    })
    .await;
}

/// A stopped (hung) server: its GETs time out, are retried on another
/// server, and it is taken out; SIGCONT and the end of its ejection bring
/// it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_server_is_retried_around_and_taken_out() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        Backend::start("a", dir.path()),
        Backend::start("b", dir.path()),
    );
    let pools = format!(
        "[[upstream]]\nname = \"api\"\nupstream_timeout = \"300ms\"\nbalance = \"round_robin\"\n\
         eject = {{ after = 2, for = \"1s\" }}\nservers = [{}]\n",
        servers(&[&a, &b])
    );
    let sluice = start(dir.path(), &config("api", &pools));
    a.pause(true);
    for _ in 0..6 {
        let got = get(&url(&sluice, "/"), &[]).await;
        assert_eq!(got.status, StatusCode::OK, "{got:?}");
        assert_eq!(got.body, "b");
    }
    let view = server_view(&sluice, "api", &a.addr.to_string()).await;
    assert_eq!(view["state"], "out", "{view}");
    assert!(
        metric(
            &sluice,
            "sluice_upstream_errors_total",
            &[("upstream", "api"), ("kind", "timeout")]
        )
        .await
            >= 2.0
    );
    // Out: the next requests go straight to b, without waiting on a.
    let started = Instant::now();
    for _ in 0..4 {
        assert_eq!(get(&url(&sluice, "/"), &[]).await.body, "b");
    }
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
    a.pause(false);
    support::eventually(Duration::from_secs(10), "a serves again", || async {
        spread(&sluice, "/", 4).await.contains_key("a")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_checks_take_a_server_out_and_bring_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        Backend::start("a", dir.path()),
        Backend::start("b", dir.path()),
    );
    let pools = format!(
        "[[upstream]]\nname = \"api\"\nservers = [{}]\n\
         health = {{ path = \"/healthz\", interval = \"100ms\", timeout = \"500ms\", fails = 2, passes = 2 }}\n",
        servers(&[&a, &b])
    );
    let sluice = start(dir.path(), &config("api", &pools));
    let addr = a.addr.to_string();
    a.set_unhealthy(true);
    support::eventually(Duration::from_secs(5), "a fails its checks", || async {
        server_view(&sluice, "api", &addr).await["state"] == "out"
    })
    .await;
    let view = server_view(&sluice, "api", &addr).await;
    assert_eq!(
        view["out_because"],
        serde_json::json!([{ "reason": "failing_checks" }])
    );
    let served = a.served().await;
    let seen = spread(&sluice, "/", 20).await;
    assert_eq!(seen.get("b"), Some(&20), "{seen:?}");
    assert_eq!(a.served().await, served, "a got requests while out");
    a.set_unhealthy(false);
    support::eventually(Duration::from_secs(5), "a passes its checks", || async {
        server_view(&sluice, "api", &addr).await["state"] == "in"
    })
    .await;
    assert!(spread(&sluice, "/", 30).await.contains_key("a"));
    // Checks are not requests.
    let view = server_view(&sluice, "api", &addr).await;
    assert_eq!(view["failures"], 0, "{view}");
}

/// Every server failing its checks: requests still go to all of them
/// (panic routing), never a 503 for "no healthy server".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_servers_out_sends_to_all_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        Backend::start("a", dir.path()),
        Backend::start("b", dir.path()),
        Backend::start("c", dir.path()),
    );
    let pools = format!(
        "[[upstream]]\nname = \"api\"\neject = {{ max_share = 0.5 }}\nservers = [{}]\n\
         health = {{ path = \"/healthz\", interval = \"100ms\", fails = 1, passes = 1 }}\n",
        servers(&[&a, &b, &c])
    );
    let sluice = start(dir.path(), &config("api", &pools));
    // One of three out: not a panic; a gets nothing.
    a.set_unhealthy(true);
    support::eventually(Duration::from_secs(5), "a out", || async {
        upstreams(&sluice).await["upstreams"][0]["servers_out"] == 1
    })
    .await;
    assert!(!spread(&sluice, "/", 30).await.contains_key("a"));
    assert_eq!(
        metric(&sluice, "sluice_upstream_panic", &[("upstream", "api")]).await,
        0.0
    );
    // Two of three out: more than max_share, so all three take requests.
    b.set_unhealthy(true);
    support::eventually(Duration::from_secs(5), "b out", || async {
        upstreams(&sluice).await["upstreams"][0]["servers_out"] == 2
    })
    .await;
    let seen = spread(&sluice, "/", 60).await;
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(upstreams(&sluice).await["upstreams"][0]["panic"], true);
    assert_eq!(
        metric(&sluice, "sluice_upstream_panic", &[("upstream", "api")]).await,
        1.0
    );
    c.set_unhealthy(true);
    support::eventually(Duration::from_secs(5), "all out", || async {
        upstreams(&sluice).await["upstreams"][0]["servers_out"] == 3
    })
    .await;
    assert_eq!(spread(&sluice, "/", 30).await.len(), 3);
}

/// What is retried: a 503 for an idempotent GET, never for a POST; a
/// connect error for a POST whose body sluice still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_follow_the_method_and_the_failure() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        Backend::start("a", dir.path()),
        Backend::start("b", dir.path()),
    );
    let refusing = support::Refusing::new();
    let closed = refusing.addr;
    let pools = format!(
        "[[upstream]]\nname = \"api\"\neject = false\nservers = [{}]\n\
         [[upstream]]\nname = \"half-closed\"\neject = false\nservers = [\"http://{closed}\", \"{}\"]\n\
         [[upstream]]\nname = \"no-retries\"\nretries = 0\neject = false\nbalance = \"round_robin\"\n\
         servers = [\"http://{closed}\", \"{}\"]\n\
         [[route]]\nmatch = {{ path_prefix = \"/half\" }}\nupstream = \"half-closed\"\n\
         [[route]]\nmatch = {{ path_prefix = \"/none\" }}\nupstream = \"no-retries\"\n",
        servers(&[&a, &b]),
        b.url(),
        b.url()
    );
    let sluice = start(dir.path(), &config("api", &pools));
    // a answers 503 to this path: a GET that meets it is tried on b.
    for _ in 0..20 {
        let got = get(&url(&sluice, "/fail-on/a/503"), &[]).await;
        assert_eq!(got.status, StatusCode::OK, "{got:?}");
        assert_eq!(got.body, "b");
    }
    let retried = metric(
        &sluice,
        "sluice_upstream_retries_total",
        &[("upstream", "api")],
    )
    .await;
    assert!(retried >= 1.0, "a never met in 20 requests?");
    // A POST that meets a gets a's 503: it may have acted on it.
    let a_before = a.served().await;
    let mut unavailable = 0;
    for _ in 0..20 {
        let got = post(&url(&sluice, "/fail-on/a/503"), "order=1").await;
        if got.status == StatusCode::SERVICE_UNAVAILABLE {
            unavailable += 1;
        } else {
            assert_eq!(got.status, StatusCode::OK);
        }
    }
    assert!(unavailable >= 1, "a never met in 20 POSTs");
    assert_eq!(
        a.served().await - a_before,
        unavailable,
        "a POST was retried"
    );
    // A refused connection reached nobody: the POST goes to b, body whole.
    for _ in 0..10 {
        let got = post(&url(&sluice, "/half"), "order=2").await;
        assert_eq!(got.status, StatusCode::OK, "{got:?}");
        assert_eq!(got.header("x-body-length"), Some("7"));
    }
    // A PUT is idempotent, and its small body was read whole: it goes to b
    // whole after a's 503.
    for _ in 0..20 {
        let got = put(&url(&sluice, "/fail-on/a/503"), "x".repeat(1000)).await;
        assert_eq!(got.status, StatusCode::OK, "{got:?}");
        assert_eq!(got.header("x-body-length"), Some("1000"));
    }
    // A body over 64 KiB streams to the server as it comes, so it is not
    // sent again after a's 503...
    let a_before = a.served().await;
    let mut unavailable = 0;
    for _ in 0..20 {
        let got = put(&url(&sluice, "/fail-on/a/503"), "y".repeat(70_000)).await;
        if got.status == StatusCode::SERVICE_UNAVAILABLE {
            unavailable += 1;
        } else {
            assert_eq!(got.header("x-body-length"), Some("70000"));
        }
    }
    assert!(unavailable >= 1, "a never met in 20 PUTs");
    assert_eq!(a.served().await - a_before, unavailable);
    // ...but a refused connection never started it: it goes to b whole.
    for _ in 0..6 {
        let got = put(&url(&sluice, "/half"), "z".repeat(70_000)).await;
        assert_eq!(got.status, StatusCode::OK, "{got:?}");
        assert_eq!(got.header("x-body-length"), Some("70000"));
    }
    // retries = 0: a refused connection is the client's 502.
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(get(&url(&sluice, "/none"), &[]).await.status.as_u16());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 502, 502]);
}

/// `PUT url` with `body` (a declared length), on a fresh connection.
async fn put(url: &str, body: String) -> support::Got {
    use http_body_util::Full;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
    let request = http::Request::put(url)
        .body(Full::new(bytes::Bytes::from(body)))
        .unwrap();
    support::collect(client.request(request).await.unwrap()).await
}

/// `POST url` with a small body, on a fresh connection.
async fn post(url: &str, body: &str) -> support::Got {
    support::post_json(url, body, &[]).await
}

/// A request that failed on one server and was answered by another was
/// admitted, and charged, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_request_is_charged_once() {
    let dir = tempfile::tempdir().unwrap();
    let b = Backend::start("b", dir.path());
    let refusing = support::Refusing::new();
    let closed = refusing.addr;
    let pools = format!(
        "[[upstream]]\nname = \"api\"\neject = false\nbalance = \"round_robin\"\n\
         servers = [\"http://{closed}\", \"{}\"]\n\
         [[rule]]\nname = \"per-ip\"\nrate = \"4/m\"\n",
        b.url()
    );
    let sluice = start(dir.path(), &config("api", &pools));
    for _ in 0..4 {
        assert_eq!(get(&url(&sluice, "/"), &[]).await.status, StatusCode::OK);
    }
    let got = get(&url(&sluice, "/"), &[]).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS, "{got:?}");
    assert_eq!(b.served().await, 4);
    let retried = metric(
        &sluice,
        "sluice_upstream_retries_total",
        &[("upstream", "api")],
    )
    .await;
    assert_eq!(
        retried, 4.0,
        "round robin gave each request the closed port first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_send_requests_to_their_pools() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new, grpc) = (
        Backend::start("old", dir.path()),
        Backend::start("new", dir.path()),
        Backend::start("grpc", dir.path()),
    );
    let pools = format!(
        "[[upstream]]\nname = \"v1\"\nservers = [\"{}\"]\n\
         [[upstream]]\nname = \"v2\"\nservers = [\"{}\"]\n\
         [[upstream]]\nname = \"grpc\"\nservers = [\"{}\"]\n\
         [[route]]\nmatch = {{ host = \"grpc.example.com\" }}\nupstream = \"grpc\"\n\
         [[route]]\nmatch = {{ path_prefix = \"/v2/\", method = [\"GET\", \"POST\"] }}\nupstream = \"v2\"\n",
        old.url(),
        new.url(),
        grpc.url()
    );
    let sluice = start(dir.path(), &config("v1", &pools));
    assert_eq!(get(&url(&sluice, "/v1/users"), &[]).await.body, "old");
    assert_eq!(get(&url(&sluice, "/v2/users"), &[]).await.body, "new");
    // The route's methods: a DELETE is not v2's.
    assert_eq!(
        send(Method::DELETE, &url(&sluice, "/v2/users"), &[])
            .await
            .body,
        "old"
    );
    assert_eq!(
        get(&url(&sluice, "/v2/users"), &[("host", "grpc.example.com")])
            .await
            .body,
        "grpc"
    );
    let view = upstreams(&sluice).await;
    assert_eq!(view["default"], "v1");
    assert_eq!(view["routes"][0]["upstream"], "grpc");
    assert_eq!(view["routes"][1]["match"], "method=GET|POST prefix=/v2/");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_does_not_resolve_is_a_502_naming_its_pool() {
    let dir = tempfile::tempdir().unwrap();
    let b = Backend::start("b", dir.path());
    let pools = format!(
        "[[upstream]]\nname = \"ghost\"\nservers = [\"http://sluice-test.invalid:80\"]\n\
         [[upstream]]\nname = \"named\"\nservers = [\"http://localhost:{}\"]\n\
         [[route]]\nmatch = {{ path_prefix = \"/ghost\" }}\nupstream = \"ghost\"\n",
        b.addr.port()
    );
    // `run` starts all the same.
    let sluice = start(dir.path(), &config("named", &pools));
    let got = get(&url(&sluice, "/ghost"), &[]).await;
    let problem = assert_problem(&got, StatusCode::BAD_GATEWAY);
    assert!(
        problem["detail"].as_str().unwrap().contains("'ghost'"),
        "{problem}"
    );
    // localhost stands for every address it resolves to; the one that
    // listens answers.
    for _ in 0..5 {
        let got = get(&url(&sluice, "/"), &[]).await;
        assert_eq!(got.status, StatusCode::OK, "{got:?}");
    }
    let view = upstreams(&sluice).await;
    let named = &view["upstreams"][1];
    assert!(named["servers"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["url"] == format!("http://localhost:{}", b.addr.port())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_health_of_the_servers_that_stay() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, b) = (
        Backend::start("a", dir.path()),
        Backend::start("b", dir.path()),
    );
    let listed = servers(&[&a, &b]);
    let pools = |rate: &str| {
        format!(
            "[[upstream]]\nname = \"api\"\nbalance = \"round_robin\"\n\
             eject = {{ after = 1, for = \"5m\" }}\nservers = [{listed}]\n\
             [[rule]]\nname = \"per-ip\"\nrate = \"{rate}\"\n"
        )
    };
    let path = write_config(dir.path(), &config("api", &pools("1000/s")));
    let sluice = SluiceProcess::spawn(&path);
    a.kill();
    for _ in 0..4 {
        assert_eq!(get(&url(&sluice, "/"), &[]).await.status, StatusCode::OK);
    }
    let addr = a.addr.to_string();
    let before = server_view(&sluice, "api", &addr).await;
    assert_eq!(before["state"], "out", "{before}");
    a.restart();
    std::fs::write(&path, config("api", &pools("999/s"))).unwrap();
    let reloaded =
        support::post_json(&format!("http://{}/admin/reload", sluice.admin), "", &[]).await;
    assert_eq!(reloaded.status, StatusCode::OK, "{reloaded:?}");
    let after = server_view(&sluice, "api", &addr).await;
    assert_eq!(after["state"], "out", "{after}");
    assert_eq!(after["out_because"], before["out_because"]);
    assert_eq!(after["failures"], before["failures"]);
    // Still out although it listens again: its ejection has minutes to run.
    assert!(!spread(&sluice, "/", 10).await.contains_key("a"));
}
