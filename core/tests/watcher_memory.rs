//! Bytes per idle watcher, counted by a global allocator: the watcher itself, its wake cell
//! and its entry in its bucket. A watcher has no queue, so the figure must not depend on how
//! many events are in flight. And allocations on the hot path: none per delivery or per park
//! once warm. Run with `--nocapture` to see the figures.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::task::{Context, Waker};

use common::pod;
use watchcache_core::{Event, Filter, WatchHub, WatchSpec, Watcher};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
/// Allocations made by the thread that set `COUNTING` (the test's own), while it is set.
static ALLOCS: AtomicIsize = AtomicIsize::new(0);

/// The tests of this file measure the process's allocations: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

thread_local! {
    static COUNTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

// SAFETY: forwards to the system allocator unchanged and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        if COUNTING.with(|c| c.get()) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
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
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
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

/// Counts the allocations `f` makes on this thread.
fn allocations<R>(f: impl FnOnce() -> R) -> (R, isize) {
    let before = ALLOCS.load(Ordering::Relaxed);
    COUNTING.with(|c| c.set(true));
    let out = f();
    COUNTING.with(|c| c.set(false));
    (out, ALLOCS.load(Ordering::Relaxed) - before)
}

#[test]
fn a_steady_state_delivery_or_park_allocates_nothing() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (mut publisher, hub) = WatchHub::builder()
        .capacity(256)
        .trigger_field("spec.nodeName")
        .build()
        .unwrap();
    let filters = [
        Filter::everything(),
        Filter::everything().in_namespace("ns"),
        Filter::parse(None, "", "spec.nodeName=n1").unwrap(),
        Filter::parse(None, "", "spec.nodeName=n2").unwrap(),
        Filter::parse(None, "", "metadata.name=p3").unwrap(),
        Filter::parse(None, "app=web", "").unwrap(),
    ];
    let mut watchers: Vec<Watcher> = filters
        .iter()
        .map(|f| hub.watch(WatchSpec::new(f.clone())).unwrap())
        .collect();
    // A real (reference-counted) waker: storing it clones it, which must not allocate either.
    let waker = std::task::Waker::from(std::sync::Arc::new(common::CountingWaker::default()));
    let mut cx = Context::from_waker(&waker);
    let rounds = if cfg!(miri) { 40 } else { 3_000 };
    let warm = rounds / 4;
    let events: Vec<Event> = (1..=rounds as u64)
        .map(|rev| Event::Added {
            object: pod(
                "ns",
                &format!("p{}", rev % 5),
                rev,
                "web",
                &format!("n{}", rev % 3),
            ),
        })
        .collect();
    let (mut deliveries, mut parks, mut allocs) = (0usize, 0usize, 0isize);
    for (i, event) in events.into_iter().enumerate() {
        publisher.publish(event).unwrap();
        // Reading to the end and parking again, per watcher: counted after a warm-up in which
        // every bucket's list and the epoch's thread state reached their working size.
        let ((d, p), n) = allocations(|| {
            let (mut d, mut p) = (0, 0);
            for w in &mut watchers {
                loop {
                    match w.poll_next_with(&mut cx, |d| d.revision) {
                        std::task::Poll::Ready(Some(Ok(_))) => d += 1,
                        std::task::Poll::Ready(other) => panic!("{other:?}"),
                        std::task::Poll::Pending => {
                            p += 1;
                            break;
                        }
                    }
                }
            }
            (d, p)
        });
        if i >= warm {
            deliveries += d;
            parks += p;
            allocs += n;
        }
    }
    eprintln!("{deliveries} deliveries and {parks} parks: {allocs} allocations");
    assert!(deliveries > (rounds - warm) && parks >= watchers.len() * (rounds - warm));
    assert_eq!(allocs, 0, "allocations on the delivery and park path");
}
