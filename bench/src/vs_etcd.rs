//! `vs-etcd`: watchcache against the peer a user could pick instead, watching etcd directly.
//!
//! One etcd member on loopback (its data on a tmpfs when `/dev/shm` exists), one writer
//! straight to it for every design: ConfigMaps of `value_bytes` in one namespace, updated
//! round robin at a fixed rate, each stamped with the time it was written (annotation
//! `watchcache.dev/written-at-us`, µs since the epoch). The designs watch the same prefix:
//!
//! - **`etcd`**, **`etcd-prev-kv`**: etcd's own watch API over gRPC, `per_connection` watches
//!   multiplexed on each connection's one watch stream, as Go's clientv3 multiplexes the
//!   watches of one client (the apiserver's storage layer asks for `prev_kv`; a plain client
//!   need not). The server's CPU is etcd's.
//! - **`h1`**, **`h2`**, **`h1-tls`**, **`h2-tls`**: `watchcache serve --etcd` following that
//!   member, its watches over a real transport ([`crate::wire`]): HTTP/1.1 a connection per
//!   watch, HTTP/2 `per_connection` streams a connection. The server's CPU is watchcache's
//!   plus etcd's (the cache's own watches of etcd, and whatever else the server writes).
//!
//! A run opens every connection, then every watch (from etcd's revision then: no initial
//! events), starts the writer, waits two seconds, and counts for `seconds`: the events each
//! watch receives, the servers' CPU, the clients' CPU (this process: the watch clients and the
//! writer), and the latency of a sample of watches (one in `watchers / 64`), which parse each
//! event for its write time; the others only count. etcd is compacted to its revision after
//! each run, so its state does not drift between designs. Designs run in the order given,
//! then reversed for the next repetition (A B B A).

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Client, CompactionOptions, GetOptions, WatchOptions, WatchStream};
use futures_util::StreamExt;
use memchr::memmem;
use serde_json::{Map, Value, json};

use crate::alloc::{cpu_seconds, rss_bytes};
use crate::etcd::etcd_pid;
use crate::http::clients_runtime;
use crate::report::{quantile, round3};
use crate::wire::{self, KindOutcome, Outcome, Plan, Transport, WRITTEN_AT, now_us};

/// The namespace of the written ConfigMaps.
pub const NAMESPACE: &str = "vs-etcd";

/// Their etcd prefix, as the apiserver lays it out.
const PREFIX: &str = "/registry/configmaps/vs-etcd/";

/// How long the writer runs before the window opens.
const SETTLE: Duration = Duration::from_secs(2);

/// Puts in flight at once: a writer that keeps its rate while etcd answers within
/// `IN_FLIGHT` periods, and slows when etcd is slower.
const IN_FLIGHT: usize = 16;

/// How long opening one connection or one watch may take before it counts as failed.
const OPEN_TIMEOUT: Duration = Duration::from_secs(60);

/// One design of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Design {
    /// etcd's own watch, with `prev_kv` or without.
    Etcd {
        /// Each event carries the key's previous value too.
        prev_kv: bool,
    },
    /// `watchcache serve --etcd` in front of the same etcd, on a transport.
    Watchcache(Transport),
}

impl Design {
    /// Every design, in the order of `--designs`' help.
    pub const ALL: [Design; 6] = [
        Design::Etcd { prev_kv: false },
        Design::Etcd { prev_kv: true },
        Design::Watchcache(Transport::H1),
        Design::Watchcache(Transport::H2),
        Design::Watchcache(Transport::H1Tls),
        Design::Watchcache(Transport::H2Tls),
    ];

    /// The name `--designs` takes and rows show.
    pub fn name(self) -> &'static str {
        match self {
            Design::Etcd { prev_kv: false } => "etcd",
            Design::Etcd { prev_kv: true } => "etcd-prev-kv",
            Design::Watchcache(t) => t.name(),
        }
    }

    /// A comma-separated list of design names: at least one, each once, in the order given.
    pub fn parse_list(list: &str) -> Result<Vec<Design>, String> {
        let mut out = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let Some(d) = Design::ALL.into_iter().find(|d| d.name() == name) else {
                let names: Vec<&str> = Design::ALL.iter().map(|d| d.name()).collect();
                return Err(format!(
                    "unknown design {name:?}; the designs are {}",
                    names.join(", ")
                ));
            };
            if out.contains(&d) {
                return Err(format!("design {name:?} named twice"));
            }
            out.push(d);
        }
        if out.is_empty() {
            return Err("--designs names no design".into());
        }
        Ok(out)
    }
}

/// What a run compares.
#[derive(Clone, Debug)]
pub struct Params {
    /// Watch clients, one run each.
    pub watchers: Vec<usize>,
    /// Writes per second, one run each.
    pub rates: Vec<f64>,
    /// The counted window of each run.
    pub seconds: f64,
    /// About how large each written ConfigMap is.
    pub value_bytes: usize,
    /// How many ConfigMaps the writer updates, round robin.
    pub keys: usize,
    /// Watches multiplexed on one connection: etcd's gRPC watch streams and HTTP/2.
    pub per_connection: usize,
    /// Repetitions of each point, the designs' order reversed every other one.
    pub reps: usize,
    /// The designs, in the order the first repetition runs them.
    pub designs: Vec<Design>,
    /// `GLIBC_TUNABLES` for the watchcache server.
    pub glibc_tunables: String,
}

impl Params {
    /// Refuses what cannot run, or would not end.
    pub fn check(&self) -> Result<(), String> {
        if self.watchers.is_empty() || self.watchers.iter().any(|&w| w == 0 || w > 100_000) {
            return Err("--watchers must be from 1 to 100000".into());
        }
        if self.rates.is_empty() || self.rates.iter().any(|r| !(0.0 < *r && *r <= 10_000.0)) {
            return Err("--rate must be in (0, 10000]".into());
        }
        if !(0.0 < self.seconds && self.seconds <= 3600.0) {
            return Err("--seconds must be in (0, 3600]".into());
        }
        if !(64..=1 << 20).contains(&self.value_bytes) {
            return Err("--value-bytes must be from 64 to 1048576".into());
        }
        if !(1..=100_000).contains(&self.keys) || !(1..=10_000).contains(&self.per_connection) {
            return Err("--keys must be from 1 to 100000, --watches-per-connection from 1 to 10000".into());
        }
        if !(1..=100).contains(&self.reps) {
            return Err("--reps must be from 1 to 100".into());
        }
        Ok(())
    }
}

/// The key of ConfigMap `i`.
fn key(i: usize) -> String {
    format!("{PREFIX}cm-{i}")
}

/// ConfigMap `i` as stored, stamped `written_at_us`: about `value_bytes` of JSON (at least its
/// head), its data last.
pub fn configmap(i: usize, value_bytes: usize, written_at_us: u64) -> Vec<u8> {
    let head = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": format!("cm-{i}"),
            "namespace": NAMESPACE,
            "uid": format!("00000000-0000-4000-8000-{i:012}"),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"watchcache.dev/written-at-us": written_at_us.to_string()},
        },
    });
    let mut text = serde_json::to_string(&head).expect("a JSON value serialises");
    text.pop();
    text.push_str(r#","data":{"v":""#);
    let fill = value_bytes.saturating_sub(text.len() + r#""}}"#.len());
    text.push_str(&"x".repeat(fill));
    text.push_str(r#""}}"#);
    text.into_bytes()
}

/// The namespace's object, so that the server serves its ConfigMaps as it would any.
fn namespace() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "uid": "00000000-0000-4000-8000-ffffffffffff",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }))
    .expect("a JSON value serialises")
}

/// The writer: a thread of its own, waiting for [`Writer::start`], then putting ConfigMaps at
/// a fixed rate (up to [`IN_FLIGHT`] at once; ticks it cannot take are skipped, so a slow etcd
/// slows it) until [`Writer::stop`].
pub struct Writer {
    phase: tokio::sync::watch::Sender<u8>,
    thread: std::thread::JoinHandle<Result<Written, String>>,
}

/// What the writer wrote.
#[derive(Debug, Default)]
pub struct Written {
    /// The write time of each put etcd acknowledged (µs since the epoch).
    pub stamps: Vec<u64>,
    /// Puts that failed.
    pub errors: u64,
}

impl Written {
    /// Puts stamped in `[from, to)`.
    pub fn in_window(&self, (from, to): (u64, u64)) -> u64 {
        self.stamps.iter().filter(|s| (from..to).contains(*s)).count() as u64
    }
}

const WAIT: u8 = 0;
const WRITE: u8 = 1;
const STOP: u8 = 2;

impl Writer {
    /// A writer of `p.keys` ConfigMaps to etcd at `endpoint`, at `rate` a second.
    pub fn spawn(endpoint: &str, p: &Params, rate: f64) -> Writer {
        let (phase, mut rx) = tokio::sync::watch::channel(WAIT);
        let (endpoint, keys, bytes) = (endpoint.to_owned(), p.keys, p.value_bytes);
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async move {
                let client = Client::connect([endpoint], None)
                    .await
                    .map_err(|e| format!("the writer cannot reach etcd: {e}"))?;
                while *rx.borrow_and_update() == WAIT {
                    if rx.changed().await.is_err() {
                        return Ok(Written::default());
                    }
                }
                let out = Arc::new(Mutex::new(Written::default()));
                let permits = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
                let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                let mut i = 0usize;
                while *rx.borrow() == WRITE {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = rx.changed() => continue,
                    }
                    let Ok(permit) = permits.clone().try_acquire_owned() else {
                        // IN_FLIGHT puts wait on etcd: this tick is skipped.
                        continue;
                    };
                    let (mut kv, out) = (client.kv_client(), out.clone());
                    let k = i % keys;
                    i += 1;
                    tokio::spawn(async move {
                        let _permit = permit;
                        let stamp = now_us();
                        let put = kv.put(key(k), configmap(k, bytes, stamp), None).await;
                        let mut out = out.lock().expect("the writer's record is not poisoned");
                        match put {
                            Ok(_) => out.stamps.push(stamp),
                            Err(_) => out.errors += 1,
                        }
                    });
                }
                // The puts in flight finish.
                let _ = permits.acquire_many(IN_FLIGHT as u32).await;
                let written = std::mem::take(&mut *out.lock().expect("not poisoned"));
                Ok(written)
            })
        });
        Writer { phase, thread }
    }

    /// Starts writing.
    pub fn start(&self) {
        let _ = self.phase.send(WRITE);
    }

    /// Stops writing: what was written.
    pub fn stop(self) -> Result<Written, String> {
        let _ = self.phase.send(STOP);
        self.thread.join().map_err(|_| "the writer panicked".to_owned())?
    }
}

/// Writes the namespace and the ConfigMaps once, before the runs.
async fn populate(client: &mut Client, p: &Params) -> Result<(), String> {
    client
        .put(format!("/registry/namespaces/{NAMESPACE}"), namespace(), None)
        .await
        .map_err(|e| e.to_string())?;
    for k in 0..p.keys {
        client
            .put(key(k), configmap(k, p.value_bytes, 0), None)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// etcd's revision.
async fn revision(client: &mut Client) -> Result<i64, String> {
    let resp = client
        .get(PREFIX, Some(GetOptions::new().with_prefix().with_count_only()))
        .await
        .map_err(|e| e.to_string())?;
    Ok(resp.header().map_or(0, |h| h.revision()))
}

/// Compacts etcd to its revision (physically: the run after starts on the same state).
async fn compact(client: &mut Client) -> Result<(), String> {
    let rev = revision(client).await?;
    client
        .compact(rev, Some(CompactionOptions::new().with_physical()))
        .await
        .map_err(|e| format!("compaction at {rev}: {e}"))?;
    Ok(())
}

/// When the measurement runs, shared by the runner and etcd's watch clients.
struct Window {
    /// Watches etcd confirmed.
    opened: AtomicUsize,
    /// Events written from this time on (µs since the epoch) are the window's.
    from_us: AtomicU64,
    /// When the clients stop (set when the window opens).
    deadline: tokio::sync::watch::Receiver<Option<tokio::time::Instant>>,
}

/// What the watches of one gRPC watch stream received.
#[derive(Default)]
struct StreamResult {
    deliveries: u64,
    /// Per sampled watch: events written in the window it received, and their latencies.
    sampled: Vec<(u64, Vec<u64>)>,
    failed: usize,
}

/// Opens `n` watches of the prefix on one watch stream of `client`, from `start`, and reads
/// them until the deadline. `sampled[i]` says whether watch `i` parses its events.
async fn etcd_stream(
    client: Client,
    n: usize,
    sampled: Vec<bool>,
    start: i64,
    prev_kv: bool,
    window: Arc<Window>,
) -> StreamResult {
    let mut out = StreamResult {
        failed: n,
        ..StreamResult::default()
    };
    let mut options = WatchOptions::new().with_prefix().with_start_revision(start);
    if prev_kv {
        options = options.with_prev_key();
    }
    let mut stream: WatchStream = match tokio::time::timeout(
        OPEN_TIMEOUT,
        client.watch_client().watch(PREFIX, Some(options.clone())),
    )
    .await
    {
        Ok(Ok(s)) => s,
        _ => return out,
    };
    for _ in 1..n {
        if stream.watch(PREFIX, Some(options.clone())).await.is_err() {
            return out;
        }
    }
    // etcd creates a stream's watches in the order asked: the i-th created is watch i.
    let mut ids: Vec<i64> = Vec::with_capacity(n);
    let mut by_id: std::collections::HashMap<i64, usize> = std::collections::HashMap::new();
    let mut per_watch = vec![(0u64, Vec::new()); n];
    let finder = memmem::Finder::new(WRITTEN_AT);
    let mut deadline_rx = window.deadline.clone();
    let mut deadline: Option<tokio::time::Instant> = *deadline_rx.borrow();
    let mut canceled = 0;
    loop {
        let message = match deadline {
            Some(d) => match tokio::time::timeout_at(d, stream.message()).await {
                Err(_) => break,
                Ok(m) => m,
            },
            None => tokio::select! {
                m = stream.message() => m,
                changed = deadline_rx.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    deadline = *deadline_rx.borrow();
                    continue;
                }
            },
        };
        let Ok(Some(resp)) = message else {
            // The stream ended before the deadline: every watch on it failed.
            return StreamResult {
                failed: n,
                ..StreamResult::default()
            };
        };
        if resp.created() {
            by_id.insert(resp.watch_id(), ids.len());
            ids.push(resp.watch_id());
            window.opened.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if resp.canceled() {
            canceled += 1;
            continue;
        }
        if deadline.is_none() {
            continue;
        }
        let events = resp.events();
        out.deliveries += events.len() as u64;
        let Some(&i) = by_id.get(&resp.watch_id()) else {
            continue;
        };
        if !sampled[i] {
            continue;
        }
        let received = now_us();
        let from = window.from_us.load(Ordering::Relaxed);
        for e in events {
            let written = e.kv().and_then(|kv| wire::written_at(&finder, kv.value()));
            if let Some(w) = written.filter(|w| *w >= from) {
                per_watch[i].0 += 1;
                per_watch[i].1.push(received.saturating_sub(w));
            }
        }
    }
    out.failed = n - ids.len() + canceled;
    out.sampled = per_watch
        .into_iter()
        .enumerate()
        .filter(|(i, _)| sampled[*i] && *i < ids.len())
        .map(|(_, w)| w)
        .collect();
    out
}

/// One run of an etcd design: `watchers` watches on connections of `per_connection`, etcd's
/// figures in the outcome's server fields.
fn run_etcd(
    endpoint: &str,
    watchers: usize,
    p: &Params,
    prev_kv: bool,
    writer: &Writer,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Outcome, String> {
    let pid = etcd_pid(endpoint).ok_or("etcd's process is not found")?;
    let rt = clients_runtime()?;
    rt.block_on(async {
        let mut admin = Client::connect([endpoint], None)
            .await
            .map_err(|e| e.to_string())?;
        let start = revision(&mut admin).await? + 1;
        let sample_every = watchers.div_ceil(64).max(1);
        let groups: Vec<Vec<bool>> = (0..watchers)
            .map(|i| i % sample_every == 0)
            .collect::<Vec<_>>()
            .chunks(p.per_connection)
            .map(<[bool]>::to_vec)
            .collect();
        let mut out = Outcome {
            kinds: vec![KindOutcome::default()],
            connections: groups.len(),
            streams: watchers,
            rss_before: rss_bytes(pid).unwrap_or(0),
            ..Outcome::default()
        };
        out.kinds[0].streams = watchers;
        out.kinds[0].sampled = groups.iter().flatten().filter(|s| **s).count();

        // Connections (a client each: one HTTP/2 connection to etcd).
        let cpu0 = cpu_seconds(pid).unwrap_or(0.0);
        let started = Instant::now();
        let endpoint = endpoint.to_owned();
        let clients: Vec<Option<Client>> = futures_util::stream::iter(0..groups.len())
            .map(|_| {
                let endpoint = endpoint.clone();
                async move {
                    let client = tokio::time::timeout(OPEN_TIMEOUT, Client::connect([endpoint], None)).await;
                    let mut client = client.ok()?.ok()?;
                    // A first request opens the connection (the channel connects lazily).
                    client.status().await.ok()?;
                    Some(client)
                }
            })
            .buffered(64)
            .collect()
            .await;
        out.connect_secs = started.elapsed().as_secs_f64();
        out.connect_cpu_s = cpu_seconds(pid).unwrap_or(0.0) - cpu0;
        out.failed_connections = clients.iter().filter(|c| c.is_none()).count();
        tokio::time::sleep(Duration::from_secs(1)).await;
        out.rss_connected = rss_bytes(pid).unwrap_or(0);

        // Watches.
        let cpu2 = cpu_seconds(pid).unwrap_or(0.0);
        let (set_deadline, deadline) = tokio::sync::watch::channel(None);
        let window = Arc::new(Window {
            opened: AtomicUsize::new(0),
            from_us: AtomicU64::new(u64::MAX),
            deadline,
        });
        let mut tasks = Vec::new();
        for (client, sampled) in clients.into_iter().zip(groups) {
            let Some(client) = client else {
                out.kinds[0].failed += sampled.len();
                continue;
            };
            let n = sampled.len();
            tasks.push(tokio::spawn(etcd_stream(
                client,
                n,
                sampled,
                start,
                prev_kv,
                window.clone(),
            )));
        }
        let expected = watchers - out.kinds[0].failed;
        let by = Instant::now() + OPEN_TIMEOUT * 2;
        while window.opened.load(Ordering::Relaxed) < expected && Instant::now() < by {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        out.watch_cpu_s = cpu_seconds(pid).unwrap_or(0.0) - cpu2;
        out.rss_streams = rss_bytes(pid).unwrap_or(0);

        // The writer.
        writer.start();
        tokio::time::sleep(SETTLE).await;
        let from_us = now_us();
        window.from_us.store(from_us, Ordering::Relaxed);
        let started = Instant::now();
        let cpu_at_start = (cpu_seconds(pid), cpu_seconds(std::process::id()));
        let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(p.seconds);
        let _ = set_deadline.send(Some(deadline));
        let mut ticker = tokio::time::interval(Duration::from_secs(1));
        while tokio::time::Instant::now() < deadline {
            ticker.tick().await;
            progress(started.elapsed().as_secs());
        }
        let window_secs = started.elapsed().as_secs_f64();
        out.window_us = (from_us, now_us());
        let cores = |before: Option<f64>, pid: u32| match (before, cpu_seconds(pid)) {
            (Some(b), Some(a)) => (a - b) / window_secs,
            _ => 0.0,
        };
        out.server_cores = cores(cpu_at_start.0, pid);
        out.client_cores = cores(cpu_at_start.1, std::process::id());
        // etcd's peak is its whole life's: its resident set at the window's end instead.
        out.rss_peak = rss_bytes(pid).unwrap_or(0);
        let k = &mut out.kinds[0];
        for t in tasks {
            let r = t.await.map_err(|e| e.to_string())?;
            k.deliveries += r.deliveries;
            k.failed += r.failed;
            for (written, latencies) in r.sampled {
                k.written_in_window += written;
                k.max_written_in_window = k.max_written_in_window.max(written);
                k.min_written_in_window = k.min_written_in_window.min(written);
                k.latencies_us.extend(latencies);
            }
        }
        out.elapsed = Duration::from_secs_f64(window_secs.min(p.seconds));
        Ok(out)
    })
}

/// The watch every watchcache client opens: the namespace's ConfigMaps from the revision the
/// cache is at, with no initial events (as etcd's watches start from etcd's revision).
fn watch_path() -> String {
    format!(
        "/api/v1/namespaces/{NAMESPACE}/configmaps?watch=1&resourceVersion=0&sendInitialEvents=false&resourceVersionMatch=NotOlderThan"
    )
}

/// `watchers` watches, `per_connection` a connection where the transport multiplexes; one in
/// `watchers / 64` parses its frames.
fn plan(watchers: usize, per_connection: usize, transport: Transport) -> Plan {
    let sample_every = watchers.div_ceil(64).max(1);
    let all: Vec<wire::Watch> = (0..watchers)
        .map(|i| wire::Watch {
            path: watch_path(),
            kind: 0,
            sampled: i % sample_every == 0,
        })
        .collect();
    let groups = all.chunks(per_connection).map(<[wire::Watch]>::to_vec).collect();
    Plan {
        kinds: vec!["configmaps"],
        connections: wire::connections(groups, transport),
    }
}

/// One run of a watchcache design.
fn run_watchcache(
    binary: &Path,
    endpoint: &str,
    transport: Transport,
    watchers: usize,
    p: &Params,
    writer: &Writer,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Outcome, String> {
    let start = || writer.start();
    let server = wire::Server {
        binary,
        args: vec!["--etcd".into(), endpoint.to_owned()],
        glibc_tunables: p.glibc_tunables.clone(),
        churn: wire::Churn::Outside(&start),
        also_measured: etcd_pid(endpoint),
    };
    if server.also_measured.is_none() {
        return Err("etcd's process is not found".into());
    }
    wire::run(
        &server,
        transport,
        &plan(watchers, p.per_connection, transport),
        p.seconds,
        progress,
    )
}

/// One row: a design's run at one point.
pub fn row(
    design: Design,
    watchers: usize,
    rate: f64,
    rep: usize,
    out: &mut Outcome,
    written: &Written,
) -> Value {
    let secs = out.elapsed.as_secs_f64().max(1e-9);
    let k = &mut out.kinds[0];
    let writes = written.in_window(out.window_us);
    let opened = watchers.saturating_sub(k.failed);
    let mut row = Map::new();
    let mut put = |k: &str, v: Value| {
        row.insert(k.into(), v);
    };
    put("design", json!(design.name()));
    put("watchers", json!(watchers));
    put("rate", json!(rate));
    put("rep", json!(rep));
    put("writes_in_window", json!(writes));
    put("writes_per_sec", json!(round3(writes as f64 / secs)));
    put("write_errors", json!(written.errors));
    put("failed_watchers", json!(k.failed));
    put("deliveries", json!(k.deliveries));
    put("deliveries_per_sec", json!(round3(k.deliveries as f64 / secs)));
    // Frames counted by when they arrived, writes by when they were made: the two differ at
    // the window's edges by what is in flight (about rate × latency a watch).
    let expected = writes * opened as u64;
    if expected > 0 {
        put(
            "delivered_fraction",
            json!(round3(k.deliveries as f64 / expected as f64)),
        );
    }
    if writes > 0 && k.sampled > 0 {
        put(
            "sampled_min_vs_writes",
            json!(round3(k.min_written_in_window as f64 / writes as f64)),
        );
    }
    let server_cores = out.server_cores + out.also_cores;
    put("server_cores", json!(round3(server_cores)));
    put(
        "etcd_cores",
        json!(round3(match design {
            Design::Etcd { .. } => out.server_cores,
            Design::Watchcache(_) => out.also_cores,
        })),
    );
    put("client_cores", json!(round3(out.client_cores)));
    if k.deliveries > 0 {
        put(
            "server_cpu_us_per_event",
            json!(round3(server_cores * secs * 1e6 / k.deliveries as f64)),
        );
    }
    put(
        "rss_bytes_per_watcher",
        json!(round3(
            out.rss_streams.saturating_sub(out.rss_before) as f64 / watchers as f64
        )),
    );
    put("server_rss_bytes", json!(out.rss_peak));
    put("connections", json!(out.connections));
    for (field, q) in [
        ("p50_latency_us", 0.5),
        ("p99_latency_us", 0.99),
        ("p999_latency_us", 0.999),
    ] {
        if let Some(v) = quantile(&mut k.latencies_us, q) {
            put(field, json!(v));
        }
    }
    put("latency_samples", json!(k.latencies_us.len()));
    Value::Object(row)
}

/// The mean of `field` over the rows of `design` at one point.
fn mean(rows: &[Value], design: &str, watchers: usize, rate: f64, field: &str) -> Option<f64> {
    let xs: Vec<f64> = rows
        .iter()
        .filter(|r| r["design"] == design && r["watchers"] == watchers && r["rate"].as_f64() == Some(rate))
        .filter_map(|r| r[field].as_f64())
        .collect();
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// At each point, for each watchcache design against each etcd design: how many times cheaper
/// per delivered event it is (etcd's CPU per event ÷ its own), and its p99 against etcd's.
pub fn ratios(p: &Params, rows: &[Value]) -> Map<String, Value> {
    let mut out = Map::new();
    for &w in &p.watchers {
        for &r in &p.rates {
            for base in p.designs.iter().filter(|d| matches!(d, Design::Etcd { .. })) {
                for d in p.designs.iter().filter(|d| matches!(d, Design::Watchcache(_))) {
                    let point = format!("{}_vs_{}_w{w}_r{r}", d.name(), base.name());
                    let cpu = |design: Design| mean(rows, design.name(), w, r, "server_cpu_us_per_event");
                    if let (Some(e), Some(c)) = (cpu(*base), cpu(*d)) {
                        out.insert(
                            format!("{point}_cheaper_per_event"),
                            json!(round3(e / c.max(1e-9))),
                        );
                    }
                    let p99 = |design: Design| mean(rows, design.name(), w, r, "p99_latency_us");
                    if let (Some(e), Some(c)) = (p99(*base), p99(*d)) {
                        out.insert(format!("{point}_p99_ratio"), json!(round3(c / e.max(1e-9))));
                    }
                }
            }
        }
    }
    out
}

/// Runs every point: each rate, each watcher count, `reps` times, the designs in A B B A
/// order, on one etcd started here. `binary` is a `watchcache` built with the `etcd` feature
/// (needed only by watchcache designs). `progress(what, seconds)` reports each run.
pub fn run(
    p: &Params,
    binary: Option<&Path>,
    progress: &(dyn Fn(&str, u64) + Sync),
) -> Result<Vec<Value>, String> {
    p.check()?;
    if binary.is_none() && p.designs.iter().any(|d| matches!(d, Design::Watchcache(_))) {
        return Err("a watchcache design needs the server binary".into());
    }
    let limit = wire::raise_nofile();
    let most = p.watchers.iter().copied().max().unwrap_or(0);
    if (most as u64) + 256 > limit {
        return Err(format!(
            "{most} watchers need more open files than the limit ({limit}; `ulimit -Hn` caps it)"
        ));
    }
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let tmpfs = Path::new("/dev/shm");
    let parent = if tmpfs.is_dir() {
        tmpfs.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    // etcd's own default for periodic progress notifications (ten minutes).
    let cluster = rt
        .block_on(watchcache_tests::etcd::EtcdCluster::start_in(
            1,
            Duration::from_secs(600),
            &parent,
        ))
        .ok_or("etcd is not installed (apt-get install -y etcd-server)")?;
    let endpoint = cluster.endpoint(0);
    let mut admin = rt
        .block_on(Client::connect([endpoint.clone()], None))
        .map_err(|e| format!("cannot reach etcd: {e}"))?;
    rt.block_on(populate(&mut admin, p))?;
    let mut rows = Vec::new();
    for &rate in &p.rates {
        for &watchers in &p.watchers {
            for rep in 0..p.reps {
                let mut order = p.designs.clone();
                if rep % 2 == 1 {
                    order.reverse();
                }
                for design in order {
                    rt.block_on(compact(&mut admin))?;
                    let what = format!("{} W={watchers} rate={rate}/s rep {}", design.name(), rep + 1);
                    let report = |s: u64| progress(&what, s);
                    let writer = Writer::spawn(&endpoint, p, rate);
                    let outcome = match design {
                        Design::Etcd { prev_kv } => {
                            run_etcd(&endpoint, watchers, p, prev_kv, &writer, &report)
                        }
                        Design::Watchcache(t) => {
                            let binary = binary.expect("checked above");
                            run_watchcache(binary, &endpoint, t, watchers, p, &writer, &report)
                        }
                    };
                    let written = writer.stop()?;
                    let mut outcome = outcome?;
                    rows.push(row(design, watchers, rate, rep, &mut outcome, &written));
                }
            }
        }
    }
    drop(cluster);
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn designs_parse_in_order_and_refuse_unknown_or_repeated_names() {
        assert_eq!(
            Design::parse_list("h2, etcd").unwrap(),
            vec![Design::Watchcache(Transport::H2), Design::Etcd { prev_kv: false }]
        );
        assert_eq!(
            Design::parse_list("etcd-prev-kv").unwrap(),
            vec![Design::Etcd { prev_kv: true }]
        );
        assert!(Design::parse_list("etcd3").unwrap_err().contains("etcd-prev-kv"));
        assert!(Design::parse_list("h1,h1").unwrap_err().contains("twice"));
        assert!(Design::parse_list(",").is_err());
    }

    #[test]
    fn a_written_configmap_is_the_size_asked_and_carries_its_write_time() {
        let v = configmap(7, 4096, 1_700_000_000_000_001);
        assert_eq!(v.len(), 4096);
        let object: Value = serde_json::from_slice(&v).expect("JSON");
        assert_eq!(object["metadata"]["name"], "cm-7");
        assert_eq!(object["metadata"]["namespace"], NAMESPACE);
        let finder = memmem::Finder::new(WRITTEN_AT);
        assert_eq!(wire::written_at(&finder, &v), Some(1_700_000_000_000_001));
        // Smaller than its head: the head alone.
        assert!(configmap(7, 64, 1).len() > 64);
    }

    #[test]
    fn writes_are_counted_by_their_stamp_in_the_window() {
        let w = Written {
            stamps: vec![5, 10, 15, 20],
            errors: 0,
        };
        assert_eq!(w.in_window((10, 20)), 2);
        assert_eq!(w.in_window((0, 100)), 4);
    }

    #[test]
    fn ratios_compare_each_watchcache_design_with_each_etcd_design_at_each_point() {
        let p = Params {
            watchers: vec![10],
            rates: vec![20.0],
            seconds: 1.0,
            value_bytes: 4096,
            keys: 10,
            per_connection: 100,
            reps: 2,
            designs: vec![Design::Etcd { prev_kv: false }, Design::Watchcache(Transport::H2)],
            glibc_tunables: String::new(),
        };
        let rows = vec![
            json!({"design": "etcd", "watchers": 10, "rate": 20.0, "server_cpu_us_per_event": 6.0, "p99_latency_us": 100.0}),
            json!({"design": "etcd", "watchers": 10, "rate": 20.0, "server_cpu_us_per_event": 4.0, "p99_latency_us": 300.0}),
            json!({"design": "h2", "watchers": 10, "rate": 20.0, "server_cpu_us_per_event": 1.0, "p99_latency_us": 100.0}),
            json!({"design": "h2", "watchers": 10, "rate": 20.0, "server_cpu_us_per_event": 1.5, "p99_latency_us": 100.0}),
        ];
        let r = ratios(&p, &rows);
        assert_eq!(r["h2_vs_etcd_w10_r20_cheaper_per_event"], json!(4.0));
        assert_eq!(r["h2_vs_etcd_w10_r20_p99_ratio"], json!(0.5));
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn parameters_that_would_not_end_are_refused() {
        let ok = Params {
            watchers: vec![10],
            rates: vec![20.0],
            seconds: 1.0,
            value_bytes: 4096,
            keys: 10,
            per_connection: 100,
            reps: 1,
            designs: vec![Design::Etcd { prev_kv: false }],
            glibc_tunables: String::new(),
        };
        assert!(ok.check().is_ok());
        assert!(
            Params {
                rates: vec![0.0],
                ..ok.clone()
            }
            .check()
            .is_err()
        );
        assert!(
            Params {
                rates: vec![f64::NAN],
                ..ok.clone()
            }
            .check()
            .is_err()
        );
        assert!(
            Params {
                watchers: vec![],
                ..ok.clone()
            }
            .check()
            .is_err()
        );
        assert!(
            Params {
                seconds: 1e9,
                ..ok.clone()
            }
            .check()
            .is_err()
        );
        assert!(
            Params {
                per_connection: 0,
                ..ok.clone()
            }
            .check()
            .is_err()
        );
    }
}
