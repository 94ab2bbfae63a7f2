//! Fan-out of one event stream to many watchers, four ways.
//!
//! Every design does the same work per event and per delivery. Per event, the writer builds
//! the cache's object, as a reflector decodes a watch event: an `Arc<ObjectVersion>` with its
//! key, revision and node name around the shared encoded bytes (`Decoder`). Per delivery, the
//! watcher receives the event and copies its frame (`{"type":"ADDED","object":…}\n`) into its
//! own bounded output buffer, as a socket writer would, clearing the buffer when the next
//! frame might not fit. They differ in how the event gets to the watcher:
//!
//! - [`Design::Ring`] (ours): one `WatchHub`; the object is published once into the ring and
//!   each watcher, a cursor, copies its shared pre-encoded bytes.
//! - [`Design::RingProtobuf`]: the same ring, each watcher writing Kubernetes protobuf watch
//!   frames; the first watcher to write an event makes its protobuf encoding (from the JSON,
//!   once per object version) and every other watcher shares it.
//! - [`Design::NaiveCopy`]: a bounded channel per watcher; the writer sends each watcher its
//!   own deep copy of the decoded object (a `serde_json::Value` tree), which the watcher
//!   encodes itself (an apiserver without encode-once).
//! - [`Design::NaiveShared`]: a bounded channel per watcher carrying the shared object, whose
//!   encoded bytes each watcher copies (encode once, but a queue per watcher, as
//!   kube-apiserver's cacheWatcher).
//! - [`Design::TokioBroadcast`]: `tokio::sync::broadcast` of the shared object.
//! - [`Design::CopyOnly`]: the limit of this machine rather than a design: every watcher
//!   copies its frames from a shared pool with no writer, queue or wake-up at all.
//!
//! With [`Params::selective`], each event is for one watcher only (a pod for the kubelet of its
//! node): the ring's watchers filter on `spec.nodeName`, the key of their bucket in the
//! interest registry, so an event wakes one watcher, which then follows its bucket's chain;
//! the per-watcher channels are sent to through a trigger index keyed by node name too (as
//! kube-apiserver's cacher does); broadcast receivers see every event and skip those not
//! theirs.
//!
//! Watchers are tokio tasks on a two-worker runtime; the writer is its own thread. The ring
//! and broadcast never make the writer wait, so the writer holds back by itself while the
//! slowest watcher is half a history window behind; the per-watcher channels push back through
//! their bounded queues. Broadcast receivers read every event, so the writer paces on their
//! progress counters (yielding, then sleeping). A selective ring watcher needs only its own
//! events kept (one that is idle, or has read its bucket's last event, is never lapped by
//! others' traffic), so there the writer paces on the oldest event not delivered yet, and
//! parks until a quarter window has drained, woken by the watcher that delivers it. The
//! ring's writer wakes watchers per burst of 16 events (`WAKE_BURST`), as the reflector does for
//! the events it finds waiting. No design loses an event in a run, and a run that did would
//! say so in [`Outcome::lapped`].

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};
use watchcache_core::{
    Encoding, Event, Filter, ObjectKey, ObjectVersion, Revision, WatchHub, WatchSpec, WireFormat,
};
use watchcache_encoders::{FrameEncoder, ResourceInfo};

use crate::objects;

/// A fan-out design.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Design {
    /// Ours: the shared ring.
    Ring,
    /// Ours, writing protobuf frames.
    RingProtobuf,
    /// A channel per watcher, a deep copy per watcher, encoded by each watcher.
    NaiveCopy,
    /// A channel per watcher carrying the shared object.
    NaiveShared,
    /// `tokio::sync::broadcast` of the shared object.
    TokioBroadcast,
    /// The limit, not a design: each watcher copies the frames of its events from a shared
    /// pool with no coordination at all (no writer, no queue, no wake-up).
    CopyOnly,
}

impl Design {
    /// Every design, ours first.
    pub const ALL: [Design; 6] = [
        Design::Ring,
        Design::RingProtobuf,
        Design::NaiveCopy,
        Design::NaiveShared,
        Design::TokioBroadcast,
        Design::CopyOnly,
    ];

    /// The design's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Design::Ring => "ring",
            Design::RingProtobuf => "ring_protobuf",
            Design::NaiveCopy => "naive_copy",
            Design::NaiveShared => "naive_shared",
            Design::TokioBroadcast => "tokio_broadcast",
            Design::CopyOnly => "copy_only",
        }
    }

    /// The design called `name`.
    pub fn from_name(name: &str) -> Option<Design> {
        Design::ALL.into_iter().find(|d| d.name() == name)
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Params {
    /// Watchers, each receiving every event.
    pub watchers: usize,
    /// Events published.
    pub events: usize,
    /// Encoded size of each object.
    pub object_bytes: usize,
    /// Ring capacity and broadcast capacity, in events (a power of two, at least 64).
    pub history: usize,
    /// Queue depth of each per-watcher channel.
    pub queue: usize,
    /// How many watchers, evenly spread, record the latency of every event they receive.
    pub probes: usize,
    /// Each event concerns one watcher only (event `seq` is for watcher `seq % watchers`,
    /// as a pod is for the kubelet of its node), instead of every watcher.
    pub selective: bool,
}

impl Params {
    /// Default history, queue and probes for `watchers`, `events` and `object_bytes`.
    pub fn new(watchers: usize, events: usize, object_bytes: usize) -> Self {
        Params {
            watchers,
            events,
            object_bytes,
            history: 1024,
            queue: 16,
            probes: 64,
            selective: false,
        }
    }

    /// The most a frame can take.
    pub fn max_frame(&self) -> usize {
        self.object_bytes + 64
    }

    /// Events watcher `i` receives.
    pub fn expected(&self, i: usize) -> u64 {
        if !self.selective {
            self.events as u64
        } else if i < self.events {
            ((self.events - i).div_ceil(self.watchers)) as u64
        } else {
            0
        }
    }

    /// The watcher event `seq` is for, when selective.
    fn target(&self, seq: u64) -> usize {
        (seq % self.watchers as u64) as usize
    }

    /// Capacity of each watcher's output buffer: two frames, at least 16 KiB.
    pub fn out_buffer(&self) -> usize {
        (2 * self.max_frame()).max(16 * 1024)
    }
}

/// What a run measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// From the first publish to the last watcher receiving the last event.
    pub elapsed: Duration,
    /// Events received, summed over watchers.
    pub deliveries: u64,
    /// Time the writer spent publishing (for per-watcher channels this includes waiting on
    /// full queues; it excludes the writer's own hold-back for the ring and broadcast).
    pub publish_busy: Duration,
    /// Publish-to-receipt latencies seen by the probe watchers, in nanoseconds.
    pub latencies_ns: Vec<u64>,
    /// Frame bytes copied into output buffers, summed over watchers.
    pub bytes_copied: u64,
    /// Watchers that lost events (lapped, lagged); zero in a valid run.
    pub lapped: usize,
    /// Heap (bytes, when counting is on) after the watchers were set up, above the start.
    pub setup_heap: isize,
}

struct Shared {
    clock: Instant,
    /// Publish time of each event, nanoseconds since `clock`.
    stamps: Box<[AtomicU64]>,
    /// Events each watcher has received.
    progress: Box<[AtomicU64]>,
    /// Selective: whether each event reached its watcher.
    delivered: Box<[AtomicBool]>,
    /// The event the parked writer waits to see delivered (`u64::MAX`: none), and the writer.
    awaited: AtomicU64,
    writer: std::sync::OnceLock<std::thread::Thread>,
    started: AtomicUsize,
}

impl Shared {
    fn now(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }

    /// Latency of event `seq` now. The stamp was stored before the event was published, and
    /// the receiver got the event through a channel or the ring, whose release/acquire pair
    /// orders the stamp before this read; the stamp itself needs only Relaxed.
    fn latency(&self, seq: u64) -> u64 {
        self.now()
            .saturating_sub(self.stamps[seq as usize].load(Ordering::Relaxed))
    }
}

struct Receipt {
    latencies: Vec<u64>,
    bytes: u64,
    received: u64,
    lapped: bool,
    finished_ns: u64,
}

/// Per-watcher state every design shares: the output buffer and the counters.
struct Sink {
    shared: Arc<Shared>,
    index: usize,
    /// Watchers, when events are selective (a watcher's next event is `watchers` later).
    stride: Option<u64>,
    expected: u64,
    out: BytesMut,
    max_frame: usize,
    probe: bool,
    receipt: Receipt,
}

impl Sink {
    fn new(shared: Arc<Shared>, index: usize, p: &Params) -> Sink {
        let probe_every = p.watchers.div_ceil(p.probes.max(1)).max(1);
        let probe = index % probe_every == probe_every - 1 || index + 1 == p.watchers;
        Sink {
            shared,
            index,
            stride: p.selective.then_some(p.watchers as u64),
            expected: p.expected(index),
            out: BytesMut::with_capacity(p.out_buffer()),
            max_frame: p.max_frame(),
            probe,
            receipt: Receipt {
                latencies: if probe {
                    Vec::with_capacity(p.expected(index) as usize)
                } else {
                    Vec::new()
                },
                bytes: 0,
                received: 0,
                lapped: false,
                finished_ns: 0,
            },
        }
    }

    fn start(&self) {
        self.shared.started.fetch_add(1, Ordering::Relaxed);
    }

    /// Room for one more frame: a full buffer is "written to the socket", i.e. cleared.
    fn room(&mut self) -> &mut BytesMut {
        if self.out.capacity() - self.out.len() < self.max_frame {
            self.receipt.bytes += self.out.len() as u64;
            std::hint::black_box(&self.out[..]);
            self.out.clear();
        }
        &mut self.out
    }

    fn done(&self) -> bool {
        self.receipt.received >= self.expected
    }

    fn received(&mut self, seq: u64) {
        if self.probe {
            let l = self.shared.latency(seq);
            self.receipt.latencies.push(l);
        }
        self.receipt.received += 1;
        if self.stride.is_some() {
            // SeqCst, with the writer's SeqCst store of `awaited` and load of the flag: either
            // it sees this flag before parking, or this sees it waits and unparks it.
            self.shared.delivered[seq as usize].store(true, Ordering::SeqCst);
            if self.shared.awaited.load(Ordering::SeqCst) == seq
                && let Some(writer) = self.shared.writer.get()
            {
                writer.unpark();
            }
        }
        match self.stride {
            // Progress is the first event this watcher may still lack: every 16th event only
            // when each watcher gets every event (neighbouring counters share cache lines, and
            // the writer's hold-back works in half windows of hundreds of events).
            None if self.receipt.received.is_multiple_of(16) => self.progress(seq + 1),
            None => {}
            Some(stride) => self.progress(seq + stride),
        }
    }

    /// Event `seq`, not for this watcher, was seen and skipped (broadcast, selective).
    fn skipped(&mut self, seq: u64) {
        if (seq + 1).is_multiple_of(16) {
            self.progress(seq + 1);
        }
    }

    fn progress(&self, next: u64) {
        // Relaxed: the writer reads progress only to pace itself, never to access data.
        self.shared.progress[self.index].store(next, Ordering::Relaxed);
    }

    fn finish(mut self) -> Receipt {
        // A finished watcher never holds the writer back.
        self.progress(u64::MAX);
        self.receipt.bytes += self.out.len() as u64;
        self.receipt.finished_ns = self.shared.now();
        self.receipt
    }
}

const PREFIX: &[u8] = br#"{"type":"ADDED","object":"#;
const SUFFIX: &[u8] = b"}\n";

/// Events the ring's writer publishes before it wakes the watchers they concern (it also
/// wakes them before it waits).
const WAKE_BURST: u64 = 16;

/// Passed to a design's writer instead of an event: send any wake-ups held back, now.
const FLUSH: u64 = u64::MAX - 1;

/// Distinct objects the writer cycles through.
const POOL: usize = 64;

/// The writer of a channel-per-watcher design and its watchers' tasks.
type ChannelDesign = (Box<dyn FnMut(u64) + Send>, Vec<tokio::task::JoinHandle<Receipt>>);

/// What every design's writer does with each event before it hands it on: build the cache's
/// object from it, as a reflector decodes a watch event (its key, revision and the node name
/// it is indexed by, around the shared encoded bytes), in an `Arc`. The ring publishes that
/// object; the channel and broadcast designs send it (or, naive_copy, a deep copy of its
/// decoded tree) and their watchers copy its encoding; so no design's writer skips work
/// another's does. Its strings are made up front so that formatting them is not counted.
struct Decoder {
    encoded: Vec<Bytes>,
    names: Vec<String>,
    nodes: Vec<String>,
    params: Params,
}

impl Decoder {
    fn new(encoded: Vec<Bytes>, p: &Params) -> Decoder {
        Decoder {
            encoded,
            names: (0..1000).map(|i| format!("web-{i:06}")).collect(),
            nodes: (0..p.watchers).map(|i| format!("n{i}")).collect(),
            params: p.clone(),
        }
    }

    /// The object of event `seq`.
    fn decode(&self, seq: u64) -> Arc<ObjectVersion> {
        let body = self.encoded[seq as usize % POOL].clone();
        let object = ObjectVersion::builder(
            ObjectKey::new("ns-0", self.names[(seq % 1000) as usize].as_str()),
            Revision::new(seq + 1),
        )
        .field("spec.nodeName", self.nodes[self.params.target(seq)].as_str())
        .encoding(WireFormat::Json, Encoding::new(body))
        .build();
        Arc::new(object)
    }
}

/// The JSON encoding of an object the decoder built.
fn json_of(object: &ObjectVersion) -> &[u8] {
    object
        .encoded(WireFormat::Json)
        .map_or(&[][..], |e| e.bytes().as_ref())
}

/// A bounded channel per watcher, carrying what `item` makes of each decoded event (the
/// shared object, or a deep copy of a decoded tree); `write` puts its JSON into a buffer.
/// Selective, the writer sends straight to the one watcher an event is for, as the
/// apiserver's trigger index does; else to every watcher in turn, waiting on full queues.
fn channel_per_watcher<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    shared: &Arc<Shared>,
    p: &Params,
    decoder: Decoder,
    item: impl Fn(u64, &Arc<ObjectVersion>) -> T + Send + 'static,
    write: fn(&mut BytesMut, &T),
) -> ChannelDesign {
    let mut senders = Vec::with_capacity(p.watchers);
    let handles = (0..p.watchers)
        .map(|i| {
            let (tx, mut rx) = mpsc::channel::<(u64, T)>(p.queue);
            senders.push(tx);
            let mut sink = Sink::new(shared.clone(), i, p);
            rt.spawn(async move {
                sink.start();
                // Until the writer drops the senders.
                while let Some((seq, object)) = rx.recv().await {
                    let out = sink.room();
                    out.put_slice(PREFIX);
                    write(out, &object);
                    out.put_slice(SUFFIX);
                    drop(object);
                    sink.received(seq);
                }
                sink.finish()
            })
        })
        .collect();
    let params = p.clone();
    // The trigger index, as kube-apiserver's cacher keeps it: node name → watcher. The writer
    // routes each event by its object's node name, as the ring's writer finds its bucket.
    let index: HashMap<Box<str>, usize, foldhash::fast::RandomState> = decoder
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str().into(), i))
        .collect();
    let publish = move |seq: u64| {
        if seq == FLUSH {
            return;
        }
        let object = decoder.decode(seq);
        if params.selective {
            let node = object.field("spec.nodeName").unwrap_or_default();
            let _ = senders[index[node]].blocking_send((seq, item(seq, &object)));
        } else {
            for tx in &senders {
                let _ = tx.blocking_send((seq, item(seq, &object)));
            }
        }
        if seq + 1 == params.events as u64 {
            senders.clear();
        }
    };
    (Box::new(publish), handles)
}

/// Runs `design` with `p`, calling `progress(published)` now and then from the writer.
pub fn run(design: Design, p: &Params, progress: &(dyn Fn(u64) + Sync)) -> Outcome {
    assert!(
        p.watchers > 0 && p.events > 0,
        "at least one watcher and one event"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let shared = Arc::new(Shared {
        clock: Instant::now(),
        stamps: (0..p.events).map(|_| AtomicU64::new(0)).collect(),
        // Selective, watcher `i` lacks nothing before its first event, `i`.
        progress: (0..p.watchers)
            .map(|i| AtomicU64::new(if p.selective { i as u64 } else { 0 }))
            .collect(),
        delivered: (0..if p.selective { p.events } else { 0 })
            .map(|_| AtomicBool::new(false))
            .collect(),
        awaited: AtomicU64::new(u64::MAX),
        writer: std::sync::OnceLock::new(),
        started: AtomicUsize::new(0),
    });
    let encoded: Vec<Bytes> = (0..POOL).map(|i| objects::pod_bytes(i, p.object_bytes)).collect();
    let heap_start = crate::alloc::Counting::live();
    let events = p.events as u64;
    let params = p.clone();

    // Set up the watchers and a writer that publishes event `seq` (and may block).
    let (mut publish, gated, handles): (Box<dyn FnMut(u64) + Send>, bool, Vec<_>) = match design {
        Design::Ring | Design::RingProtobuf => {
            // Selective watchers filter on spec.nodeName, the trigger field of the interest
            // index: an event wakes the one watcher it is for.
            let (publisher, hub) = WatchHub::builder()
                .capacity(p.history)
                .trigger_field("spec.nodeName")
                .build()
                .expect("a power-of-two history");
            let info = ResourceInfo::new("pods", "Pod", "v1").with_protobuf(objects::POD_MESSAGE);
            let mut frames = FrameEncoder::new(info, objects::codec());
            if design == Design::RingProtobuf {
                frames = frames.protobuf().expect("pods have protobuf");
            }
            let handles = (0..p.watchers)
                .map(|i| {
                    let filter = if p.selective {
                        Filter::parse(None, "", &format!("spec.nodeName=n{i}")).expect("a field selector")
                    } else {
                        Filter::everything()
                    };
                    let mut watcher = hub.watch(WatchSpec::new(filter)).expect("a watcher");
                    let mut sink = Sink::new(shared.clone(), i, p);
                    let frames = frames.clone();
                    rt.spawn(async move {
                        sink.start();
                        // Until the writer closes the hub, as a real watcher waits for more.
                        loop {
                            let got = watcher
                                .next_with(|d| {
                                    let _ = frames.write(&d, sink.room());
                                    d.revision.get() - 1
                                })
                                .await;
                            match got {
                                Some(Ok(seq)) => sink.received(seq),
                                // The close, once everything was read; else a lap.
                                Some(Err(_)) => {
                                    sink.receipt.lapped = !sink.done();
                                    break;
                                }
                                None => break,
                            }
                        }
                        sink.finish()
                    })
                })
                .collect();
            let mut publisher = Some(publisher);
            let decoder = Decoder::new(encoded, p);
            let publish = move |seq: u64| {
                let Some(writer) = publisher.as_mut() else { return };
                if seq == FLUSH {
                    writer.flush();
                    return;
                }
                writer
                    .publish_deferred(Event::Added {
                        object: decoder.decode(seq),
                    })
                    .expect("revisions increase");
                // Wake-ups go out per burst, as the reflector sends them for the events it
                // finds waiting; a burst is far shorter than the writer's hold-back window.
                if (seq + 1).is_multiple_of(WAKE_BURST) {
                    writer.flush();
                }
                if seq + 1 == events
                    && let Some(writer) = publisher.take()
                {
                    writer.close(Revision::new(events));
                }
            };
            (Box::new(publish), true, handles)
        }
        Design::NaiveCopy => {
            // Decoded objects: each send is a deep copy, each watcher encodes its own.
            // Its writer builds the same object as every other's, then sends each watcher a
            // deep copy of its decoded tree (the trees are decoded up front, once per pool
            // object, so that the writer does not also parse JSON the others do not).
            let values: Vec<Value> = encoded
                .iter()
                .map(|b| serde_json::from_slice(b).expect("valid JSON"))
                .collect();
            let decoder = Decoder::new(encoded, p);
            let item = move |seq: u64, _: &Arc<ObjectVersion>| values[seq as usize % POOL].clone();
            let (publish, handles) = channel_per_watcher(&rt, &shared, p, decoder, item, |out, object| {
                let _ = serde_json::to_writer(out.writer(), object);
            });
            (publish, false, handles)
        }
        Design::NaiveShared => {
            let decoder = Decoder::new(encoded, p);
            let (publish, handles) = channel_per_watcher(
                &rt,
                &shared,
                p,
                decoder,
                |_, object| object.clone(),
                |out, object| out.put_slice(json_of(object)),
            );
            (publish, false, handles)
        }
        Design::CopyOnly => {
            // Each watcher waits for the start, then copies its events' frames one after
            // another; the "writer" only opens the start.
            let (go, ready) = tokio::sync::watch::channel(false);
            let encoded = Arc::new(encoded);
            let handles = (0..p.watchers)
                .map(|i| {
                    let mut sink = Sink::new(shared.clone(), i, p);
                    sink.probe = false;
                    let mut ready = ready.clone();
                    let (encoded, stride) = (encoded.clone(), sink.stride);
                    rt.spawn(async move {
                        sink.start();
                        let _ = ready.wait_for(|&go| go).await;
                        for k in 0..sink.expected {
                            let seq = stride.map_or(k, |w| i as u64 + k * w);
                            let out = sink.room();
                            out.put_slice(PREFIX);
                            out.put_slice(&encoded[seq as usize % POOL]);
                            out.put_slice(SUFFIX);
                            sink.received(seq);
                        }
                        sink.finish()
                    })
                })
                .collect();
            let mut go = Some(go);
            let publish = move |_seq: u64| {
                if let Some(go) = go.take() {
                    let _ = go.send(true);
                }
            };
            (Box::new(publish), false, handles)
        }
        Design::TokioBroadcast => {
            let (tx, _) = broadcast::channel::<(u64, Arc<ObjectVersion>)>(p.history);
            let handles = (0..p.watchers)
                .map(|i| {
                    let mut rx = tx.subscribe();
                    let mut sink = Sink::new(shared.clone(), i, p);
                    let params = params.clone();
                    rt.spawn(async move {
                        sink.start();
                        // Until the writer drops the sender, as a real receiver waits for more.
                        loop {
                            match rx.recv().await {
                                // Every receiver sees every event and filters it itself.
                                Ok((seq, _)) if params.selective && params.target(seq) != i => {
                                    sink.skipped(seq)
                                }
                                Ok((seq, object)) => {
                                    let out = sink.room();
                                    out.put_slice(PREFIX);
                                    out.put_slice(json_of(&object));
                                    out.put_slice(SUFFIX);
                                    drop(object);
                                    sink.received(seq);
                                }
                                Err(broadcast::error::RecvError::Lagged(_)) => {
                                    sink.receipt.lapped = true;
                                    break;
                                }
                                Err(broadcast::error::RecvError::Closed) => break,
                            }
                        }
                        sink.finish()
                    })
                })
                .collect();
            let mut tx = Some(tx);
            let decoder = Decoder::new(encoded, p);
            let publish = move |seq: u64| {
                if seq == FLUSH {
                    return;
                }
                if let Some(sender) = &tx {
                    let _ = sender.send((seq, decoder.decode(seq)));
                }
                if seq + 1 == events {
                    tx = None;
                }
            };
            (Box::new(publish), true, handles)
        }
    };

    // Every watcher task has started (and parked) before the first event.
    while shared.started.load(Ordering::Relaxed) < p.watchers {
        std::thread::sleep(Duration::from_millis(1));
    }
    let setup_heap = crate::alloc::Counting::live() - heap_start;

    let window = (p.history / 2) as u64;
    // The ring's selective watchers need only their own events kept (an idle or caught-up one
    // is never lapped by others' traffic): the writer paces on the oldest undelivered event.
    // Broadcast receivers read every event, so it paces on their progress.
    let by_delivery = p.selective && matches!(design, Design::Ring | Design::RingProtobuf);
    let writer_shared = shared.clone();
    let (start_ns, publish_busy) = std::thread::scope(|s| {
        s.spawn(|| {
            let shared = writer_shared;
            let _ = shared.writer.set(std::thread::current());
            let start = shared.now();
            let mut busy = Duration::ZERO;
            let mut slowest = 0u64;
            let tick = (events / 100).max(1);
            for seq in 0..events {
                let mut waited = 0u32;
                // Hold back while the slowest watcher is half a window behind.
                while gated && by_delivery && seq >= slowest + window {
                    // The first event not delivered yet: O(1) amortized, where the minimum
                    // over every watcher's progress is O(watchers) per look.
                    while slowest < events && shared.delivered[slowest as usize].load(Ordering::SeqCst) {
                        slowest += 1;
                    }
                    // Blocked: sleep until a quarter window has drained, woken by the watcher
                    // that delivers the event awaited (not spinning for a core the watchers
                    // need, and publishing in bursts between waits).
                    let target = (seq + 1 + window / 4).saturating_sub(window);
                    if slowest <= target && target < events {
                        // Wake-ups held back for a burst go out before the writer waits.
                        publish(FLUSH);
                        shared.awaited.store(target, Ordering::SeqCst);
                        if !shared.delivered[target as usize].load(Ordering::SeqCst) {
                            std::thread::park_timeout(Duration::from_millis(1));
                        }
                        shared.awaited.store(u64::MAX, Ordering::SeqCst);
                    }
                }
                while gated && !by_delivery && seq >= slowest + window {
                    slowest = {
                        shared
                            .progress
                            .iter()
                            .map(|c| c.load(Ordering::Relaxed))
                            .min()
                            .unwrap_or(events)
                    };
                    if seq >= slowest + window {
                        // Yield first, then sleep: the writer must not take a core from the
                        // watchers it waits for (the channel designs' writer parks in
                        // `blocking_send` too).
                        publish(FLUSH);
                        waited += 1;
                        if waited < 64 {
                            std::thread::yield_now();
                        } else {
                            std::thread::sleep(Duration::from_micros(50));
                        }
                    }
                }
                let t = Instant::now();
                shared.stamps[seq as usize].store(shared.now(), Ordering::Relaxed);
                publish(seq);
                busy += t.elapsed();
                if seq % tick == 0 {
                    progress(seq);
                }
            }
            progress(events);
            (start, busy)
        })
        .join()
        .expect("the writer")
    });

    let receipts: Vec<Receipt> = rt.block_on(async {
        let mut out = Vec::with_capacity(handles.len());
        for h in handles {
            out.push(h.await.expect("a watcher task"));
        }
        out
    });
    drop(publish);
    let mut outcome = Outcome {
        publish_busy,
        setup_heap,
        ..Outcome::default()
    };
    let mut last = start_ns;
    for r in receipts {
        outcome.deliveries += r.received;
        outcome.bytes_copied += r.bytes;
        outcome.lapped += usize::from(r.lapped);
        outcome.latencies_ns.extend(r.latencies);
        last = last.max(r.finished_ns);
    }
    outcome.elapsed = Duration::from_nanos(last - start_ns);
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_design_delivers_every_event_to_every_watcher() {
        for design in Design::ALL {
            let mut p = Params::new(37, 300, 1024);
            p.history = 64;
            p.queue = 4;
            p.probes = 5;
            let out = run(design, &p, &|_| ());
            assert_eq!(out.lapped, 0, "{design:?}");
            assert_eq!(out.deliveries, 37 * 300, "{design:?}");
            let frame = match design {
                // Protobuf is more compact than JSON: about 70% of it for these pods.
                Design::RingProtobuf => 1024 / 2,
                _ => PREFIX.len() + 1024 + SUFFIX.len() - 8,
            };
            assert!(
                out.bytes_copied as usize >= 37 * 300 * frame,
                "{design:?}: {} bytes copied",
                out.bytes_copied
            );
            // Probes: every 8th watcher (7, 15, 23, 31) and the last one; copy_only has no
            // publication to measure latency from.
            let probes = if design == Design::CopyOnly { 0 } else { 5 * 300 };
            assert_eq!(out.latencies_ns.len(), probes, "{design:?}");
            assert!(out.elapsed > Duration::ZERO);
        }
    }

    #[test]
    fn selective_events_reach_only_their_watcher() {
        for design in Design::ALL {
            let mut p = Params::new(13, 400, 1024);
            p.history = 64;
            p.queue = 4;
            p.probes = 13;
            p.selective = true;
            let out = run(design, &p, &|_| ());
            assert_eq!(out.lapped, 0, "{design:?}");
            assert_eq!(out.deliveries, 400, "{design:?}: each event once");
            let probes = if design == Design::CopyOnly { 0 } else { 400 };
            assert_eq!(out.latencies_ns.len(), probes, "{design:?}: every watcher probes");
            assert_eq!((0..13).map(|i| p.expected(i)).sum::<u64>(), 400);
        }
    }

    #[test]
    fn names_round_trip() {
        for d in Design::ALL {
            assert_eq!(Design::from_name(d.name()), Some(d));
        }
        assert_eq!(Design::from_name("nope"), None);
    }
}
