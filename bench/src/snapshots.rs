//! Snapshot memory under a burst of writes: `watchcache serve --seed-pods N --churn 500
//! --history 1024` in its own process for a bounded time (90 s by default), its resident set
//! sampled every second, while one client pages through every pod with `limit` and `continue`
//! (about 1,000 pages, `limit = N / 1000`), its pages spread evenly over `list_seconds`.
//!
//! What it says about the store (`core/src/store.rs`): a cache keeps only its current
//! snapshot; a paginated LIST pins the one it reads while its pages are asked for; older
//! states of the history window are made on demand by undoing the ring's events. So RSS should
//! grow by about the pinned snapshot's superseded versions and the ring's history, not by a
//! snapshot per event, and every page of the LIST should carry one resourceVersion.
//!
//! The LIST must end within the revisions the embedded store keeps: `serve` compacts it to
//! the last `max(4 × history, 1024)` revisions (4,096 with `--history 1024`: 8.2 s at 500
//! writes a second), and a continue token below the store's compacted revision is a 410
//! whatever the cache still holds, as the apiserver answers one etcd compacted. So by default
//! its pages are spread over 6 s, starting 10 s into the run; `--list-seconds 80` shows the
//! 410 a slower LIST gets.
//!
//! Each run reports RSS when `/readyz` first answers, the lowest in the first 10 s (the start:
//! with many pods the seeding's garbage is still resident at ready, and goes within seconds),
//! 10 s in (the store's log and the ring are full by then), the peak after the start and the
//! end of the run; the data (the seeded
//! pods' JSON, computed here with the same generator) and the ring's history bytes
//! (`watchcache_history_bytes`); the pages, their resourceVersions (one throughout, or not),
//! continues refused with 410; and from `/metrics` the pinned snapshots, the LISTs served by
//! undoing events and the reads the store answered. Three designs, each in its own server
//! process: the default snapshot retention (75 s), `--snapshot-retention 0` (the pin goes at
//! the reflector's next retention tick), and the default with no LIST at all (what the churn
//! alone costs).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use memchr::memmem;
use tokio::sync::Mutex;
use watchcache_server::workload::{node_count, pod};

use crate::alloc::{peak_rss_of, rss_bytes};
use crate::http::{get, start_server};

/// How long after `/readyz` the store's log (4,096 revisions) and the ring (1,024 events) are
/// full at 500 writes a second, with a margin: growth after it is growth in the steady state.
pub const WARM_UP: Duration = Duration::from_secs(10);

/// What to run.
#[derive(Clone, Debug)]
pub struct Params {
    /// Pods seeded (`--seed-pods`).
    pub pods: usize,
    /// Pod updates per second (`--churn`).
    pub churn: f64,
    /// The history window (`--history`).
    pub history: usize,
    /// `--snapshot-retention` in seconds; `None` for the server's default (75 s).
    pub retention: Option<f64>,
    /// How long to sample, from `/readyz` on.
    pub seconds: f64,
    /// How long the LIST is paced to take (its pages evenly spread over it); `None`: no LIST.
    pub list_seconds: Option<f64>,
    /// When the LIST starts, seconds into the run.
    pub list_start: f64,
    /// Pages the LIST is meant to have (`limit = pods / pages`, at least 1).
    pub pages: usize,
}

impl Params {
    /// Items per page.
    pub fn limit(&self) -> usize {
        (self.pods / self.pages.max(1)).max(1)
    }
}

/// One sample of the server, a second apart.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub at_secs: f64,
    pub rss: u64,
    pub history_bytes: u64,
    pub pinned_snapshots: u64,
    pub undone_reads: u64,
    pub store_reads: u64,
    /// The cache's revision (a LIST of an empty namespace at any state): the writes so far.
    pub revision: u64,
}

/// What the paginated LIST saw.
#[derive(Clone, Debug, Default)]
pub struct Lister {
    /// Pages served (of every attempt).
    pub pages: u64,
    /// Items on the pages of the attempt that completed (or of the last one).
    pub items: u64,
    /// Body bytes of the attempt that completed (or of the last one).
    pub bytes: u64,
    /// Whether an attempt reached its last page.
    pub completed: bool,
    /// Whether every page of that attempt carried the first page's resourceVersion.
    pub one_revision: bool,
    /// Distinct resourceVersions over the pages of that attempt.
    pub revisions: u64,
    /// Continues refused with 410 (each starts the LIST over, as a pager does).
    pub expired: u64,
    /// When the first 410 came, seconds from the first page, and after how many pages.
    pub first_expired: Option<(f64, u64)>,
    /// Seconds from the first page to the last page of the completed attempt.
    pub seconds: f64,
    /// Anything else that failed: a refused connection, another status, an unreadable page.
    pub errors: u64,
}

/// What a run measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Seconds from the server's start to `/readyz` (seeding, then the caches' first lists).
    pub ready_seconds: f64,
    /// RSS when `/readyz` first answered, after seeding.
    pub rss_start: u64,
    /// RSS 10 s later, once the store's log and the ring are full (from the samples).
    pub rss_warm: u64,
    /// The kernel's high-water mark over the process's life (seeding included).
    pub rss_hwm: u64,
    pub samples: Vec<Sample>,
    pub lister: Lister,
    /// The seeded pods' JSON, summed.
    pub data_bytes: u64,
}

/// A LIST that reads the cache's revision and nothing else: a namespace with no pods, at any
/// state (no wait, no continue, so no pin).
const REVISION_PATH: &str = "/api/v1/namespaces/watchcache-bench-none/pods?resourceVersion=0";

/// The seeded pods' JSON, summed: the generator's pods, as `--seed-pods` writes them (their
/// uid and timestamps are of fixed length, so the sum is the stored one).
pub fn data_bytes(pods: usize) -> u64 {
    let nodes = node_count(pods);
    (0..pods).map(|i| pod(i, nodes, 0).to_string().len() as u64).sum()
}

/// The value of the series that starts with `name` in a Prometheus text body.
fn series(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// A page's `metadata`: its resourceVersion and continue token. The header comes before the
/// items (`encoders/src/list.rs`), so only it is parsed.
fn page_meta(body: &[u8]) -> Option<(String, Option<String>)> {
    let at = memmem::find(body, br#""items":["#)?;
    let mut head = body[..at].to_vec();
    head.extend_from_slice(br#""items":[]}"#);
    let v: serde_json::Value = serde_json::from_slice(&head).ok()?;
    let meta = &v["metadata"];
    let rv = meta["resourceVersion"].as_str()?.to_owned();
    let token = meta["continue"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    Some((rv, token))
}

/// Items on a page: each is a pod as the generator writes it, `{"apiVersion":"v1","kind":"Pod",…`
/// (the list's own kind is `PodList`).
fn page_items(body: &[u8]) -> u64 {
    memmem::find_iter(body, br#""kind":"Pod","#).count() as u64
}

/// Pages through every pod, one page every `every`, until a LIST completes or `stop`; a 410
/// on a continue starts it over.
async fn list(
    addr: SocketAddr,
    limit: usize,
    every: Duration,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Lister>>,
) {
    let started = Instant::now();
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    'attempt: while !stop.load(Ordering::Relaxed) {
        let mut path = format!("/api/v1/pods?limit={limit}");
        let mut first_rv: Option<String> = None;
        let mut revisions: Vec<String> = Vec::new();
        let (mut items, mut bytes) = (0u64, 0u64);
        let attempt_started = Instant::now();
        loop {
            ticker.tick().await;
            if stop.load(Ordering::Relaxed) {
                let mut o = out.lock().await;
                o.items = items;
                o.bytes = bytes;
                o.revisions = revisions.len() as u64;
                return;
            }
            let answer = tokio::time::timeout(Duration::from_secs(30), get(addr, &path)).await;
            let mut o = out.lock().await;
            match answer {
                Ok(Ok((200, body))) => {
                    o.pages += 1;
                    let Some((rv, token)) = page_meta(&body) else {
                        o.errors += 1;
                        continue 'attempt;
                    };
                    items += page_items(&body);
                    bytes += body.len() as u64;
                    if !revisions.contains(&rv) {
                        revisions.push(rv.clone());
                    }
                    let first = first_rv.get_or_insert(rv);
                    match token {
                        Some(t) => path = format!("/api/v1/pods?limit={limit}&continue={t}"),
                        None => {
                            o.completed = true;
                            o.one_revision = revisions.len() == 1 && revisions[0] == *first;
                            o.revisions = revisions.len() as u64;
                            o.items = items;
                            o.bytes = bytes;
                            o.seconds = attempt_started.elapsed().as_secs_f64();
                            return;
                        }
                    }
                }
                Ok(Ok((410, _))) => {
                    o.expired += 1;
                    if o.first_expired.is_none() {
                        o.first_expired = Some((started.elapsed().as_secs_f64(), o.pages));
                    }
                    continue 'attempt;
                }
                _ => {
                    o.errors += 1;
                    drop(o);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue 'attempt;
                }
            }
        }
    }
}

/// Starts `binary serve` as `p` says and measures it; `progress(elapsed seconds)` each sample.
pub fn run(binary: &Path, p: &Params, progress: &(dyn Fn(u64) + Sync)) -> Result<Outcome, String> {
    let pods = p.pods.to_string();
    let churn = p.churn.to_string();
    let history = p.history.to_string();
    let mut args = vec!["--seed-pods", &pods, "--churn", &churn, "--history", &history];
    let retention = p.retention.map(|r| r.to_string());
    if let Some(r) = &retention {
        args.extend(["--snapshot-retention", r]);
    }
    let data_bytes = data_bytes(p.pods);
    let launched = Instant::now();
    let (server, addr) = start_server(binary, &args, &[])?;
    let pid = server.0.id();
    let rt = crate::http::clients_runtime()?;
    rt.block_on(async {
        // Seeding happens before the server accepts: the first answer comes after it.
        let ready_by = Instant::now() + Duration::from_secs(900);
        loop {
            let left = ready_by.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("the server was not ready in 15 minutes".to_owned());
            }
            if let Ok(Ok((200, _))) = tokio::time::timeout(left, get(addr, "/readyz")).await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let ready_seconds = launched.elapsed().as_secs_f64();
        let rss_start = rss_bytes(pid).ok_or("no RSS for the server")?;
        let stop = Arc::new(AtomicBool::new(false));
        let lister = Arc::new(Mutex::new(Lister::default()));
        let pages = p.pods.div_ceil(p.limit()).max(1);
        let task = p.list_seconds.map(|secs| {
            let every = Duration::from_secs_f64(secs / pages as f64);
            let (stop, lister, limit, after) = (stop.clone(), lister.clone(), p.limit(), p.list_start);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs_f64(after)).await;
                list(addr, limit, every, stop, lister).await;
            })
        });
        let started = Instant::now();
        let total = Duration::from_secs_f64(p.seconds);
        let mut samples = Vec::new();
        let mut ticker = tokio::time::interval(Duration::from_secs(1));
        while started.elapsed() < total {
            ticker.tick().await;
            let text = match tokio::time::timeout(Duration::from_secs(10), get(addr, "/metrics")).await {
                Ok(Ok((200, body))) => String::from_utf8_lossy(&body).into_owned(),
                _ => String::new(),
            };
            let pods = |name: &str| series(&text, &format!("{name}{{resource=\"pods\"}}"));
            // The churn is paced by the server's own timer, which falls behind on a busy
            // machine: the revisions say how many writes there were.
            let revision = match tokio::time::timeout(Duration::from_secs(10), get(addr, REVISION_PATH)).await
            {
                Ok(Ok((200, body))) => page_meta(&body).and_then(|(rv, _)| rv.parse().ok()).unwrap_or(0),
                _ => 0,
            };
            samples.push(Sample {
                at_secs: started.elapsed().as_secs_f64(),
                rss: rss_bytes(pid).unwrap_or(0),
                history_bytes: pods("watchcache_history_bytes"),
                pinned_snapshots: pods("watchcache_pinned_snapshots"),
                undone_reads: pods("watchcache_undone_reads_total"),
                store_reads: pods("watchcache_store_reads_total"),
                revision,
            });
            progress(started.elapsed().as_secs());
        }
        stop.store(true, Ordering::Relaxed);
        if let Some(task) = task {
            let _ = tokio::time::timeout(Duration::from_secs(35), task).await;
        }
        let lister = lister.lock().await.clone();
        let rss_warm = samples
            .iter()
            .find(|s| s.at_secs >= WARM_UP.as_secs_f64())
            .map_or(rss_start, |s| s.rss);
        Ok(Outcome {
            ready_seconds,
            rss_start,
            rss_warm,
            rss_hwm: peak_rss_of(pid).unwrap_or(0),
            samples,
            lister,
            data_bytes,
        })
    })
}

/// Where the heap goes under the same churn, measured in one process with every allocation
/// counted (no HTTP, no allocator's retention): an embedded store as `serve` builds it, then a
/// pod cache over it as `serve` configures it, then a page of a paginated LIST.
#[derive(Debug, Default)]
pub struct Heap {
    /// The store's change log once full (`max(4 × history, 1024)` revisions): the heap the
    /// store took over as many writes after seeding.
    pub store_log: i64,
    /// Revisions the store keeps.
    pub store_revisions: u64,
    /// The cache's growth over two history windows of writes, once built (its ring and what
    /// the ring's events keep alive).
    pub cache_growth: i64,
    /// The cache's own count of the superseded versions its ring holds, then.
    pub history_bytes: u64,
    /// The growth over `writes` more writes after a first LIST page pinned its snapshot:
    /// the pinned snapshot's superseded versions (store and ring are full, so nothing else
    /// grows).
    pub pinned: i64,
    /// Those writes.
    pub writes: usize,
}

/// Measures [`Heap`] for `pods` pods and a window of `history` events; `writes` is how much
/// churn goes by while the LIST's snapshot is pinned. Run with counting on (a child process).
pub async fn heap(
    pods: usize,
    history: usize,
    writes: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Heap, String> {
    use bytes::Bytes;
    use watchcache_core::{Cache, CacheConfig, ListOptions, ListResult, MemorySource, Revision};
    use watchcache_encoders::JsonCodec;
    use watchcache_server::workload::pod_key;

    use crate::alloc::Counting;

    let keep = (history as u64 * 4).max(1024);
    let store = MemorySource::with_limits(None, Some(keep), Some(256 << 20));
    let nodes = node_count(pods);
    for i in 0..pods {
        store
            .create(&pod_key(i), Bytes::from(pod(i, nodes, 0).to_string()))
            .map_err(|e| e.to_string())?;
    }
    progress(1);
    // The churn's own choice of pods: uniform, as `workload::churn` draws them.
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut generation = 0u64;
    let mut churn = |n: usize| -> Result<Revision, String> {
        let mut last = Revision::ZERO;
        for _ in 0..n {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let i = (rng % pods as u64) as usize;
            generation += 1;
            last = store
                .update(
                    &pod_key(i),
                    Bytes::from(pod(i, nodes, generation).to_string()),
                    None,
                )
                .map_err(|e| e.to_string())?;
        }
        Ok(last)
    };
    let seeded = Counting::live();
    churn(keep as usize)?;
    let store_log = (Counting::live() - seeded) as i64;
    progress(2);

    let fields = ["spec.nodeName", "status.phase"];
    let codec = Arc::new(JsonCodec::new(true, &fields));
    let mut config = CacheConfig::new("pods", "/registry/pods/");
    config.capacity = history;
    config.fields = fields.iter().map(|f| (*f).to_owned()).collect();
    config.trigger_field = Some("spec.nodeName".into());
    let cache = Cache::new(store.clone(), codec, config).map_err(|e| e.to_string())?;
    let caught_up = async |target: Revision| -> Result<(), String> {
        let by = Instant::now() + Duration::from_secs(300);
        while !cache.is_ready() || cache.revision() < target {
            if Instant::now() > by {
                return Err("the cache did not catch up in 300 s".into());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(())
    };
    caught_up(store.revision()).await?;
    let built = Counting::live();
    // The writes go in slices, so the reflector keeps up (as at 500 a second) rather than
    // finding thousands waiting.
    let mut paced = async |n: usize| -> Result<(), String> {
        for _ in 0..n.div_ceil(256) {
            let last = churn(256)?;
            caught_up(last).await?;
        }
        Ok(())
    };
    paced(2 * history).await?;
    let cache_growth = (Counting::live() - built) as i64;
    let history_bytes = cache.stats().history_bytes.load(Ordering::Relaxed);
    progress(3);

    let page = ListOptions {
        limit: Some((pods / 1000).max(1)),
        ..ListOptions::default()
    };
    // Only the continue token is kept: the page's items (which hold the snapshot too) go at
    // once, so what keeps the snapshot is the store's pin.
    let ListResult {
        revision,
        continue_token,
        ..
    } = cache.list(&page).await.map_err(|e| e.to_string())?;
    let token = continue_token.ok_or("the first page was the last")?;
    let pinned_from = Counting::live();
    paced(writes).await?;
    let pinned = (Counting::live() - pinned_from) as i64;
    // The pin is held for the retention (75 s) after the last page, whether or not a next
    // page could still be served: once the store has compacted the revision (after
    // `keep` writes), a continue is a 410 whatever the cache pins.
    if cache.stats().pinned_snapshots.load(Ordering::Relaxed) != 1 {
        return Err("the first page's snapshot is not pinned".into());
    }
    if writes < keep as usize {
        let next = ListOptions {
            continue_token: Some(token),
            ..page
        };
        let second = cache.list(&next).await.map_err(|e| e.to_string())?;
        if second.revision != revision {
            return Err("the second page did not read the first one's snapshot".into());
        }
    }
    progress(4);
    Ok(Heap {
        store_log,
        store_revisions: keep,
        cache_growth,
        history_bytes,
        pinned,
        writes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_header_is_read_without_its_items() {
        let page = br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"abc","remainingItemCount":3},"items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}},{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b"}}]}"#;
        assert_eq!(page_meta(page), Some(("42".into(), Some("abc".into()))));
        assert_eq!(page_items(page), 2);
        let last = br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"42"},"items":[]}"#;
        assert_eq!(page_meta(last), Some(("42".into(), None)));
        assert_eq!(series("a{resource=\"pods\"} 7\n", "a{resource=\"pods\"}"), 7);
    }

    #[test]
    fn the_data_is_the_generators_pods() {
        let one = data_bytes(1);
        assert!((3_500..5_000).contains(&one), "a pod of about 4 KiB: {one}");
        assert_eq!(
            data_bytes(3),
            (0..3).map(|i| pod(i, 1, 0).to_string().len() as u64).sum::<u64>()
        );
    }
}
