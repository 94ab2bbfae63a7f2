//! Loom models of watchcache's lock-free protocols; the models are the integration tests of
//! this crate and exist only under `--cfg watchcache_loom --cfg crossbeam_loom` (README.md).
//! Without those cfgs this crate is empty.

/// Runs `f` under `loom::model`, counting the interleavings explored, and prints the count and
/// the time taken (the figures in README.md).
#[cfg(watchcache_loom)]
pub fn model<F>(name: &str, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let start = std::time::Instant::now();
    loom::model(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        f();
    });
    eprintln!(
        "model {name}: {} interleavings in {:.2} s",
        runs.load(Ordering::Relaxed),
        start.elapsed().as_secs_f64()
    );
}
