//! One LIST of the whole collection by each design (streaming, buffered, a materialised
//! `Value` list, and the memcpy reference), for 1,000 and 50,000 items of 4 KiB. Throughput in
//! body bytes. Memory is the scenario runner's job (`watchcache-bench list`), in separate
//! processes.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use watchcache_bench::list::{self, Design, Params};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn lists(c: &mut Criterion) {
    let mut group = c.benchmark_group("list");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    for items in [1_000usize, 50_000] {
        let p = Params {
            items,
            item_bytes: 4096,
            concurrent: 1,
            rounds: 1,
        };
        for design in Design::ALL {
            let (store, _, _) = list::build_store(design, &p);
            let bytes = list::list_once(design, &store);
            group.throughput(Throughput::Bytes(bytes));
            group.bench_function(BenchmarkId::new(design.name(), items), |b| {
                b.iter(|| list::list_once(design, &store))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, lists);
criterion_main!(benches);
