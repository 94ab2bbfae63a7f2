//! `vs-etcd`: watchcache against the peer a user could pick instead, watching etcd directly.
//!
//! A fresh etcd member on loopback for every run (its data on `/dev/shm` when that has room,
//! a tmpfs on Linux), one writer straight to it for every design: ConfigMaps of `value_bytes` in one namespace, updated
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
//! - **`writes-only`**: no watcher, what the writes alone cost etcd.
//!
//! A run opens every connection, then every watch (from etcd's revision then: no initial
//! events), starts the writer, waits two seconds, and counts for `seconds`: the events each
//! watch receives, the servers' CPU, the clients' CPU (the watch clients of this process; the
//! writer's thread left out), and the latency of a sample of watches (one in
//! `watchers / 64`), which parse each event for its write time and read on two seconds past
//! the window, so that what they never received is counted exactly; the others only count.
//! Each run's fresh etcd keeps the designs' state from drifting. Designs run in the order
//! given, then reversed for the next repetition (A B B A).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes};
use etcd_client::{Client, GetOptions};
use futures_util::StreamExt;
use memchr::memmem;
use serde_json::{Map, Value, json};

use crate::alloc::{cpu_ns_of_threads, cpu_seconds, rss_bytes};
use crate::etcd::etcd_pid;
use crate::http::clients_runtime;
use crate::report::{quantile, round3};
use crate::wire::{self, DRAIN, KindOutcome, Outcome, Plan, Transport, WRITTEN_AT, now_us};

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

/// How long one put may take before it counts as failed.
const PUT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a tmpfs must have free for etcd's data there: its first WAL segment (64 MB) and the
/// spare it preallocates, and room for the run's writes.
const TMPFS_NEEDED: u64 = 512 << 20;

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
    /// No watcher: what the writes alone cost etcd (run at the first watcher count only).
    WritesOnly,
}

impl Design {
    /// Every design, in the order of `--designs`' help.
    pub const ALL: [Design; 7] = [
        Design::WritesOnly,
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
            Design::WritesOnly => "writes-only",
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
/// a fixed rate (up to 16 at once; ticks it cannot take are skipped, so a slow etcd
/// slows it) until [`Writer::stop`] (or its drop).
pub struct Writer {
    phase: tokio::sync::watch::Sender<u8>,
    thread: Option<std::thread::JoinHandle<Result<Written, String>>>,
    /// The thread's id, for its CPU time (0 until it runs).
    tid: Arc<AtomicI32>,
}

/// What the writer wrote.
#[derive(Debug, Default)]
pub struct Written {
    /// The write time of each put etcd acknowledged (µs since the epoch).
    pub stamps: Vec<u64>,
    /// Puts that failed or timed out.
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
        let tid = Arc::new(AtomicI32::new(0));
        let my_tid = tid.clone();
        let thread = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            my_tid.store(unsafe { libc::gettid() }, Ordering::Relaxed);
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
                        changed = rx.changed() => {
                            if changed.is_err() {
                                break;
                            }
                            continue;
                        }
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
                        let put = kv.put(key(k), configmap(k, bytes, stamp), None);
                        let put = tokio::time::timeout(PUT_TIMEOUT, put).await;
                        let mut out = out.lock().expect("the writer's record is not poisoned");
                        match put {
                            Ok(Ok(_)) => out.stamps.push(stamp),
                            _ => out.errors += 1,
                        }
                    });
                }
                // The puts in flight finish (each within its timeout).
                let all = permits.acquire_many(IN_FLIGHT as u32);
                let _ = tokio::time::timeout(PUT_TIMEOUT * 2, all).await;
                let written = std::mem::take(&mut *out.lock().expect("not poisoned"));
                Ok(written)
            })
        });
        Writer {
            phase,
            thread: Some(thread),
            tid,
        }
    }

    /// Starts writing.
    pub fn start(&self) {
        let _ = self.phase.send(WRITE);
    }

    /// The writer thread's CPU time so far, in seconds.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let tid = self.tid.load(Ordering::Relaxed);
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
        let ns: u64 = stat.split_whitespace().next()?.parse().ok()?;
        Some(ns as f64 / 1e9)
    }

    /// Stops writing: what was written.
    pub fn stop(mut self) -> Result<Written, String> {
        let _ = self.phase.send(STOP);
        let thread = self.thread.take().ok_or("the writer was stopped twice")?;
        thread.join().map_err(|_| "the writer panicked".to_owned())?
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // A run that failed drops its writer: it stops rather than writing on.
        let _ = self.phase.send(STOP);
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

/// When the measurement runs, shared by the runner and etcd's watch clients.
struct Window {
    /// Watches etcd confirmed.
    opened: AtomicUsize,
    /// Events written in `[from_us, to_us)` (µs since the epoch) are the window's.
    from_us: AtomicU64,
    /// See `from_us`.
    to_us: AtomicU64,
    /// When the clients stop counting deliveries (set when the window opens).
    deadline: tokio::sync::watch::Receiver<Option<tokio::time::Instant>>,
    /// When the clients close their watches (after etcd's CPU was read and the sampled
    /// watches drained).
    close: tokio::sync::watch::Receiver<bool>,
}

/// A watch response as the clients need it: skimmed by [`Skim`], its events' values left
/// unread unless the watch is sampled.
#[derive(Debug, Default, PartialEq)]
pub struct Skimmed {
    /// The watch it is for.
    pub watch_id: i64,
    /// It confirms the watch's creation.
    pub created: bool,
    /// It ends the watch.
    pub canceled: bool,
    /// Its events.
    pub events: u64,
    /// Of them, those carrying the key's previous value.
    pub prev_kvs: u64,
    /// The write time stamped in each event's value, on a sampled watch.
    pub written_at: Vec<u64>,
}

/// The codec of etcd's watch stream on the client side: `WatchRequest`s are sent as encoded,
/// and each `WatchResponse` is skimmed in place, with prost's wire helpers: its events counted,
/// their values searched for a write time only on the watches `sampled` by position (etcd
/// numbers a stream's watches from 0 in the order asked). The HTTP clients count frames the
/// same way; a generated client would copy every value out of every response.
#[derive(Clone)]
pub struct Skim {
    /// Which watches of the stream are sampled, by id.
    pub sampled: Arc<[bool]>,
}

impl tonic::codec::Codec for Skim {
    type Encode = Bytes;
    type Decode = Skimmed;
    type Encoder = Skim;
    type Decoder = Skim;

    fn encoder(&mut self) -> Skim {
        self.clone()
    }

    fn decoder(&mut self) -> Skim {
        self.clone()
    }
}

impl tonic::codec::Encoder for Skim {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for Skim {
    type Item = Skimmed;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Skimmed>, tonic::Status> {
        // tonic hands over a whole message, in one contiguous buffer.
        let len = src.remaining();
        let chunk = src.chunk();
        if chunk.len() < len {
            return Err(tonic::Status::internal("a watch response in pieces"));
        }
        let out = skim(&chunk[..len], &self.sampled).map_err(tonic::Status::internal)?;
        src.advance(len);
        Ok(Some(out))
    }
}

/// The fields of a length-delimited protobuf message: `(field, wire type, its bytes if
/// length-delimited, else its varint)`.
fn fields<'a>(mut buf: &'a [u8], mut each: impl FnMut(u32, &'a [u8], u64)) -> Result<(), String> {
    use prost::encoding::{WireType, decode_key, decode_varint};
    while !buf.is_empty() {
        let (field, wire) = decode_key(&mut buf).map_err(|e| e.to_string())?;
        match wire {
            WireType::Varint => {
                let v = decode_varint(&mut buf).map_err(|e| e.to_string())?;
                each(field, &[], v);
            }
            WireType::LengthDelimited => {
                let n = decode_varint(&mut buf).map_err(|e| e.to_string())?;
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                if n > buf.len() {
                    return Err("a field past the message's end".into());
                }
                each(field, &buf[..n], 0);
                buf = &buf[n..];
            }
            WireType::SixtyFourBit if buf.len() >= 8 => buf = &buf[8..],
            WireType::ThirtyTwoBit if buf.len() >= 4 => buf = &buf[4..],
            _ => return Err("an unexpected or cut wire type".into()),
        }
    }
    Ok(())
}

/// Skims one `WatchResponse` (etcd's `rpc.proto`): `watch_id` 2, `created` 3, `canceled` 4,
/// `events` 11; an `Event`'s `kv` 2 and `prev_kv` 3; a `KeyValue`'s `value` 5.
pub fn skim(message: &[u8], sampled: &[bool]) -> Result<Skimmed, String> {
    let mut out = Skimmed::default();
    let mut events: Vec<&[u8]> = Vec::new();
    fields(message, |field, bytes, v| match field {
        2 => out.watch_id = v as i64,
        3 => out.created = v != 0,
        4 => out.canceled = v != 0,
        11 => events.push(bytes),
        _ => {}
    })?;
    let is_sampled = usize::try_from(out.watch_id)
        .ok()
        .and_then(|i| sampled.get(i))
        .copied()
        .unwrap_or(false);
    let finder = memmem::Finder::new(WRITTEN_AT);
    for event in events {
        out.events += 1;
        let mut kv: &[u8] = &[];
        fields(event, |field, bytes, _| match field {
            2 => kv = bytes,
            3 => out.prev_kvs += 1,
            _ => {}
        })?;
        if is_sampled {
            let mut value: &[u8] = &[];
            fields(kv, |field, bytes, _| {
                if field == 5 {
                    value = bytes;
                }
            })?;
            if let Some(w) = wire::written_at(&finder, value) {
                out.written_at.push(w);
            }
        }
    }
    Ok(out)
}

/// The end of the range of keys with `PREFIX` (its last byte plus one).
fn prefix_end() -> Vec<u8> {
    let mut end = PREFIX.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

/// A `WatchRequest` creating a watch of the ConfigMaps' prefix from revision `start`.
pub fn create_request(start: i64, prev_kv: bool) -> Bytes {
    use prost::encoding::{WireType, encode_key, encode_varint};
    let mut create = Vec::new();
    prost::encoding::bytes::encode(1, &PREFIX.as_bytes().to_vec(), &mut create);
    prost::encoding::bytes::encode(2, &prefix_end(), &mut create);
    prost::encoding::int64::encode(3, &start, &mut create);
    if prev_kv {
        prost::encoding::bool::encode(6, &true, &mut create);
    }
    let mut request = Vec::new();
    encode_key(1, WireType::LengthDelimited, &mut request);
    encode_varint(create.len() as u64, &mut request);
    request.extend_from_slice(&create);
    Bytes::from(request)
}

/// What the watches of one gRPC connection received.
#[derive(Default)]
struct StreamResult {
    deliveries: u64,
    prev_kvs: u64,
    /// Per sampled watch: events written in the window it received, and their latencies.
    sampled: Vec<(u64, Vec<u64>)>,
    failed: usize,
}

/// Opens a gRPC connection to etcd (windows as large as the HTTP/2 clients', and as Go's
/// grow to) and on it one watch stream of `n` watches of the prefix from `start`, and reads
/// them: deliveries until the deadline, the sampled watches' window until the close.
async fn etcd_stream(
    endpoint: String,
    sampled: Vec<bool>,
    start: i64,
    prev_kv: bool,
    window: Arc<Window>,
) -> StreamResult {
    let n = sampled.len();
    let mut out = StreamResult {
        failed: n,
        ..StreamResult::default()
    };
    let connect = async {
        let channel = tonic::transport::Endpoint::from_shared(endpoint)
            .map_err(|e| e.to_string())?
            .tcp_nodelay(true)
            .initial_stream_window_size(4 << 20)
            .initial_connection_window_size(64 << 20)
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(usize::MAX);
        grpc.ready().await.map_err(|e| e.to_string())?;
        let requests: Vec<Bytes> = (0..n).map(|_| create_request(start, prev_kv)).collect();
        // The request side stays open: a closed one ends the stream.
        let requests = futures_util::stream::iter(requests).chain(futures_util::stream::pending());
        let codec = Skim {
            sampled: sampled.clone().into(),
        };
        let path = http::uri::PathAndQuery::from_static("/etcdserverpb.Watch/Watch");
        grpc.streaming(tonic::Request::new(requests), path, codec)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|e| e.to_string())
    };
    let Ok(Ok(mut stream)) = tokio::time::timeout(OPEN_TIMEOUT, connect).await else {
        return out;
    };
    let mut created = 0usize;
    let mut per_watch = vec![(0u64, Vec::new()); n];
    let mut deadline_rx = window.deadline.clone();
    let mut close_rx = window.close.clone();
    let mut deadline: Option<tokio::time::Instant> = *deadline_rx.borrow();
    let mut past = false;
    let mut ended_early = false;
    loop {
        let until_deadline = async {
            match deadline {
                Some(d) if !past => tokio::time::sleep_until(d).await,
                _ => std::future::pending().await,
            }
        };
        let message = tokio::select! {
            biased;
            _ = close_rx.wait_for(|c| *c) => break,
            () = until_deadline => {
                past = true;
                continue;
            }
            changed = deadline_rx.changed(), if deadline.is_none() => {
                if changed.is_err() {
                    break;
                }
                deadline = *deadline_rx.borrow();
                continue;
            }
            m = stream.message() => m,
        };
        let Ok(Some(resp)) = message else {
            // The stream ended: its watches failed if it was before the deadline (what they
            // counted is kept, as for the HTTP clients).
            ended_early = !past;
            break;
        };
        if resp.created && !resp.canceled {
            created += 1;
            window.opened.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if resp.canceled {
            ended_early |= !past;
            continue;
        }
        if deadline.is_none() {
            continue;
        }
        if !past {
            out.deliveries += resp.events;
            out.prev_kvs += resp.prev_kvs;
        }
        let Some(w) = usize::try_from(resp.watch_id)
            .ok()
            .filter(|&i| i < n && sampled[i])
        else {
            continue;
        };
        let received = now_us();
        let from = window.from_us.load(Ordering::Relaxed);
        let to = window.to_us.load(Ordering::Relaxed);
        for written in resp.written_at.into_iter().filter(|w| (from..to).contains(w)) {
            per_watch[w].0 += 1;
            per_watch[w].1.push(received.saturating_sub(written));
        }
    }
    out.failed = if ended_early { n } else { n - created };
    out.sampled = per_watch
        .into_iter()
        .enumerate()
        .filter(|(i, _)| sampled[*i])
        .map(|(_, w)| w)
        .collect();
    out
}

/// One run of an etcd design: `watchers` watches on connections of `per_connection`, etcd's
/// figures in the outcome's server fields (its CPU from its threads' run time). With no
/// watchers, what the writes alone cost etcd.
fn run_etcd(
    endpoint: &str,
    watchers: usize,
    p: &Params,
    prev_kv: bool,
    writer: &Writer,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(Outcome, u64), String> {
    let pid = etcd_pid(endpoint).ok_or("etcd's process is not found")?;
    let cpu = |pid: u32| cpu_ns_of_threads(pid).map(|ns| ns as f64 / 1e9);
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

        // Each connection opens its watches as it connects.
        let cpu0 = cpu(pid).unwrap_or(0.0);
        let started = Instant::now();
        let (set_deadline, deadline) = tokio::sync::watch::channel(None);
        let (set_close, close) = tokio::sync::watch::channel(false);
        let window = Arc::new(Window {
            opened: AtomicUsize::new(0),
            from_us: AtomicU64::new(u64::MAX),
            to_us: AtomicU64::new(u64::MAX),
            deadline,
            close,
        });
        let opening = Arc::new(tokio::sync::Semaphore::new(64));
        let mut tasks = Vec::new();
        for sampled in groups {
            let (endpoint, window, opening) = (endpoint.to_owned(), window.clone(), opening.clone());
            tasks.push(tokio::spawn(async move {
                let permit = opening.acquire_owned().await;
                let (w, n) = (window.clone(), sampled.len());
                let reading = tokio::spawn(etcd_stream(endpoint, sampled, start, prev_kv, window));
                // The next connection opens once this one's watches are all created (or it
                // failed): at most 64 open at once.
                let by = Instant::now() + OPEN_TIMEOUT;
                while w.opened.load(Ordering::Relaxed) < n && Instant::now() < by && !reading.is_finished() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                drop(permit);
                reading.await.unwrap_or_default()
            }));
        }
        let by = Instant::now() + OPEN_TIMEOUT * 2;
        while window.opened.load(Ordering::Relaxed) < watchers && Instant::now() < by {
            if tasks.iter().all(|t| t.is_finished()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        out.connect_secs = started.elapsed().as_secs_f64();
        out.connect_cpu_s = cpu(pid).unwrap_or(0.0) - cpu0;
        tokio::time::sleep(Duration::from_secs(1)).await;
        out.rss_connected = rss_bytes(pid).unwrap_or(0);
        out.rss_streams = out.rss_connected;

        // The writer, then the window.
        writer.start();
        tokio::time::sleep(SETTLE).await;
        let from_us = now_us();
        let to_us = from_us + (p.seconds * 1e6) as u64;
        window.from_us.store(from_us, Ordering::Relaxed);
        window.to_us.store(to_us, Ordering::Relaxed);
        let started = Instant::now();
        let cpu_at_start = (cpu(pid), cpu_seconds(std::process::id()), writer.cpu_seconds());
        let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(p.seconds);
        let _ = set_deadline.send(Some(deadline));
        wire::until(deadline, progress, started).await;
        let window_secs = started.elapsed().as_secs_f64();
        out.window_us = (from_us, to_us);
        let per_sec = |before: Option<f64>, after: Option<f64>| match (before, after) {
            (Some(b), Some(a)) => (a - b) / window_secs,
            _ => 0.0,
        };
        out.server_cores = per_sec(cpu_at_start.0, cpu(pid));
        let writer_cores = per_sec(cpu_at_start.2, writer.cpu_seconds());
        out.client_cores = per_sec(cpu_at_start.1, cpu_seconds(std::process::id())) - writer_cores;
        out.rss_end = rss_bytes(pid).unwrap_or(0);
        out.rss_peak = out.rss_end;
        tokio::time::sleep(DRAIN).await;
        let _ = set_close.send(true);
        let mut prev_kvs = 0;
        let k = &mut out.kinds[0];
        for t in tasks {
            let r = t.await.map_err(|e| e.to_string())?;
            k.deliveries += r.deliveries;
            prev_kvs += r.prev_kvs;
            k.failed += r.failed;
            for (written, latencies) in r.sampled {
                k.written_in_window += written;
                k.max_written_in_window = k.max_written_in_window.max(written);
                k.min_written_in_window = k.min_written_in_window.min(written);
                k.latencies_us.extend(latencies);
            }
        }
        out.elapsed = Duration::from_secs_f64(window_secs);
        Ok((out, prev_kvs))
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

/// One run of a watchcache design. The server compacts nothing (the runner's fresh etcd per
/// run keeps the state even), so that no compaction lands in its window.
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
    let writer_cpu = || writer.cpu_seconds();
    let server = wire::Server {
        binary,
        args: vec![
            "--etcd".into(),
            endpoint.to_owned(),
            "--compaction-interval".into(),
            "0".into(),
        ],
        glibc_tunables: p.glibc_tunables.clone(),
        churn: wire::Churn::Outside(&start),
        also_measured: etcd_pid(endpoint),
        not_clients: Some(&writer_cpu),
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

/// One row: a design's run at one point. `prev_kvs`: the events that carried a previous value
/// (etcd designs).
pub fn row(
    design: Design,
    watchers: usize,
    rate: f64,
    rep: usize,
    out: &mut Outcome,
    written: &Written,
    prev_kvs: u64,
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
    put("window_seconds", json!(round3(secs)));
    put("writes_in_window", json!(writes));
    put("writes_per_sec", json!(round3(writes as f64 / secs)));
    put("write_errors", json!(written.errors));
    put("failed_watchers", json!(k.failed));
    put("deliveries", json!(k.deliveries));
    put("deliveries_per_sec", json!(round3(k.deliveries as f64 / secs)));
    put("prev_kv_events", json!(prev_kvs));
    // Frames counted by when they arrived, writes by when they were made: the two differ at
    // the window's edges by what is in flight (about rate × latency a watch).
    let expected = writes * opened as u64;
    if expected > 0 {
        put(
            "delivered_fraction",
            json!(round3(k.deliveries as f64 / expected as f64)),
        );
    }
    // The sampled watches count every write of the window, whenever it arrived (up to the
    // drain after it): exact, so any loss shows.
    if k.sampled > 0 && k.min_written_in_window != u64::MAX {
        let sampled_ok = k.sampled.saturating_sub(k.failed.min(k.sampled)) as u64;
        put("sampled_received", json!(k.written_in_window));
        put(
            "sampled_lost",
            json!((writes * sampled_ok).saturating_sub(k.written_in_window)),
        );
        if writes > 0 {
            put(
                "sampled_min_vs_writes",
                json!(round3(k.min_written_in_window as f64 / writes as f64)),
            );
        }
    }
    let server_cores = out.server_cores + out.also_cores;
    put("server_cores", json!(round3(server_cores)));
    let etcd_cores = match design {
        Design::Etcd { .. } | Design::WritesOnly => out.server_cores,
        Design::Watchcache(_) => out.also_cores,
    };
    put("etcd_cores", json!(round3(etcd_cores)));
    put("client_cores", json!(round3(out.client_cores)));
    if k.deliveries > 0 {
        put(
            "server_cpu_us_per_event",
            json!(round3(server_cores * secs * 1e6 / k.deliveries as f64)),
        );
    }
    let per_watcher = |rss: u64| round3(rss.saturating_sub(out.rss_before) as f64 / watchers.max(1) as f64);
    if watchers > 0 {
        // Growth from before the connections: with the watches open and idle, and at the
        // window's end (with what writing to them took).
        put("rss_bytes_per_watcher_idle", json!(per_watcher(out.rss_streams)));
        put("rss_bytes_per_watcher", json!(per_watcher(out.rss_end)));
    }
    put("server_rss_end_bytes", json!(out.rss_end));
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

/// Where etcd keeps its data: `/dev/shm` when it is a tmpfs with room, else the temporary
/// directory (whose disk then costs fsyncs).
fn data_parent() -> PathBuf {
    let shm = Path::new("/dev/shm");
    // SAFETY: statvfs is plain old data, for which all zeroes is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: the path is a NUL-terminated string and `st` a writable statvfs for the call.
    let ok = unsafe { libc::statvfs(c"/dev/shm".as_ptr(), &mut st) } == 0;
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    if ok && shm.is_dir() && free >= TMPFS_NEEDED {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// One design's run at one point, on a fresh etcd: a row, or the error that ended it.
fn run_one(
    rt: &tokio::runtime::Runtime,
    p: &Params,
    binary: Option<&Path>,
    design: Design,
    watchers: usize,
    rate: f64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(Outcome, Written, u64), String> {
    // etcd's own default for periodic progress notifications (ten minutes).
    let cluster = rt
        .block_on(watchcache_tests::etcd::EtcdCluster::start_in(
            1,
            Duration::from_secs(600),
            &data_parent(),
        ))
        .ok_or("etcd is not installed (apt-get install -y etcd-server)")?;
    let endpoint = cluster.endpoint(0);
    rt.block_on(async {
        let mut admin = Client::connect([endpoint.clone()], None)
            .await
            .map_err(|e| format!("cannot reach etcd: {e}"))?;
        populate(&mut admin, p).await
    })?;
    let writer = Writer::spawn(&endpoint, p, rate);
    let outcome = match design {
        Design::Etcd { prev_kv } => run_etcd(&endpoint, watchers, p, prev_kv, &writer, progress),
        Design::WritesOnly => run_etcd(&endpoint, 0, p, false, &writer, progress),
        Design::Watchcache(t) => {
            let binary = binary.ok_or("a watchcache design needs the server binary")?;
            run_watchcache(binary, &endpoint, t, watchers, p, &writer, progress).map(|o| (o, 0))
        }
    };
    let written = writer.stop()?;
    drop(cluster);
    let (outcome, prev_kvs) = outcome?;
    Ok((outcome, written, prev_kvs))
}

/// Runs every point: each rate, each watcher count, `reps` times, the designs in A B B A
/// order, each run on a fresh etcd (so that no run inherits another's state: its database,
/// its compaction, its heap). `binary` is a `watchcache` built with the `etcd` feature (needed
/// only by watchcache designs). `progress(what, seconds)` reports each run. A run that fails
/// is a row with its `error`; the others go on.
pub fn run(
    p: &Params,
    binary: Option<&Path>,
    progress: &(dyn Fn(&str, u64) + Sync),
) -> Result<Vec<Value>, String> {
    p.check()?;
    if binary.is_none() && p.designs.iter().any(|d| matches!(d, Design::Watchcache(_))) {
        return Err("a watchcache design needs the server binary".into());
    }
    if !watchcache_tests::etcd::available() {
        return Err("etcd is not installed (apt-get install -y etcd-server)".into());
    }
    let limit = wire::raise_nofile();
    let most = p.watchers.iter().copied().max().unwrap_or(0);
    if (most as u64) + 256 > limit {
        return Err(format!(
            "{most} watchers need more open files than the limit ({limit}; `ulimit -Hn` caps it)"
        ));
    }
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for &rate in &p.rates {
        for (nth, &watchers) in p.watchers.iter().enumerate() {
            for rep in 0..p.reps {
                let mut order = p.designs.clone();
                if rep % 2 == 1 {
                    order.reverse();
                }
                for design in order {
                    if design == Design::WritesOnly && nth > 0 {
                        continue;
                    }
                    let w = if design == Design::WritesOnly { 0 } else { watchers };
                    let what = format!("{} W={w} rate={rate}/s rep {}", design.name(), rep + 1);
                    let report = |s: u64| progress(&what, s);
                    match run_one(&rt, p, binary, design, w, rate, &report) {
                        Ok((mut outcome, written, prev_kvs)) => {
                            rows.push(row(design, w, rate, rep, &mut outcome, &written, prev_kvs));
                        }
                        Err(e) => rows.push(json!({
                            "design": design.name(), "watchers": w, "rate": rate, "rep": rep, "error": e,
                        })),
                    }
                }
            }
        }
    }
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
        assert_eq!(
            Design::parse_list("writes-only").unwrap(),
            vec![Design::WritesOnly]
        );
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

    /// `field` as a length-delimited protobuf field holding `bytes`.
    fn message(field: u32, bytes: &[u8], out: &mut Vec<u8>) {
        prost::encoding::bytes::encode(field, &bytes.to_vec(), out);
    }

    fn key_value(value: &[u8]) -> Vec<u8> {
        let mut kv = Vec::new();
        message(1, b"/registry/configmaps/vs-etcd/cm-1", &mut kv);
        prost::encoding::int64::encode(3, &7, &mut kv);
        message(5, value, &mut kv);
        kv
    }

    #[test]
    fn a_watch_response_is_skimmed_its_values_read_only_on_a_sampled_watch() {
        let (a, b) = (configmap(1, 512, 1_111), configmap(2, 512, 2_222));
        let mut with_prev = Vec::new();
        message(2, &key_value(&a), &mut with_prev);
        message(3, &key_value(&b), &mut with_prev);
        let mut without = Vec::new();
        message(2, &key_value(&b), &mut without);
        let mut resp = Vec::new();
        message(1, b"\x08\x01", &mut resp); // a header, skipped
        prost::encoding::int64::encode(2, &1, &mut resp);
        message(11, &with_prev, &mut resp);
        message(11, &without, &mut resp);
        let sampled = skim(&resp, &[false, true]).expect("skims");
        assert_eq!(
            sampled,
            Skimmed {
                watch_id: 1,
                events: 2,
                prev_kvs: 1,
                written_at: vec![1_111, 2_222],
                ..Skimmed::default()
            }
        );
        let counted = skim(&resp, &[true, false]).expect("skims");
        assert_eq!((counted.events, counted.prev_kvs), (2, 1));
        assert!(counted.written_at.is_empty(), "an unsampled watch reads no value");
        // A creation, and a cut message (an error, never a panic or a read past the end).
        let mut created = Vec::new();
        prost::encoding::int64::encode(2, &0, &mut created);
        prost::encoding::bool::encode(3, &true, &mut created);
        let c = skim(&created, &[]).expect("skims");
        assert!(c.created && !c.canceled && c.events == 0);
        for cut in 1..resp.len() {
            let _ = skim(&resp[..cut], &[true, true]);
        }
        assert!(skim(&resp[..resp.len() - 1], &[true, true]).is_err());
    }

    #[test]
    fn a_create_request_watches_the_prefix_from_its_revision() {
        let request = create_request(42, true);
        let mut create: &[u8] = &[];
        fields(&request, |f, b, _| {
            if f == 1 {
                create = b;
            }
        })
        .expect("a WatchRequest");
        let mut seen = Vec::new();
        fields(create, |f, b, v| seen.push((f, b.to_vec(), v))).expect("a WatchCreateRequest");
        assert_eq!(
            seen,
            vec![
                (1, PREFIX.as_bytes().to_vec(), 0),
                (2, b"/registry/configmaps/vs-etcd0".to_vec(), 0),
                (3, vec![], 42),
                (6, vec![], 1),
            ]
        );
        let mut without = Vec::new();
        fields(&create_request(1, false), |_, b, _| {
            let _ = fields(b, |f, _, _| without.push(f));
        })
        .expect("a WatchRequest");
        assert_eq!(without, vec![1, 2, 3]);
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
