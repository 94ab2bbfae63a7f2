//! One LIST of the whole collection by each design (streaming, buffered, a materialised
//! `Value` list, and the memcpy reference), for 1,000 and 50,000 items of 4 KiB. Throughput in
//! body bytes. Memory is the scenario runner's job (`watchcache-bench list`), in separate
//! processes.
//!
//! And a filtered LIST, one node's pods among 150,000 (1,500 of them), through the cache with
//! its trigger-field index and without it: the indexed one looks at the node's pods only.

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

fn list_by_node(c: &mut Criterion) {
    use std::sync::Arc;
    use watchcache_bench::objects;
    use watchcache_core::{Cache, CacheConfig, Filter, ListOptions, MemorySource};

    let mut group = c.benchmark_group("list_by_node");
    group.sample_size(20).measurement_time(Duration::from_secs(5));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let source = MemorySource::new();
    let maker = objects::PodMaker::new(objects::MIN_POD_BYTES);
    for i in 0..150_000 {
        source
            .create(&format!("pods/ns-{}/web-{i:06}", i % 10), maker.make(i).into())
            .expect("a new key");
    }
    for (name, trigger) in [("indexed", Some("spec.nodeName")), ("unindexed", None)] {
        let mut config = CacheConfig::new("pods", "pods/");
        config.fields = vec!["spec.nodeName".into()];
        config.trigger_field = trigger.map(Into::into);
        let cache = rt.block_on(async {
            let cache = Cache::new(source.clone(), objects::codec(), config).expect("a cache");
            while !cache.is_ready() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            cache
        });
        let opts = ListOptions {
            resource_version: Some(watchcache_core::Revision::ZERO),
            filter: Filter::parse(None, "", "spec.nodeName=node-42").expect("a selector"),
            ..ListOptions::default()
        };
        let list =
            |cache: &Cache<MemorySource>| rt.block_on(cache.list(&opts)).expect("a list").items.count();
        assert_eq!(list(&cache), 1500);
        group.throughput(Throughput::Elements(1500));
        group.bench_function(BenchmarkId::new(name, 150_000), |b| b.iter(|| list(&cache)));
        drop(Arc::new(cache));
    }
    group.finish();
}

criterion_group!(benches, lists, list_by_node);
criterion_main!(benches);
