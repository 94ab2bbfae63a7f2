//! One LIST of a whole collection, `concurrent` at a time, four ways.
//!
//! - [`Design::Streaming`] (ours): the cache's snapshot of shared encoded objects, written in
//!   bounded chunks that are handed on (and dropped) one at a time, as hyper sends a body.
//! - [`Design::Buffered`]: the same snapshot, but the whole body built, then handed on.
//! - [`Design::NaiveValue`]: a store of decoded `serde_json::Value`s; the response is
//!   materialised as a `Value` list (a deep copy of every item), then serialised.
//! - [`Design::Memcpy`]: the bandwidth reference: the same walk over the snapshot, each item's
//!   encoded bytes copied once into a reused 64 KiB buffer. No encoder can move the bytes
//!   with less work.
//! - [`Design::StreamingProtobuf`], [`Design::BufferedProtobuf`], [`Design::MemcpyProtobuf`]:
//!   the same three in Kubernetes protobuf, from each object's protobuf encoding (made once
//!   when the store is built, as the first protobuf read would make it). The streaming body
//!   walks the items twice: their sizes first, for the envelope's length prefix, then their
//!   bytes.
//!
//! Sending is not simulated: the consumer touches each chunk and drops it, so the figures
//! are the encoders' own.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};
use watchcache_core::{Codec, ListItems, ObjectVersion, Revision, Snapshot, WireFormat};
use watchcache_encoders::{
    DEFAULT_CHUNK_SIZE, ListHeader, ResourceInfo, StreamingList, encode_list, encode_protobuf_list,
};

use crate::alloc::Counting;
use crate::objects;

/// A LIST design.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Design {
    /// Ours: bounded chunks from shared pieces.
    Streaming,
    /// The whole body, then sent.
    Buffered,
    /// A materialised `Value` list, then serialised.
    NaiveValue,
    /// The bandwidth reference.
    Memcpy,
    /// Ours, in protobuf.
    StreamingProtobuf,
    /// The whole protobuf body, then sent.
    BufferedProtobuf,
    /// The bandwidth reference over the protobuf encodings.
    MemcpyProtobuf,
}

impl Design {
    /// Every design, ours first, the reference last.
    pub const ALL: [Design; 7] = [
        Design::Streaming,
        Design::Buffered,
        Design::NaiveValue,
        Design::Memcpy,
        Design::StreamingProtobuf,
        Design::BufferedProtobuf,
        Design::MemcpyProtobuf,
    ];

    /// The design's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Design::Streaming => "streaming",
            Design::Buffered => "buffered",
            Design::NaiveValue => "naive_value",
            Design::Memcpy => "memcpy",
            Design::StreamingProtobuf => "streaming_protobuf",
            Design::BufferedProtobuf => "buffered_protobuf",
            Design::MemcpyProtobuf => "memcpy_protobuf",
        }
    }

    /// The design called `name`.
    pub fn from_name(name: &str) -> Option<Design> {
        Design::ALL.into_iter().find(|d| d.name() == name)
    }

    /// The wire format the design writes.
    pub fn format(self) -> WireFormat {
        match self {
            Design::StreamingProtobuf | Design::BufferedProtobuf | Design::MemcpyProtobuf => {
                WireFormat::Protobuf
            }
            _ => WireFormat::Json,
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Params {
    /// Items in the collection.
    pub items: usize,
    /// Encoded size of each item.
    pub item_bytes: usize,
    /// LISTs served at once, each on its own thread.
    pub concurrent: usize,
    /// Rounds; wall time is the fastest (interference only ever slows a copy down), peak
    /// heap the highest.
    pub rounds: usize,
}

/// The collection, as a design stores it.
pub enum Store {
    /// Shared encoded object versions (the cache's snapshot).
    Encoded(Arc<Snapshot>),
    /// Decoded values.
    Values(Arc<Vec<Value>>),
}

/// The store for `design` and its measured heap per object (when counting is on), with the
/// mean encoded size of an object.
pub fn build_store(design: Design, p: &Params) -> (Store, f64, f64) {
    let codec = objects::codec();
    let maker = objects::PodMaker::new(p.item_bytes);
    let raws: Vec<Vec<u8>> = (0..p.items).map(|i| maker.make(i)).collect();
    let mut encoded = raws.iter().map(Vec::len).sum::<usize>() as f64 / p.items.max(1) as f64;
    let before = Counting::live();
    let store = match design {
        Design::NaiveValue => Store::Values(Arc::new(
            raws.iter()
                .map(|r| serde_json::from_slice(r).expect("valid JSON"))
                .collect(),
        )),
        _ => {
            let objects: Vec<Arc<ObjectVersion>> = raws
                .iter()
                .enumerate()
                .map(|(i, r)| Arc::new(codec.decode(r, Revision::new(i as u64 + 1)).expect("a valid pod")))
                .collect();
            if design.format() == WireFormat::Protobuf {
                // Made once per version, as the first protobuf read makes it: the store then
                // holds both encodings.
                for o in &objects {
                    o.encoding(WireFormat::Protobuf, &*codec)
                        .expect("a pod has protobuf");
                }
            }
            Store::Encoded(Arc::new(Snapshot::new(Revision::new(p.items as u64), objects)))
        }
    };
    let stored = (Counting::live() - before) as f64 / p.items.max(1) as f64;
    if let Store::Encoded(snapshot) = &store {
        // The codec stamps each object's own resourceVersion: measure what is stored.
        let total: usize = snapshot
            .iter()
            .map(|o| o.encoded(design.format()).map_or(0, |e| e.bytes().len()))
            .sum();
        encoded = total as f64 / p.items.max(1) as f64;
    }
    (store, stored, encoded)
}

/// What a run measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Wall time of the fastest round (all `concurrent` LISTs).
    pub wall: Duration,
    /// Bytes one LIST moved (its body, or for memcpy the items' bytes).
    pub bytes_per_list: u64,
    /// Highest heap above the round's start, over rounds (when counting is on).
    pub peak_extra_heap: isize,
}

fn info() -> ResourceInfo {
    ResourceInfo::new("pods", "Pod", "v1").with_protobuf(objects::POD_MESSAGE)
}

/// One LIST by `design` over `store`; returns the bytes moved.
pub fn list_once(design: Design, store: &Store) -> u64 {
    let info = info();
    match (design, store) {
        (Design::Streaming | Design::StreamingProtobuf, Store::Encoded(snapshot)) => {
            let header = ListHeader {
                revision: snapshot.revision(),
                ..Default::default()
            };
            let items = ListItems::all(snapshot.clone());
            let mut body = if design == Design::Streaming {
                StreamingList::new(&info, &header, items, objects::codec(), DEFAULT_CHUNK_SIZE)
            } else {
                StreamingList::protobuf(&info, &header, items, objects::codec(), DEFAULT_CHUNK_SIZE)
                    .expect("every object has protobuf")
            };
            let mut total = 0;
            while let Some(chunk) = body.next_chunk() {
                let chunk = chunk.expect("every object has JSON");
                total += consume(&chunk);
            }
            total
        }
        (Design::Buffered, Store::Encoded(snapshot)) => {
            let header = ListHeader {
                revision: snapshot.revision(),
                ..Default::default()
            };
            let body = encode_list(
                &info,
                &header,
                ListItems::all(snapshot.clone()),
                &*objects::codec(),
            )
            .expect("every object has JSON");
            consume(&body)
        }
        (Design::BufferedProtobuf, Store::Encoded(snapshot)) => {
            let header = ListHeader {
                revision: snapshot.revision(),
                ..Default::default()
            };
            let body = encode_protobuf_list(
                &info,
                &header,
                ListItems::all(snapshot.clone()),
                &*objects::codec(),
            )
            .expect("every object has protobuf");
            consume(&body)
        }
        (Design::NaiveValue, Store::Values(values)) => {
            let list = json!({
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": values.len().to_string()},
                "items": Value::Array(values.iter().cloned().collect()),
            });
            let body = Bytes::from(serde_json::to_vec(&list).expect("a Value serialises"));
            drop(list);
            consume(&body)
        }
        (Design::Memcpy | Design::MemcpyProtobuf, Store::Encoded(snapshot)) => {
            // The same walk over the snapshot as the streaming encoder; only the copy is left.
            let mut buf = Vec::with_capacity(DEFAULT_CHUNK_SIZE);
            let mut total = 0;
            ListItems::all(snapshot.clone()).lend_while(|object| {
                let bytes = object
                    .encoded(design.format())
                    .expect("encoded when the store was built")
                    .bytes();
                if buf.len() + bytes.len() > DEFAULT_CHUNK_SIZE {
                    total += consume(&buf);
                    buf.clear();
                }
                buf.extend_from_slice(bytes);
                true
            });
            total + consume(&buf)
        }
        _ => unreachable!("each design is run on its own store"),
    }
}

/// The consumer: looks at the bytes (so no copy is optimised away) and lets them go.
fn consume(bytes: &[u8]) -> u64 {
    std::hint::black_box(bytes);
    bytes.len() as u64
}

/// Runs `p.rounds` rounds of `p.concurrent` LISTs of `store`, calling `progress(round)`.
pub fn run(design: Design, store: &Store, p: &Params, progress: &(dyn Fn(u64) + Sync)) -> Outcome {
    let mut walls = Vec::with_capacity(p.rounds);
    let mut outcome = Outcome::default();
    for round in 0..p.rounds.max(1) {
        let barrier = Barrier::new(p.concurrent + 1);
        let base = Counting::reset_peak();
        // Each LIST times itself: the round runs from the first start to the last end (the
        // thread that releases the barrier may well be scheduled after the LISTs are done).
        let runs: Vec<(Instant, Instant, u64)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..p.concurrent)
                .map(|i| {
                    // Named, so a profile can tell the LISTs from the store's construction.
                    std::thread::Builder::new()
                        .name(format!("list-{i}"))
                        .spawn_scoped(s, || {
                            barrier.wait();
                            let start = Instant::now();
                            let bytes = list_once(design, store);
                            (start, Instant::now(), bytes)
                        })
                        .expect("a thread")
                })
                .collect();
            barrier.wait();
            handles.into_iter().map(|h| h.join().expect("a LIST")).collect()
        });
        let first = runs.iter().map(|r| r.0).min().expect("at least one LIST");
        let last = runs.iter().map(|r| r.1).max().expect("at least one LIST");
        walls.push(last - first);
        let bytes: Vec<u64> = runs.iter().map(|r| r.2).collect();
        outcome.peak_extra_heap = outcome.peak_extra_heap.max(Counting::peak() - base);
        outcome.bytes_per_list = bytes[0];
        progress(round as u64 + 1);
    }
    outcome.wall = walls.into_iter().min().unwrap_or_default();
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_designs_produce_the_same_list() {
        let p = Params {
            items: 50,
            item_bytes: 2048,
            concurrent: 1,
            rounds: 1,
        };
        let mut bodies = Vec::new();
        for design in [Design::Streaming, Design::Buffered] {
            let (store, _, encoded) = build_store(design, &p);
            assert!((2048.0..2060.0).contains(&encoded), "{encoded}");
            bodies.push(list_once(design, &store));
        }
        assert_eq!(bodies[0], bodies[1]);
        // The materialised list has the same items; its key order and metadata may differ,
        // so compare sizes loosely.
        let (values, _, _) = build_store(Design::NaiveValue, &p);
        let naive = list_once(Design::NaiveValue, &values);
        assert!(naive.abs_diff(bodies[0]) < 200, "{naive} vs {}", bodies[0]);
        let (store, _, _) = build_store(Design::Memcpy, &p);
        let copied = list_once(Design::Memcpy, &store);
        assert!(copied >= 50 * 2048 && copied < bodies[0]);
        let out = run(Design::Streaming, &store_of(Design::Streaming, &p), &p, &|_| ());
        assert_eq!(out.bytes_per_list, bodies[0]);

        // Protobuf: streaming and buffered bodies are the same size, a little over the items.
        let (store, _, encoded) = build_store(Design::StreamingProtobuf, &p);
        assert!(encoded > 1000.0 && encoded < 2048.0, "{encoded}");
        let streamed = list_once(Design::StreamingProtobuf, &store);
        let (store, _, _) = build_store(Design::BufferedProtobuf, &p);
        assert_eq!(list_once(Design::BufferedProtobuf, &store), streamed);
        let (store, _, _) = build_store(Design::MemcpyProtobuf, &p);
        let copied = list_once(Design::MemcpyProtobuf, &store);
        assert!(
            copied < streamed && streamed - copied < 50 * 4 + 100,
            "{copied} vs {streamed}"
        );
    }

    fn store_of(design: Design, p: &Params) -> Store {
        build_store(design, p).0
    }
}
