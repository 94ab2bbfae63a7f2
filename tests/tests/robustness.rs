//! The robustness suite, modelled on etcd's own: a 3-member etcd and three replicas under
//! writers, consistent readers and watchers of every kind, while a seeded schedule of faults
//! kills, pauses and restarts etcd members and replicas and compacts the store. After the run,
//! every stream a client received and every read it made is checked against the history etcd
//! itself recorded (`watchcache_tests::robustness`): Ordered, Unique, Reliable, Bookmarkable,
//! Resumable, initial events, DELETED's last state, 410 only once compacted, LIST and GET
//! linearizable across replicas (a LIST's items, a GET's object, and the revision initial
//! events are given at, against every write acknowledged before the request); no watch ended
//! cleanly before its timeout; and every stream still open at the end has reached the store's
//! last revision.
//!
//! The replicas: one as configured by default, one with a window of 16 events, one whose etcd
//! watch lags 150 ms. Besides the HTTP writers, transactions go straight to etcd, some of them
//! larger than the small window: each such revision laps every watcher of that replica inside
//! it, and they catch up from etcd, within the revision, then hand back over to the window.
//! (Slow and stalled clients alone seldom make a lap here: the server's and the kernel's
//! buffers on loopback hold more than a stall of seconds owes them.) Each seed reports the
//! replicas' catch-ups, and the run fails if none was lapped and handed back over.
//!
//! The watchers: from a LIST's revision (all namespaces, or one namespace and a label
//! selector), with initial events (`sendInitialEvents`), from `resourceVersion=0` (the state
//! with no bookmark to end it), from an older revision (a catch-up
//! from etcd), slow readers, and stalled ones that read nothing for seconds. Each one that is
//! cut (a replica killed, its timeout) resumes from the last revision it received, on any
//! replica, as a new stream: a resumption checked like any other. A watch ended by an ERROR
//! other than 410 is a violation.
//!
//! The faults, one at a time: kill -9 and restart of the etcd leader or of a follower, SIGSTOP
//! and SIGCONT of a member (a partition), a replica killed and restarted on its address, and
//! compaction at a random revision.
//!
//! Schedule: `WATCHCACHE_ROBUSTNESS_SEEDS` (a count from 1, or `A-B`; default 2) runs of
//! `WATCHCACHE_ROBUSTNESS_SECS` seconds each (default 20); `WATCHCACHE_ROBUSTNESS_SEED=N` replays
//! one. A violation writes a report (seed, fault timeline, the violation with the events around
//! it) under the target directory's `robustness/` and fails the test.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use watchcache_etcd::{EtcdOptions, EtcdSource};
use watchcache_server::Backend;
use watchcache_tests::etcd::EtcdCluster;
use watchcache_tests::robustness::{
    Change, End, Get, History, Kind, Obj, Read, Seen, Selector, Stream, Violation, Write, check_gets,
    check_list, check_reads, check_stream,
};
use watchcache_tests::{ServeConfig, Server, config};

const PREFIX: &str = "/registry/configmaps/";
const NAMESPACES: [&str; 2] = ["rb-a", "rb-b"];
const APPS: [&str; 3] = ["web", "db", "cache"];
/// Names each writer cycles through, per namespace.
const NAMES: usize = 12;
/// The keys the transactions write, in all: a big transaction writes up to all of them.
const TX_KEYS: usize = 24;

type Http = Client<HttpConnector, Full<Bytes>>;

/// An object as the checks compare it: labels, and a digest of the JSON without its
/// resourceVersion (the store holds none; the server sets it from the revision).
fn obj_of(v: &Value) -> Obj {
    let labels = v["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let mut v = v.clone();
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    canonical(&v, &mut h);
    Obj {
        labels,
        digest: h.finish(),
    }
}

/// Hashes a JSON value with its object keys in order, whatever order it was written in.
fn canonical(v: &Value, h: &mut impl Hasher) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for k in keys {
                k.hash(h);
                canonical(&m[k], h);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| canonical(x, h)),
        other => other.to_string().hash(h),
    }
}

fn key_of(etcd_key: &[u8]) -> String {
    String::from_utf8_lossy(etcd_key)
        .strip_prefix(PREFIX)
        .unwrap_or_default()
        .to_owned()
}

fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// What every task of a run shares.
struct Run {
    seed: u64,
    started: Instant,
    /// Each replica's address while it serves; `None` while it is down.
    replicas: Vec<Mutex<Option<SocketAddr>>>,
    streams: Mutex<Vec<Stream>>,
    reads: Mutex<Vec<Read>>,
    gets: Mutex<Vec<Get>>,
    writes: Mutex<Vec<Write>>,
    /// The newest compaction the run asked for (set before it is asked).
    compacted: AtomicU64,
    /// Every compaction asked for, in order, with whether etcd made it: `None` while the
    /// request is out, or if that could not be told.
    compactions: Mutex<Vec<(u64, Option<bool>)>>,
    /// For each stream in `streams`, how many compactions had been asked for when it ended.
    asked_by_end: Mutex<Vec<usize>>,
    /// The revision through which the history is recorded.
    recorded: AtomicU64,
    /// The faults, in order, timed from the start.
    timeline: Mutex<Vec<String>>,
    /// The highest revision each watcher's current stream has reached (its start, events,
    /// bookmarks).
    reached: Vec<AtomicU64>,
    /// Violations the clients saw as they ran (a watch ended early).
    violations: Mutex<Vec<Violation>>,
    /// What each watcher did last and when, for a report of one that fell behind.
    activity: Vec<Mutex<(Instant, String)>>,
    /// Requests that failed (a fault the client saw): counted, not checked.
    failed: AtomicU64,
    /// The replicas' catch-up counters ([`TALLIED`]), summed over each replica's lives: read
    /// before each kill and at the end.
    tally: Mutex<[u64; TALLIED.len()]>,
    /// Writers and faults stop.
    calm: AtomicBool,
    /// Readers and watchers stop.
    stop: AtomicBool,
}

impl Run {
    fn note(&self, what: String) {
        let at = self.started.elapsed();
        eprintln!("[seed {}] +{:.1}s {what}", self.seed, at.as_secs_f64());
        self.timeline
            .lock()
            .unwrap()
            .push(format!("+{:.3}s {what}", at.as_secs_f64()));
    }

    /// A serving replica, at random.
    fn replica(&self, rng: &mut fastrand::Rng) -> Option<(usize, SocketAddr)> {
        let up: Vec<(usize, SocketAddr)> = self
            .replicas
            .iter()
            .enumerate()
            .filter_map(|(i, a)| a.lock().unwrap().map(|a| (i, a)))
            .collect();
        (!up.is_empty()).then(|| up[rng.usize(0..up.len())])
    }
}

fn http() -> Http {
    watchcache_tests::http()
}

/// The catch-up counters the run reports, to show the paths it checks were taken: catch-ups
/// (of which lapped mid-stream), their reads of etcd, events and hand-overs.
const TALLIED: [&str; 5] = [
    "watchcache_watch_catch_ups_total",
    "watchcache_watch_catch_ups_lapped_total",
    "watchcache_watch_catch_up_reads_total",
    "watchcache_watch_catch_up_events_total",
    "watchcache_watch_catch_up_handovers_total",
];

/// Adds a replica's catch-up counters to the run's tally (nothing if it does not answer).
async fn tally(run: &Run, addr: SocketAddr) {
    let req = http::Request::get(format!("http://{addr}/metrics"))
        .body(Full::new(Bytes::new()))
        .expect("a valid request");
    let text = async {
        let resp = http().request(req).await.ok()?;
        let body = resp.into_body().collect().await.ok()?.to_bytes();
        Some(String::from_utf8_lossy(&body).into_owned())
    };
    let Ok(Some(text)) = tokio::time::timeout(Duration::from_secs(10), text).await else {
        return;
    };
    let mut tally = run.tally.lock().unwrap();
    for (sum, name) in tally.iter_mut().zip(TALLIED) {
        *sum += text
            .lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with(['{', ' ']))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64;
    }
}

/// One request without retry, bounded in time: the status and the body, or why it failed.
async fn send(
    client: &Http,
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .body(Full::new(
            body.map(|b| Bytes::from(b.to_string())).unwrap_or_default(),
        ))
        .expect("a valid request");
    let answer = async {
        let resp = client.request(req).await.map_err(|e| e.to_string())?;
        let code = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((code, serde_json::from_slice(&body).unwrap_or(Value::Null)))
    };
    tokio::time::timeout(Duration::from_secs(20), answer)
        .await
        .unwrap_or_else(|_| Err("no answer in 20 s".into()))
}

fn configmap(ns: &str, name: &str, app: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "data": {"v": value}})
}

/// A writer through the replicas: creates, replaces and deletes configmaps of its own names,
/// each value unique. Acknowledged writes (deletions too) are recorded with their revisions.
async fn writer(run: Arc<Run>, w: usize) {
    let mut rng = fastrand::Rng::with_seed(run.seed * 1000 + w as u64);
    let client = http();
    let mut exists = [[false; NAMES]; 2];
    let mut n = 0u64;
    while !run.calm.load(Ordering::Relaxed) {
        n += 1;
        let Some((r, addr)) = run.replica(&mut rng) else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let (nsi, i) = (rng.usize(0..2), rng.usize(0..NAMES));
        let (ns, name) = (NAMESPACES[nsi], format!("w{w}-{i}"));
        let app = APPS[rng.usize(0..APPS.len())];
        let body = configmap(ns, &name, app, &format!("w{w}-{n}"));
        let base = format!("/api/v1/namespaces/{ns}/configmaps");
        let (method, path) = match (exists[nsi][i], rng.u8(0..4)) {
            (false, _) => ("POST", base),
            (true, 0) => ("DELETE", format!("{base}/{name}")),
            (true, _) => ("PUT", format!("{base}/{name}")),
        };
        let body = (method != "DELETE").then_some(body);
        match send(&client, addr, method, &path, body.as_ref()).await {
            Ok((code, v)) if (200..300).contains(&code) => {
                exists[nsi][i] = method != "DELETE";
                // A deletion answers with its own revision, as a write does.
                run.writes.lock().unwrap().push(Write {
                    acked: Instant::now(),
                    rv: rv_of(&v),
                });
            }
            // Created meanwhile by an earlier attempt whose answer was lost, or gone.
            Ok((409, _)) => exists[nsi][i] = true,
            Ok((404, _)) => exists[nsi][i] = false,
            Ok((code, v)) => {
                run.failed.fetch_add(1, Ordering::Relaxed);
                if code != 503 && code != 504 && code != 500 && code != 429 {
                    panic!("replica {r}: {method} {path}: {code} {v}");
                }
            }
            Err(_) => {
                run.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(10..40))).await;
    }
}

/// Transactions straight to etcd that change keys of both namespaces at one revision: what a
/// watch must deliver whole.
async fn transactor(run: Arc<Run>, endpoints: Vec<String>) {
    let mut rng = fastrand::Rng::with_seed(run.seed * 1000 + 999);
    let mut client = None;
    let mut n = 0u64;
    while !run.calm.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.u64(100..400))).await;
        if client.is_none() {
            client = etcd_client::Client::connect(&endpoints, None).await.ok();
        }
        let Some(c) = client.as_mut() else { continue };
        n += 1;
        // Distinct keys (a transaction may not write a key twice), in both namespaces. Now
        // and then a revision larger than the small window (16 events): it laps every watcher
        // of that replica inside the revision, and they catch up from etcd within it.
        let (keys, size) = if rng.u8(0..6) == 0 {
            (TX_KEYS, rng.usize(17..TX_KEYS + 1))
        } else {
            (6, rng.usize(2..4))
        };
        let first = rng.usize(0..keys);
        let ops: Vec<etcd_client::TxnOp> = (0..size)
            .map(|k| {
                let ns = NAMESPACES[k % 2];
                let name = format!("tx-{}", (first + k) % keys);
                let key = format!("{PREFIX}{ns}/{name}");
                // A big one only puts: each of its keys makes an event.
                if size <= 16 && rng.u8(0..5) == 0 {
                    etcd_client::TxnOp::delete(key, None)
                } else {
                    let app = APPS[rng.usize(0..APPS.len())];
                    let v = configmap(ns, &name, app, &format!("tx-{n}-{k}"));
                    etcd_client::TxnOp::put(key, v.to_string(), None)
                }
            })
            .collect();
        match tokio::time::timeout(
            Duration::from_secs(5),
            c.txn(etcd_client::Txn::new().and_then(ops)),
        )
        .await
        {
            Ok(Ok(resp)) => {
                if let Some(h) = resp.header() {
                    run.writes.lock().unwrap().push(Write {
                        acked: Instant::now(),
                        rv: h.revision() as u64,
                    });
                }
            }
            _ => {
                run.failed.fetch_add(1, Ordering::Relaxed);
                client = None;
            }
        }
    }
}

/// Consistent LISTs (all, or a namespace with a selector) and GETs on random replicas.
async fn reader(run: Arc<Run>, r: usize) {
    let mut rng = fastrand::Rng::with_seed(run.seed * 1000 + 500 + r as u64);
    let client = http();
    while !run.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.u64(20..80))).await;
        let Some((i, addr)) = run.replica(&mut rng) else {
            continue;
        };
        let ns = NAMESPACES[rng.usize(0..2)];
        if rng.bool() {
            let name = format!("w{}-{}", rng.usize(0..2), rng.usize(0..NAMES));
            let began = Instant::now();
            let path = format!("/api/v1/namespaces/{ns}/configmaps/{name}");
            let answer = match send(&client, addr, "GET", &path, None).await {
                Ok((200, v)) => Some((rv_of(&v), obj_of(&v))),
                Ok((404, v)) if v["reason"] == "NotFound" => None,
                _ => {
                    run.failed.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            };
            run.gets.lock().unwrap().push(Get {
                name: format!("reader {r} GET {path} on replica {i}"),
                began,
                key: format!("{ns}/{name}"),
                answer,
            });
        } else {
            let (selector, path) = if rng.bool() {
                (Selector::default(), "/api/v1/configmaps".to_owned())
            } else {
                let app = APPS[rng.usize(0..APPS.len())];
                (
                    Selector {
                        namespace: Some(ns.to_owned()),
                        labels: [("app".to_owned(), app.to_owned())].into(),
                    },
                    format!("/api/v1/namespaces/{ns}/configmaps?labelSelector=app%3D{app}"),
                )
            };
            let began = Instant::now();
            let Ok((200, v)) = send(&client, addr, "GET", &path, None).await else {
                run.failed.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let ended = Instant::now();
            let items = items_of(&v);
            run.reads.lock().unwrap().push(Read {
                name: format!("reader {r} LIST {path} on replica {i}"),
                began,
                ended,
                rv: rv_of(&v),
                items: Some((selector, items)),
            });
        }
    }
}

fn items_of(list: &Value) -> BTreeMap<String, Obj> {
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|o| {
                    let m = &o["metadata"];
                    (
                        format!(
                            "{}/{}",
                            m["namespace"].as_str().unwrap_or(""),
                            m["name"].as_str().unwrap_or("")
                        ),
                        obj_of(o),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The kinds of watcher.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Style {
    /// Every namespace, from a LIST's revision.
    All,
    /// One namespace and a label selector.
    Selective,
    /// `sendInitialEvents=true` from any revision.
    Initial,
    /// `resourceVersion=0`: the state as ADDED events, with no bookmark to end them.
    Zero,
    /// From a revision well behind the store's: a catch-up.
    Old,
    /// Reads each frame late.
    Slow,
    /// Reads nothing for seconds at a time.
    Stalled,
}

/// The run's watchers, two of each style.
const STYLES: [Style; 14] = [
    Style::All,
    Style::All,
    Style::Selective,
    Style::Selective,
    Style::Initial,
    Style::Initial,
    Style::Zero,
    Style::Zero,
    Style::Old,
    Style::Old,
    Style::Slow,
    Style::Slow,
    Style::Stalled,
    Style::Stalled,
];

/// How a watch is read: frames of newline-delimited JSON, each awaited at most `wait`.
struct Body {
    /// What the body's reader task received: data, or how the body ended.
    chunks: tokio::sync::mpsc::Receiver<Result<Bytes, String>>,
    buf: Vec<u8>,
    done: Option<Next>,
}

enum Next {
    Frame(Value),
    Quiet,
    End,
    Broken(String),
}

impl Body {
    /// Reads `body` in a task of its own, a chunk at a time: the watcher's waits and stalls
    /// never cancel a read of the body half-way, and a watcher that stops taking chunks stops
    /// the reads (the server sees its client stall).
    fn new(mut body: hyper::body::Incoming) -> Body {
        let (tx, chunks) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            loop {
                let sent = match body.frame().await {
                    None => break,
                    Some(Err(e)) => tx.send(Err(e.to_string())).await,
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => tx.send(Ok(data)).await,
                        Err(_) => continue,
                    },
                };
                if sent.is_err() {
                    break;
                }
            }
        });
        Body {
            chunks,
            buf: Vec::new(),
            done: None,
        }
    }

    async fn next(&mut self, wait: Duration) -> Next {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return match serde_json::from_slice(&line) {
                    Ok(v) => Next::Frame(v),
                    Err(e) => Next::Broken(format!("a frame that is not JSON: {e}")),
                };
            }
            if let Some(done) = self.done.take() {
                return done;
            }
            match tokio::time::timeout(wait, self.chunks.recv()).await {
                Err(_) => return Next::Quiet,
                Ok(None) => self.done = Some(Next::End),
                Ok(Some(Err(e))) => self.done = Some(Next::Broken(e)),
                Ok(Some(Ok(data))) => self.buf.extend_from_slice(&data),
            }
        }
    }
}

/// A watcher: opens a watch of its style, records what it gets, and when it is cut resumes
/// from the last revision it received (after a 410, from a fresh LIST), until the run stops.
async fn watcher(run: Arc<Run>, id: usize, style: Style) {
    let mut rng = fastrand::Rng::with_seed(run.seed * 1000 + 100 + id as u64);
    let client = http();
    let ns = NAMESPACES[id % 2];
    let app = APPS[id % APPS.len()];
    let selector = match style {
        Style::Selective => Selector {
            namespace: Some(ns.to_owned()),
            labels: [("app".to_owned(), app.to_owned())].into(),
        },
        _ => Selector::default(),
    };
    let base = match style {
        Style::Selective => format!("/api/v1/namespaces/{ns}/configmaps?labelSelector=app%3D{app}"),
        _ => "/api/v1/configmaps".to_owned(),
    };
    // Where the next stream starts: `None` for a fresh start (a LIST, or initial events).
    let mut from: Option<u64> = None;
    let mut n = 0;
    let mut stalled = Instant::now();
    while !run.stop.load(Ordering::Relaxed) {
        let Some((r, addr)) = run.replica(&mut rng) else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        n += 1;
        *run.activity[id].lock().unwrap() = (Instant::now(), format!("opening stream {n}"));
        let sep = if base.contains('?') { '&' } else { '?' };
        let timeout = rng.u64(4..12);
        let initial = style == Style::Initial && from.is_none();
        let start = match from {
            Some(rv) => rv,
            None if initial || style == Style::Zero => 0,
            None if style == Style::Old => {
                // A revision some way back, above the compaction as far as the run knows.
                let head = run.recorded.load(Ordering::Relaxed);
                let floor = run.compacted.load(Ordering::Relaxed);
                head.saturating_sub(rng.u64(20..200)).max(floor + 1)
            }
            None => match send(&client, addr, "GET", &base, None).await {
                Ok((200, v)) => rv_of(&v),
                _ => {
                    run.failed.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let path = if initial {
            format!(
                "{base}{sep}watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds={timeout}"
            )
        } else {
            format!(
                "{base}{sep}watch=1&resourceVersion={start}&allowWatchBookmarks=true&timeoutSeconds={timeout}"
            )
        };
        let name = format!(
            "watcher {id} ({style:?}) stream {n} on replica {r} at +{:.1}s: {path}",
            run.started.elapsed().as_secs_f64()
        );
        let req = http::Request::get(format!("http://{addr}{path}"))
            .body(Full::new(Bytes::new()))
            .expect("a valid request");
        let sent = Instant::now();
        let resp = match tokio::time::timeout(Duration::from_secs(20), client.request(req)).await {
            Ok(Ok(resp)) if resp.status() == 200 => resp,
            Ok(Ok(resp)) => {
                let code = resp.status().as_u16();
                assert!(
                    code == 503 || code == 504 || code == 429 || code == 500,
                    "{name}: answered {code}"
                );
                run.failed.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            _ => {
                run.failed.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let local = resp
            .extensions()
            .get::<hyper_util::client::legacy::connect::HttpInfo>()
            .map(|i| i.local_addr().port())
            .unwrap_or(0);
        let name = format!("{name} (port {local})");
        let mut body = Body::new(resp.into_body());
        let opened = Instant::now();
        // What this stream has reached (the drain waits for every watcher's current stream).
        run.reached[id].store(if initial { 0 } else { start }, Ordering::Relaxed);
        let mut events = Vec::new();
        let end = loop {
            if run.stop.load(Ordering::Relaxed) {
                // What has come already is read first: a revision's events arrive together.
                while let Next::Frame(frame) = body.next(Duration::from_millis(100)).await {
                    if let Some(seen) = seen_of(&frame) {
                        events.push(seen);
                    }
                }
                let ended_initial = events
                    .iter()
                    .any(|e| e.kind == Kind::Bookmark { initial_end: true });
                // A resourceVersion=0 stream with nothing but ADDEDs may be inside its state,
                // which nothing marks the end of: cut, as initial events without their bookmark.
                let in_state =
                    style == Style::Zero && start == 0 && events.iter().all(|e| e.kind == Kind::Added);
                break if (initial && !ended_initial) || in_state {
                    End::Cut
                } else {
                    End::Open
                };
            }
            match style {
                // Slower than the writers at times (a lap on the small window), faster on
                // average: it keeps up in the end.
                Style::Slow => tokio::time::sleep(Duration::from_millis(rng.u64(2..20))).await,
                // Reads nothing for 2 to 7 s, every 6 s or so (past 5 s, a catch-up's read
                // gives its place up); in between, at full speed.
                Style::Stalled if stalled.elapsed() > Duration::from_secs(6) => {
                    tokio::time::sleep(Duration::from_millis(rng.u64(2000..7000))).await;
                    stalled = Instant::now();
                }
                _ => {}
            }
            *run.activity[id].lock().unwrap() = (
                Instant::now(),
                format!(
                    "reading stream {n}, {} bytes received and not yet read",
                    body.buf.len()
                ),
            );
            let frame = match body.next(Duration::from_millis(200)).await {
                Next::Quiet => continue,
                Next::End => {
                    // A clean end before the timeout asked for is an early end.
                    let lasted = opened.elapsed();
                    if lasted + Duration::from_secs(1) < Duration::from_secs(timeout) {
                        run.violations.lock().unwrap().push(Violation {
                            guarantee: "Timeout",
                            who: name.clone(),
                            detail: format!("ended cleanly after {lasted:?} of its {timeout} s"),
                        });
                    }
                    break End::Closed;
                }
                Next::Broken(e) => break End::Broken(e),
                Next::Frame(f) => f,
            };
            if frame["type"] == "ERROR" {
                if frame["object"]["code"] == 410 {
                    break End::Expired;
                }
                // Only a 410 ends a watch of valid objects in stream: any other ERROR is the
                // server giving up on a watcher.
                run.violations.lock().unwrap().push(Violation {
                    guarantee: "Reliable",
                    who: name.clone(),
                    detail: format!("ended by an ERROR other than 410: {frame}"),
                });
                break End::Broken(format!("{frame}"));
            }
            let Some(seen) = seen_of(&frame) else {
                break End::Broken(format!("{frame}"));
            };
            if seen.kind == (Kind::Bookmark { initial_end: true }) {
                // The state the initial events gave is a consistent read at the bookmark.
                run.reads.lock().unwrap().push(Read {
                    name: format!("{name}: its initial events"),
                    began: sent,
                    ended: Instant::now(),
                    rv: seen.rv,
                    items: None,
                });
            }
            run.reached[id].fetch_max(seen.rv, Ordering::Relaxed);
            events.push(seen);
        };
        // Resume from the last revision received (of the live part, for initial events).
        let initial_done = !initial
            || events
                .iter()
                .any(|e| e.kind == Kind::Bookmark { initial_end: true });
        let last = events.iter().map(|e| e.rv).max();
        from = match (&end, last) {
            (End::Expired, _) => None,
            (_, Some(rv)) if initial_done => Some(rv),
            (_, None) if !initial => Some(start),
            _ => None,
        };
        // A watcher from an old revision goes on from where it got, as the others do; it
        // starts anew from an old revision now and then.
        if style == Style::Old && rng.u8(0..3) == 0 {
            from = None;
        }
        let mut streams = run.streams.lock().unwrap();
        // Judged after the run by the compactions asked for by now that etcd made.
        let asked = run.compactions.lock().unwrap().len();
        run.asked_by_end.lock().unwrap().push(asked);
        streams.push(Stream {
            name,
            start,
            initial,
            selector: selector.clone(),
            events,
            end,
            compacted: None,
        });
    }
}

/// What a frame says, for the checks: `None` for an ERROR or a frame of no known type.
fn seen_of(frame: &Value) -> Option<Seen> {
    let object = &frame["object"];
    let kind = match frame["type"].as_str()? {
        "ADDED" => Kind::Added,
        "MODIFIED" => Kind::Modified,
        "DELETED" => Kind::Deleted,
        "BOOKMARK" => Kind::Bookmark {
            initial_end: object["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true",
        },
        _ => return None,
    };
    Some(if let Kind::Bookmark { .. } = kind {
        Seen {
            kind,
            rv: rv_of(object),
            key: String::new(),
            object: None,
        }
    } else {
        let m = &object["metadata"];
        Seen {
            kind,
            rv: rv_of(object),
            key: format!(
                "{}/{}",
                m["namespace"].as_str().unwrap_or(""),
                m["name"].as_str().unwrap_or("")
            ),
            object: Some(obj_of(object)),
        }
    })
}

/// Records etcd's history of the prefix from revision 1, with each change's previous value:
/// a watch that resumes after its last whole revision when a member dies under it. The run
/// never compacts past what it has recorded.
async fn recorder(run: Arc<Run>, endpoints: Vec<String>, history: Arc<Mutex<History>>) -> Result<(), String> {
    let mut next = 1i64;
    while !run.stop.load(Ordering::Relaxed) {
        let Ok(Ok(mut client)) = tokio::time::timeout(
            Duration::from_secs(2),
            etcd_client::Client::connect(&endpoints, None),
        )
        .await
        else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let options = etcd_client::WatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_progress_notify()
            .with_start_revision(next);
        let Ok(Ok(mut stream)) =
            tokio::time::timeout(Duration::from_secs(2), client.watch(PREFIX, Some(options))).await
        else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        loop {
            if run.stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            let resp = match tokio::time::timeout(Duration::from_secs(3), stream.message()).await {
                Ok(Ok(Some(resp))) => resp,
                // Quiet for long (a paused member under it), broken or ended: watch anew.
                _ => break,
            };
            if resp.compact_revision() != 0 {
                return Err(format!(
                    "the recorder's history was compacted at {} (it needed {next})",
                    resp.compact_revision()
                ));
            }
            if resp.canceled() {
                // Canceled by the member (it is going away): nothing in it, watch anew.
                break;
            }
            let mut h = history.lock().unwrap();
            for e in resp.events() {
                let Some(kv) = e.kv() else { continue };
                let rev = kv.mod_revision();
                let value = match e.event_type() {
                    etcd_client::EventType::Put => Some(parse(kv.value())?),
                    etcd_client::EventType::Delete => None,
                };
                let prev = e.prev_kv().map(|p| parse(p.value())).transpose()?;
                h.revisions.entry(rev as u64).or_default().push(Change {
                    key: key_of(kv.key()),
                    value,
                    prev,
                });
                next = next.max(rev + 1);
            }
            drop(h);
            // A response holds whole revisions: all up to its header's are recorded (the
            // events of a watch come before a progress notification past them).
            let through = match resp.header() {
                // A progress notification: every event through its revision was sent. (Not the
                // response that confirms the watch: events from `next` may still follow it.)
                Some(h) if resp.events().is_empty() && !resp.created() => h.revision(),
                _ => next - 1,
            };
            next = next.max(through + 1);
            run.recorded.fetch_max(through as u64, Ordering::SeqCst);
        }
    }
    Ok(())
}

fn parse(value: &[u8]) -> Result<Obj, String> {
    serde_json::from_slice(value)
        .map(|v| obj_of(&v))
        .map_err(|e| format!("a configmap not stored as JSON: {e}"))
}

/// The replicas' configs: 0 as configured by default, 1 with a window of 16 events.
fn replica_config(cluster: &EtcdCluster, i: usize, addr: SocketAddr) -> ServeConfig {
    let mut c = ServeConfig {
        addr,
        etcd: cluster.endpoints(),
        compaction_interval: Duration::ZERO,
        ..config(0)
    };
    if i == 1 {
        c.history = 16;
    }
    c
}

/// A running replica: its server and, for the lagging one, its compaction follower.
struct Replica {
    server: Server,
    follower: Option<tokio::task::JoinHandle<()>>,
}

async fn start_replica(cluster: &EtcdCluster, i: usize, addr: SocketAddr) -> Replica {
    let cfg = replica_config(cluster, i, addr);
    if i != 2 {
        let server = Server::start(cfg).await.expect("a replica starts");
        return Replica {
            server: watchcache_tests::start_ready(server).await,
            follower: None,
        };
    }
    // Replica 2's etcd watch lags, as a busy replica's does.
    let lagging = EtcdOptions {
        watch_delay: Duration::from_millis(150),
        ..EtcdOptions::default()
    };
    let etcd = EtcdSource::connect(&cluster.endpoints(), lagging)
        .await
        .expect("connects to etcd");
    let follower = Some(tokio::spawn(etcd.clone().follow_compactions()));
    let server = Server::start_with(cfg, Backend::Etcd(etcd))
        .await
        .expect("a replica starts");
    Replica {
        server: watchcache_tests::start_ready(server).await,
        follower,
    }
}

impl Replica {
    async fn kill(self) {
        if let Some(f) = self.follower {
            f.abort();
        }
        let _ = self.server.kill().await;
    }
}

/// The faults, one at a time, until the run calms; every member and replica is back at the
/// end.
async fn faults(
    run: Arc<Run>,
    mut cluster: EtcdCluster,
    mut replicas: Vec<Option<Replica>>,
) -> (EtcdCluster, Vec<Option<Replica>>) {
    let mut rng = fastrand::Rng::with_seed(run.seed);
    let endpoints = cluster.endpoints();
    while !run.calm.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.u64(1000..3000))).await;
        if run.calm.load(Ordering::Relaxed) {
            break;
        }
        let down = Duration::from_millis(rng.u64(500..2500));
        match rng.u8(0..6) {
            0 | 1 => {
                let leader = cluster.leader().await;
                let target = match (rng.bool(), leader) {
                    (true, Some(l)) => l,
                    (_, Some(l)) => (l + 1 + rng.usize(0..cluster.size() - 1)) % cluster.size(),
                    (_, None) => rng.usize(0..cluster.size()),
                };
                let role = if Some(target) == leader {
                    "leader"
                } else {
                    "follower"
                };
                run.note(format!("kill -9 etcd member {target} ({role})"));
                cluster.kill(target);
                tokio::time::sleep(down).await;
                cluster.restart(target);
                run.note(format!("etcd member {target} restarted"));
                cluster.wait_healthy().await;
            }
            2 => {
                let target = rng.usize(0..cluster.size());
                run.note(format!("SIGSTOP etcd member {target}"));
                cluster.pause(target);
                tokio::time::sleep(down).await;
                cluster.resume(target);
                run.note(format!("SIGCONT etcd member {target}"));
            }
            3 => {
                let target = rng.usize(0..replicas.len());
                let addr = run.replicas[target]
                    .lock()
                    .unwrap()
                    .take()
                    .expect("a serving replica");
                run.note(format!("kill replica {target}"));
                tally(&run, addr).await;
                replicas[target].take().expect("a replica").kill().await;
                tokio::time::sleep(down).await;
                replicas[target] = Some(start_replica(&cluster, target, addr).await);
                *run.replicas[target].lock().unwrap() = Some(addr);
                run.note(format!("replica {target} restarted"));
            }
            _ => {
                let recorded = run.recorded.load(Ordering::SeqCst);
                let floor = run.compacted.load(Ordering::SeqCst);
                if recorded <= floor + 1 {
                    continue;
                }
                // Somewhere in the recorded history, most often near its head.
                let back = rng.u64(0..(recorded - floor).min(300));
                let to = recorded - back;
                // Asked for before the request: a stream may see it as soon as etcd applies it.
                let index = {
                    let mut log = run.compactions.lock().unwrap();
                    log.push((to, None));
                    log.len() - 1
                };
                run.compacted.fetch_max(to, Ordering::SeqCst);
                run.note(format!("compact etcd at {to}"));
                let answer = match tokio::time::timeout(
                    Duration::from_secs(2),
                    etcd_client::Client::connect(&endpoints, None),
                )
                .await
                {
                    Ok(Ok(mut c)) => tokio::time::timeout(Duration::from_secs(5), c.compact(to as i64, None))
                        .await
                        .map_err(|_| "timed out".to_owned())
                        .and_then(|r| r.map(drop).map_err(|e| e.to_string())),
                    _ => Err("no connection".into()),
                };
                let made = match answer {
                    Ok(()) => Some(true),
                    Err(e) if e.contains("compacted") => Some(true),
                    // Not answered: whether etcd made it is whether `to - 1` is still readable.
                    Err(e) => {
                        let made = compacted_at(&endpoints, to).await;
                        run.note(format!("compaction at {to} not answered ({e}): made {made:?}"));
                        made
                    }
                };
                run.compactions.lock().unwrap()[index].1 = made;
            }
        }
    }
    (cluster, replicas)
}

/// Whether etcd has compacted at `to` or above: a read at `to - 1` fails as compacted. `None`
/// if etcd does not answer within 10 s.
async fn compacted_at(endpoints: &[String], to: u64) -> Option<bool> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Ok(mut c)) = tokio::time::timeout(
            Duration::from_secs(2),
            etcd_client::Client::connect(endpoints, None),
        )
        .await
        {
            let options = etcd_client::GetOptions::new()
                .with_revision(to.saturating_sub(1).max(1) as i64)
                .with_count_only();
            match tokio::time::timeout(Duration::from_secs(2), c.get(PREFIX, Some(options))).await {
                Ok(Ok(_)) => return Some(to <= 1),
                Ok(Err(e)) if e.to_string().contains("compacted") => return Some(true),
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

/// The revision etcd has compacted to (at most `upto`, the newest asked for): the lowest one a
/// read at a revision is still answered at. None if etcd does not answer.
async fn compacted_in_etcd(endpoints: &[String], upto: u64) -> Option<u64> {
    let mut c = tokio::time::timeout(
        Duration::from_secs(5),
        etcd_client::Client::connect(endpoints, None),
    )
    .await
    .ok()?
    .ok()?;
    // Reads below the compaction fail; at it and above, they are answered.
    let (mut lo, mut hi) = (1u64, upto.max(1));
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let read = c.get(
            PREFIX,
            Some(
                etcd_client::GetOptions::new()
                    .with_revision(mid as i64)
                    .with_count_only(),
            ),
        );
        match tokio::time::timeout(Duration::from_secs(5), read).await.ok()? {
            Ok(_) => hi = mid,
            Err(e) if e.to_string().contains("compacted") => lo = mid + 1,
            Err(_) => return None,
        }
    }
    Some(lo)
}

/// One run of `secs` seconds under `seed`: its summary and catch-up tally ([`TALLIED`]), or
/// the violations found, with the report.
async fn run_once(seed: u64, secs: u64) -> Option<Result<(String, [u64; TALLIED.len()]), String>> {
    let cluster = EtcdCluster::start(3).await?;
    let endpoints = cluster.endpoints();
    let run = Arc::new(Run {
        seed,
        started: Instant::now(),
        replicas: (0..3).map(|_| Mutex::new(None)).collect(),
        streams: Mutex::default(),
        reads: Mutex::default(),
        gets: Mutex::default(),
        writes: Mutex::default(),
        compacted: AtomicU64::new(0),
        compactions: Mutex::default(),
        asked_by_end: Mutex::default(),
        recorded: AtomicU64::new(0),
        timeline: Mutex::default(),
        violations: Mutex::default(),
        reached: (0..STYLES.len()).map(|_| AtomicU64::new(0)).collect(),
        activity: (0..STYLES.len())
            .map(|_| Mutex::new((Instant::now(), String::new())))
            .collect(),
        failed: AtomicU64::new(0),
        tally: Mutex::default(),
        calm: AtomicBool::new(false),
        stop: AtomicBool::new(false),
    });
    let history = Arc::new(Mutex::new(History::default()));
    let recording = tokio::spawn(recorder(run.clone(), endpoints.clone(), history.clone()));
    let any = "127.0.0.1:0".parse().expect("an address");
    let mut replicas = Vec::new();
    for i in 0..3 {
        let r = start_replica(&cluster, i, any).await;
        *run.replicas[i].lock().unwrap() = Some(r.server.addr());
        replicas.push(Some(r));
    }
    watchcache_tests::create_namespaces(&replicas[0].as_ref().unwrap().server, &NAMESPACES).await;

    let mut load = Vec::new();
    for w in 0..2 {
        load.push(tokio::spawn(writer(run.clone(), w)));
    }
    load.push(tokio::spawn(transactor(run.clone(), endpoints.clone())));
    let mut readers = Vec::new();
    for r in 0..2 {
        readers.push(tokio::spawn(reader(run.clone(), r)));
    }
    for (id, style) in STYLES.into_iter().enumerate() {
        readers.push(tokio::spawn(watcher(run.clone(), id, style)));
    }
    let faulting = tokio::spawn(faults(run.clone(), cluster, replicas));
    tokio::time::sleep(Duration::from_secs(secs)).await;

    // Calm: no more writes or faults; everything is back up. The watchers read on until they
    // have reached the store's last revision, or the drain's time is up.
    run.calm.store(true, Ordering::Relaxed);
    for l in load {
        l.await.expect("a writer");
    }
    let (cluster, replicas) = faulting.await.expect("the faults");
    run.note("calm: writes and faults stopped".into());
    // A member restarted last may not listen yet: the harness's own read tries again.
    let head = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let read = async {
                let mut c = etcd_client::Client::connect(cluster.endpoints(), None).await?;
                c.get("health", None).await
            };
            match tokio::time::timeout(Duration::from_secs(5), read).await {
                Ok(Ok(r)) => break r.header().map(|h| h.revision() as u64).unwrap_or(0),
                failed => {
                    assert!(
                        Instant::now() < deadline,
                        "etcd does not answer once calm: {failed:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    };
    let drained = Instant::now() + Duration::from_secs(30);
    while run.recorded.load(Ordering::SeqCst) < head && Instant::now() < drained {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Every watcher reaches the head: slow ones read a backlog, stalled ones wake.
    while Instant::now() < drained && run.reached.iter().any(|r| r.load(Ordering::Relaxed) < head) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // For a report: what the replicas say of their watches, if a watcher is behind.
    let mut replica_state = String::new();
    if run.reached.iter().any(|r| r.load(Ordering::Relaxed) < head) {
        let client = http();
        for (i, a) in run.replicas.iter().enumerate() {
            let Some(addr) = *a.lock().unwrap() else { continue };
            let req = http::Request::get(format!("http://{addr}/metrics"))
                .body(Full::new(Bytes::new()))
                .expect("a valid request");
            if let Ok(Ok(resp)) = tokio::time::timeout(Duration::from_secs(5), client.request(req)).await
                && let Ok(body) = resp.into_body().collect().await
            {
                let text = String::from_utf8_lossy(&body.to_bytes()).into_owned();
                let lines: Vec<&str> = text
                    .lines()
                    .filter(|l| {
                        l.contains("configmaps")
                            && !l.starts_with('#')
                            && (l.contains("watch") || l.contains("catch"))
                    })
                    .collect();
                replica_state.push_str(&format!("replica {i}:\n  {}\n", lines.join("\n  ")));
            }
        }
    }
    run.stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.expect("a reader or watcher");
    }
    // The recorder ends at the stop; what it failed on makes the run's report.
    let recorded = run.recorded.load(Ordering::SeqCst);
    let recorder_failed = match tokio::time::timeout(Duration::from_secs(10), recording).await {
        Ok(Ok(Ok(()))) if recorded >= head => None,
        Ok(Ok(Ok(()))) => Some(format!("the recorder reached {recorded} of {head}")),
        Ok(Ok(Err(e))) => Some(e),
        Ok(Err(e)) => Some(format!("the recorder panicked: {e}")),
        Err(_) => Some("the recorder did not stop".into()),
    };
    for addr in run.replicas.iter().filter_map(|a| *a.lock().unwrap()) {
        tally(&run, addr).await;
    }
    for r in replicas.into_iter().flatten() {
        r.kill().await;
    }
    // A 410 is judged against the compactions asked for by the time its stream ended; one
    // asked for that etcd never made (a member down, a timeout) must not excuse it. etcd's
    // own compaction bounds every one it made.
    let asked = run.compacted.load(Ordering::SeqCst);
    let made = compacted_in_etcd(&endpoints, asked).await;
    drop(cluster);
    if made.is_none() {
        eprintln!(
            "seed {seed}: etcd's compaction could not be read; 410s judged against every one asked for"
        );
    }
    let made = made.unwrap_or(asked);

    let history = history.lock().unwrap().clone();
    let history = History {
        compacted: asked.min(made),
        ..history
    };
    // Each stream's 410 is excused by the compactions asked for before it ended that etcd
    // made (one it could not be asked about counts as made), and never above what etcd holds.
    let mut compactions = run.compactions.lock().unwrap().clone();
    // One found not made when it went unanswered may have been applied later (a request
    // held by a paused member): if etcd's compaction reaches it and no later one that was
    // made does, it was.
    for i in 0..compactions.len() {
        let (to, status) = compactions[i];
        let covered_later = compactions[i + 1..]
            .iter()
            .any(|(later, made)| *made == Some(true) && *later >= to);
        if status == Some(false) && made >= to && !covered_later {
            compactions[i].1 = None;
        }
    }
    let mut streams = run.streams.lock().unwrap().clone();
    let asked_by_end = run.asked_by_end.lock().unwrap().clone();
    for (s, &asked) in streams.iter_mut().zip(&asked_by_end) {
        let excused = compactions[..asked]
            .iter()
            .filter(|(_, made)| *made != Some(false))
            .map(|(to, _)| *to)
            .max()
            .unwrap_or(0);
        s.compacted = Some(excused.min(made));
    }
    let reads = run.reads.lock().unwrap().clone();
    let gets = run.gets.lock().unwrap().clone();
    let writes = run.writes.lock().unwrap().clone();
    let events: usize = streams.iter().map(|s| s.events.len()).sum();
    let expired = streams.iter().filter(|s| s.end == End::Expired).count();
    let [catch_ups, lapped, catch_up_reads, catch_up_events, handovers] = *run.tally.lock().unwrap();
    let summary = format!(
        "seed {seed}: {} revisions recorded (head {head}), {} writes acknowledged, {} streams ({events} events, {expired} ended with 410), {catch_ups} catch-ups ({lapped} lapped, {catch_up_reads} reads of etcd, {catch_up_events} events, {handovers} hand-overs), {} LISTs, {} GETs, {} failed requests, {} faults",
        history.revisions.len(),
        writes.len(),
        streams.len(),
        reads.len(),
        gets.len(),
        run.failed.load(Ordering::Relaxed),
        run.timeline
            .lock()
            .unwrap()
            .iter()
            .filter(|t| !t.contains("restarted") && !t.contains("SIGCONT") && !t.contains("calm"))
            .count(),
    );
    if let Some(why) = recorder_failed {
        return Some(Err(format!(
            "{summary}\nreplay: WATCHCACHE_ROBUSTNESS_SEED={seed} WATCHCACHE_ROBUSTNESS_SECS={secs} cargo test -p watchcache-tests --test robustness -- --nocapture\n\nno history to check against: {why}\n"
        )));
    }
    let mut violations: Vec<Violation> = Vec::new();
    for s in &streams {
        if let Err(v) = check_stream(s, &history) {
            violations.push(v);
        }
    }
    violations.extend(run.violations.lock().unwrap().drain(..));
    // Live: every stream open at the end reached the store's last revision (events or a
    // bookmark) within the drain, faults over.
    for (id, r) in run.reached.iter().enumerate() {
        let reached = r.load(Ordering::Relaxed);
        let open_behind = streams.iter().any(|s| {
            s.name.starts_with(&format!("watcher {id} "))
                && s.end == End::Open
                && s.events.iter().map(|e| e.rv).max().unwrap_or(s.start) < head
        });
        if reached < head || open_behind {
            let prefix = format!("watcher {id} ");
            let mut last: Vec<String> = streams
                .iter()
                .filter(|s| s.name.starts_with(&prefix))
                .rev()
                .take(3)
                .map(|s| {
                    let tail: Vec<String> = s.events[s.events.len().saturating_sub(3)..]
                        .iter()
                        .map(|e| format!("{:?} {} {}", e.kind, e.rv, e.key))
                        .collect();
                    format!(
                        "{} ({} events, ending {tail:?}, {:?})",
                        s.name,
                        s.events.len(),
                        s.end
                    )
                })
                .collect();
            let (when, what) = run.activity[id].lock().unwrap().clone();
            last.push(format!("last {what} {:?} ago", when.elapsed()));
            violations.push(Violation {
                guarantee: "Live",
                who: format!("watcher {id} ({:?})", STYLES[id]),
                detail: format!(
                    "at {reached} 30 s after the writes stopped, the store at {head}; its last streams: {last:#?}"
                ),
            });
        }
    }
    if let Err(v) = check_reads(&reads, &writes) {
        violations.push(v);
    }
    for r in &reads {
        if let Err(v) = check_list(r, &history) {
            violations.push(v);
        }
    }
    if let Err(v) = check_gets(&gets, &writes, &history) {
        violations.push(v);
    }
    if violations.is_empty() {
        return Some(Ok((summary, *run.tally.lock().unwrap())));
    }
    let report = format!(
        "{summary}\nreplay: WATCHCACHE_ROBUSTNESS_SEED={seed} WATCHCACHE_ROBUSTNESS_SECS={secs} cargo test -p watchcache-tests --test robustness -- --nocapture\n\nfault timeline:\n  {}\n\n{} violations:\n{}\n{replica_state}",
        run.timeline.lock().unwrap().join("\n  "),
        violations.len(),
        violations
            .iter()
            .take(20)
            .map(|v| format!("- {v}\n"))
            .collect::<String>()
    );
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("robustness");
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join(format!("seed-{seed}.txt"));
    let _ = std::fs::write(&file, &report);
    Some(Err(format!("{report}(written to {})", file.display())))
}

fn schedule() -> (Vec<u64>, u64) {
    let var = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
    let secs = var("WATCHCACHE_ROBUSTNESS_SECS")
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    if let Some(seed) = var("WATCHCACHE_ROBUSTNESS_SEED").and_then(|s| s.parse().ok()) {
        return (vec![seed], secs);
    }
    let seeds = match var("WATCHCACHE_ROBUSTNESS_SEEDS") {
        Some(range) if range.contains('-') => {
            let (a, b) = range.split_once('-').expect("A-B");
            (a.parse().expect("a seed")..=b.parse().expect("a seed")).collect()
        }
        Some(count) => (1..=count.parse().expect("a count of seeds")).collect(),
        None => vec![1, 2],
    };
    (seeds, secs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stream_and_read_keeps_etcds_guarantees_under_faults() {
    let (seeds, secs) = schedule();
    let mut failures = Vec::new();
    let mut tally = [0; TALLIED.len()];
    for seed in seeds {
        match run_once(seed, secs).await {
            None => return,
            Some(Ok((summary, seed_tally))) => {
                eprintln!("{summary}: 0 violations");
                tally.iter_mut().zip(seed_tally).for_each(|(t, s)| *t += s);
            }
            Some(Err(report)) => {
                eprintln!("{report}");
                failures.push(seed);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "violations under seeds {failures:?} (reports above)"
    );
    // The paths checked were taken: watchers lapped mid-stream caught up from etcd, and
    // handed back over to the window.
    let [_, lapped, _, _, handovers] = tally;
    assert!(
        lapped > 0 && handovers > 0,
        "no watcher was lapped and caught up ({tally:?} of {TALLIED:?}): the run checked no catch-up"
    );
}
