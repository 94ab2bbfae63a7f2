//! The `watchcache` binary: `watchcache serve`.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Parser, Subcommand};
use watchcache_server::{ServeConfig, Server};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "watchcache",
    version,
    about = "A Kubernetes watch cache with shared fan-out and flat-memory LIST"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a Kubernetes-compatible API on the embedded store.
    Serve(ServeArgs),
}

fn power_of_two(s: &str) -> Result<usize, String> {
    let n: usize = s.parse().map_err(|e| format!("{e}"))?;
    if n >= 2 && n.is_power_of_two() {
        Ok(n)
    } else {
        Err(format!("{n} is not a power of two of at least 2"))
    }
}

fn seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if secs.is_finite() && secs > 0.0 {
        Ok(Duration::from_secs_f64(secs))
    } else {
        Err("must be a positive number of seconds".into())
    }
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// Pods to create at start (about 4 KiB each, spread over 10 namespaces and up to 100 nodes).
    #[arg(long, default_value_t = 0)]
    seed_pods: usize,
    /// Pod updates per second after seeding.
    #[arg(long, default_value_t = 0.0)]
    churn: f64,
    /// History window per resource, in events (a power of two).
    #[arg(long, default_value = "4096", value_parser = power_of_two)]
    history: usize,
    /// Seconds between bookmarks to watchers that asked for them.
    #[arg(long, default_value = "60", value_parser = seconds)]
    bookmark_interval: Duration,
    /// Seconds consistent and not-older-than reads wait for the cache.
    #[arg(long, default_value = "3", value_parser = seconds)]
    fresh_timeout: Duration,
    /// The most watches open at once; more get 429.
    #[arg(long, default_value_t = 100_000)]
    max_watchers: usize,
}

async fn terminated() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return std::future::pending().await,
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let Command::Serve(args) = Cli::parse().command;
    let config = ServeConfig {
        addr: args.addr,
        history: args.history,
        bookmark_interval: args.bookmark_interval,
        fresh_timeout: args.fresh_timeout,
        max_watchers: args.max_watchers,
        seed_pods: args.seed_pods,
        churn: args.churn,
    };
    let server = match Server::start(config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("watchcache: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    eprintln!(
        "watchcache: serving on http://{0}\n  try: KUBECONFIG=/dev/null kubectl --server=http://{0} get pods -A",
        server.addr()
    );
    match server.run_until(terminated()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("watchcache: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
