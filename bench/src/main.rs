//! The scenario runner: `cargo run --release -p watchcache-bench -- SCENARIO [--json]`.
//!
//! Every design of a scenario runs in the same invocation, each in a fresh child process (this
//! binary, re-run with a hidden `__child` command), so one design's memory peak never shows in
//! another's figures. Timing runs and memory runs are separate children: a memory run counts
//! every allocation, which would slow an allocation-heavy design in a timing run. The runner
//! shows a progress bar per child, then a summary table and the ratios between designs.
//! `--json` prints one JSON object on stdout instead (the table goes to stderr).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Map, Value, json};
use watchcache_bench::alloc::{self, Counting};
use watchcache_bench::report::{self, Column, human, human_bytes, quantile, round3};
use watchcache_bench::{cluster, fanout, http, idle, kubelets, list, patch, snapshots, soak, wire};

mod help;

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Parser)]
#[command(
    name = "watchcache-bench",
    about = "watchcache against naive designs, side by side, each design in its own process",
    version = VERSION,
    after_help = help::RUNNER
)]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

/// `--version`: the crate's version and the commit it was built from (`unknown` without git).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("WATCHCACHE_GIT_COMMIT"),
    ")"
);

#[derive(Subcommand)]
enum Scenario {
    /// One writer, W watchers copying every event into their own output buffer.
    #[command(after_help = help::FANOUT)]
    Fanout(FanoutArgs),
    /// A cluster's watchers (kubelets, Node watchers, controllers, operators) under pod and
    /// node churn.
    #[command(after_help = help::CLUSTER)]
    Cluster(ClusterArgs),
    /// C concurrent LISTs of a whole collection.
    #[command(after_help = help::LIST)]
    List(ListArgs),
    /// Memory per idle watcher.
    #[command(after_help = help::WATCHERS)]
    Watchers(WatchersArgs),
    /// End to end through `watchcache serve` over loopback.
    #[command(after_help = help::HTTP)]
    Http(HttpArgs),
    /// Kubelets (a connection each: their pods, Node, ConfigMaps and Secrets) and controllers
    /// through `watchcache serve` under pod and node churn, over each transport.
    #[command(after_help = help::KUBELETS)]
    Kubelets(KubeletsArgs),
    /// `watchcache serve` for minutes: reconnecting, stalled and listing clients; RSS, fds,
    /// open watches and errors over time.
    #[command(after_help = help::SOAK)]
    Soak(SoakArgs),
    /// On real etcd: a cache's initial sync, the event rate it follows, and a replica restarted
    /// under watch clients with history fill on and off.
    #[command(after_help = help::ETCD)]
    Etcd(EtcdArgs),
    /// On real etcd: watch clients, a tenth of them slow, under pod churn for minutes, with
    /// catch-up from etcd on and off: 410s, relists, etcd reads, RSS, healthy latency.
    #[command(name = "slow-watchers", after_help = help::SLOW_WATCHERS)]
    SlowWatchers(SlowWatchersArgs),
    /// The cost of a label PATCH of an object with N finalizers, N doubling: linear or not.
    #[command(after_help = help::PATCH)]
    Patch(PatchArgs),
    /// An operator over N custom resources with three children each: memory per resource,
    /// watch latency, change-to-child latency, a full LIST, from 1,000 to 10,000.
    #[command(after_help = help::OPERATOR)]
    Operator(OperatorArgs),
    /// `watchcache serve` under a burst of writes with a paginated LIST running through it:
    /// RSS growth against the data and the history, and whether the LIST read one snapshot;
    /// the default snapshot retention against none.
    #[command(after_help = help::SNAPSHOTS)]
    Snapshots(SnapshotsArgs),
    /// On real etcd 3.4.23: what proving a consistent read costs, the old proof (a count and a
    /// keys-only range since the cache's revision) against a fence write brought back by the
    /// cache's watch.
    #[command(after_help = help::PROOF)]
    Proof(ProofArgs),
    /// The cost of authorization: a GET and a LIST, anonymous under AlwaysAllow against a
    /// token user under RBAC with the decision cache warm and defeated; servers in process.
    #[command(after_help = help::AUTHZ)]
    Authz(AuthzArgs),
    /// What an idle TLS connection, an idle HTTP/2 connection and an idle watch on an HTTP/2
    /// stream cost `watchcache serve` in RSS, and the socket writes of one event fanned out to
    /// the streams of one connection.
    #[command(after_help = help::TRANSPORT_MEMORY)]
    TransportMemory(TransportMemoryArgs),
    /// On real etcd: the same writes watched directly on etcd (gRPC, watches multiplexed) and
    /// through `watchcache serve --etcd` (HTTP/1.1, HTTP/2, TLS): server CPU per delivered
    /// event, latency, RSS per watcher, delivered fraction.
    #[command(name = "vs-etcd", after_help = help::VS_ETCD)]
    VsEtcd(VsEtcdArgs),
    /// Runs one design in this process and prints its figures (used by the runner).
    #[command(name = "__child", hide = true)]
    Child { spec: String },
}

#[derive(Args)]
struct Output {
    /// Print one JSON object on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
    /// Only these designs (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    designs: Vec<String>,
}

#[derive(Args)]
struct FanoutArgs {
    /// Watchers; a comma-separated list sweeps.
    #[arg(long, value_delimiter = ',', default_value = "10000")]
    watchers: Vec<usize>,
    /// Events published [default: 5,000,000 deliveries' worth, between 500 and 200,000;
    /// naive_copy 500,000 deliveries' worth, at least 50; see `auto_events` for --selective].
    #[arg(long)]
    events: Option<usize>,
    /// Encoded size of each object.
    #[arg(long, default_value_t = 4096)]
    object_bytes: usize,
    /// Ring and broadcast capacity in events (a power of two, at least 64).
    #[arg(long, default_value_t = 1024)]
    history: usize,
    /// Queue depth of each per-watcher channel.
    #[arg(long, default_value_t = 16)]
    queue: usize,
    /// Each event is for one watcher only (as pods are for the kubelet of their node).
    #[arg(long)]
    selective: bool,
    /// Write an SVG plot of deliveries per second against watchers here.
    #[arg(long)]
    plot: Option<PathBuf>,
    #[command(flatten)]
    out: Output,
}

#[derive(Args)]
struct ClusterArgs {
    /// Nodes (a pods watcher and a Node watcher each); a comma-separated list sweeps.
    #[arg(long, value_delimiter = ',', default_value = "5000")]
    nodes: Vec<usize>,
    /// Events published [default: 200,000; naive_copy 50,000; tokio_broadcast 20 million
    /// reads' worth (every receiver reads every event), at least 1,000].
    #[arg(long)]
    events: Option<usize>,
    /// Encoded size of a pod (a node is half that).
    #[arg(long, default_value_t = 2048)]
    pod_bytes: usize,
    /// Ring and broadcast capacity per resource, in events (a power of two, at least 64).
    #[arg(long, default_value_t = 1024)]
    history: usize,
    /// Queue depth of each per-watcher channel.
    #[arg(long, default_value_t = 16)]
    queue: usize,
    /// Events per second offered (default: as fast as each design takes them). At a rate
    /// every design sustains, latency is the delivery path's, not the depth of its queues.
    #[arg(long)]
    rate: Option<f64>,
    /// Write SVG plots of deliveries per second and of p99 latency against nodes here (the
    /// second gets `-p99` before the extension).
    #[arg(long)]
    plot: Option<PathBuf>,
    #[command(flatten)]
    out: Output,
}

#[derive(Args)]
struct ListArgs {
    /// Items in the collection; a comma-separated list sweeps.
    #[arg(long, value_delimiter = ',', default_value = "50000")]
    items: Vec<usize>,
    /// Encoded size of each item.
    #[arg(long, default_value_t = 4096)]
    item_bytes: usize,
    /// LISTs served at once.
    #[arg(long, default_value_t = 10)]
    concurrent: usize,
    /// Rounds per timing run (the fastest is reported).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Timing runs per design, interleaved across designs so that a slow spell of the
    /// machine does not land on one design only (the fastest is reported).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Write an SVG plot of peak extra heap against items here.
    #[arg(long)]
    plot: Option<PathBuf>,
    #[command(flatten)]
    out: Output,
}

#[derive(Args)]
struct WatchersArgs {
    /// Idle watchers; a comma-separated list sweeps (up to 1,000,000).
    #[arg(long, value_delimiter = ',', default_value = "100000")]
    count: Vec<usize>,
    #[command(flatten)]
    out: Output,
}

#[derive(Args)]
struct EtcdArgs {
    /// Pods in etcd for the initial sync and the follow phases.
    #[arg(long, default_value_t = 100_000)]
    pods: usize,
    /// How long writers update pods while a cache follows.
    #[arg(long, default_value_t = 10.0)]
    follow_seconds: f64,
    /// Watch clients of the restarted replica.
    #[arg(long, default_value_t = 1000)]
    clients: usize,
    /// Which phases to run.
    #[arg(long, value_delimiter = ',', default_value = "sync,follow,restart")]
    phases: Vec<String>,
    /// A `watchcache` binary built with the `etcd` feature (default: build it).
    #[arg(long)]
    binary: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct SlowWatchersArgs {
    /// Watch clients in all.
    #[arg(long, default_value_t = 1000)]
    watchers: usize,
    /// How many of them read at a tenth of the write rate.
    #[arg(long, default_value_t = 100)]
    slow: usize,
    /// Pod updates per second.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    /// How long the writer runs.
    #[arg(long, default_value_t = 600.0)]
    seconds: f64,
    /// Pods in etcd.
    #[arg(long, default_value_t = 1000)]
    pods: usize,
    /// The server's history window in events (`--history`).
    #[arg(long, default_value_t = 1024)]
    history: usize,
    /// Seconds between the server's etcd compactions (its `--compaction-interval`; 0: none in
    /// the run). A slow client whose place falls below a compaction is 410 whatever the
    /// design: this sets how far behind catch-up can still serve it.
    #[arg(long, default_value_t = 300)]
    compaction_interval: u64,
    /// Which designs to run (catch_up, relist).
    #[arg(long, value_delimiter = ',', default_value = "catch_up,relist")]
    designs: Vec<String>,
    /// A `watchcache` binary built with the `etcd` feature (default: build it).
    #[arg(long)]
    binary: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct SnapshotsArgs {
    /// Pods seeded; a comma-separated list runs each (a server process per run).
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    pods: Vec<usize>,
    /// Pod updates per second.
    #[arg(long, default_value_t = 500.0)]
    churn: f64,
    /// The history window in events (`--history`).
    #[arg(long, default_value_t = 1024)]
    history: usize,
    /// Seconds sampled from `/readyz` on.
    #[arg(long, default_value_t = 90.0)]
    seconds: f64,
    /// Seconds the LIST's pages are spread over. It must end within the revisions the
    /// embedded store keeps (4 × history: 8.2 s at 500 writes/s with a history of 1,024),
    /// or its next continue is a 410, as on an etcd that compacted.
    #[arg(long, default_value_t = 6.0)]
    list_seconds: f64,
    /// When the LIST starts, seconds into the run.
    #[arg(long, default_value_t = 10.0)]
    list_start: f64,
    /// Pages the LIST is meant to have (`limit = pods / pages`, at least 1).
    #[arg(long, default_value_t = 1000)]
    pages: usize,
    /// The `watchcache` binary [default: next to this one, built if missing].
    #[arg(long)]
    binary: Option<PathBuf>,
    #[command(flatten)]
    out: Output,
}

#[derive(Args)]
struct ProofArgs {
    /// Keys of about 4 KB under the proven prefix; a comma-separated list runs each on a fresh
    /// etcd.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    keys: Vec<usize>,
    /// Timed repetitions of each design.
    #[arg(long, default_value_t = 50)]
    reps: usize,
    /// Writes per second to the other, busy prefix while the designs run (its keys are
    /// written once first, after the proven prefix's).
    #[arg(long, default_value_t = 100.0)]
    busy_rate: f64,
    /// Keys of the busy prefix (about 1 KB each).
    #[arg(long, default_value_t = 1000)]
    busy_keys: usize,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct VsEtcdArgs {
    /// Watch clients; a comma-separated list runs each.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,5000")]
    watchers: Vec<usize>,
    /// Writes per second; a comma-separated list runs each.
    #[arg(long, value_delimiter = ',', default_value = "20,100")]
    rate: Vec<f64>,
    /// Seconds each run counts.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Designs, comma-separated, in the order the first repetition runs them: writes-only,
    /// etcd, etcd-prev-kv, h1, h2, h1-tls, h2-tls.
    #[arg(long, default_value = "writes-only,etcd,etcd-prev-kv,h1,h2,h2-tls")]
    designs: String,
    /// Watches multiplexed on one connection (etcd's gRPC watch streams, HTTP/2).
    #[arg(long, default_value_t = 100)]
    watches_per_connection: usize,
    /// About how large each written ConfigMap is.
    #[arg(long, default_value_t = 4096)]
    value_bytes: usize,
    /// ConfigMaps the writer updates, round robin.
    #[arg(long, default_value_t = 100)]
    keys: usize,
    /// Repetitions of each point (the designs' order reversed every other one).
    #[arg(long, default_value_t = 2)]
    reps: usize,
    /// A `watchcache` binary built with the `etcd` feature (default: build it).
    #[arg(long)]
    binary: Option<PathBuf>,
    /// Print one JSON object on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct HttpArgs {
    /// Streaming watch clients.
    #[arg(long, default_value_t = 1000)]
    watchers: usize,
    /// Pod updates per second.
    #[arg(long, default_value_t = 100.0)]
    churn: f64,
    /// Seconds to watch.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Pods seeded before the run.
    #[arg(long, default_value_t = 1000)]
    seed_pods: usize,
    /// Transports, comma-separated, each a design of the run: h1, h2 (h2c), h1-tls, h2-tls.
    #[arg(long, default_value = "h1")]
    transport: String,
    /// On HTTP/2, watches multiplexed on each connection.
    #[arg(long, default_value_t = 1)]
    streams_per_connection: usize,
    /// The `watchcache` binary [default: next to this one, built if missing].
    #[arg(long)]
    binary: Option<PathBuf>,
    /// Print one JSON object on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct KubeletsArgs {
    /// Nodes, each with a kubelet.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Controllers watching all pods and all nodes, a connection each.
    #[arg(long, default_value_t = 50)]
    controllers: usize,
    /// Pods seeded per node (about 4 KiB each).
    #[arg(long, default_value_t = 10)]
    pods_per_node: usize,
    /// Pod updates per second.
    #[arg(long, default_value_t = 1000.0)]
    pod_churn: f64,
    /// Node status updates per second.
    #[arg(long, default_value_t = 500.0)]
    node_churn: f64,
    /// Seconds the clients count.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Transports, comma-separated, each a design of the run: h1, h2 (h2c), h1-tls, h2-tls.
    #[arg(long, default_value = "h1,h2,h1-tls,h2-tls")]
    transport: String,
    /// The `watchcache` binary [default: next to this one, built if missing].
    #[arg(long)]
    binary: Option<PathBuf>,
    /// Print one JSON object on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct AuthzArgs {
    /// Requests per design, operation and round.
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// Rounds (each runs the designs in order, then in reverse).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// ConfigMaps in the namespace the LIST reads.
    #[arg(long, default_value_t = 10)]
    objects: usize,
    /// Bindings to other users in the policy.
    #[arg(long, default_value_t = 200)]
    filler: usize,
    /// Print one JSON object on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct PatchArgs {
    /// Finalizer counts, comma-separated (the last is near the stored object size limit).
    #[arg(long, value_delimiter = ',', default_value = "2500,5000,10000,20000,40000")]
    lengths: Vec<usize>,
    /// Label PATCHes timed at each length.
    #[arg(long, default_value_t = 7)]
    patches: usize,
    /// Print one JSON object on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct OperatorArgs {
    /// Custom resource counts, comma-separated: a row each, on a fresh server.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    crs: Vec<usize>,
    /// The approximate size of each custom resource's spec, in bytes.
    #[arg(long, default_value_t = 2048)]
    cr_bytes: usize,
    /// Reconciling workers.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Spec changes per second.
    #[arg(long, default_value_t = 50.0)]
    change_rate: f64,
    /// Seconds of spec changes.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Print one JSON object on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct TransportMemoryArgs {
    /// Connections (and streams) opened for each idle figure, on a fresh server each.
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// Watches of one HTTP/2 connection that one event goes to, under strace.
    #[arg(long, default_value_t = 100)]
    streams: usize,
    /// The `watchcache` binary [default: next to this one, built if missing].
    #[arg(long)]
    binary: Option<PathBuf>,
    /// Print one JSON object on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.scenario {
        Scenario::Child { spec } => child(&spec),
        Scenario::Fanout(a) => run_fanout(a),
        Scenario::Cluster(a) => run_cluster(a),
        Scenario::List(a) => run_list(a),
        Scenario::Watchers(a) => run_watchers(a),
        Scenario::Http(a) => run_http(a),
        Scenario::Kubelets(a) => run_kubelets(a),
        Scenario::Soak(a) => run_soak(a),
        Scenario::Etcd(a) => run_etcd(a),
        Scenario::SlowWatchers(a) => run_slow_watchers(a),
        Scenario::Patch(a) => run_patch(a),
        Scenario::Operator(a) => run_operator(a),
        Scenario::Snapshots(a) => run_snapshots(a),
        Scenario::Proof(a) => run_proof(a),
        Scenario::Authz(a) => run_authz(a),
        Scenario::TransportMemory(a) => run_transport_memory(a),
        Scenario::VsEtcd(a) => run_vs_etcd(a),
    };
    if let Err(e) = result {
        eprintln!("watchcache-bench: {e}");
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------------------------------
// The parent side.

fn pick<T: Copy>(all: &[T], name: fn(T) -> &'static str, wanted: &[String]) -> Result<Vec<T>, String> {
    for w in wanted {
        if !all.iter().any(|d| name(*d) == w) {
            let names: Vec<_> = all.iter().map(|d| name(*d)).collect();
            return Err(format!(
                "unknown design {w:?}; the designs are {}",
                names.join(", ")
            ));
        }
    }
    Ok(all
        .iter()
        .copied()
        .filter(|d| wanted.is_empty() || wanted.iter().any(|w| w == name(*d)))
        .collect())
}

/// The glibc tunables every child runs with: the caller's `GLIBC_TUNABLES` if set, else
/// copies of any size through glibc's vector loop rather than `rep movsb`.
///
/// glibc (2.36 here) switches `memcpy` to `rep movsb` above a few KiB; on this machine's AMD
/// EPYC that runs at under a third of the vector loop's speed for the unaligned copies a
/// socket writer makes (a 4 KiB frame into a buffer at an odd offset), which would make every
/// design's figures mostly a measure of that quirk. All designs and the memcpy reference run
/// with the same setting; `GLIBC_TUNABLES= watchcache-bench …` (empty) runs with glibc's
/// default. BENCHMARKS.md shows both.
fn glibc_tunables() -> String {
    std::env::var("GLIBC_TUNABLES").unwrap_or_else(|_| TUNED_MEMCPY.to_string())
}

const TUNED_MEMCPY: &str = "glibc.cpu.x86_rep_movsb_threshold=1000000000";

/// A spinner with the time elapsed, on stderr, for a phase that reports no progress.
fn spinner(label: String) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{prefix:>40} [{elapsed_precise}] {spinner}").expect("a valid template"),
    );
    bar.set_prefix(label);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Runs `spec` in a fresh child process with a progress bar of `total` steps.
fn run_child(spec: &Value, total: u64, label: &str) -> Result<Value, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args(["__child", &spec.to_string()])
        .env("GLIBC_TUNABLES", glibc_tunables())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start a child: {e}"))?;
    let bar = ProgressBar::new(total.max(1));
    bar.set_style(
        ProgressStyle::with_template("{prefix:>32} [{elapsed_precise}] {wide_bar} {pos}/{len}")
            .expect("a valid template"),
    );
    bar.set_prefix(label.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    let stderr = child.stderr.take().expect("piped");
    let progress = {
        let bar = bar.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                match line.strip_prefix("@progress ").and_then(|n| n.parse().ok()) {
                    Some(n) => bar.set_position(n),
                    None => bar.println(line),
                }
            }
        })
    };
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    let _ = progress.join();
    bar.finish_and_clear();
    if !output.status.success() {
        return Err(format!("{label}: the child failed ({})", output.status));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).map_err(|e| format!("{label}: unreadable result {last:?}: {e}"))
}

/// A design's timing run (`events`) and memory run (`mem_events`), in two children, merged
/// into one row; `spec(mode, events)` describes a child.
fn time_and_memory(
    spec: impl Fn(&str, usize) -> Value,
    events: usize,
    mem_events: usize,
    label: &str,
) -> Result<Value, String> {
    let mut row = run_child(&spec("time", events), events as u64, &format!("{label} time"))?;
    let memory = run_child(
        &spec("memory", mem_events),
        mem_events as u64,
        &format!("{label} memory"),
    )?;
    merge(&mut row, &memory);
    Ok(row)
}

fn merge(into: &mut Value, from: &Value) {
    if let (Some(a), Some(b)) = (into.as_object_mut(), from.as_object()) {
        for (k, v) in b {
            a.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}

fn finish(
    scenario: &str,
    mut params: Value,
    rows: Vec<Value>,
    ratios: Map<String, Value>,
    columns: &[Column],
    json: bool,
) {
    params["glibc_tunables"] = json!(glibc_tunables());
    let table = report::table(&rows, columns);
    let mut ratio_lines = String::new();
    for (k, v) in &ratios {
        ratio_lines.push_str(&format!("  {k}: {v}\n"));
    }
    let text = format!("\n{scenario} {params}\n\n{table}\nratios:\n{ratio_lines}");
    if json {
        eprint!("{text}");
        let out = json!({"scenario": scenario, "params": params, "results": rows, "ratios": ratios});
        println!("{out}");
    } else {
        print!("{text}");
    }
}

fn us(x: f64) -> String {
    if x >= 1000.0 {
        format!("{:.2} ms", x / 1000.0)
    } else {
        format!("{x:.1} µs")
    }
}

fn ns(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} ms", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} µs", x / 1e3)
    } else {
        format!("{x:.0} ns")
    }
}

fn cores(x: f64) -> String {
    format!("{x:.2} cores")
}

fn ms(x: f64) -> String {
    format!("{x:.1} ms")
}

/// Events for a fanout point when `--events` is not given: about five million deliveries (at
/// least 500 events, at most 200,000), except for naive_copy, which is two orders of
/// magnitude slower: half a million deliveries (at least 50 events), so that a sweep ends in
/// minutes. Rates are per second, so the designs stay comparable.
///
/// Selective (each event for one watcher), it is 200,000 events, except for broadcast, where
/// every receiver pulls every event: 20 million pulls' worth (at least 1,000 events).
fn auto_events(design: fanout::Design, watchers: usize, selective: bool) -> usize {
    let w = watchers.max(1);
    match (design, selective) {
        (fanout::Design::TokioBroadcast, true) => (20_000_000 / w).clamp(1_000, 200_000),
        (_, true) => 200_000,
        (fanout::Design::NaiveCopy, false) => (500_000 / w).clamp(50, 200_000),
        (_, false) => (5_000_000 / w).clamp(500, 200_000),
    }
}

fn run_fanout(a: FanoutArgs) -> Result<(), String> {
    let designs = pick(&fanout::Design::ALL, fanout::Design::name, &a.out.designs)?;
    if !a.history.is_power_of_two() || a.history < 64 {
        return Err("--history must be a power of two of at least 64".into());
    }
    if a.watchers.contains(&0) || a.events == Some(0) || a.queue == 0 {
        return Err("--watchers, --events and --queue must be positive".into());
    }
    let mut rows = Vec::new();
    for &watchers in &a.watchers {
        // Selective ring watchers follow their buckets' chains and are never lapped by
        // others' traffic, so the history is the one asked for, whatever the watchers.
        let history = a.history;
        for &design in &designs {
            let events = a
                .events
                .unwrap_or_else(|| auto_events(design, watchers, a.selective));
            let spec = |mode: &str, events: usize| {
                json!({"scenario": "fanout", "design": design.name(), "mode": mode, "watchers": watchers,
                       "events": events, "object_bytes": a.object_bytes, "history": history, "queue": a.queue,
                       "selective": a.selective})
            };
            // The memory peak is reached once the history (or the queues) is full.
            let label = format!("{} W={watchers}", design.name());
            rows.push(time_and_memory(spec, events, events.min(2 * history), &label)?);
        }
    }
    let mut ratios = Map::new();
    report::ratios(
        &rows,
        "watchers",
        &[
            ("ring", "naive_copy", "deliveries_per_sec", "deliveries"),
            ("ring_protobuf", "ring", "deliveries_per_sec", "deliveries"),
            ("ring", "naive_shared", "deliveries_per_sec", "deliveries"),
            ("ring", "tokio_broadcast", "deliveries_per_sec", "deliveries"),
            ("ring", "copy_only", "deliveries_per_sec", "deliveries"),
            ("naive_copy", "ring", "bytes_per_watcher", "bytes_per_watcher"),
            ("naive_shared", "ring", "bytes_per_watcher", "bytes_per_watcher"),
        ],
        &mut ratios,
    );
    if let Some(path) = &a.plot {
        report::plot(
            path,
            &format!("fan-out of {} B objects: deliveries per second", a.object_bytes),
            &rows,
            ("watchers", "watchers"),
            ("deliveries_per_sec", "deliveries per second"),
        )?;
        eprintln!("plot written to {}", path.display());
    }
    let params = json!({"watchers": a.watchers, "events": a.events.map_or(json!("auto"), |e| json!(e)),
                        "object_bytes": a.object_bytes, "history": a.history, "queue": a.queue,
                        "selective": a.selective});
    finish(
        "fanout",
        params,
        rows,
        ratios,
        &[
            ("design", "design", human),
            ("watchers", "watchers", human),
            ("events", "events", human),
            ("deliveries/s", "deliveries_per_sec", human),
            ("publish/event", "publish_ns_per_event", ns),
            ("p50", "p50_latency_us", us),
            ("p99", "p99_latency_us", us),
            ("p99.9", "p999_latency_us", us),
            ("peak heap", "peak_heap_bytes", human_bytes),
            ("peak RSS", "peak_rss_bytes", human_bytes),
            ("bytes/watcher", "bytes_per_watcher", human_bytes),
        ],
        a.out.json,
    );
    Ok(())
}

/// Events for a cluster point when `--events` is not given (see `ClusterArgs::events`).
fn cluster_events(design: cluster::Design, nodes: usize) -> usize {
    match design {
        cluster::Design::NaiveCopy => 50_000,
        cluster::Design::TokioBroadcast => (20_000_000 / (2 * nodes).max(1)).clamp(1_000, 200_000),
        _ => 200_000,
    }
}

fn run_cluster(a: ClusterArgs) -> Result<(), String> {
    let designs = pick(&cluster::DESIGNS, cluster::Design::name, &a.out.designs)?;
    if !a.history.is_power_of_two() || a.history < 64 {
        return Err("--history must be a power of two of at least 64".into());
    }
    if a.nodes.contains(&0) || a.events == Some(0) || a.queue == 0 {
        return Err("--nodes, --events and --queue must be positive".into());
    }
    if a.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        return Err("--rate must be a positive number of events per second".into());
    }
    let mut rows = Vec::new();
    for &nodes in &a.nodes {
        for &design in &designs {
            let events = a.events.unwrap_or_else(|| cluster_events(design, nodes));
            let spec = |mode: &str, events: usize| {
                json!({"scenario": "cluster", "design": design.name(), "mode": mode, "nodes": nodes,
                       "events": events, "pod_bytes": a.pod_bytes, "history": a.history, "queue": a.queue,
                       "rate": a.rate})
            };
            let label = format!("{} N={nodes}", design.name());
            rows.push(time_and_memory(spec, events, events.min(4 * a.history), &label)?);
        }
    }
    let mut ratios = Map::new();
    let mut pairs = Vec::new();
    for baseline in ["naive_copy", "naive_shared", "tokio_broadcast", "copy_only"] {
        pairs.push(("ring", baseline, "deliveries_per_sec", "deliveries"));
    }
    for baseline in ["naive_copy", "naive_shared", "tokio_broadcast"] {
        // Above 1: the ring's p99 is that many times lower.
        pairs.push((baseline, "ring", "p99_latency_us", "p99"));
    }
    report::ratios(&rows, "nodes", &pairs, &mut ratios);
    if let Some(path) = &a.plot {
        report::plot(
            path,
            "cluster: deliveries per second",
            &rows,
            ("nodes", "nodes"),
            ("deliveries_per_sec", "deliveries per second"),
        )?;
        let p99 = path.with_file_name(format!(
            "{}-p99.{}",
            path.file_stem().and_then(|s| s.to_str()).unwrap_or("cluster"),
            path.extension().and_then(|s| s.to_str()).unwrap_or("svg")
        ));
        let latency_rows: Vec<Value> = rows
            .iter()
            .filter(|r| r.get("p99_latency_us").is_some())
            .cloned()
            .collect();
        report::plot(
            &p99,
            "cluster: p99 latency (µs)",
            &latency_rows,
            ("nodes", "nodes"),
            ("p99_latency_us", "p99 latency, µs"),
        )?;
        eprintln!("plots written to {} and {}", path.display(), p99.display());
    }
    let params = json!({"nodes": a.nodes, "events": a.events.map_or(json!("auto"), |e| json!(e)),
                        "pod_bytes": a.pod_bytes, "history": a.history, "queue": a.queue, "rate": a.rate,
                        "watchers_per_node": 2, "all_pods_watchers": cluster::ALL_PODS_WATCHERS,
                        "namespace_watchers": cluster::NAMESPACE_WATCHERS});
    finish(
        "cluster",
        params,
        rows,
        ratios,
        &[
            ("design", "design", human),
            ("nodes", "nodes", human),
            ("watchers", "watchers", human),
            ("events", "events", human),
            ("deliveries/s", "deliveries_per_sec", human),
            ("publish/event", "publish_ns_per_event", ns),
            ("p50", "p50_latency_us", us),
            ("p99", "p99_latency_us", us),
            ("p99.9", "p999_latency_us", us),
            ("peak heap", "peak_heap_bytes", human_bytes),
            ("bytes/watcher", "bytes_per_watcher", human_bytes),
        ],
        a.out.json,
    );
    Ok(())
}

fn run_list(a: ListArgs) -> Result<(), String> {
    let designs = pick(&list::Design::ALL, list::Design::name, &a.out.designs)?;
    if a.items.contains(&0) || a.concurrent == 0 || a.rounds == 0 || a.repeat == 0 {
        return Err("--items, --concurrent, --rounds and --repeat must be positive".into());
    }
    let mut rows = Vec::new();
    for &items in &a.items {
        let spec = |design: list::Design, mode: &str| {
            json!({"scenario": "list", "design": design.name(), "mode": mode, "items": items,
                   "item_bytes": a.item_bytes, "concurrent": a.concurrent, "rounds": a.rounds})
        };
        let label = |design: list::Design| format!("{} N={items}", design.name());
        // Memory first: it also says whether this machine can afford the design at all.
        let mut point = Vec::new();
        for &design in &designs {
            let memory = run_child(
                &spec(design, "memory"),
                a.rounds as u64,
                &format!("{} memory", label(design)),
            )?;
            point.push((design, memory, None::<Value>));
        }
        for r in 0..a.repeat {
            for (design, memory, best) in &mut point {
                if memory.get("skipped").is_some() {
                    continue;
                }
                let timed = run_child(
                    &spec(*design, "time"),
                    a.rounds as u64,
                    &format!("{} time {}/{}", label(*design), r + 1, a.repeat),
                )?;
                let faster = |b: &Value| report::num(&timed, "mb_per_sec") > report::num(b, "mb_per_sec");
                if best.as_ref().is_none_or(faster) {
                    *best = Some(timed);
                }
            }
        }
        for (_, memory, best) in point {
            let mut row = best.unwrap_or_else(|| memory.clone());
            merge(&mut row, &memory);
            rows.push(row);
        }
    }
    let mut ratios = Map::new();
    report::ratios(
        &rows,
        "items",
        &[
            ("buffered", "streaming", "peak_heap_bytes", "peak_heap"),
            ("naive_value", "streaming", "peak_heap_bytes", "peak_heap"),
            ("streaming", "memcpy", "mb_per_sec", "throughput"),
            ("streaming", "buffered", "mb_per_sec", "throughput"),
            ("streaming", "naive_value", "mb_per_sec", "throughput"),
            (
                "buffered_protobuf",
                "streaming_protobuf",
                "peak_heap_bytes",
                "peak_heap",
            ),
            (
                "streaming_protobuf",
                "memcpy_protobuf",
                "mb_per_sec",
                "throughput",
            ),
            (
                "streaming_protobuf",
                "buffered_protobuf",
                "mb_per_sec",
                "throughput",
            ),
        ],
        &mut ratios,
    );
    for row in &rows {
        if let (Some(s), Some(e)) = (
            report::num(row, "store_bytes_per_object"),
            report::num(row, "encoded_bytes_per_object"),
        ) {
            let mut key = format!("{}_store_vs_encoded", row["design"].as_str().unwrap_or("?"));
            if a.items.len() > 1 {
                key.push_str(&format!("@items={}", row["items"]));
            }
            ratios.insert(key, json!(round3(s / e)));
        }
    }
    if let Some(path) = &a.plot {
        report::plot(
            path,
            &format!(
                "LIST of {} B items, {} concurrent: peak extra heap",
                a.item_bytes, a.concurrent
            ),
            &rows,
            ("items", "items"),
            ("peak_heap_bytes", "peak extra heap (bytes)"),
        )?;
        eprintln!("plot written to {}", path.display());
    }
    let params = json!({"items": a.items, "item_bytes": a.item_bytes, "concurrent": a.concurrent, "rounds": a.rounds, "repeat": a.repeat});
    finish(
        "list",
        params,
        rows,
        ratios,
        &[
            ("design", "design", human),
            ("items", "items", human),
            ("wall", "wall_ms", ms),
            ("MB/s", "mb_per_sec", human),
            ("peak extra heap", "peak_heap_bytes", human_bytes),
            ("peak RSS", "peak_rss_bytes", human_bytes),
            ("store/object", "store_bytes_per_object", human_bytes),
            ("encoded/object", "encoded_bytes_per_object", human_bytes),
            ("skipped", "skipped", human),
        ],
        a.out.json,
    );
    Ok(())
}

fn run_watchers(a: WatchersArgs) -> Result<(), String> {
    let designs = pick(&idle::Design::ALL, idle::Design::name, &a.out.designs)?;
    if a.count.contains(&0) {
        return Err("--count must be positive".into());
    }
    let mut rows = Vec::new();
    for &count in &a.count {
        for &design in &designs {
            let spec =
                json!({"scenario": "watchers", "design": design.name(), "mode": "memory", "count": count});
            rows.push(run_child(
                &spec,
                count as u64,
                &format!("{} N={count}", design.name()),
            )?);
        }
    }
    let mut ratios = Map::new();
    report::ratios(
        &rows,
        "count",
        &[
            ("task_channel", "ring", "bytes_per_watcher", "bytes_per_watcher"),
            ("task_channel", "ring", "rss_bytes_per_watcher", "rss_per_watcher"),
        ],
        &mut ratios,
    );
    finish(
        "watchers",
        json!({"count": a.count}),
        rows,
        ratios,
        &[
            ("design", "design", human),
            ("count", "count", human),
            ("heap/watcher", "bytes_per_watcher", human_bytes),
            ("RSS/watcher", "rss_bytes_per_watcher", human_bytes),
            ("peak heap", "peak_heap_bytes", human_bytes),
            ("peak RSS", "peak_rss_bytes", human_bytes),
        ],
        a.out.json,
    );
    Ok(())
}

/// The `watchcache` binary: `--binary`, else next to this one (built first if missing).
#[derive(Args)]
struct SoakArgs {
    /// Watch clients, the stalled ones included.
    #[arg(long, default_value_t = 2000)]
    watchers: usize,
    /// Of the watchers, how many send a watch and never read.
    #[arg(long, default_value_t = 100)]
    stalled: usize,
    /// Pod updates per second.
    #[arg(long, default_value_t = 20.0)]
    churn: f64,
    /// Pods seeded before the run.
    #[arg(long, default_value_t = 1000)]
    seed_pods: usize,
    /// How long to run.
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 30.0)]
    sample_every: f64,
    /// The `watchcache` binary [default: next to this one, built if missing].
    #[arg(long)]
    binary: Option<PathBuf>,
    /// Print one JSON object on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
}

fn run_soak(a: SoakArgs) -> Result<(), String> {
    if a.watchers == 0 || a.stalled > a.watchers || !(0.0 < a.minutes && a.minutes <= 24.0 * 60.0) {
        return Err("--watchers must be positive and at least --stalled, --minutes up to a day".into());
    }
    if !(a.churn.is_finite() && a.churn >= 0.0 && a.sample_every >= 1.0) {
        return Err("--churn must be a rate, --sample-every at least 1 s".into());
    }
    let binary = server_binary(a.binary)?;
    let p = soak::Params {
        watchers: a.watchers,
        stalled: a.stalled,
        churn: a.churn,
        seed_pods: a.seed_pods,
        minutes: a.minutes,
        sample_every: a.sample_every,
    };
    let bar = ProgressBar::new((a.minutes * 60.0).ceil() as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>32} [{elapsed_precise}] {wide_bar} {pos}/{len} s")
            .expect("a valid template"),
    );
    bar.set_prefix(format!("soak W={} stalled={}", a.watchers, a.stalled));
    let b = bar.clone();
    let out = soak::run(&binary, &p, &move |s| b.set_position(s))?;
    bar.finish_and_clear();
    let c = &out.counts;
    let load = |x: &std::sync::atomic::AtomicU64| x.load(std::sync::atomic::Ordering::Relaxed);
    let rows: Vec<Value> = out
        .samples
        .iter()
        .map(|s| json!({"at_secs": round3(s.at_secs), "rss_bytes": s.rss, "open_fds": s.fds, "open_watches": s.open_watches}))
        .collect();
    // Warm-up: the first quarter of the run. Growth compares the end with the sample there.
    let warm = out.samples.get(out.samples.len() / 4);
    let last = out.samples.last();
    let mut ratios = Map::new();
    if let (Some(w), Some(l)) = (warm, last) {
        let growth = |from: &soak::Sample| (l.rss as f64 - from.rss as f64) / from.rss.max(1) as f64;
        ratios.insert("rss_growth_after_warmup".into(), json!(round3(growth(w))));
        // History windows fill for as long as the store's revision retention takes at the
        // churn rate (4 × history revisions); over the second half the run is past that.
        if let Some(h) = out.samples.get(out.samples.len() / 2) {
            ratios.insert("rss_growth_second_half".into(), json!(round3(growth(h))));
        }
        let fds: Vec<u64> = out.samples[out.samples.len() / 4..]
            .iter()
            .map(|s| s.fds)
            .collect();
        ratios.insert("fds_min_after_warmup".into(), json!(fds.iter().min()));
        ratios.insert("fds_max_after_warmup".into(), json!(fds.iter().max()));
    }
    for (k, v) in [
        ("events", &c.events),
        ("clean_ends", &c.clean_ends),
        ("expired_410", &c.expired_410),
        ("relists", &c.relists),
        ("stalled_reopened", &c.stalled_reopened),
        ("list_pages", &c.list_pages),
        ("list_continue_410", &c.list_continue_410),
        ("errors", &c.errors),
    ] {
        ratios.insert(k.into(), json!(load(v)));
    }
    finish(
        "soak",
        json!({"watchers": a.watchers, "stalled": a.stalled, "churn": a.churn, "seed_pods": a.seed_pods, "minutes": a.minutes}),
        rows,
        ratios,
        &[
            ("t (s)", "at_secs", human),
            ("server RSS", "rss_bytes", human_bytes),
            ("open fds", "open_fds", human),
            ("open watches", "open_watches", human),
        ],
        a.json,
    );
    Ok(())
}

/// The server binary the scenario starts: `given` (`--binary`), or the `watchcache` beside
/// this runner, built first when the runner runs under cargo (`cargo run -p
/// watchcache-bench` builds the runner only, and a server left from an older build would be
/// measured without a word).
fn server_binary(given: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(b) = given {
        return Ok(b);
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let sibling = exe.with_file_name("watchcache");
    let Ok(cargo) = std::env::var("CARGO") else {
        // Run by hand: the binary beside it is the one there is.
        return if sibling.exists() {
            Ok(sibling)
        } else {
            Err(format!(
                "no server binary at {}; pass --binary",
                sibling.display()
            ))
        };
    };
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    // In the runner's own profile (the name of the directory it runs from: `debug` is the dev
    // profile), so that the binary beside it is the one built.
    let dir = exe
        .parent()
        .and_then(|d| d.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("release");
    let profile: Vec<&str> = match dir {
        "debug" => vec![],
        "release" => vec!["--release"],
        other => vec!["--profile", other],
    };
    eprintln!(
        "building the server: {cargo} build {} -p watchcache-server",
        profile.join(" ")
    );
    let status = Command::new(cargo)
        .arg("build")
        .args(&profile)
        .args(["-p", "watchcache-server", "--manifest-path"])
        .arg(&manifest)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() || !sibling.exists() {
        return Err(format!(
            "no server binary at {}; pass --binary",
            sibling.display()
        ));
    }
    Ok(sibling)
}

fn factor(x: f64) -> String {
    format!("{x:.2}x")
}

/// The `authz` scenario: see `watchcache_bench::authz`. Servers and clients share this
/// process: its CPU per request is the client's and the server's together.
fn run_authz(a: AuthzArgs) -> Result<(), String> {
    use watchcache_bench::authz::{self, Design, OPERATIONS};
    if a.requests == 0 || a.rounds == 0 {
        return Err("--requests and --rounds must not be zero".into());
    }
    let p = authz::Params {
        requests: a.requests,
        rounds: a.rounds,
        objects: a.objects,
        filler: a.filler,
    };
    let total = (a.requests * a.rounds * 2 * Design::ALL.len() * OPERATIONS.len()) as u64;
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>32} [{elapsed_precise}] {wide_bar} {pos}/{len}")
            .expect("a valid template"),
    );
    bar.set_prefix("requests");
    let b = bar.clone();
    let mut outcomes = authz::run(&p, &move |n| b.set_position(n))?;
    bar.finish_and_clear();
    let mut rows = Vec::new();
    let mut medians = Map::new();
    for (d, design) in Design::ALL.iter().enumerate() {
        for (o, op) in OPERATIONS.iter().enumerate() {
            let out = &mut outcomes[d][o];
            let n = out.latencies_ns.len().max(1) as f64;
            let p50 = quantile(&mut out.latencies_ns, 0.5).unwrap_or(0) as f64 / 1e3;
            let p99 = quantile(&mut out.latencies_ns, 0.99).unwrap_or(0) as f64 / 1e3;
            medians.insert(
                format!("{}_{op}", design.name()),
                json!([p50, out.cpu_seconds * 1e6 / n]),
            );
            rows.push(json!({
                "design": design.name(),
                "operation": op,
                "requests": out.latencies_ns.len(),
                "failed": out.failed,
                "p50_us": round3(p50),
                "p99_us": round3(p99),
                "cpu_us_per_request": round3(out.cpu_seconds * 1e6 / n),
                "requests_per_sec": round3(n / out.elapsed.as_secs_f64().max(1e-9)),
            }));
        }
    }
    let mut ratios = Map::new();
    for op in OPERATIONS {
        let base = &medians[&format!("anonymous_{op}")];
        for design in [Design::RbacCached, Design::RbacUncached] {
            let this = &medians[&format!("{}_{op}", design.name())];
            let r = |i: usize| {
                round3(this[i].as_f64().unwrap_or(0.0) / base[i].as_f64().unwrap_or(1.0).max(1e-9))
            };
            ratios.insert(format!("{}_vs_anonymous_{op}_p50", design.name()), json!(r(0)));
            ratios.insert(format!("{}_vs_anonymous_{op}_cpu", design.name()), json!(r(1)));
        }
    }
    finish(
        "authz",
        json!({"requests": a.requests, "rounds": a.rounds, "objects": a.objects, "filler": a.filler,
            "cpu": "process (clients and servers in one process)"}),
        rows,
        ratios,
        &[
            ("design", "design", human),
            ("op", "operation", human),
            ("requests", "requests", human),
            ("failed", "failed", human),
            ("p50", "p50_us", us),
            ("p99", "p99_us", us),
            ("CPU/request", "cpu_us_per_request", us),
            ("requests/s", "requests_per_sec", human),
        ],
        a.json,
    );
    Ok(())
}

/// The `patch` scenario: see `watchcache_bench::patch`.
fn run_patch(a: PatchArgs) -> Result<(), String> {
    if a.lengths.is_empty() || a.patches == 0 {
        return Err("--lengths and --patches must not be empty or zero".into());
    }
    let p = patch::Params {
        lengths: a.lengths.clone(),
        patches: a.patches,
    };
    let bar = ProgressBar::new((a.lengths.len() * a.patches) as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>32} [{elapsed_precise}] {wide_bar} {pos}/{len}")
            .expect("a valid template"),
    );
    bar.set_prefix("label PATCH");
    let b = bar.clone();
    let rows = patch::run(&p, &move |n| b.set_position(n))?;
    bar.finish_and_clear();
    let mut out = Vec::new();
    let mut ratios = Map::new();
    for (i, r) in rows.iter().enumerate() {
        let mut row = json!({
            "finalizers": r.length,
            "object_bytes": r.object_bytes,
            "median_ms": round3(r.median.as_secs_f64() * 1e3),
            "min_ms": round3(r.min.as_secs_f64() * 1e3),
            "us_per_1000": round3(r.median.as_secs_f64() * 1e9 / r.length.max(1) as f64),
        });
        if let Some(prev) = i.checked_sub(1).map(|j| &rows[j]) {
            let d = round3(patch::per_doubling(prev, r));
            row["per_doubling"] = json!(d);
            ratios.insert(format!("per_doubling_{}_to_{}", prev.length, r.length), json!(d));
        }
        out.push(row);
    }
    finish(
        "patch",
        json!({"lengths": a.lengths, "patches": a.patches}),
        out,
        ratios,
        &[
            ("finalizers", "finalizers", human),
            ("object", "object_bytes", human_bytes),
            ("median", "median_ms", ms),
            ("min", "min_ms", ms),
            ("µs per 1000", "us_per_1000", human),
            ("per doubling", "per_doubling", factor),
        ],
        a.json,
    );
    Ok(())
}

/// The `operator` scenario: see `watchcache_bench::operator`.
fn run_operator(a: OperatorArgs) -> Result<(), String> {
    use watchcache_bench::operator;
    if a.crs.is_empty() || a.crs.iter().any(|&n| n == 0 || n > 100_000) {
        return Err("--crs: counts from 1 to 100000".into());
    }
    if a.cr_bytes > 512 * 1024 || a.concurrency == 0 || a.concurrency > 256 {
        return Err("--cr-bytes up to 524288, --concurrency from 1 to 256".into());
    }
    if !(a.change_rate > 0.0 && a.change_rate <= 10_000.0 && a.seconds > 0.0 && a.seconds <= 600.0) {
        return Err("--change-rate from 0 to 10000, --seconds from 0 to 600".into());
    }
    let p = operator::Params {
        crs: a.crs.clone(),
        cr_bytes: a.cr_bytes,
        concurrency: a.concurrency,
        change_rate: a.change_rate,
        seconds: a.seconds,
    };
    let bar = ProgressBar::new(a.crs.iter().sum::<usize>() as u64);
    bar.set_prefix("operator");
    let b = bar.clone();
    let rows = operator::run(&p, &move |n| b.inc(n))?;
    bar.finish_and_clear();
    let mut ratios = Map::new();
    if let (Some(first), Some(last)) = (rows.first(), rows.last())
        && rows.len() > 1
    {
        for key in [
            "heap_per_cr_bytes",
            "watch_p99_ms",
            "change_to_child_p99_ms",
            "list_ms",
            "initial_reconcile_s",
        ] {
            if let (Some(a), Some(b)) = (first[key].as_f64(), last[key].as_f64())
                && a > 0.0
            {
                let name = format!("{key}_{}_to_{}", first["crs"], last["crs"]);
                ratios.insert(name, json!(round3(b / a)));
            }
        }
    }
    finish(
        "operator",
        json!({"crs": a.crs, "cr_bytes": a.cr_bytes, "concurrency": a.concurrency,
               "change_rate": a.change_rate, "seconds": a.seconds}),
        rows,
        ratios,
        &[
            ("CRs", "crs", human),
            ("CR JSON", "cr_json_bytes", human_bytes),
            ("heap/CR", "heap_per_cr_bytes", human_bytes),
            ("heap/JSON", "heap_to_json", factor),
            ("creates/s", "creates_per_sec", human),
            ("reconcile all", "initial_reconcile_s", seconds),
            ("changes", "changes", human),
            ("seen", "children_seen", human),
            ("watch p50", "watch_p50_ms", ms),
            ("watch p99", "watch_p99_ms", ms),
            ("to child p50", "change_to_child_p50_ms", ms),
            ("to child p99", "change_to_child_p99_ms", ms),
            ("LIST", "list_ms", ms),
            ("LIST bytes", "list_bytes", human_bytes),
            ("errors", "errors", human),
        ],
        a.json,
    );
    Ok(())
}

fn seconds(x: f64) -> String {
    format!("{x:.2} s")
}

fn run_http(a: HttpArgs) -> Result<(), String> {
    if a.watchers == 0 || !(0.0 < a.seconds && a.seconds <= 3600.0) || a.churn.is_nan() || a.churn <= 0.0 {
        return Err("--watchers and --churn must be positive, --seconds between 0 and 3600".into());
    }
    if a.streams_per_connection == 0 || a.streams_per_connection > 100_000 {
        return Err("--streams-per-connection must be from 1 to 100000".into());
    }
    let transports = wire::parse_transports(&a.transport)?;
    let binary = server_binary(a.binary)?;
    let server = wire::Server {
        binary: &binary,
        args: vec![
            "--seed-pods".into(),
            a.seed_pods.to_string(),
            "--churn".into(),
            a.churn.to_string(),
        ],
        glibc_tunables: glibc_tunables(),
        churn: wire::Churn::Server,
        also_measured: None,
        not_clients: None,
    };
    let mut rows = Vec::new();
    for &t in &transports {
        let plan = http::plan(a.watchers, a.streams_per_connection, t);
        let bar = seconds_bar(
            a.seconds,
            format!("{} W={} churn={}/s", t.name(), a.watchers, a.churn),
        );
        let b = bar.clone();
        let mut out = wire::run(&server, t, &plan, a.seconds, &move |s| b.set_position(s))?;
        bar.finish_and_clear();
        rows.push(http::row(t, a.watchers, a.churn, &mut out));
    }
    let mut ratios = Map::new();
    transport_ratios(&rows, &mut ratios);
    for row in &rows {
        if let Some(d) = report::num(row, "delivered_vs_written") {
            ratios.insert(
                format!("{}_delivered_vs_written", row["design"].as_str().unwrap_or("?")),
                json!(d),
            );
        }
    }
    finish(
        "http",
        json!({"watchers": a.watchers, "churn": a.churn, "seconds": a.seconds, "seed_pods": a.seed_pods,
               "transport": a.transport, "streams_per_connection": a.streams_per_connection}),
        rows,
        ratios,
        &[
            ("design", "design", human),
            ("watchers", "watchers", human),
            ("conns", "connections", human),
            ("deliveries/s", "deliveries_per_sec", human),
            ("expected/s", "expected_deliveries_per_sec", human),
            ("delivered", "delivered_vs_written", fraction),
            ("p50", "p50_latency_us", us),
            ("p99", "p99_latency_us", us),
            ("p99.9", "p999_latency_us", us),
            ("RSS/conn", "rss_bytes_per_connection", human_bytes),
            ("RSS/stream", "rss_bytes_per_stream", human_bytes),
            ("handshake CPU", "handshake_cpu_us", us),
            ("server peak RSS", "peak_rss_bytes", human_bytes),
            ("server CPU", "server_cores", cores),
            ("CPU/frame", "server_cpu_us_per_frame", us),
            ("client CPU", "client_cores", cores),
            ("failed", "failed_watchers", human),
        ],
        a.json,
    );
    Ok(())
}

/// The `vs-etcd` scenario: see `watchcache_bench::vs_etcd`.
fn run_vs_etcd(a: VsEtcdArgs) -> Result<(), String> {
    use watchcache_bench::vs_etcd::{self, Design, Params};
    let p = Params {
        watchers: a.watchers.clone(),
        rates: a.rate.clone(),
        seconds: a.seconds,
        value_bytes: a.value_bytes,
        keys: a.keys,
        per_connection: a.watches_per_connection,
        reps: a.reps,
        designs: Design::parse_list(&a.designs)?,
        glibc_tunables: glibc_tunables(),
    };
    p.check()?;
    let binary = if p.designs.iter().any(|d| matches!(d, Design::Watchcache(_))) {
        Some(server_binary_with_etcd(a.binary.clone())?)
    } else {
        None
    };
    let bar = seconds_bar(a.seconds, String::new());
    let b = bar.clone();
    let rows = vs_etcd::run(&p, binary.as_deref(), &move |what, s| {
        b.set_prefix(what.to_owned());
        b.set_position(s);
    });
    bar.finish_and_clear();
    let rows = rows?;
    let ratios = vs_etcd::ratios(&p, &rows);
    finish(
        "vs-etcd",
        json!({"watchers": a.watchers, "rate": a.rate, "seconds": a.seconds, "designs": a.designs,
               "watches_per_connection": a.watches_per_connection, "value_bytes": a.value_bytes,
               "keys": a.keys, "reps": a.reps}),
        rows,
        ratios,
        &[
            ("design", "design", human),
            ("watchers", "watchers", human),
            ("rate", "rate", human),
            ("rep", "rep", human),
            ("writes/s", "writes_per_sec", human),
            ("delivered", "delivered_fraction", fraction),
            ("sampled min", "sampled_min_vs_writes", fraction),
            ("lost", "sampled_lost", human),
            ("server CPU", "server_cores", cores),
            ("etcd CPU", "etcd_cores", cores),
            ("CPU/event", "server_cpu_us_per_event", us),
            ("p50", "p50_latency_us", us),
            ("p99", "p99_latency_us", us),
            ("RSS/watcher", "rss_bytes_per_watcher", human_bytes),
            ("client CPU", "client_cores", cores),
            ("failed", "failed_watchers", human),
            ("error", "error", human),
        ],
        a.json,
    );
    Ok(())
}

fn fraction(x: f64) -> String {
    format!("{x:.3}")
}

/// A progress bar over a run's seconds.
fn seconds_bar(seconds: f64, prefix: String) -> ProgressBar {
    let bar = ProgressBar::new(seconds.ceil() as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>32} [{elapsed_precise}] {wide_bar} {pos}/{len} s")
            .expect("a valid template"),
    );
    bar.set_prefix(prefix);
    bar
}

/// Each transport's CPU per frame, memory per stream and handshake cost against HTTP/1.1's
/// (the same security: h2 against h1, h2-tls against h1-tls).
fn transport_ratios(rows: &[Value], ratios: &mut Map<String, Value>) {
    let find = |name: &str| rows.iter().find(|r| r["design"] == name);
    for (a, b) in [
        ("h2", "h1"),
        ("h2-tls", "h1-tls"),
        ("h1-tls", "h1"),
        ("h2-tls", "h2"),
    ] {
        let (Some(ra), Some(rb)) = (find(a), find(b)) else {
            continue;
        };
        for field in [
            "server_cpu_us_per_frame",
            "rss_bytes_per_stream",
            "handshake_cpu_us",
        ] {
            if let (Some(x), Some(y)) = (report::num(ra, field), report::num(rb, field))
                && y > 0.0
            {
                ratios.insert(format!("{a}_vs_{b}_{field}"), json!(round3(x / y)));
            }
        }
    }
}

fn run_kubelets(a: KubeletsArgs) -> Result<(), String> {
    if a.nodes == 0 || a.nodes > 100_000 || a.controllers > 10_000 || a.pods_per_node > 1000 {
        return Err("--nodes from 1 to 100000, --controllers up to 10000, --pods-per-node up to 1000".into());
    }
    let rates = 0.0..=100_000.0;
    if !(0.0 < a.seconds
        && a.seconds <= 3600.0
        && rates.contains(&a.pod_churn)
        && rates.contains(&a.node_churn))
    {
        return Err("--seconds between 0 and 3600, the churns from 0 to 100000".into());
    }
    let transports = wire::parse_transports(&a.transport)?;
    let binary = server_binary(a.binary)?;
    let p = kubelets::Params {
        nodes: a.nodes,
        controllers: a.controllers,
        pods_per_node: a.pods_per_node,
        pod_churn: a.pod_churn,
        node_churn: a.node_churn,
        seconds: a.seconds,
    };
    let server = wire::Server {
        binary: &binary,
        args: kubelets::server_args(&p),
        glibc_tunables: glibc_tunables(),
        churn: wire::Churn::Server,
        also_measured: None,
        not_clients: None,
    };
    let mut rows = Vec::new();
    for &t in &transports {
        let plan = kubelets::plan(&p, t);
        let bar = seconds_bar(a.seconds, format!("{} nodes={}", t.name(), a.nodes));
        let b = bar.clone();
        let out = wire::run(&server, t, &plan, a.seconds, &move |s| b.set_position(s));
        bar.finish_and_clear();
        match out {
            Ok(mut out) => rows.push(kubelets::row(t, &p, &mut out)),
            // A transport this machine cannot run (too many connections for its open files
            // limit) is reported, and the others still run.
            Err(e) => {
                eprintln!("{}: {e}", t.name());
                rows.push(json!({"design": t.name(), "nodes": a.nodes, "error": e}));
            }
        }
    }
    let mut ratios = Map::new();
    transport_ratios(&rows, &mut ratios);
    finish(
        "kubelets",
        json!({"nodes": a.nodes, "controllers": a.controllers, "pods_per_node": a.pods_per_node,
               "pod_churn": a.pod_churn, "node_churn": a.node_churn, "seconds": a.seconds,
               "transport": a.transport}),
        rows,
        ratios,
        &[
            ("design", "design", human),
            ("conns", "connections", human),
            ("streams", "streams", human),
            ("pods w/s", "pod_events_written_per_sec", human),
            ("nodes w/s", "node_events_written_per_sec", human),
            ("delivered", "delivered_fraction", fraction),
            ("pods p50", "kubelet_pods_p50_us", us),
            ("pods p99", "kubelet_pods_p99_us", us),
            ("nodes p50", "kubelet_nodes_p50_us", us),
            ("nodes p99", "kubelet_nodes_p99_us", us),
            ("ctrl p99", "controller_pods_p99_us", us),
            ("CPU/frame", "server_cpu_us_per_frame", us),
            ("server CPU", "server_cores", cores),
            ("RSS/conn", "rss_bytes_per_connection", human_bytes),
            ("RSS/stream", "rss_bytes_per_stream", human_bytes),
            ("handshake CPU", "handshake_cpu_us", us),
            ("failed", "failed_watches", human),
        ],
        a.json,
    );
    Ok(())
}

/// The `snapshots` designs: the server's default snapshot retention (75 s: a paginated LIST's
/// snapshot stays pinned while its pages are asked for, and 75 s after its last one); none
/// (`--snapshot-retention 0`: the pin goes at the reflector's next retention tick, and later
/// pages are made from the ring or read from the store while either still holds their
/// revision); and the default with no LIST, what the churn alone costs. Each: its retention
/// (`None`: the default) and whether it lists.
const SNAPSHOT_DESIGNS: [(&str, Option<f64>, bool); 3] = [
    ("pinned", None, true),
    ("retention_0", Some(0.0), true),
    ("no_list", None, false),
];

fn run_snapshots(a: SnapshotsArgs) -> Result<(), String> {
    let names: Vec<&str> = SNAPSHOT_DESIGNS.iter().map(|d| d.0).collect();
    let designs = pick(&names, |n| n, &a.out.designs)?;
    if a.pods.contains(&0) || a.pages == 0 || !a.history.is_power_of_two() {
        return Err("--pods and --pages must be positive, --history a power of two".into());
    }
    if !(a.churn.is_finite()
        && a.churn > 0.0
        && 0.0 < a.list_seconds
        && 0.0 <= a.list_start
        && a.list_start + a.list_seconds <= a.seconds
        && a.seconds <= 3600.0)
    {
        return Err(
            "--churn must be positive, --list-start + --list-seconds at most --seconds, --seconds up to an hour".into(),
        );
    }
    let binary = server_binary(a.binary)?;
    let mut rows = Vec::new();
    for &pods in &a.pods {
        for &design in &designs {
            let &(_, retention, lists) = SNAPSHOT_DESIGNS
                .iter()
                .find(|d| d.0 == design)
                .expect("picked from the designs");
            let p = snapshots::Params {
                pods,
                churn: a.churn,
                history: a.history,
                retention,
                seconds: a.seconds,
                list_seconds: lists.then_some(a.list_seconds),
                list_start: a.list_start,
                pages: a.pages,
            };
            let bar = ProgressBar::new(a.seconds.ceil() as u64);
            bar.set_style(
                ProgressStyle::with_template("{prefix:>32} [{elapsed_precise}] {wide_bar} {pos}/{len} s")
                    .expect("a valid template"),
            );
            bar.set_prefix(format!("{design} pods={pods}"));
            let b = bar.clone();
            let out = snapshots::run(&binary, &p, &move |s| b.set_position(s))?;
            bar.finish_and_clear();
            rows.push(snapshot_row(design, &p, &out));
        }
        // Where the heap goes, in one process with every allocation counted: the store's log,
        // the cache's ring, and a pinned snapshot over the writes of the run after the LIST
        // starts.
        let writes = (a.churn * (a.seconds - a.list_start)).round() as usize;
        let spec = json!({"scenario": "snapshots", "mode": "memory", "pods": pods, "history": a.history,
                          "writes": writes});
        let mut heap = run_child(&spec, 4, &format!("heap pods={pods}"))?;
        heap["design"] = json!("heap (in-process)");
        heap["pods"] = json!(pods);
        rows.push(heap);
    }
    let mut ratios = Map::new();
    for row in &rows {
        let mut key = format!(
            "{}_growth_vs_data_and_history",
            row["design"].as_str().unwrap_or("?")
        );
        if a.pods.len() > 1 {
            key.push_str(&format!("@pods={}", row["pods"]));
        }
        if let Some(r) = report::num(row, "growth_vs_data_and_history") {
            ratios.insert(key, json!(r));
        }
    }
    report::ratios(
        &rows,
        "pods",
        &[
            ("retention_0", "pinned", "rss_growth_bytes", "rss_growth"),
            ("pinned", "no_list", "rss_growth_bytes", "rss_growth"),
            ("retention_0", "no_list", "rss_growth_bytes", "rss_growth"),
        ],
        &mut ratios,
    );
    finish(
        "snapshots",
        json!({"pods": a.pods, "churn": a.churn, "history": a.history, "seconds": a.seconds,
               "list_seconds": a.list_seconds, "list_start": a.list_start, "pages": a.pages}),
        rows,
        ratios,
        &[
            ("design", "design", human),
            ("pods", "pods", human),
            ("writes/s", "writes_per_sec", human),
            ("RSS ready", "rss_ready_bytes", human_bytes),
            ("RSS start", "rss_start_bytes", human_bytes),
            ("RSS peak", "rss_peak_bytes", human_bytes),
            ("RSS end", "rss_end_bytes", human_bytes),
            ("growth", "rss_growth_bytes", human_bytes),
            ("after 10 s", "rss_growth_after_warmup_bytes", human_bytes),
            ("data", "data_bytes", human_bytes),
            ("history", "history_bytes", human_bytes),
            ("growth ÷ (data + history)", "growth_vs_data_and_history", human),
            ("pages", "list_pages", human),
            ("completed", "list_completed", human),
            ("one RV", "list_one_revision", human),
            ("410s", "list_expired", human),
            ("pinned max", "pinned_snapshots_max", human),
            ("store log", "store_log_heap_bytes", human_bytes),
            ("cache growth", "cache_growth_heap_bytes", human_bytes),
            ("pinned snapshot", "pinned_snapshot_heap_bytes", human_bytes),
            ("undone reads", "undone_reads", human),
            ("store reads", "store_reads", human),
        ],
        a.out.json,
    );
    Ok(())
}

/// One `snapshots` run as a row: the figures, then the samples.
fn snapshot_row(design: &str, p: &snapshots::Params, out: &snapshots::Outcome) -> Value {
    let s = &out.samples;
    let warm = snapshots::WARM_UP.as_secs_f64();
    // The start is the lowest RSS of the warm-up, `/readyz` included: with many pods the
    // seeding's garbage is still resident when the server becomes ready, and goes within
    // seconds (2.3 GiB at ready, 1.6 GiB three seconds later, at 100,000 pods).
    let (start_at, start) = s
        .iter()
        .filter(|x| x.at_secs < warm)
        .map(|x| (x.at_secs, x.rss))
        .fold((0.0, out.rss_start), |low, x| if x.1 < low.1 { x } else { low });
    let peak = s
        .iter()
        .filter(|x| x.at_secs >= start_at)
        .map(|x| x.rss)
        .max()
        .unwrap_or(0)
        .max(start);
    let end = s.last().map_or(0, |x| x.rss);
    let history = s.iter().map(|x| x.history_bytes).max().unwrap_or(0);
    let growth = peak.saturating_sub(start);
    // Writes a second after the warm-up, from the cache's revisions (about one a write).
    let writes_per_sec = match (s.iter().find(|x| x.at_secs >= warm), s.last()) {
        (Some(a), Some(b)) if b.at_secs > a.at_secs && b.revision >= a.revision => {
            (b.revision - a.revision) as f64 / (b.at_secs - a.at_secs)
        }
        _ => 0.0,
    };
    let peak_after_warm = s
        .iter()
        .filter(|x| x.at_secs >= warm)
        .map(|x| x.rss)
        .max()
        .unwrap_or(out.rss_warm);
    let mut row = json!({
        "design": design,
        "pods": p.pods,
        "ready_seconds": round3(out.ready_seconds),
        "rss_ready_bytes": out.rss_start,
        "rss_start_bytes": start,
        "rss_start_at_seconds": round3(start_at),
        "rss_warm_bytes": out.rss_warm,
        "rss_peak_bytes": peak,
        "rss_end_bytes": end,
        "rss_hwm_bytes": out.rss_hwm,
        "rss_growth_bytes": growth,
        "rss_growth_end_bytes": end.saturating_sub(start),
        "rss_growth_after_warmup_bytes": peak_after_warm.saturating_sub(out.rss_warm),
        "writes_per_sec": round3(writes_per_sec),
        "data_bytes": out.data_bytes,
        "history_bytes": history,
        "growth_vs_data_and_history": round3(growth as f64 / (out.data_bytes + history).max(1) as f64),
        "pinned_snapshots_max": s.iter().map(|x| x.pinned_snapshots).max().unwrap_or(0),
        "undone_reads": s.last().map_or(0, |x| x.undone_reads),
        "store_reads": s.last().map_or(0, |x| x.store_reads),
        "samples": s.iter().map(|x| json!([round3(x.at_secs), x.rss, x.history_bytes, x.pinned_snapshots,
                                             x.undone_reads, x.store_reads, x.revision])).collect::<Vec<_>>(),
        "samples_columns": ["at_secs", "rss_bytes", "history_bytes", "pinned_snapshots", "undone_reads", "store_reads",
                            "revision"],
    });
    if p.list_seconds.is_some() {
        let l = &out.lister;
        let list = json!({
            "limit": p.limit(),
            "list_pages": l.pages,
            "list_items": l.items,
            "list_body_bytes": l.bytes,
            "list_completed": l.completed.to_string(),
            "list_one_revision": if l.completed { l.one_revision.to_string() } else { "-".into() },
            "list_revisions": l.revisions,
            "list_seconds": round3(l.seconds),
            "list_expired": l.expired,
            "list_first_expired_at_seconds": l.first_expired.map(|(t, _)| round3(t)),
            "list_first_expired_after_pages": l.first_expired.map(|(_, n)| n),
            "list_errors": l.errors,
        });
        merge(&mut row, &list);
    }
    row
}

/// The `proof` scenario: see `watchcache_bench::etcd` (its module docs). Each prefix size runs
/// on a fresh one-member etcd, in this process (etcd's CPU is read from its own).
fn run_proof(a: ProofArgs) -> Result<(), String> {
    use watchcache_bench::etcd;
    if a.keys.contains(&0) || a.reps == 0 || !(a.busy_rate.is_finite() && a.busy_rate >= 0.0) {
        return Err("--keys and --reps must be positive, --busy-rate a rate".into());
    }
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    let mut version = String::new();
    for &keys in &a.keys {
        let out = rt.block_on(async {
            // etcd's own default for periodic progress notifications (ten minutes): none
            // comes during a run, so every notification the fence design sees is its fence's.
            let c = watchcache_tests::etcd::EtcdCluster::start_with(1, Duration::from_secs(600))
                .await
                .ok_or("etcd is not installed (apt-get install -y etcd-server)")?;
            let source = etcd::connect(&c.endpoints()).await?;
            let bar = ProgressBar::new(keys as u64);
            bar.set_prefix(format!("populating etcd with {keys} pods"));
            bar.set_style(
                ProgressStyle::with_template("{prefix:>40} [{elapsed_precise}] {wide_bar} {pos}/{len}")
                    .expect("a valid template"),
            );
            let b = bar.clone();
            etcd::populate(&source, keys, &move |n| b.set_position(n)).await?;
            bar.finish_and_clear();
            let pid = etcd::etcd_pid(&c.endpoint(0));
            if pid.is_none() {
                eprintln!("proof: etcd's pid not found; no CPU figures");
            }
            let bar = spinner(format!("proof: {keys} keys, {} repetitions each", a.reps));
            let out = etcd::proof(&c.endpoints(), pid, keys, a.busy_keys, a.busy_rate, a.reps).await;
            bar.finish_and_clear();
            let out = out?;
            Ok::<_, String>(out)
        })?;
        version = out.version.clone();
        let mut old = out.old_ns.clone();
        let mut count = out.count_ns.clone();
        let mut keys_only = out.keys_only_ns.clone();
        let mut fence = out.fence_ns.clone();
        let mut put = out.fence_put_ns.clone();
        let q = |v: &mut Vec<u64>, p: f64| quantile(v, p).map(|x| round3(x as f64 / 1e6));
        let cpu_ms = |c: Option<f64>| c.map(|ns| round3(ns / 1e6));
        rows.push(json!({
            "design": "old_proof", "keys": keys, "reps": old.len(),
            "p50_ms": q(&mut old, 0.5), "p99_ms": q(&mut old, 0.99), "max_ms": q(&mut old, 1.0),
            "count_only_p50_ms": q(&mut count, 0.5), "count_only_p99_ms": q(&mut count, 0.99),
            "keys_only_p50_ms": q(&mut keys_only, 0.5), "keys_only_p99_ms": q(&mut keys_only, 0.99),
            "etcd_cpu_ms_per_op": cpu_ms(out.old_cpu_ns),
            "busy_writes_per_sec": round3(out.busy_writes_per_sec),
            "busy_etcd_cores": out.busy_cores.map(round3),
        }));
        rows.push(json!({
            "design": "fence", "keys": keys, "reps": fence.len(),
            "p50_ms": q(&mut fence, 0.5), "p99_ms": q(&mut fence, 0.99), "max_ms": q(&mut fence, 1.0),
            "put_p50_ms": q(&mut put, 0.5), "put_p99_ms": q(&mut put, 0.99),
            "etcd_cpu_ms_per_op": cpu_ms(out.fence_cpu_ns),
            "busy_writes_per_sec": round3(out.busy_writes_per_sec),
            "busy_etcd_cores": out.busy_cores.map(round3),
        }));
    }
    let mut ratios = Map::new();
    report::ratios(
        &rows,
        "keys",
        &[
            ("old_proof", "fence", "p50_ms", "p50"),
            ("old_proof", "fence", "p99_ms", "p99"),
            ("old_proof", "fence", "etcd_cpu_ms_per_op", "etcd_cpu"),
        ],
        &mut ratios,
    );
    finish(
        "proof",
        json!({"keys": a.keys, "reps": a.reps, "busy_rate": a.busy_rate, "busy_keys": a.busy_keys,
               "etcd_version": version}),
        rows,
        ratios,
        &[
            ("design", "design", human),
            ("keys", "keys", human),
            ("p50", "p50_ms", ms),
            ("p99", "p99_ms", ms),
            ("max", "max_ms", ms),
            ("count p50", "count_only_p50_ms", ms),
            ("keys-only p50", "keys_only_p50_ms", ms),
            ("put p50", "put_p50_ms", ms),
            ("etcd CPU/op", "etcd_cpu_ms_per_op", ms3),
            ("busy writes/s", "busy_writes_per_sec", human),
        ],
        a.json,
    );
    Ok(())
}

fn ms3(x: f64) -> String {
    format!("{x:.3} ms")
}

/// The `etcd` scenario: see `watchcache_bench::etcd`. Each phase runs on a fresh one-member
/// etcd; sync and follow in children of this binary (the sync with the heap counted), the
/// restart against `watchcache serve --etcd` processes.
fn run_etcd(a: EtcdArgs) -> Result<(), String> {
    use watchcache_bench::etcd;
    if a.pods == 0 || a.clients == 0 || !(0.0 < a.follow_seconds && a.follow_seconds <= 600.0) {
        return Err("--pods and --clients must be positive, --follow-seconds up to 600".into());
    }
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let cluster = |populate: usize| {
        rt.block_on(async {
            // etcd's own default for periodic progress notifications (ten minutes).
            let c = watchcache_tests::etcd::EtcdCluster::start_with(1, Duration::from_secs(600))
                .await
                .ok_or("etcd is not installed (apt-get install -y etcd-server)")?;
            let source = etcd::connect(&c.endpoints()).await?;
            let bar = ProgressBar::new(populate as u64);
            bar.set_prefix(format!("populating etcd with {populate} pods"));
            bar.set_style(
                ProgressStyle::with_template("{prefix:>40} [{elapsed_precise}] {wide_bar} {pos}/{len}")
                    .expect("a valid template"),
            );
            let b = bar.clone();
            let rate = etcd::populate(&source, populate, &move |n| b.set_position(n)).await?;
            bar.finish_and_clear();
            Ok::<_, String>((c, rate))
        })
    };
    let phase = |p: &str| a.phases.iter().any(|x| x == p);
    let mut rows = Vec::new();
    let mut ratios = Map::new();
    if phase("sync") || phase("follow") {
        let (c, populate_rate) = cluster(a.pods)?;
        if phase("sync") {
            for fill in [false, true] {
                let spec = json!({"scenario": "etcd", "phase": "sync", "mode": "memory",
                                  "endpoints": c.endpoints(), "history_fill": fill});
                let mut row = run_child(&spec, 1, &format!("sync {} pods fill={fill}", a.pods))?;
                row["design"] = json!(format!("sync history_fill={fill}"));
                row["etcd_writes_per_sec"] = json!(round3(populate_rate));
                rows.push(row);
            }
        }
        if phase("follow") {
            let spec = json!({"scenario": "etcd", "phase": "follow", "mode": "time",
                              "endpoints": c.endpoints(), "pods": a.pods, "seconds": a.follow_seconds});
            let mut row = run_child(&spec, 1, &format!("follow {} s", a.follow_seconds))?;
            row["design"] = json!("follow");
            if let (Some(c), Some(e)) = (
                report::num(&row, "cache_events_per_sec"),
                report::num(&row, "etcd_writes_per_sec"),
            ) {
                ratios.insert("follow_cache_vs_etcd_rate".into(), json!(round3(c / e)));
            }
            rows.push(row);
        }
    }
    if phase("restart") {
        let binary = server_binary_with_etcd(a.binary.clone())?;
        let mut relists = Vec::new();
        for fill in [true, false] {
            let (c, _) = cluster(1000)?;
            let bar = spinner(format!("restart: {} clients, history fill {fill}", a.clients));
            let out = etcd::restart(&binary, &c.endpoints(), a.clients, fill);
            bar.finish_and_clear();
            let out = out?;
            relists.push(out.relists);
            rows.push(json!({
                "design": format!("restart history_fill={fill}"),
                "clients": out.clients,
                "relists": out.relists,
                "expired_watch_starts": out.expired,
                "ready_seconds": round3(out.ready_seconds),
                "recovery_seconds": round3(out.recovery_seconds),
                "peak_rss_bytes": out.peak_rss,
            }));
        }
        let secs: Vec<f64> = rows
            .iter()
            .filter(|r| r["design"].as_str().is_some_and(|d| d.starts_with("restart")))
            .filter_map(|r| report::num(r, "recovery_seconds"))
            .collect();
        if let [on, off] = secs[..] {
            ratios.insert(
                "restart_recovery_off_vs_on".into(),
                json!(round3(off / on.max(1e-9))),
            );
        }
        ratios.insert("restart_relists_on".into(), json!(relists[0]));
        ratios.insert("restart_relists_off".into(), json!(relists[1]));
    }
    finish(
        "etcd",
        json!({"pods": a.pods, "follow_seconds": a.follow_seconds, "clients": a.clients}),
        rows,
        ratios,
        &[
            ("design", "design", human),
            ("objects", "objects", human),
            ("sync", "sync_seconds", seconds_text),
            ("peak heap", "peak_heap_bytes", human_bytes),
            ("heap after", "live_heap_bytes", human_bytes),
            ("peak RSS", "peak_rss_bytes", human_bytes),
            ("etcd writes/s", "etcd_writes_per_sec", human),
            ("cache events/s", "cache_events_per_sec", human),
            ("catch-up", "catch_up_ms", ms_text),
            ("relists", "relists", human),
            ("410s", "expired_watch_starts", human),
            ("ready", "ready_seconds", seconds_text),
            ("recovery", "recovery_seconds", seconds_text),
        ],
        a.json,
    );
    Ok(())
}

/// The `slow-watchers` scenario: see `watchcache_bench::slow` (its module docs).
fn run_slow_watchers(a: SlowWatchersArgs) -> Result<(), String> {
    use watchcache_bench::{etcd, slow};
    if a.watchers == 0 || a.slow > a.watchers || a.pods == 0 || a.history == 0 {
        return Err("--watchers, --pods and --history must be positive, --slow at most --watchers".into());
    }
    if !(0.0 < a.rate && a.rate <= 10_000.0 && 0.0 < a.seconds && a.seconds <= 24.0 * 3600.0) {
        return Err("--rate must be in (0, 10000], --seconds in (0, 86400]".into());
    }
    for d in &a.designs {
        if d != "catch_up" && d != "relist" {
            return Err(format!("unknown design {d:?}; the designs are catch_up, relist"));
        }
    }
    let binary = server_binary_with_etcd(a.binary.clone())?;
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for design in &a.designs {
        let cluster = rt.block_on(async {
            let c = watchcache_tests::etcd::EtcdCluster::start_with(1, Duration::from_secs(600))
                .await
                .ok_or("etcd is not installed (apt-get install -y etcd-server)")?;
            let source = etcd::connect(&c.endpoints()).await?;
            etcd::populate(&source, a.pods, &|_| {}).await?;
            Ok::<_, String>(c)
        })?;
        let plan = slow::Plan {
            watchers: a.watchers,
            slow: a.slow,
            rate: a.rate,
            seconds: a.seconds,
            pods: a.pods,
            history: a.history,
            catch_up_reads: if design == "catch_up" {
                watchcache_server::config::DEFAULT_CATCH_UP_READS
            } else {
                0
            },
            compaction_seconds: a.compaction_interval,
        };
        let bar = ProgressBar::new(a.seconds as u64);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>40} [{elapsed_precise}] {wide_bar} {pos}/{len} s")
                .expect("a valid template"),
        );
        bar.set_prefix(format!("{design}: {} watchers, {} slow", a.watchers, a.slow));
        let b = bar.clone();
        let out = slow::run(&binary, &cluster.endpoints(), &plan, &move |s| b.set_position(s));
        bar.finish_and_clear();
        let out = out?;
        drop(cluster);
        rows.push(json!({
            "design": design,
            "written": out.written,
            "expired": out.expired,
            "expired_sent": out.expired_sent,
            "relists": out.relists,
            "relisted_bytes": out.relisted_bytes,
            "catch_ups": out.catch_ups,
            "catch_up_events": out.catch_up_events,
            "catch_ups_refused": out.catch_ups_refused,
            "etcd_ranges": out.etcd_ranges,
            "etcd_watches": out.etcd_watches,
            "rss_start_bytes": out.rss.first().map_or(0, |r| r.1),
            "rss_end_bytes": out.rss.last().map_or(0, |r| r.1),
            "rss_over_time": out.rss.iter().map(|(t, b)| json!([round3(*t), b])).collect::<Vec<_>>(),
            "peak_rss_bytes": out.peak_rss,
            "peak_catch_up_bytes": out.peak_catch_up_bytes,
            "peak_history_waiting_bytes": out.peak_history_waiting_bytes,
            "history_received_bytes": out.history_received_bytes,
            "history_dropped_bytes": out.history_dropped_bytes,
            "p50_latency_us": out.p50_us,
            "p99_latency_us": out.p99_us,
            "p999_latency_us": out.p999_us,
            "healthy_events": out.healthy_events,
            "slow_events": out.slow_events,
            "read_on_seconds": round3(out.read_on.seconds),
            "read_on_current": out.read_on.current,
            "read_on_expired": out.read_on.expired,
            "read_on_relists": out.read_on.relists,
            "read_on_relisted_bytes": out.read_on.relisted_bytes,
            "read_on_events": out.read_on.events,
            "read_on_catch_up_events": out.read_on.catch_up_events,
            "read_on_etcd_ranges": out.read_on.etcd_ranges,
            "read_on_etcd_watches": out.read_on.etcd_watches,
            "read_on_peak_rss_bytes": out.read_on.peak_rss,
        }));
    }
    let mut ratios = Map::new();
    let row = |d: &str| rows.iter().find(|r| r["design"] == d);
    if let (Some(on), Some(off)) = (row("catch_up"), row("relist")) {
        for (name, field) in [
            ("relists_relist_vs_catch_up", "relists"),
            ("relisted_bytes_relist_vs_catch_up", "relisted_bytes"),
            ("expired_sent_relist_vs_catch_up", "expired_sent"),
            (
                "read_on_relisted_bytes_relist_vs_catch_up",
                "read_on_relisted_bytes",
            ),
            ("read_on_seconds_relist_vs_catch_up", "read_on_seconds"),
            ("p99_relist_vs_catch_up", "p99_latency_us"),
            ("peak_rss_relist_vs_catch_up", "peak_rss_bytes"),
        ] {
            if let (Some(x), Some(y)) = (report::num(off, field), report::num(on, field)) {
                // Counts at least 1 (none is as one); seconds at least a millisecond.
                let floor = if field.ends_with("seconds") { 0.001 } else { 1.0 };
                ratios.insert(name.into(), json!(round3(x / y.max(floor))));
            }
        }
    }
    finish(
        "slow-watchers",
        json!({"watchers": a.watchers, "slow": a.slow, "rate": a.rate, "seconds": a.seconds,
               "pods": a.pods, "history": a.history, "compaction_interval": a.compaction_interval}),
        rows,
        ratios,
        &[
            ("design", "design", human),
            ("410s", "expired", human),
            ("410s sent", "expired_sent", human),
            ("relists", "relists", human),
            ("listed", "relisted_bytes", human_bytes),
            ("catch-ups", "catch_ups", human),
            ("caught up", "catch_up_events", human),
            ("refused", "catch_ups_refused", human),
            ("etcd ranges", "etcd_ranges", human),
            ("etcd watches", "etcd_watches", human),
            ("RSS start", "rss_start_bytes", human_bytes),
            ("RSS end", "rss_end_bytes", human_bytes),
            ("peak RSS", "peak_rss_bytes", human_bytes),
            ("catch-up held", "peak_catch_up_bytes", human_bytes),
            ("etcd backlog", "peak_history_waiting_bytes", human_bytes),
            ("history received", "history_received_bytes", human_bytes),
            ("dropped", "history_dropped_bytes", human_bytes),
            ("p50", "p50_latency_us", us),
            ("p99", "p99_latency_us", us),
            ("p99.9", "p999_latency_us", us),
            ("healthy events", "healthy_events", human),
            ("slow events", "slow_events", human),
            ("read-on s", "read_on_seconds", human),
            ("current", "read_on_current", human),
            ("read-on 410s", "read_on_expired", human),
            ("read-on relists", "read_on_relists", human),
            ("read-on listed", "read_on_relisted_bytes", human_bytes),
            ("read-on events", "read_on_events", human),
            ("read-on caught up", "read_on_catch_up_events", human),
            ("read-on etcd ranges", "read_on_etcd_ranges", human),
            ("read-on etcd watches", "read_on_etcd_watches", human),
            ("read-on peak RSS", "read_on_peak_rss_bytes", human_bytes),
        ],
        a.json,
    );
    Ok(())
}

/// The `transport-memory` scenario: see `watchcache_bench::transport` (its module docs).
fn run_transport_memory(a: TransportMemoryArgs) -> Result<(), String> {
    use watchcache_bench::transport;
    if a.count < 2 || a.streams == 0 {
        return Err("--count must be at least 2, --streams positive".into());
    }
    if Command::new("strace").arg("-V").output().is_err() {
        return Err("strace is not installed (apt-get install -y strace)".into());
    }
    let binary = server_binary(a.binary)?;
    let bar = ProgressBar::new(4);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>40} [{elapsed_precise}] {wide_bar} {pos}/{len}")
            .expect("a valid template"),
    );
    bar.set_prefix(format!("{} connections, {} streams", a.count, a.streams));
    bar.enable_steady_tick(Duration::from_millis(200));
    let b = bar.clone();
    let out = transport::run(&binary, a.count, a.streams, &move |n| b.set_position(n));
    bar.finish_and_clear();
    eprintln!(
        "{} writes after one event to {} streams of one connection (and the POST's answer):",
        out.writes.len(),
        out.streams
    );
    for w in &out.writes {
        eprintln!("  {w}");
    }
    let kib = |k: f64| json!(round3(k * 1024.0));
    let rows = vec![
        json!({"design": "tls_h1_idle_connection", "count": out.count, "rss_bytes_each": kib(out.tls_h1_kib)}),
        json!({"design": "tls_h2_idle_connection", "count": out.count, "rss_bytes_each": kib(out.tls_h2_kib)}),
        json!({"design": "h2_idle_watch_stream", "count": out.count - 1, "rss_bytes_each": kib(out.h2_stream_kib)}),
        json!({"design": "h2_event_writes", "count": out.streams, "writes": out.writes.len(),
               "write_lines": out.writes}),
    ];
    finish(
        "transport-memory",
        json!({"count": a.count, "streams": a.streams}),
        rows,
        Map::new(),
        &[
            ("design", "design", human),
            ("count", "count", human),
            ("RSS each", "rss_bytes_each", human_bytes),
            ("writes", "writes", human),
        ],
        a.json,
    );
    Ok(())
}

fn seconds_text(x: f64) -> String {
    format!("{x:.2} s")
}

fn ms_text(x: f64) -> String {
    format!("{x:.1} ms")
}

/// The `watchcache` binary with the `etcd` feature: `given`, or built now.
fn server_binary_with_etcd(given: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(b) = given {
        return Ok(b);
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("building the server with etcd: {cargo} build --release -p watchcache-server --features etcd");
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "-p",
            "watchcache-server",
            "--features",
            "etcd",
            "--manifest-path",
        ])
        .arg(&manifest)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let binary = exe.with_file_name("watchcache");
    if !status.success() || !binary.exists() {
        return Err(format!("no server binary at {}; pass --binary", binary.display()));
    }
    Ok(binary)
}

fn child_etcd(spec: &Value) -> Result<Value, String> {
    use watchcache_bench::etcd;
    let endpoints: Vec<String> = spec["endpoints"]
        .as_array()
        .ok_or("the spec lacks endpoints")?
        .iter()
        .filter_map(|e| e.as_str().map(str::to_owned))
        .collect();
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    match spec["phase"].as_str() {
        Some("sync") => {
            let fill = spec["history_fill"].as_bool().unwrap_or(false);
            let s = rt.block_on(etcd::sync(&endpoints, fill))?;
            Ok(json!({"objects": s.objects, "sync_seconds": round3(s.seconds),
                      "peak_heap_bytes": s.peak_heap, "live_heap_bytes": s.live_heap,
                      "peak_rss_bytes": s.peak_rss}))
        }
        Some("follow") => {
            let seconds = spec["seconds"].as_f64().ok_or("the spec lacks seconds")?;
            let f = rt.block_on(etcd::follow(&endpoints, field(spec, "pods")?, seconds))?;
            Ok(json!({"etcd_writes_per_sec": round3(f.etcd_writes_per_sec),
                      "cache_events_per_sec": round3(f.cache_events_per_sec),
                      "catch_up_ms": round3(f.catch_up_ms)}))
        }
        other => Err(format!("unknown etcd phase {other:?}")),
    }
}

// ---------------------------------------------------------------------------------------
// The child side: one design, one mode; figures as one JSON line on stdout.

fn field(spec: &Value, name: &str) -> Result<usize, String> {
    spec[name]
        .as_u64()
        .map(|v| v as usize)
        .ok_or_else(|| format!("the spec lacks {name}"))
}

fn progress(n: u64) {
    eprintln!("@progress {n}");
}

fn child(spec: &str) -> Result<(), String> {
    let spec: Value = serde_json::from_str(spec).map_err(|e| e.to_string())?;
    let memory = spec["mode"] == "memory";
    if memory {
        Counting::enable();
    }
    let design = spec["design"].as_str().unwrap_or_default();
    let mut row = match spec["scenario"].as_str() {
        Some("fanout") => child_fanout(&spec, design, memory)?,
        Some("cluster") => child_cluster(&spec, design, memory)?,
        Some("list") => child_list(&spec, design, memory)?,
        Some("watchers") => child_watchers(&spec, design)?,
        Some("etcd") => child_etcd(&spec)?,
        Some("snapshots") => child_snapshots(&spec)?,
        other => return Err(format!("unknown scenario {other:?}")),
    };
    if !memory || spec["scenario"] == "watchers" {
        row["peak_rss_bytes"] = json!(alloc::peak_rss_bytes());
    }
    println!("{row}");
    Ok(())
}

fn child_snapshots(spec: &Value) -> Result<Value, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let pods = field(spec, "pods")?;
    let h = rt.block_on(snapshots::heap(
        pods,
        field(spec, "history")?,
        field(spec, "writes")?,
        &progress,
    ))?;
    Ok(json!({
        "store_log_heap_bytes": h.store_log,
        "store_revisions": h.store_revisions,
        "store_log_heap_bytes_per_revision": round3(h.store_log as f64 / h.store_revisions.max(1) as f64),
        "cache_growth_heap_bytes": h.cache_growth,
        "history_bytes": h.history_bytes,
        "pinned_snapshot_heap_bytes": h.pinned,
        "pinned_writes": h.writes,
        "data_bytes": snapshots::data_bytes(pods),
    }))
}

fn child_fanout(spec: &Value, design: &str, memory: bool) -> Result<Value, String> {
    let design = fanout::Design::from_name(design).ok_or("unknown fanout design")?;
    let mut p = fanout::Params::new(
        field(spec, "watchers")?,
        field(spec, "events")?,
        field(spec, "object_bytes")?,
    );
    p.history = field(spec, "history")?;
    p.queue = field(spec, "queue")?;
    p.selective = spec["selective"].as_bool().unwrap_or(false);
    let base = Counting::reset_peak();
    let mut out = fanout::run(design, &p, &progress);
    if out.lapped > 0 {
        return Err(format!("{} of {} watchers lost events", out.lapped, p.watchers));
    }
    if memory {
        let peak = Counting::peak() - base;
        let buffers = (p.watchers * p.out_buffer()) as isize;
        return Ok(json!({
            "peak_heap_bytes": peak,
            "bytes_per_watcher": round3((peak - buffers) as f64 / p.watchers as f64),
            "out_buffer_bytes": p.out_buffer(),
            "setup_bytes_per_watcher": round3((out.setup_heap - buffers) as f64 / p.watchers as f64),
        }));
    }
    let secs = out.elapsed.as_secs_f64().max(1e-9);
    let mut row = json!({
        "design": design.name(),
        "watchers": p.watchers,
        "events": p.events,
        "object_bytes": p.object_bytes,
        "history": p.history,
        "elapsed_s": round3(secs),
        "deliveries": out.deliveries,
        "deliveries_per_sec": round3(out.deliveries as f64 / secs),
        "publish_ns_per_event": round3(out.publish_busy.as_nanos() as f64 / p.events as f64),
        "copied_bytes_per_sec": round3(out.bytes_copied as f64 / secs),
    });
    for (name, q) in [
        ("p50_latency_us", 0.5),
        ("p99_latency_us", 0.99),
        ("p999_latency_us", 0.999),
    ] {
        if let Some(v) = quantile(&mut out.latencies_ns, q) {
            row[name] = json!(round3(v as f64 / 1000.0));
        }
    }
    Ok(row)
}

fn child_cluster(spec: &Value, design: &str, memory: bool) -> Result<Value, String> {
    let design = cluster::design(design).ok_or("unknown cluster design")?;
    let mut p = cluster::Params::new(field(spec, "nodes")?, field(spec, "events")?);
    p.pod_bytes = field(spec, "pod_bytes")?;
    p.history = field(spec, "history")?;
    p.queue = field(spec, "queue")?;
    p.rate = spec["rate"].as_f64();
    let base = Counting::reset_peak();
    let mut out = cluster::run(design, &p, &progress);
    if out.lapped > 0 {
        return Err(format!("{} of {} watchers lost events", out.lapped, p.watchers()));
    }
    if memory {
        let peak = Counting::peak() - base;
        return Ok(json!({
            "peak_heap_bytes": peak,
            "bytes_per_watcher": round3(out.setup_heap as f64 / p.watchers() as f64),
        }));
    }
    let secs = out.elapsed.as_secs_f64().max(1e-9);
    let mut row = json!({
        "design": design.name(),
        "nodes": p.nodes,
        "watchers": p.watchers(),
        "events": p.events,
        "elapsed_s": round3(secs),
        "deliveries": out.deliveries,
        "deliveries_per_sec": round3(out.deliveries as f64 / secs),
        "publish_ns_per_event": round3(out.publish_busy.as_nanos() as f64 / p.events as f64),
    });
    for (name, q) in [
        ("p50_latency_us", 0.5),
        ("p99_latency_us", 0.99),
        ("p999_latency_us", 0.999),
    ] {
        if let Some(v) = quantile(&mut out.latencies_ns, q) {
            row[name] = json!(round3(v as f64 / 1000.0));
        }
    }
    Ok(row)
}

fn child_list(spec: &Value, design: &str, memory: bool) -> Result<Value, String> {
    let design = list::Design::from_name(design).ok_or("unknown list design")?;
    let p = list::Params {
        items: field(spec, "items")?,
        item_bytes: field(spec, "item_bytes")?,
        concurrent: field(spec, "concurrent")?,
        rounds: field(spec, "rounds")?,
    };
    let (store, stored, encoded) = list::build_store(design, &p);
    let mut row = json!({"design": design.name(), "items": p.items, "item_bytes": p.item_bytes,
                         "concurrent": p.concurrent});
    if memory {
        if matches!(
            design,
            list::Design::Streaming | list::Design::NaiveValue | list::Design::StreamingProtobuf
        ) {
            row["store_bytes_per_object"] = json!(round3(stored));
            row["encoded_bytes_per_object"] = json!(round3(encoded));
        }
        // A materialised list holds a copy of the store and a body per request.
        if design == list::Design::NaiveValue {
            let need = p.concurrent as f64 * p.items as f64 * (stored + 2.0 * encoded);
            let available = alloc::available_bytes().unwrap_or(u64::MAX) as f64;
            if need > 0.8 * available {
                row["skipped"] = json!(format!(
                    "needs about {} with {} available",
                    human_bytes(need),
                    human_bytes(available)
                ));
                return Ok(row);
            }
        }
        let out = list::run(design, &store, &p, &progress);
        row["peak_heap_bytes"] = json!(out.peak_extra_heap);
        return Ok(row);
    }
    let out = list::run(design, &store, &p, &progress);
    let secs = out.wall.as_secs_f64().max(1e-9);
    row["wall_ms"] = json!(round3(secs * 1000.0));
    row["bytes_per_list"] = json!(out.bytes_per_list);
    row["mb_per_sec"] = json!(round3(
        (out.bytes_per_list * p.concurrent as u64) as f64 / secs / 1e6
    ));
    Ok(row)
}

fn child_watchers(spec: &Value, design: &str) -> Result<Value, String> {
    let design = idle::Design::from_name(design).ok_or("unknown watchers design")?;
    let count = field(spec, "count")?;
    let base = Counting::reset_peak();
    let out = idle::run(design, count, &progress);
    Ok(json!({
        "design": design.name(),
        "count": count,
        "bytes_per_watcher": round3(out.heap_per_watcher),
        "rss_bytes_per_watcher": round3(out.rss_per_watcher),
        "peak_heap_bytes": Counting::peak() - base,
    }))
}
