//! Fan-out by each design (ring, naive_copy, naive_shared, tokio_broadcast) to 1, 100, 1,000
//! and 10,000 watchers of 1, 4 and 16 KiB objects, each watcher copying every frame into its
//! own output buffer. One iteration is one event delivered to every watcher; throughput is in
//! deliveries. Setting up the watchers is not timed. The scenario runner
//! (`watchcache-bench fanout`) adds latency and memory, in separate processes.

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use watchcache_bench::fanout::{self, Design, Params};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn fanouts(c: &mut Criterion) {
    for kib in [1usize, 4, 16] {
        let mut group = c.benchmark_group(format!("fanout_{kib}KiB"));
        // Flat sampling: an iteration of naive_copy at 10,000 watchers takes a good fraction
        // of a second, and linear sampling would run 55 of them per sample set.
        group
            .sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(4));
        for watchers in [1usize, 100, 1_000, 10_000] {
            group.throughput(Throughput::Elements(watchers as u64));
            for design in Design::ALL {
                group.bench_function(BenchmarkId::new(design.name(), watchers), |b| {
                    b.iter_custom(|iters| {
                        // One event per iteration; building the runtime and the watchers
                        // is outside the time returned (first publish to last receipt).
                        let events = iters.max(1) as usize;
                        let p = Params::new(watchers, events, kib * 1024);
                        let started = Instant::now();
                        let out = fanout::run(design, &p, &|_| ());
                        assert_eq!(out.lapped, 0);
                        assert_eq!(out.deliveries, (watchers * events) as u64);
                        out.elapsed.min(started.elapsed())
                    })
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, fanouts);
criterion_main!(benches);
