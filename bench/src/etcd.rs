//! On real etcd (one member on loopback, etcd's defaults but for ports and data directory):
//!
//! - `sync`: a cache's initial sync of a populated pod prefix: seconds to ready, peak heap and
//!   resident memory (the child process's); with history fill off (the apiserver's start) and
//!   on (the list at an older revision, then the replay).
//! - `follow`: writers update pods as fast as etcd takes them while a cache follows: etcd's
//!   write rate, the rate of events the reflector applies over the same window, and how far
//!   behind the cache is when the writers stop.
//! - `restart`: `watchcache serve --etcd` with watch clients, killed and started again while
//!   writes go on; each client resumes from the last revision it saw, and relists on a 410.
//!   Relists, 410s and the time until every client has the write made after the restart, with
//!   history fill on and off.
//! - `proof` (its own scenario): what it costs etcd 3.4.23 to let a cache that has not reached
//!   etcd's revision serve a consistent read. A prefix of N pods of 4 KB, written first, then
//!   a busy other prefix (configmaps, written on throughout at a fixed rate), so the store's
//!   revision is ahead of the pods' and a cache of pods is behind it. The old proof is the two
//!   reads `unchanged_since` made, issued with the etcd client as it issued them: a
//!   `count_only` range of the prefix at etcd's revision, then a `keys_only` range with
//!   `min_mod_revision` just after the cache's revision and limit 1 (empty: the prefix is
//!   unchanged), timed together. The fence is `EtcdSource::request_progress` (a put at
//!   `/registry/pods`), timed until the watch of the prefix the source opens for a cache (from
//!   the fence key to the prefix's end) yields the progress notification. Each design runs
//!   `reps` times after a few untimed ones. Each repetition of either design first reads
//!   etcd's revision, as a consistent read does (not timed). etcd's CPU per operation is its
//!   threads' run time over the design's phase (`/proc/PID/task/*/schedstat`), less what the
//!   busy writer costs it over as long (measured alone before and after).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::BodyExt;
use memchr::memmem;
use watchcache_core::{Cache, CacheConfig, Revision, Source, SourceEvent};
use watchcache_encoders::JsonCodec;
use watchcache_etcd::{EtcdOptions, EtcdSource};
use watchcache_server::workload::{pod, pod_key};

use crate::alloc::{Counting, cpu_ns_of_threads, peak_rss_bytes, peak_rss_of};
use crate::http::{clients_runtime, get, open, start_server, start_server_at, wait_ready};

/// Writes in flight while populating or churning (etcd batches concurrent proposals into one
/// fsync).
const IN_FLIGHT: usize = 256;

/// The pods prefix, as the apiserver lays it out.
const PODS: &str = "/registry/pods/";

/// Connects to `endpoints`.
pub async fn connect(endpoints: &[String]) -> Result<EtcdSource, String> {
    EtcdSource::connect(endpoints, EtcdOptions::default())
        .await
        .map_err(|e| format!("cannot reach etcd: {e}"))
}

/// Creates `pods` pods of about 4 KiB (the workload generator's, over 10 namespaces and 100
/// nodes); returns the writes per second etcd took.
pub async fn populate(
    etcd: &EtcdSource,
    pods: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<f64, String> {
    let started = Instant::now();
    let done = AtomicU64::new(0);
    let results: Vec<Result<Revision, String>> = futures_util::stream::iter(0..pods)
        .map(|i| {
            let done = &done;
            async move {
                let r = etcd
                    .create(&pod_key(i), Bytes::from(pod(i, 100, 0).to_string()))
                    .await
                    .map_err(|e| e.to_string());
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_multiple_of(1000) {
                    progress(n);
                }
                r
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
        return Err(format!("populating etcd: {e}"));
    }
    Ok(pods as f64 / started.elapsed().as_secs_f64())
}

/// A cache of pods over `etcd`, as `watchcache serve` builds it.
fn pod_cache(etcd: EtcdSource, history_fill: bool) -> Result<Cache<EtcdSource>, String> {
    let fields = ["spec.nodeName", "status.phase"];
    let codec = Arc::new(JsonCodec::new(true, &fields));
    let mut config = CacheConfig::new("pods", PODS);
    config.fields = fields.iter().map(|f| (*f).to_owned()).collect();
    config.trigger_field = Some("spec.nodeName".into());
    config.history_fill = history_fill;
    Cache::new(etcd, codec, config).map_err(|e| e.to_string())
}

/// What a sync measured.
#[derive(Debug, Default)]
pub struct SyncOutcome {
    /// From the cache's creation to ready.
    pub seconds: f64,
    /// Peak heap above what was live before (counted in this process).
    pub peak_heap: i64,
    /// Heap still held once ready: the cache's state.
    pub live_heap: i64,
    /// This process's peak resident set.
    pub peak_rss: u64,
    /// Objects in the cache.
    pub objects: usize,
}

/// Times one cache's initial sync of the pods in `etcd` (run in a child with counting on).
pub async fn sync(endpoints: &[String], history_fill: bool) -> Result<SyncOutcome, String> {
    let etcd = connect(endpoints).await?;
    let base = Counting::reset_peak();
    let started = Instant::now();
    let cache = pod_cache(etcd, history_fill)?;
    while !cache.is_ready() {
        if started.elapsed() > Duration::from_secs(600) {
            return Err("the cache did not sync in 10 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(SyncOutcome {
        seconds,
        peak_heap: (Counting::peak() - base) as i64,
        live_heap: (Counting::live() - base) as i64,
        peak_rss: peak_rss_bytes().unwrap_or(0),
        objects: cache.len(),
    })
}

/// What following measured.
#[derive(Debug, Default)]
pub struct Follow {
    /// Writes etcd acknowledged per second.
    pub etcd_writes_per_sec: f64,
    /// Events the cache applied per second over the same window.
    pub cache_events_per_sec: f64,
    /// How long the cache took to reach the last write once the writers stopped.
    pub catch_up_ms: f64,
}

/// Updates `pods` pods as fast as etcd takes them for `seconds` while a cache follows.
pub async fn follow(endpoints: &[String], pods: usize, seconds: f64) -> Result<Follow, String> {
    let etcd = connect(endpoints).await?;
    let cache = pod_cache(etcd.clone(), false)?;
    while !cache.is_ready() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let events_before = cache.stats().events.load(Ordering::Relaxed);
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let writes = AtomicU64::new(0);
    let last = AtomicU64::new(0);
    let value = |i: usize, g: u64| Bytes::from(pod(i, 100, g).to_string());
    futures_util::stream::iter(0..IN_FLIGHT)
        .for_each_concurrent(IN_FLIGHT, |w| {
            let (etcd, writes, last) = (&etcd, &writes, &last);
            async move {
                let mut g = 1;
                // Each writer owns the pods w, w + IN_FLIGHT, …: no two update one at once.
                while Instant::now() < deadline {
                    let i = (w + IN_FLIGHT * (g as usize)) % pods.max(1);
                    if let Ok(r) = etcd.update(&pod_key(i), value(i, g), None).await {
                        writes.fetch_add(1, Ordering::Relaxed);
                        last.fetch_max(r.get(), Ordering::Relaxed);
                    }
                    g += 1;
                }
            }
        })
        .await;
    let window = started.elapsed().as_secs_f64();
    let applied = cache.stats().events.load(Ordering::Relaxed) - events_before;
    let stopped = Instant::now();
    let target = Revision::new(last.load(Ordering::Relaxed));
    while cache.revision() < target {
        if stopped.elapsed() > Duration::from_secs(60) {
            return Err("the cache did not catch up in 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(Follow {
        etcd_writes_per_sec: writes.load(Ordering::Relaxed) as f64 / window,
        cache_events_per_sec: applied as f64 / window,
        catch_up_ms: stopped.elapsed().as_secs_f64() * 1e3,
    })
}

/// What a restart measured.
#[derive(Debug, Default)]
pub struct Restart {
    /// Watch clients.
    pub clients: usize,
    /// Watches the restarted replica refused with an in-stream 410.
    pub expired: u64,
    /// LISTs the clients made to recover (a relist per 410).
    pub relists: u64,
    /// From the restarted process's start to its `/readyz`.
    pub ready_seconds: f64,
    /// From the restarted process's start until every client had the write made after it was
    /// ready.
    pub recovery_seconds: f64,
    /// The restarted server's peak resident set.
    pub peak_rss: u64,
}

/// Finds `"resourceVersion":"N"` in a frame and returns the last one's N (an object's own
/// resourceVersion is the last in a watch frame; a list's is the first, see `list_rv`).
pub(crate) fn last_rv(frame: &[u8]) -> Option<u64> {
    const KEY: &[u8] = br#""resourceVersion":""#;
    let at = memmem::rfind(frame, KEY)? + KEY.len();
    let end = frame[at..].iter().position(|b| *b == b'"')?;
    std::str::from_utf8(&frame[at..at + end]).ok()?.parse().ok()
}

/// The list's own resourceVersion: in its metadata, written before the items.
pub(crate) fn list_rv(body: &[u8]) -> Option<u64> {
    const KEY: &[u8] = br#""resourceVersion":""#;
    let meta = memmem::find(body, br#""metadata":{"#)?;
    let at = meta + memmem::find(&body[meta..], KEY)? + KEY.len();
    let end = body[at..].iter().position(|b| *b == b'"')?;
    std::str::from_utf8(&body[at..at + end]).ok()?.parse().ok()
}

/// Shared between the clients and the runner.
#[derive(Default)]
struct Clients {
    connected: AtomicUsize,
    expired: AtomicU64,
    relists: AtomicU64,
    /// The newest revision each client has seen.
    seen: Vec<AtomicU64>,
}

/// One informer-like client: lists once, then watches from the revision it last saw, again
/// and again (every 100 ms while the server is away); on a 410 it lists afresh.
async fn client(addr: SocketAddr, me: usize, shared: Arc<Clients>, stop: Arc<tokio::sync::Notify>) {
    let mut rv = 0u64;
    let mut listed = false;
    let mut counted = false;
    loop {
        if !listed {
            match get(addr, "/api/v1/pods").await {
                Ok((200, body)) => match list_rv(&body) {
                    Some(r) => {
                        rv = r;
                        listed = true;
                        shared.seen[me].fetch_max(rv, Ordering::Relaxed);
                    }
                    None => return,
                },
                _ => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let path = format!("/api/v1/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true");
        let Ok((_sender, resp)) = open(addr, &path).await else {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                _ = stop.notified() => return,
            }
        };
        if !counted {
            counted = true;
            shared.connected.fetch_add(1, Ordering::Relaxed);
        }
        let mut body = resp.into_body();
        let mut buf: Vec<u8> = Vec::new();
        loop {
            let frame = tokio::select! {
                f = body.frame() => f,
                _ = stop.notified() => return,
            };
            let Some(Ok(frame)) = frame else { break };
            let Ok(data) = frame.into_data() else { continue };
            buf.extend_from_slice(&data);
            while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=i).collect();
                if line.starts_with(br#"{"type":"ERROR""#) {
                    if memmem::find(&line, br#""code":410"#).is_some() {
                        shared.expired.fetch_add(1, Ordering::Relaxed);
                        shared.relists.fetch_add(1, Ordering::Relaxed);
                        listed = false;
                    }
                } else if let Some(r) = last_rv(&line) {
                    rv = rv.max(r);
                    shared.seen[me].fetch_max(rv, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Restarts `binary serve --etcd` under `clients` watch clients; see the module docs.
pub fn restart(
    binary: &Path,
    endpoints: &[String],
    clients: usize,
    history_fill: bool,
) -> Result<Restart, String> {
    let rt = clients_runtime()?;
    let flag = endpoints.join(",");
    let fill = history_fill.to_string();
    let max = (clients * 2 + 16).to_string();
    let args = ["--etcd", &flag, "--history-fill", &fill, "--max-watchers", &max];
    rt.block_on(async {
        let etcd = connect(endpoints).await?;
        let (first, addr) = start_server(binary, &args, &[])?;
        wait_ready(addr, binary).await?;
        let shared = Arc::new(Clients {
            seen: (0..clients).map(|_| AtomicU64::new(0)).collect(),
            ..Clients::default()
        });
        let stop = Arc::new(tokio::sync::Notify::new());
        let tasks: Vec<_> = (0..clients)
            .map(|me| tokio::spawn(client(addr, me, shared.clone(), stop.clone())))
            .collect();
        let connected_by = Instant::now() + Duration::from_secs(120);
        while shared.connected.load(Ordering::Relaxed) < clients {
            if Instant::now() > connected_by {
                return Err("the clients did not all connect in 120 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let relists_before = shared.relists.load(Ordering::Relaxed);
        // A crash: no graceful end of the watches.
        drop(first);
        for g in 1..=50 {
            etcd.update(
                &pod_key(g % 100),
                Bytes::from(pod(g % 100, 100, g as u64).to_string()),
                None,
            )
            .await
            .map_err(|e| e.to_string())?;
        }
        let restarted = Instant::now();
        let second = start_server_at(binary, addr, &args, &[])?;
        wait_ready(addr, binary).await?;
        let ready_seconds = restarted.elapsed().as_secs_f64();
        let last = etcd
            .update(&pod_key(0), Bytes::from(pod(0, 100, 1000).to_string()), None)
            .await
            .map_err(|e| e.to_string())?
            .get();
        let recovered_by = Instant::now() + Duration::from_secs(300);
        while shared.seen.iter().any(|s| s.load(Ordering::Relaxed) < last) {
            if Instant::now() > recovered_by {
                return Err("the clients did not recover in 300 s".into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let recovery_seconds = restarted.elapsed().as_secs_f64();
        let (_, metrics) = get(addr, "/metrics").await?;
        let expired = metric(
            &metrics,
            "watchcache_watch_starts_expired_total{resource=\"pods\"}",
        );
        stop.notify_waiters();
        for t in tasks {
            t.abort();
        }
        Ok(Restart {
            clients,
            expired,
            relists: shared.relists.load(Ordering::Relaxed) - relists_before,
            ready_seconds,
            recovery_seconds,
            peak_rss: peak_rss_of(second.0.id()).unwrap_or(0),
        })
    })
}

/// The value of the series `name` in a Prometheus text body (0 when absent).
pub(crate) fn metric(body: &[u8], name: &str) -> u64 {
    String::from_utf8_lossy(body)
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// The revision etcd is at.
pub async fn revision(etcd: &EtcdSource) -> Result<u64, String> {
    etcd.current_revision()
        .await
        .map(Revision::get)
        .map_err(|e| e.to_string())
}

/// The busy prefix of the `proof` scenario.
const CONFIGMAPS: &str = "/registry/configmaps/";

/// What the `proof` scenario measured on one prefix size.
#[derive(Debug, Default)]
pub struct Proof {
    /// etcd's version, as the source read it.
    pub version: String,
    /// Keys under the proven prefix (what `count_only` counted).
    pub keys: usize,
    /// The old proof, both reads, per repetition (ns).
    pub old_ns: Vec<u64>,
    /// Its `count_only` read alone (ns).
    pub count_ns: Vec<u64>,
    /// Its `keys_only` + `min_mod_revision` read alone (ns).
    pub keys_only_ns: Vec<u64>,
    /// The fence: from the put to the watch's progress notification (ns).
    pub fence_ns: Vec<u64>,
    /// The fence's put alone, to its answer (ns).
    pub fence_put_ns: Vec<u64>,
    /// etcd's CPU per old proof (ns), the busy writer's share taken out.
    pub old_cpu_ns: Option<f64>,
    /// etcd's CPU per fence (ns), the busy writer's share taken out.
    pub fence_cpu_ns: Option<f64>,
    /// etcd's CPU with the busy writer alone, in cores.
    pub busy_cores: Option<f64>,
    /// Writes per second to the busy prefix over the run.
    pub busy_writes_per_sec: f64,
}

/// The pid of the etcd member serving `endpoint`, a child of this process (the runner starts
/// it): found by its command line, which names the client URL.
pub fn etcd_pid(endpoint: &str) -> Option<u32> {
    let me = std::process::id();
    let url = endpoint.trim_start_matches("http://");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let serves = args
            .windows(2)
            .any(|w| w[0] == b"--listen-client-urls" && memmem::find(w[1], url.as_bytes()).is_some());
        if !serves {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The parent pid is the second field after the command's closing parenthesis.
        let ppid = stat
            .rfind(')')
            .and_then(|at| stat[at + 2..].split(' ').nth(1)?.parse::<u32>().ok());
        if ppid == Some(me) {
            return Some(pid);
        }
    }
    None
}

/// Writes `keys` configmaps of about 1 KB under the busy prefix.
async fn populate_busy(etcd: &EtcdSource, keys: usize) -> Result<(), String> {
    let results: Vec<Result<Revision, String>> = futures_util::stream::iter(0..keys)
        .map(|i| async move {
            etcd.create(&busy_key(i), busy_value(i, 0))
                .await
                .map_err(|e| e.to_string())
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    match results.into_iter().find(Result::is_err) {
        Some(Err(e)) => Err(format!("populating the busy prefix: {e}")),
        _ => Ok(()),
    }
}

fn busy_key(i: usize) -> String {
    format!("{CONFIGMAPS}ns-{}/cm-{i:06}", i % 10)
}

fn busy_value(i: usize, generation: u64) -> Bytes {
    let data = "x".repeat(900);
    Bytes::from(
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i:06}"), "namespace": format!("ns-{}", i % 10),
                         "annotations": {"generation": generation.to_string()}},
            "data": {"payload": data}})
        .to_string(),
    )
}

/// Updates the busy prefix at `rate` writes a second (one writer, paced) until `stop`;
/// returns the writes made.
async fn busy_writer(etcd: EtcdSource, keys: usize, rate: f64, stop: Arc<tokio::sync::Notify>) -> u64 {
    if rate <= 0.0 || keys == 0 {
        stop.notified().await;
        return 0;
    }
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stopped = stop.notified();
    tokio::pin!(stopped);
    let mut written = 0u64;
    loop {
        tokio::select! {
            _ = &mut stopped => return written,
            _ = ticker.tick() => {}
        }
        let i = written as usize % keys;
        // A write that fails (none should) is only not counted: the load is what matters.
        if etcd
            .update(&busy_key(i), busy_value(i, written + 1), None)
            .await
            .is_ok()
        {
            written += 1;
        }
    }
}

/// etcd's CPU (ns) over `f`, and `f`'s result.
async fn with_cpu<T>(
    pid: Option<u32>,
    f: impl std::future::Future<Output = T>,
) -> (Option<u64>, Duration, T) {
    let before = pid.and_then(cpu_ns_of_threads);
    let started = Instant::now();
    let out = f.await;
    let wall = started.elapsed();
    let after = pid.and_then(cpu_ns_of_threads);
    (before.zip(after).map(|(b, a)| a.saturating_sub(b)), wall, out)
}

/// The `proof` scenario on an etcd whose proven prefix holds `keys` pods (already written by
/// [`populate`]); see the module docs. `pid` is etcd's, for its CPU.
pub async fn proof(
    endpoints: &[String],
    pid: Option<u32>,
    keys: usize,
    busy_keys: usize,
    busy_rate: f64,
    reps: usize,
) -> Result<Proof, String> {
    use etcd_client::GetOptions;

    let etcd = connect(endpoints).await?;
    // The cache of pods has seen every pod write: its revision is the store's now.
    let since = revision(&etcd).await?;
    populate_busy(&etcd, busy_keys).await?;
    let stop = Arc::new(tokio::sync::Notify::new());
    let busy_started = Instant::now();
    let writer = tokio::spawn(busy_writer(etcd.clone(), busy_keys, busy_rate, stop.clone()));
    let mut out = Proof {
        version: etcd.version().to_owned(),
        keys,
        ..Proof::default()
    };
    // What the busy writer alone costs etcd, for as long as a phase took.
    let alone = || with_cpu(pid, tokio::time::sleep(Duration::from_secs(3)));
    let (busy_before, busy_wall_before, ()) = alone().await;

    // The old proof: at etcd's revision, count the prefix, then look for a key written since
    // the cache's revision (reading every value of the prefix to find none).
    let mut kv = etcd.client().kv_client();
    let mut old_proof = async |timed: bool, out: &mut Proof| -> Result<(), String> {
        let at = revision(&etcd).await? as i64;
        let range = || GetOptions::new().with_prefix().with_revision(at);
        let t0 = Instant::now();
        let counted = kv
            .get(PODS, Some(range().with_count_only()))
            .await
            .map_err(|e| e.to_string())?;
        let t1 = Instant::now();
        let written = kv
            .get(
                PODS,
                Some(
                    range()
                        .with_keys_only()
                        .with_min_mod_revision(since as i64 + 1)
                        .with_limit(1),
                ),
            )
            .await
            .map_err(|e| e.to_string())?;
        let t2 = Instant::now();
        if counted.count() != keys as i64 || !written.kvs().is_empty() {
            return Err(format!(
                "the proof did not hold: {} keys counted (expected {keys}), {} written since {since}",
                counted.count(),
                written.kvs().len()
            ));
        }
        if timed {
            out.count_ns.push((t1 - t0).as_nanos() as u64);
            out.keys_only_ns.push((t2 - t1).as_nanos() as u64);
            out.old_ns.push((t2 - t0).as_nanos() as u64);
        }
        Ok(())
    };
    for _ in 0..3 {
        old_proof(false, &mut out).await?;
    }
    let (old_cpu, old_wall, r) = with_cpu(pid, async {
        for _ in 0..reps {
            old_proof(true, &mut out).await?;
        }
        Ok::<_, String>(())
    })
    .await;
    r?;

    // The fence: the source's own progress request, brought back by the source's own watch of
    // the prefix (from the fence key to the prefix's end), opened as a cache opens it.
    let from = Revision::new(revision(&etcd).await? + 1);
    let mut watch = etcd.watch(PODS, from).await.map_err(|e| e.to_string())?;
    let mut fence = async |timed: bool, out: &mut Proof| -> Result<(), String> {
        // A consistent read asks etcd's revision first in either design: read here too (not
        // timed, as in the old proof), so that etcd's CPU per operation compares like for like.
        revision(&etcd).await?;
        let t0 = Instant::now();
        let put = async {
            etcd.request_progress(PODS).await.map_err(|e| e.to_string())?;
            Ok::<_, String>(t0.elapsed())
        };
        // The prefix is quiet: the next thing the watch yields is the fence's notification.
        let seen = async {
            match watch.next().await {
                Some(Ok(SourceEvent::Progress { .. })) => Ok(t0.elapsed()),
                Some(Ok(SourceEvent::Changes { revision, .. })) => {
                    Err(format!("the quiet prefix changed at {revision}"))
                }
                Some(Err(e)) => Err(e.to_string()),
                None => Err("the watch ended".to_owned()),
            }
        };
        let (put, seen) = tokio::join!(put, tokio::time::timeout(Duration::from_secs(10), seen));
        let put = put?;
        let seen = seen.map_err(|_| "no progress notification in 10 s".to_owned())??;
        if timed {
            out.fence_put_ns.push(put.as_nanos() as u64);
            out.fence_ns.push(seen.as_nanos() as u64);
        }
        Ok(())
    };
    for _ in 0..3 {
        fence(false, &mut out).await?;
    }
    let (fence_cpu, fence_wall, r) = with_cpu(pid, async {
        for _ in 0..reps {
            fence(true, &mut out).await?;
        }
        Ok::<_, String>(())
    })
    .await;
    r?;
    let (busy_after, busy_wall_after, ()) = alone().await;
    stop.notify_one();
    let written = writer.await.map_err(|e| e.to_string())?;
    out.busy_writes_per_sec = written as f64 / busy_started.elapsed().as_secs_f64();

    if let (Some(b0), Some(b1)) = (busy_before, busy_after) {
        let busy_ns_per_sec = (b0 + b1) as f64 / (busy_wall_before + busy_wall_after).as_secs_f64();
        out.busy_cores = Some(busy_ns_per_sec / 1e9);
        let per_op = |cpu: Option<u64>, wall: Duration| {
            cpu.map(|c| (c as f64 - busy_ns_per_sec * wall.as_secs_f64()).max(0.0) / reps.max(1) as f64)
        };
        out.old_cpu_ns = per_op(old_cpu, old_wall);
        out.fence_cpu_ns = per_op(fence_cpu, fence_wall);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_are_read_from_frames_and_lists() {
        let frame = br#"{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"42"}}}"#;
        assert_eq!(last_rv(frame), Some(42));
        let list = br#"{"kind":"PodList","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"resourceVersion":"3"}}]}"#;
        assert_eq!(list_rv(list), Some(7));
        assert_eq!(metric(b"# x\na_total{r=\"p\"} 5\n", "a_total{r=\"p\"}"), 5);
    }
}
