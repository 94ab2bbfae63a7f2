//! The ring's hot paths: publish cost per event (with and without parked watchers that the
//! event does not concern, and with awake selective watchers it is for, including the epoch
//! reclamation of the evicted event), a pinned
//! cursor read, the lap check, the start search, and an epoch pin.

use std::cell::Cell;
use std::hint::black_box;
use std::sync::Arc;
use std::task::{Context, Waker};

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use watchcache_core::{
    Event, EventRing, Filter, ObjectKey, ObjectVersion, Read, Revision, Seq, WatchHub, WatchSpec, Watcher,
};

fn pod(rev: u64, node: &str) -> Arc<ObjectVersion> {
    Arc::new(
        ObjectVersion::builder(
            ObjectKey::new("default", format!("p{}", rev % 1000)),
            Revision::new(rev),
        )
        .field("spec.nodeName", node)
        .build(),
    )
}

fn publish(c: &mut Criterion) {
    let mut group = c.benchmark_group("publish");
    group.throughput(Throughput::Elements(1));
    for parked in [0usize, 1_000, 10_000] {
        group.bench_with_input(
            BenchmarkId::new("parked_elsewhere", parked),
            &parked,
            |b, &parked| {
                let (mut publisher, hub) = WatchHub::builder()
                    .capacity(4096)
                    .trigger_field("spec.nodeName")
                    .build()
                    .unwrap();
                // Watchers of other nodes, parked: an event on node-x must not cost O(them).
                let mut cx = Context::from_waker(Waker::noop());
                let mut watchers: Vec<Watcher> = (0..parked)
                    .map(|i| {
                        let f = Filter::parse(None, "", &format!("spec.nodeName=n{i}")).unwrap();
                        let mut w = hub.watch(WatchSpec::new(f)).unwrap();
                        assert!(w.poll_next_with(&mut cx, |_| ()).is_pending());
                        w
                    })
                    .collect();
                // Objects are built in the untimed setup: the figure is the publish alone
                // (ring push, epoch reclamation of the evicted event, index lookup, wake-ups).
                let rev = Cell::new(0u64);
                b.iter_batched(
                    || {
                        rev.set(rev.get() + 1);
                        Event::Added {
                            object: pod(rev.get(), "node-x"),
                        }
                    },
                    |event| publisher.publish(event).unwrap(),
                    BatchSize::SmallInput,
                );
                assert_eq!(hub.parked(), parked);
                watchers.clear();
            },
        );
    }
    // Selective watchers that are awake (reading, not parked): each event is for one of them,
    // in turn, so the writer looks up its bucket and links the event into its chain. The cost
    // must not grow with the number of watchers.
    for awake in [0usize, 1_000, 10_000] {
        group.bench_with_input(BenchmarkId::new("selective_awake", awake), &awake, |b, &awake| {
            let (mut publisher, hub) = WatchHub::builder()
                .capacity(4096)
                .trigger_field("spec.nodeName")
                .build()
                .unwrap();
            let nodes: Vec<String> = (0..awake.max(1)).map(|i| format!("n{i}")).collect();
            let watchers: Vec<Watcher> = (0..awake)
                .map(|i| {
                    let f = Filter::parse(None, "", &format!("spec.nodeName={}", nodes[i])).unwrap();
                    hub.watch(WatchSpec::new(f)).unwrap()
                })
                .collect();
            let rev = Cell::new(0u64);
            b.iter_batched(
                || {
                    rev.set(rev.get() + 1);
                    let node = &nodes[rev.get() as usize % nodes.len()];
                    Event::Added {
                        object: pod(rev.get(), node),
                    }
                },
                |event| publisher.publish(event).unwrap(),
                BatchSize::SmallInput,
            );
            assert_eq!(hub.parked(), 0);
            drop(watchers);
        });
    }
    group.finish();
}

fn ring_ops(c: &mut Criterion) {
    let mut group = c.benchmark_group("ring");
    let (ring, mut w) = EventRing::new(4096, Revision::ZERO).unwrap();
    for i in 1..=10_000u64 {
        w.push(Revision::new(i), i).unwrap();
    }
    let rev = Cell::new(10_000u64);
    group.bench_function("push_u64", |b| {
        b.iter(|| {
            rev.set(rev.get() + 1);
            w.push(Revision::new(rev.get()), rev.get()).unwrap()
        })
    });
    group.bench_function("pin", |b| b.iter(|| black_box(crossbeam_epoch::pin())));
    group.bench_function("read_pinned", |b| {
        let guard = crossbeam_epoch::pin();
        let tail = ring.tail().get();
        let mut seq = tail - 1000;
        b.iter(|| {
            seq = if seq + 1 >= tail { tail - 1000 } else { seq + 1 };
            match ring.read(Seq::new(seq), &guard) {
                Read::Ready(e) => *e.value(),
                _ => 0,
            }
        })
    });
    group.bench_function("lap_check", |b| {
        let guard = crossbeam_epoch::pin();
        b.iter(|| matches!(ring.read(black_box(Seq::ZERO), &guard), Read::Lapped))
    });
    group.bench_function("seq_after", |b| {
        let guard = crossbeam_epoch::pin();
        let head = ring.head_revision().get();
        let mut r = 0;
        b.iter(|| {
            r = (r + 7) % 4000;
            ring.seq_after(Revision::new(head - r), &guard).unwrap()
        })
    });
    group.finish();
}

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

criterion_group!(benches, publish, ring_ops);
criterion_main!(benches);
