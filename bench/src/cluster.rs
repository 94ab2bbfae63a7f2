//! Fan-out shaped like a cluster: the watchers a real apiserver serves, and the traffic.
//!
//! For `N` nodes: one pods watcher per node (`spec.nodeName=<node>`, the kubelet), one Node
//! watcher per node (`metadata.name=<node>`, the kubelet's own Node), 50 watchers of every
//! pod (controllers, informers) and 20 of one namespace each (operators). The load is pod
//! churn over 40 namespaces (four events in five: each for the kubelet of its node, the 50
//! controllers and the watcher of its namespace if it has one) plus node-status churn (one
//! in five, for that node's watcher).
//!
//! Every design serves the same watchers the same events and does the same work per
//! delivery (copy the frame into the watcher's own buffer), as in [`fanout`](crate::fanout):
//!
//! - `ring` (ours): two hubs (pods, with `spec.nodeName` as trigger field, and nodes); every
//!   watcher filters; selective ones follow their bucket's chain.
//! - `naive_copy` / `naive_shared`: a bounded channel per watcher; the writer routes each
//!   event through indexes by node name, namespace and object name (as kube-apiserver's
//!   cacher does) and sends a deep copy, or the shared bytes.
//! - `tokio_broadcast`: one broadcast channel per resource; every receiver reads every event
//!   of its resource and skips those not for it.
//! - `copy_only`: the machine's limit: each watcher copies its events' frames with no writer.
//!
//! The ring and broadcast writers hold back while the oldest undelivered event (broadcast:
//! the slowest receiver) is half a history window behind, as in `fanout`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};
use watchcache_core::{
    Encoding, Event, Filter, ObjectKey, ObjectVersion, Publisher, Revision, WatchHub, WatchSpec, WireFormat,
};

use watchcache_encoders::{FrameEncoder, ResourceInfo};

use crate::objects;

/// The designs are [`fanout`](crate::fanout)'s, serving the cluster's watchers.
pub use crate::fanout::Design;

/// The designs this scenario compares (its frames are JSON: the protobuf ring is the fan-out
/// scenario's).
pub const DESIGNS: [Design; 5] = [
    Design::Ring,
    Design::NaiveCopy,
    Design::NaiveShared,
    Design::TokioBroadcast,
    Design::CopyOnly,
];

/// The design of [`DESIGNS`] called `name`.
pub fn design(name: &str) -> Option<Design> {
    DESIGNS.into_iter().find(|d| d.name() == name)
}

/// Watchers of every pod.
pub const ALL_PODS_WATCHERS: usize = 50;
/// Watchers of one namespace each (namespaces `ns-0` to `ns-19`).
pub const NAMESPACE_WATCHERS: usize = 20;
/// Namespaces pods are spread over.
const NAMESPACES: usize = 40;
/// Pods per node.
const PODS_PER_NODE: usize = 30;
/// Distinct encoded pods and nodes the writer cycles through.
const POOL: usize = 64;

/// What to run.
#[derive(Clone, Debug)]
pub struct Params {
    /// Nodes (two watchers each).
    pub nodes: usize,
    /// Events published (pod and node updates).
    pub events: usize,
    /// Encoded size of a pod, and of a node.
    pub pod_bytes: usize,
    /// Ring and broadcast capacity, in events per resource (a power of two, at least 64).
    pub history: usize,
    /// Queue depth of each per-watcher channel.
    pub queue: usize,
    /// Watchers, evenly spread, that record every latency.
    pub probes: usize,
    /// Events per second the writer offers (`None`: as fast as the design takes them). A
    /// rate every design sustains compares their latency without their queues' depth in it.
    pub rate: Option<f64>,
}

impl Params {
    /// Defaults for `nodes` and `events`.
    pub fn new(nodes: usize, events: usize) -> Self {
        Params {
            nodes,
            events,
            pod_bytes: 2048,
            history: 1024,
            queue: 16,
            probes: 64,
            rate: None,
        }
    }

    /// Watchers in all: two per node, the pods watchers and the namespace watchers.
    pub fn watchers(&self) -> usize {
        2 * self.nodes + ALL_PODS_WATCHERS + NAMESPACE_WATCHERS
    }
}

/// One event of the generated load.
#[derive(Clone, Copy, Debug)]
enum Load {
    Pod {
        pod: usize,
        node: usize,
        namespace: usize,
    },
    Node {
        node: usize,
    },
}

impl Load {
    /// Event `seq`: four in five are updates of a pseudo-random pod, one in five the status
    /// of a pseudo-random node.
    fn of(seq: u64, nodes: usize) -> Load {
        let x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
        if seq % 5 == 4 {
            Load::Node {
                node: (x % nodes as u64) as usize,
            }
        } else {
            let pod = (x % (nodes * PODS_PER_NODE) as u64) as usize;
            Load::Pod {
                pod,
                node: pod % nodes,
                namespace: pod % NAMESPACES,
            }
        }
    }

    /// The watchers this event is for, by index: kubelets `0..N`, node watchers `N..2N`,
    /// all-pods watchers next, namespace watchers last.
    fn targets(self, nodes: usize, out: &mut Vec<usize>) {
        out.clear();
        match self {
            Load::Pod { node, namespace, .. } => {
                out.push(node);
                out.extend(2 * nodes..2 * nodes + ALL_PODS_WATCHERS);
                if namespace < NAMESPACE_WATCHERS {
                    out.push(2 * nodes + ALL_PODS_WATCHERS + namespace);
                }
            }
            Load::Node { node } => out.push(nodes + node),
        }
    }
}

/// Watcher `i`'s filter, as the ring's watchers and the broadcast receivers apply it.
enum Role {
    Kubelet(usize),
    NodeWatcher(usize),
    AllPods,
    Namespace(usize),
}

fn role(i: usize, nodes: usize) -> Role {
    if i < nodes {
        Role::Kubelet(i)
    } else if i < 2 * nodes {
        Role::NodeWatcher(i - nodes)
    } else if i < 2 * nodes + ALL_PODS_WATCHERS {
        Role::AllPods
    } else {
        Role::Namespace(i - 2 * nodes - ALL_PODS_WATCHERS)
    }
}

/// What a run measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// From the first publish to the last watcher receiving its last event.
    pub elapsed: Duration,
    /// Events received, summed over watchers.
    pub deliveries: u64,
    /// Time the writer spent publishing (excluding its own hold-back).
    pub publish_busy: Duration,
    /// Publish-to-receipt latencies of the probe watchers, in nanoseconds.
    pub latencies_ns: Vec<u64>,
    /// Watchers that lost events; zero in a valid run.
    pub lapped: usize,
    /// Heap after the watchers were set up, above the start.
    pub setup_heap: isize,
}

struct Shared {
    clock: Instant,
    stamps: Box<[AtomicU64]>,
    /// Deliveries still due per event (ring: the writer paces on the oldest event with any).
    due: Box<[AtomicU32]>,
    /// Events each broadcast receiver has read (it paces the broadcast writer).
    read: Box<[AtomicU64]>,
    started: AtomicUsize,
}

impl Shared {
    fn now(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }
}

struct Receipt {
    latencies: Vec<u64>,
    received: u64,
    lapped: bool,
    finished_ns: u64,
}

/// A watcher's output buffer and counters.
struct Sink {
    shared: Arc<Shared>,
    out: BytesMut,
    max_frame: usize,
    probe: bool,
    expected: u64,
    receipt: Receipt,
}

const PREFIX: &[u8] = br#"{"type":"MODIFIED","object":"#;
const SUFFIX: &[u8] = b"}\n";

impl Sink {
    fn room(&mut self) -> &mut BytesMut {
        if self.out.capacity() - self.out.len() < self.max_frame {
            std::hint::black_box(&self.out[..]);
            self.out.clear();
        }
        &mut self.out
    }

    /// Copies event `seq`'s frame around `object` into the buffer and counts it.
    fn deliver(&mut self, seq: u64, object: &[u8]) {
        let out = self.room();
        out.put_slice(PREFIX);
        out.put_slice(object);
        out.put_slice(SUFFIX);
        self.received(seq);
    }

    fn received(&mut self, seq: u64) {
        if self.probe {
            let stamp = self.shared.stamps[seq as usize].load(Ordering::Relaxed);
            self.receipt
                .latencies
                .push(self.shared.now().saturating_sub(stamp));
        }
        self.receipt.received += 1;
        // Relaxed: read by the writer only to pace itself.
        self.shared.due[seq as usize].fetch_sub(1, Ordering::Relaxed);
    }

    fn done(&self) -> bool {
        self.receipt.received >= self.expected
    }

    fn finish(mut self) -> Receipt {
        self.receipt.finished_ns = self.shared.now();
        self.receipt
    }
}

/// The writer of one design: publishes event `seq`; [`FLUSH`] sends the wake-ups it held
/// back for a burst, `u64::MAX` ends the stream.
type Writer = Box<dyn FnMut(u64) + Send>;

/// Passed to a writer instead of an event: send any wake-ups held back, now.
const FLUSH: u64 = u64::MAX - 1;

/// Runs `design` with `p`, calling `progress(published)` now and then from the writer.
pub fn run(design: Design, p: &Params, progress: &(dyn Fn(u64) + Sync)) -> Outcome {
    let watchers = p.watchers();
    let nodes = p.nodes;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    // Who gets what: per event the number of deliveries due, per watcher its events' count.
    let mut expected = vec![0u64; watchers];
    let mut targets = Vec::new();
    let due: Box<[AtomicU32]> = (0..p.events as u64)
        .map(|seq| {
            Load::of(seq, nodes).targets(nodes, &mut targets);
            for &t in &targets {
                expected[t] += 1;
            }
            AtomicU32::new(targets.len() as u32)
        })
        .collect();
    let shared = Arc::new(Shared {
        clock: Instant::now(),
        stamps: (0..p.events).map(|_| AtomicU64::new(0)).collect(),
        due,
        read: (0..watchers).map(|_| AtomicU64::new(0)).collect(),
        started: AtomicUsize::new(0),
    });
    let pods: Vec<Bytes> = (0..POOL).map(|i| objects::pod_bytes(i, p.pod_bytes)).collect();
    let node_objects: Vec<Bytes> = (0..POOL).map(|i| node_bytes(i, p.pod_bytes / 2)).collect();
    let max_frame = p.pod_bytes + 64;
    let probe_every = watchers.div_ceil(p.probes.max(1)).max(1);
    let sink = |i: usize| Sink {
        shared: shared.clone(),
        out: BytesMut::with_capacity((2 * max_frame).max(16 * 1024)),
        max_frame,
        probe: design != Design::CopyOnly && i % probe_every == probe_every - 1,
        expected: expected[i],
        receipt: Receipt {
            latencies: Vec::new(),
            received: 0,
            lapped: false,
            finished_ns: 0,
        },
    };
    let heap_start = crate::alloc::Counting::live();
    let names: Vec<String> = (0..nodes).map(|n| format!("node-{n:05}")).collect();
    let namespaces: Vec<String> = (0..NAMESPACES).map(|k| format!("ns-{k}")).collect();

    let (mut publish, gate, handles): (Writer, Gate, Vec<tokio::task::JoinHandle<Receipt>>) = match design {
        Design::Ring => ring(&rt, p, &sink, &names, &namespaces, pods, node_objects),
        Design::RingProtobuf => unreachable!("not one of the scenario's DESIGNS"),
        Design::NaiveCopy => {
            let decode = |b: &Bytes| -> Value { serde_json::from_slice(b).expect("valid JSON") };
            let pods: Vec<Value> = pods.iter().map(decode).collect();
            let node_objects: Vec<Value> = node_objects.iter().map(decode).collect();
            channels(
                &rt,
                p,
                &sink,
                &names,
                &namespaces,
                pods,
                node_objects,
                |out, v| {
                    let _ = serde_json::to_writer(out.writer(), v);
                },
            )
        }
        Design::NaiveShared => channels(
            &rt,
            p,
            &sink,
            &names,
            &namespaces,
            pods,
            node_objects,
            |out, b| out.put_slice(b),
        ),
        Design::TokioBroadcast => broadcasts(&rt, p, &sink, pods, node_objects),
        Design::CopyOnly => copy_only(&rt, p, &sink, pods, node_objects),
    };

    while shared.started.load(Ordering::Relaxed) < watchers {
        std::thread::sleep(Duration::from_millis(1));
    }
    let setup_heap = crate::alloc::Counting::live() - heap_start;
    let events = p.events as u64;
    let window = (p.history / 2) as u64;
    let rate = p.rate;
    let (start_ns, publish_busy) = {
        let shared = shared.clone();
        std::thread::scope(|s| {
            s.spawn(move || {
                let start = shared.now();
                let mut busy = Duration::ZERO;
                let mut oldest = 0u64;
                let tick = (events / 100).max(1);
                let paced = rate.map(|r| Duration::from_secs_f64(1.0 / r));
                let began = Instant::now();
                for seq in 0..events {
                    if let Some(every) = paced {
                        // Event `seq` is due `seq` intervals after the start. The writer sleeps
                        // until then (never spins: it would take a core from the watchers) and
                        // publishes what fell due while it overslept back to back.
                        let due = began + every.mul_f64(seq as f64);
                        let now = Instant::now();
                        if due > now {
                            // Wake-ups held back for a burst go out before the writer waits.
                            publish(FLUSH);
                            std::thread::sleep(due - now);
                        }
                    }
                    let mut waited = 0u32;
                    loop {
                        oldest = match gate {
                            Gate::None => break,
                            // The oldest event with deliveries still due.
                            Gate::Due => {
                                let mut o = oldest;
                                while o < events && shared.due[o as usize].load(Ordering::Relaxed) == 0 {
                                    o += 1;
                                }
                                o
                            }
                            // The slowest receiver.
                            Gate::Read => shared
                                .read
                                .iter()
                                .map(|r| r.load(Ordering::Relaxed))
                                .min()
                                .unwrap_or(events),
                        };
                        if seq < oldest + window {
                            break;
                        }
                        publish(FLUSH);
                        waited += 1;
                        if waited < 64 {
                            std::thread::yield_now();
                        } else {
                            std::thread::sleep(Duration::from_micros(50));
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
                // The last call closes or drops what the design's writer holds.
                publish(u64::MAX);
                progress(events);
                (start, busy)
            })
            .join()
            .expect("the writer")
        })
    };
    let receipts: Vec<Receipt> = rt.block_on(async {
        let mut out = Vec::with_capacity(handles.len());
        for h in handles {
            out.push(h.await.expect("a watcher task"));
        }
        out
    });
    let mut outcome = Outcome {
        publish_busy,
        setup_heap,
        ..Outcome::default()
    };
    let mut last = start_ns;
    for r in receipts {
        outcome.deliveries += r.received;
        outcome.lapped += usize::from(r.lapped);
        outcome.latencies_ns.extend(r.latencies);
        last = last.max(r.finished_ns);
    }
    outcome.elapsed = Duration::from_nanos(last.saturating_sub(start_ns));
    outcome
}

/// How the writer holds back.
#[derive(Clone, Copy)]
enum Gate {
    None,
    Due,
    Read,
}

/// A node object of about `bytes` bytes.
fn node_bytes(i: usize, bytes: usize) -> Bytes {
    let pad = "x".repeat(bytes.saturating_sub(300));
    Bytes::from(
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("node-{i:05}"), "resourceVersion": "1",
                         "annotations": {"pad": pad}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap_or_default(),
    )
}

type Spawned = (Writer, Gate, Vec<tokio::task::JoinHandle<Receipt>>);

fn ring(
    rt: &tokio::runtime::Runtime,
    p: &Params,
    sink: &dyn Fn(usize) -> Sink,
    names: &[String],
    namespaces: &[String],
    pods: Vec<Bytes>,
    node_objects: Vec<Bytes>,
) -> Spawned {
    let nodes = p.nodes;
    let (pod_publisher, pod_hub) = WatchHub::builder()
        .capacity(p.history)
        .trigger_field("spec.nodeName")
        .build()
        .expect("a power-of-two history");
    let (node_publisher, node_hub) = WatchHub::builder()
        .capacity(p.history)
        .build()
        .expect("a power-of-two history");
    let pod_frames = FrameEncoder::new(ResourceInfo::new("pods", "Pod", "v1"), objects::codec());
    let node_frames = FrameEncoder::new(ResourceInfo::new("nodes", "Node", "v1"), objects::codec());
    let handles = (0..p.watchers())
        .map(|i| {
            let (hub, filter) = match role(i, nodes) {
                Role::Kubelet(n) => (
                    &pod_hub,
                    Filter::parse(None, "", &format!("spec.nodeName={}", names[n])).expect("a selector"),
                ),
                Role::NodeWatcher(n) => (
                    &node_hub,
                    Filter::parse(None, "", &format!("metadata.name={}", names[n])).expect("a selector"),
                ),
                Role::AllPods => (&pod_hub, Filter::everything()),
                Role::Namespace(k) => (&pod_hub, Filter::everything().in_namespace(&namespaces[k])),
            };
            let mut watcher = hub.watch(WatchSpec::new(filter)).expect("a watcher");
            let mut sink = sink(i);
            let frames = if matches!(role(i, nodes), Role::NodeWatcher(_)) {
                node_frames.clone()
            } else {
                pod_frames.clone()
            };
            rt.spawn(async move {
                sink.shared.started.fetch_add(1, Ordering::Relaxed);
                loop {
                    let got = watcher
                        .next_with(|d| {
                            let _ = frames.write(&d, sink.room());
                            d.revision.get() - 1
                        })
                        .await;
                    match got {
                        Some(Ok(seq)) => sink.received(seq),
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
    let names = names.to_vec();
    let namespaces = namespaces.to_vec();
    let mut writers: Option<(Publisher, Publisher)> = Some((pod_publisher, node_publisher));
    let publish = move |seq: u64| {
        let Some((pods_w, nodes_w)) = writers.as_mut() else {
            return;
        };
        if seq == FLUSH {
            pods_w.flush();
            nodes_w.flush();
            return;
        }
        if seq == u64::MAX {
            if let Some((a, b)) = writers.take() {
                let (ra, rb) = (a.last_revision(), b.last_revision());
                a.close(ra);
                b.close(rb);
            }
            return;
        }
        let revision = Revision::new(seq + 1);
        match Load::of(seq, nodes) {
            Load::Pod { pod, node, namespace } => {
                let object = ObjectVersion::builder(
                    ObjectKey::new(namespaces[namespace].as_str(), format!("pod-{pod:07}")),
                    revision,
                )
                .field("spec.nodeName", names[node].as_str())
                .encoding(WireFormat::Json, Encoding::new(pods[pod % POOL].clone()))
                .build();
                pods_w
                    .publish_deferred(Event::Added {
                        object: Arc::new(object),
                    })
                    .expect("revisions increase");
            }
            Load::Node { node } => {
                let object = ObjectVersion::builder(ObjectKey::new("", names[node].as_str()), revision)
                    .encoding(WireFormat::Json, Encoding::new(node_objects[node % POOL].clone()))
                    .build();
                nodes_w
                    .publish_deferred(Event::Added {
                        object: Arc::new(object),
                    })
                    .expect("revisions increase");
            }
        }
        if (seq + 1).is_multiple_of(16) {
            pods_w.flush();
            nodes_w.flush();
        }
    };
    (Box::new(publish), Gate::Due, handles)
}

#[allow(clippy::too_many_arguments)]
fn channels<T: Clone + Send + Sync + 'static>(
    rt: &tokio::runtime::Runtime,
    p: &Params,
    sink: &dyn Fn(usize) -> Sink,
    names: &[String],
    namespaces: &[String],
    pods: Vec<T>,
    node_objects: Vec<T>,
    write: fn(&mut BytesMut, &T),
) -> Spawned {
    let nodes = p.nodes;
    let mut senders = Vec::with_capacity(p.watchers());
    let handles = (0..p.watchers())
        .map(|i| {
            let (tx, mut rx) = mpsc::channel::<(u64, T)>(p.queue);
            senders.push(tx);
            let mut sink = sink(i);
            rt.spawn(async move {
                sink.shared.started.fetch_add(1, Ordering::Relaxed);
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
    // The cacher's indexes: kubelets by node name, node watchers by object name, namespace
    // watchers by namespace; the all-pods watchers are always sent to.
    type Index = HashMap<Box<str>, usize, foldhash::fast::RandomState>;
    let by_node: Index = names
        .iter()
        .enumerate()
        .map(|(n, s)| (s.as_str().into(), n))
        .collect();
    let by_name: Index = names
        .iter()
        .enumerate()
        .map(|(n, s)| (s.as_str().into(), nodes + n))
        .collect();
    let by_namespace: Index = namespaces[..NAMESPACE_WATCHERS]
        .iter()
        .enumerate()
        .map(|(k, s)| (s.as_str().into(), 2 * nodes + ALL_PODS_WATCHERS + k))
        .collect();
    let (names, namespaces) = (names.to_vec(), namespaces.to_vec());
    let publish = move |seq: u64| {
        if seq == FLUSH {
            return;
        }
        if seq == u64::MAX {
            senders.clear();
            return;
        }
        match Load::of(seq, nodes) {
            Load::Pod { pod, node, namespace } => {
                let object = &pods[pod % POOL];
                let _ = senders[by_node[names[node].as_str()]].blocking_send((seq, object.clone()));
                for tx in &senders[2 * nodes..2 * nodes + ALL_PODS_WATCHERS] {
                    let _ = tx.blocking_send((seq, object.clone()));
                }
                if let Some(&w) = by_namespace.get(namespaces[namespace].as_str()) {
                    let _ = senders[w].blocking_send((seq, object.clone()));
                }
            }
            Load::Node { node } => {
                let object = &node_objects[node % POOL];
                let _ = senders[by_name[names[node].as_str()]].blocking_send((seq, object.clone()));
            }
        }
    };
    (Box::new(publish), Gate::None, handles)
}

fn broadcasts(
    rt: &tokio::runtime::Runtime,
    p: &Params,
    sink: &dyn Fn(usize) -> Sink,
    pods: Vec<Bytes>,
    node_objects: Vec<Bytes>,
) -> Spawned {
    let nodes = p.nodes;
    let (pod_tx, _) = broadcast::channel::<(u64, Load)>(p.history);
    let (node_tx, _) = broadcast::channel::<(u64, Load)>(p.history);
    let pods = Arc::new(pods);
    let node_objects = Arc::new(node_objects);
    let handles = (0..p.watchers())
        .map(|i| {
            let role = role(i, nodes);
            let mut rx = match role {
                Role::NodeWatcher(_) => node_tx.subscribe(),
                _ => pod_tx.subscribe(),
            };
            let mut sink = sink(i);
            let (pods, node_objects) = (pods.clone(), node_objects.clone());
            rt.spawn(async move {
                sink.shared.started.fetch_add(1, Ordering::Relaxed);
                loop {
                    match rx.recv().await {
                        Ok((seq, load)) => {
                            // Progress for the writer's hold-back: read up to `seq` (Relaxed, it
                            // only paces the writer).
                            sink.shared.read[i].store(seq, Ordering::Relaxed);
                            let object = match (&role, load) {
                                (Role::Kubelet(n), Load::Pod { node, pod, .. }) if *n == node => {
                                    &pods[pod % POOL]
                                }
                                (Role::AllPods, Load::Pod { pod, .. }) => &pods[pod % POOL],
                                (Role::Namespace(k), Load::Pod { namespace, pod, .. }) if *k == namespace => {
                                    &pods[pod % POOL]
                                }
                                (Role::NodeWatcher(n), Load::Node { node }) if *n == node => {
                                    &node_objects[node % POOL]
                                }
                                _ => continue,
                            };
                            sink.deliver(seq, object);
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            sink.receipt.lapped = true;
                            break;
                        }
                        Err(broadcast::error::RecvError::Closed) => break,
                    }
                }
                sink.shared.read[i].store(u64::MAX, Ordering::Relaxed);
                sink.finish()
            })
        })
        .collect();
    let mut senders = Some((pod_tx, node_tx));
    let publish = move |seq: u64| {
        let Some((pod_tx, node_tx)) = &senders else { return };
        if seq == FLUSH {
            return;
        }
        if seq == u64::MAX {
            senders = None;
            return;
        }
        let load = Load::of(seq, nodes);
        let tx = if matches!(load, Load::Node { .. }) {
            node_tx
        } else {
            pod_tx
        };
        let _ = tx.send((seq, load));
    };
    (Box::new(publish), Gate::Read, handles)
}

fn copy_only(
    rt: &tokio::runtime::Runtime,
    p: &Params,
    sink: &dyn Fn(usize) -> Sink,
    pods: Vec<Bytes>,
    node_objects: Vec<Bytes>,
) -> Spawned {
    let nodes = p.nodes;
    let events = p.events as u64;
    // Each watcher's events, worked out up front so that the copies are all that is timed.
    let mut mine: Vec<Vec<u64>> = vec![Vec::new(); p.watchers()];
    let mut targets = Vec::new();
    for seq in 0..events {
        Load::of(seq, nodes).targets(nodes, &mut targets);
        for &t in &targets {
            mine[t].push(seq);
        }
    }
    let (go, ready) = tokio::sync::watch::channel(false);
    let (pods, node_objects) = (Arc::new(pods), Arc::new(node_objects));
    let handles = mine
        .into_iter()
        .enumerate()
        .map(|(i, seqs)| {
            let mut sink = sink(i);
            let mut ready = ready.clone();
            let (pods, node_objects) = (pods.clone(), node_objects.clone());
            rt.spawn(async move {
                sink.shared.started.fetch_add(1, Ordering::Relaxed);
                let _ = ready.wait_for(|&go| go).await;
                for seq in seqs {
                    let object = match Load::of(seq, nodes) {
                        Load::Pod { pod, .. } => &pods[pod % POOL],
                        Load::Node { node } => &node_objects[node % POOL],
                    };
                    sink.deliver(seq, object);
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
    (Box::new(publish), Gate::None, handles)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_design_delivers_each_event_to_exactly_its_watchers() {
        let mut p = Params::new(12, 600);
        p.history = 64;
        p.queue = 4;
        p.probes = 8;
        p.pod_bytes = 1024;
        let mut want = 0u64;
        let mut targets = Vec::new();
        for seq in 0..600 {
            Load::of(seq, 12).targets(12, &mut targets);
            want += targets.len() as u64;
        }
        for design in DESIGNS {
            let out = run(design, &p, &|_| ());
            assert_eq!(out.lapped, 0, "{design:?}");
            assert_eq!(out.deliveries, want, "{design:?}");
            assert!(
                design == Design::CopyOnly || !out.latencies_ns.is_empty(),
                "{design:?}"
            );
        }
    }

    #[test]
    fn the_load_mixes_pods_and_nodes_and_reaches_every_kind_of_watcher() {
        let nodes = 100;
        let (mut pods, mut node_events, mut ns_hits) = (0, 0, 0);
        let mut targets = Vec::new();
        for seq in 0..10_000 {
            let load = Load::of(seq, nodes);
            load.targets(nodes, &mut targets);
            match load {
                Load::Pod { .. } => {
                    pods += 1;
                    assert!(targets.len() == 1 + ALL_PODS_WATCHERS || targets.len() == 2 + ALL_PODS_WATCHERS);
                    ns_hits += usize::from(targets.len() == 2 + ALL_PODS_WATCHERS);
                }
                Load::Node { .. } => {
                    node_events += 1;
                    assert_eq!(targets.len(), 1);
                }
            }
        }
        assert_eq!((pods, node_events), (8_000, 2_000));
        assert!(
            (3_000..5_000).contains(&ns_hits),
            "half the namespaces are watched: {ns_hits}"
        );
    }
}
