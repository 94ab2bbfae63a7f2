//! Bytes per idle watcher, counted by a global allocator: the watcher itself, its wake cell
//! and its entry in the interest index. A watcher has no queue, so the figure must not depend
//! on how many events are in flight. Run with `--nocapture` to see the figures.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::task::{Context, Waker};

use common::pod;
use watchcache_core::{Event, Filter, WatchHub, WatchSpec, Watcher};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const N: usize = if cfg!(miri) { 50 } else { 20_000 };

/// Heap bytes per parked watcher for watchers built by `filter(i)`, including the slot each
/// takes in the Vec that owns them (its `size_of`).
fn bytes_per_idle_watcher(filter: impl Fn(usize) -> Filter) -> f64 {
    let (mut publisher, hub) = WatchHub::builder()
        .capacity(1024)
        .trigger_field("spec.nodeName")
        .build()
        .unwrap();
    // Filters are parsed before counting and kept alive until after: each watcher's own copy
    // (a clone) is counted as the watcher's.
    let filters: Vec<Filter> = (0..N).map(&filter).collect();
    let mut cx = Context::from_waker(Waker::noop());
    let before = LIVE.load(Ordering::SeqCst);
    let mut watchers: Vec<Watcher> = Vec::with_capacity(N);
    for f in &filters {
        let mut w = hub.watch(WatchSpec::new(f.clone())).unwrap();
        assert!(w.poll_next_with(&mut cx, |_| ()).is_pending());
        watchers.push(w);
    }
    assert_eq!(hub.parked(), N);
    let after = LIVE.load(Ordering::SeqCst);
    // Events flowing past idle watchers cost them nothing.
    for rev in 1..=if cfg!(miri) { 20 } else { 5_000 } {
        publisher
            .publish(Event::Added {
                object: pod("elsewhere", "p", rev, "a", "busy"),
            })
            .unwrap();
    }
    let per_watcher = (after - before) as f64 / N as f64;
    drop(filters);
    drop(watchers);
    assert_eq!(hub.parked(), 0);
    per_watcher
}

#[test]
fn an_idle_watcher_costs_well_under_a_kibibyte() {
    let all = bytes_per_idle_watcher(|_| Filter::everything());
    let ns = bytes_per_idle_watcher(|i| Filter::everything().in_namespace(&format!("ns-{}", i % 100)));
    let node =
        bytes_per_idle_watcher(|i| Filter::parse(None, "", &format!("spec.nodeName=node-{i}")).unwrap());
    eprintln!(
        "bytes per idle watcher (size_of::<Watcher>() = {}): unindexed {all:.0}, by namespace {ns:.0}, by node {node:.0}",
        std::mem::size_of::<Watcher>()
    );
    for (what, bytes) in [("unindexed", all), ("by namespace", ns), ("by node", node)] {
        assert!(bytes <= 1024.0, "{what}: {bytes} bytes per idle watcher");
        assert!(
            bytes >= std::mem::size_of::<Watcher>() as f64,
            "{what}: the count includes the watcher itself"
        );
    }
}
