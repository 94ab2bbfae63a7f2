//! Peak extra heap of one LIST of 50,000 items of about 4 KiB, counted by a global allocator:
//! the streaming encoder stays under 1 MiB, the buffered one needs at least the body.
//! Bytes, never time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use watchcache_core::{Encoding, ListItems, ObjectKey, ObjectVersion, Revision, Snapshot, WireFormat};
use watchcache_encoders::{
    DEFAULT_CHUNK_SIZE, JsonCodec, ListHeader, ResourceInfo, StreamingList, encode_list,
};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const ITEMS: usize = if cfg!(miri) { 100 } else { 50_000 };
const ITEM_BYTES: usize = 4096;

/// Items built directly with their JSON bytes (no parsing: the property is the encoder's).
fn snapshot() -> Arc<Snapshot> {
    let objects = (0..ITEMS)
        .map(|i| {
            let name = format!("pod-{i:06}");
            let head = format!(r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"1"}},"pad":""#);
            let mut json = head.into_bytes();
            json.resize(ITEM_BYTES - 2, b'x');
            json.extend_from_slice(b"\"}");
            let bytes = Bytes::from(json);
            Arc::new(
                ObjectVersion::builder(ObjectKey::new("ns", name), Revision::new(1))
                    .encoding(WireFormat::Json, Encoding::new(bytes))
                    .build(),
            )
        })
        .collect();
    Arc::new(Snapshot::new(Revision::new(1), objects))
}

/// Runs `f` and returns its peak heap above what was live when it started.
fn peak_extra(f: impl FnOnce() -> usize) -> (usize, usize) {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let out = f();
    (PEAK.load(Ordering::SeqCst) - base, out)
}

#[test]
fn streaming_a_large_list_keeps_extra_heap_flat_while_buffering_needs_the_body() {
    let snapshot = snapshot();
    let info = ResourceInfo::new("pods", "Pod", "v1");
    let codec: Arc<JsonCodec> = Arc::new(JsonCodec::new(true, &[]));
    let header = ListHeader {
        revision: Revision::new(1),
        ..Default::default()
    };

    let (streaming_peak, streamed) = peak_extra(|| {
        let mut body = StreamingList::new(
            &info,
            &header,
            ListItems::all(snapshot.clone()),
            codec.clone(),
            DEFAULT_CHUNK_SIZE,
        );
        let mut total = 0;
        // A discarding consumer: each chunk is dropped before the next is asked for.
        while let Some(chunk) = body.next_chunk() {
            total += chunk.unwrap().len();
        }
        total
    });
    let (buffered_peak, buffered) = peak_extra(|| {
        encode_list(&info, &header, ListItems::all(snapshot.clone()), &*codec)
            .unwrap()
            .len()
    });
    eprintln!(
        "LIST of {ITEMS} items, {streamed} bytes: streaming peak extra heap {streaming_peak} B, buffered {buffered_peak} B ({:.0}x)",
        buffered_peak as f64 / streaming_peak.max(1) as f64
    );
    assert_eq!(streamed, buffered);
    assert!(streamed >= ITEMS * ITEM_BYTES);
    assert!(streaming_peak < 1024 * 1024, "streaming peak {streaming_peak} B");
    assert!(
        buffered_peak >= buffered,
        "buffered peak {buffered_peak} B below its body of {buffered} B"
    );
}
