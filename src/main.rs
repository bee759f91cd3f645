//! sluice's entry point: parse the command line, load the config, start
//! logging, run. Kept thin; the only place that uses `anyhow`.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use sluice::cli::{self, Cli, Command, ImportFormat, LogFormat};
use sluice::config::Config;
use sluice::server::Server;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{reload, EnvFilter, Registry};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Only the demo changes its log levels while running.
    let levels = if matches!(cli.command, Command::Demo { .. }) {
        Some(init_reloadable_tracing(cli.log))
    } else {
        init_tracing(cli.log);
        None
    };
    match cli.command {
        Command::Check {
            diff: Some(paths), ..
        } => check_diff(&paths[0], &paths[1]),
        Command::Check { config, .. } => match Config::load(&config) {
            Ok(config) => {
                for warning in &config.warnings {
                    eprintln!("warning: {warning}");
                }
                print!("{}", cli::describe_rules(&config, &cli::labels_of(&config)));
                ExitCode::SUCCESS
            }
            Err(errors) => {
                eprintln!("{errors}");
                ExitCode::FAILURE
            }
        },
        Command::Run { config: path } => {
            let config = match Config::load(&path) {
                Ok(config) => config,
                Err(errors) => {
                    eprintln!("{errors}");
                    return ExitCode::FAILURE;
                }
            };
            for warning in &config.warnings {
                tracing::warn!("{warning}");
            }
            report(runtime(config.server.workers).and_then(|rt| rt.block_on(run(config, path))))
        }
        Command::Demo { once } => demo(once, levels),
        Command::Replay {
            config,
            json,
            strict,
            logs,
        } => replay(&config, logs, json, strict),
        Command::Suggest {
            config,
            rule,
            spare,
            logs,
        } => suggest(&config, rule, spare, logs),
        Command::Import { format } => {
            use sluice::import::{envoy_gateway, envoy_ratelimit, traefik};
            match format {
                ImportFormat::EnvoyRatelimit { file } => import(&file, envoy_ratelimit::translate),
                ImportFormat::EnvoyGateway { file } => import(&file, envoy_gateway::translate),
                ImportFormat::Traefik { file } => import(&file, traefik::translate),
            }
        }
    }
}

/// `sluice replay --config NEW LOG...`: the report on stdout, or why the
/// replay could not run on stderr (exit 1).
fn replay(
    path: &std::path::Path,
    logs: Vec<std::path::PathBuf>,
    json: bool,
    strict: bool,
) -> ExitCode {
    let config = match Config::load(path) {
        Ok(config) => config,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::FAILURE;
        }
    };
    let replay = sluice::replay::Replay {
        config,
        logs,
        strict,
    };
    match sluice::replay::replay(replay) {
        Ok(report) if json => {
            println!("{}", serde_json::to_string(&report).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Ok(report) => {
            print!("{}", report.text());
            ExitCode::SUCCESS
        }
        Err(sluice::replay::Failed(why)) => {
            eprintln!("{why}");
            ExitCode::FAILURE
        }
    }
}

/// `sluice suggest --config PATH --rule NAME LOG...`.
fn suggest(
    path: &std::path::Path,
    rule: String,
    spare: f64,
    logs: Vec<std::path::PathBuf>,
) -> ExitCode {
    let loaded = std::fs::read_to_string(path)
        .map_err(|error| format!("{}: {error}", path.display()))
        .and_then(|text| Ok((Config::load(path).map_err(|e| e.to_string())?, text)));
    let (config, config_text) = match loaded {
        Ok(loaded) => loaded,
        Err(why) => {
            eprintln!("{why}");
            return ExitCode::FAILURE;
        }
    };
    let ask = sluice::replay::suggest::Ask {
        config,
        config_text,
        rule,
        spare,
        logs,
    };
    match sluice::replay::suggest::suggest(ask) {
        Ok(suggestion) => {
            print!("{}", suggestion.text());
            ExitCode::SUCCESS
        }
        Err(sluice::replay::Failed(why)) => {
            eprintln!("{why}");
            ExitCode::FAILURE
        }
    }
}

/// `sluice import FORMAT FILE`: the rules `translate` makes of the file on
/// stdout, or every reason there are none on stderr (and nothing on
/// stdout).
fn import(
    file: &std::path::Path,
    translate: fn(&str, &str) -> Result<String, sluice::import::ImportError>,
) -> ExitCode {
    let yaml = match std::fs::read_to_string(file) {
        Ok(yaml) => yaml,
        Err(error) => {
            eprintln!("error: could not read {}: {error}", file.display());
            return ExitCode::FAILURE;
        }
    };
    match translate(&yaml, &file.display().to_string()) {
        Ok(rules) => {
            print!("{rules}");
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            ExitCode::FAILURE
        }
    }
}

/// `sluice demo`. The tour prints a table, and the refusals it provokes
/// would be logged into the middle of it: below warnings nothing is logged
/// during the tour (unless `RUST_LOG` says otherwise), and the requests
/// tried by hand afterwards are logged as `run` logs them.
fn demo(once: bool, levels: Option<reload::Handle<EnvFilter, Registry>>) -> ExitCode {
    let levels = levels.filter(|_| std::env::var_os("RUST_LOG").is_none());
    if let Some(levels) = &levels {
        let _ = levels.reload(EnvFilter::new("warn"));
    }
    let tour_done = move || {
        if let Some(levels) = levels {
            let _ = levels.reload(EnvFilter::new(DEFAULT_LOG_FILTER));
        }
    };
    report(runtime(0).and_then(|rt| {
        rt.block_on(sluice::demo::run(once, tour_done))
            .context("demo failed")
    }))
}

/// `sluice check --diff OLD NEW`: NEW's rules, then what a reload from OLD
/// to NEW does to each rule's buckets. Exits 1 when either file is invalid.
fn check_diff(old: &std::path::Path, new: &std::path::Path) -> ExitCode {
    let (old, new) = match (Config::load(old), Config::load(new)) {
        (Ok(old), Ok(new)) => (old, new),
        (old, new) => {
            for errors in [old.err(), new.err()].into_iter().flatten() {
                eprintln!("{errors}");
            }
            return ExitCode::FAILURE;
        }
    };
    for warning in &new.warnings {
        eprintln!("warning: {warning}");
    }
    print!("{}", cli::describe_rules(&new, &cli::labels_of(&new)));
    println!("\nreloading from the old file:");
    for change in sluice::reload::diff(&old, &new) {
        println!("  {change}");
    }
    let mut kept = new.clone();
    let restart = sluice::config::keep_startup_settings(&old, &mut kept);
    if !restart.is_empty() {
        println!("  needs a restart to change: {}", restart.join(", "));
    }
    ExitCode::SUCCESS
}

async fn run(config: Config, path: std::path::PathBuf) -> anyhow::Result<()> {
    let mut server = Server::bind(config)
        .await
        .context("could not start the listeners")?;
    server.reload_from(path);
    // Caught before "serving" is logged: a SIGTERM from then on drains.
    let (shutdown, hurry) = shutdown_signals();
    tracing::info!(
        listen = %server.local_addr()?,
        scheme = server.scheme(),
        admin = %server.admin_addr()?,
        rls = %server.rls_addr().map_or_else(|| "-".to_owned(), |addr| addr.to_string()),
        http3 = %server.http3_addr().map_or_else(|| "-".to_owned(), |addr| addr.to_string()),
        "sluice is serving"
    );
    server.serve_until(shutdown, hurry).await;
    tracing::info!("stopped");
    Ok(())
}

/// The first SIGTERM or SIGINT (shutdown begins), and the second (it
/// stops waiting out `shutdown_delay`: docs/operations.md, "Shutting
/// down").
fn shutdown_signals() -> (
    impl std::future::Future<Output = ()>,
    impl std::future::Future<Output = ()>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    // Installed now, when called, not when first awaited.
    let signals = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    // How many have come: each future waits for its count.
    let (count, received) = tokio::sync::watch::channel(0u32);
    match signals {
        (Ok(mut term), Ok(mut int)) => {
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = term.recv() => {},
                        _ = int.recv() => {},
                    }
                    count.send_modify(|count| *count += 1);
                }
            });
        }
        _ => {
            // Without signal handlers sluice can still be stopped by
            // SIGKILL; serve until then (`count` dropped: the waits below
            // never end).
            tracing::warn!("could not install signal handlers");
        }
    }
    let nth = |n: u32| {
        let mut received = received.clone();
        async move {
            if received.wait_for(|count| *count >= n).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    (nth(1), nth(2))
}

/// One worker uses a current-thread runtime: no cross-thread wake-ups, which
/// is what a single core wants.
fn runtime(workers: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    let runtime = match workers {
        1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        0 => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build(),
    };
    runtime.context("could not start the async runtime")
}

/// What is logged without `RUST_LOG`: sluice's `info`, and only rustls'
/// errors. rustls warns about what a client sent (an IP address as SNI, as
/// OpenSSL clients send when given one; an alert), once per connection: a
/// line and a write per handshake, which any client can cause and no
/// operator can act on (a failed handshake is counted in
/// `sluice_tls_handshakes_total`, docs/edge.md).
const DEFAULT_LOG_FILTER: &str = "info,rustls=error";

fn init_tracing(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// [`init_tracing`] with levels that can change while running. Only for
/// the demo: the reloadable filter takes a lock for every event it lets
/// through, which `run`'s request path should not pay.
fn init_reloadable_tracing(format: LogFormat) -> reload::Handle<EnvFilter, Registry> {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    let (filter, handle) = reload::Layer::new(filter);
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let logs = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => logs.with(lines).init(),
        LogFormat::Json => logs.with(lines.json()).init(),
    }
    handle
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
