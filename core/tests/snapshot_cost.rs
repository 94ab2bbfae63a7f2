//! What a snapshot costs beyond the versions it shares, counted by a global allocator, against
//! the estimate retention bounds history with (`snapshot_step_bytes`): the estimate must not
//! be below the real cost (history would outgrow `history_bytes`), nor far above it (history
//! would be released for nothing).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};

use watchcache_core::{Event, ObjectKey, ObjectVersion, Revision, Snapshot, snapshot_step_bytes};

static LIVE: AtomicIsize = AtomicIsize::new(0);

struct Counting;

// SAFETY: forwards to the system allocator unchanged and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller upholds `alloc`'s contract, which we forward.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn pod(i: usize, revision: u64) -> Arc<ObjectVersion> {
    let key = ObjectKey::new(format!("ns-{}", i % 10), format!("web-{i:06}"));
    Arc::new(
        ObjectVersion::builder(key, Revision::new(revision))
            .field("spec.nodeName", format!("node-{}", i % 100))
            .build(),
    )
}

/// Bytes per snapshot kept, over `steps` insertions and then `steps` changes in place, into
/// a collection of `n` indexed objects.
fn measured(n: usize, steps: usize) -> (usize, usize) {
    let base =
        Snapshot::new(Revision::new(1), (0..n).map(|i| pod(i, 1)).collect()).with_index("spec.nodeName");
    // Made before counting: only the snapshots' own structure is measured.
    let added: Vec<_> = (0..steps).map(|k| pod(n + k, 2)).collect();
    let changed: Vec<_> = (0..steps).map(|k| pod((k * 7919) % n, 3)).collect();
    let mut kept = vec![Arc::new(base)];
    let before = LIVE.load(Ordering::Relaxed);
    for object in &added {
        let next = kept.last().unwrap().apply(&Event::Added {
            object: object.clone(),
        });
        kept.push(Arc::new(next));
    }
    let middle = LIVE.load(Ordering::Relaxed);
    for object in &changed {
        let last = kept.last().unwrap();
        let prev = last.get(object.key()).cloned().unwrap();
        let next = last.apply(&Event::Modified {
            object: object.clone(),
            prev,
        });
        kept.push(Arc::new(next));
    }
    let after = LIVE.load(Ordering::Relaxed);
    (
        ((middle - before) as usize) / steps,
        ((after - middle) as usize) / steps,
    )
}

#[test]
fn the_estimate_bounds_what_a_snapshot_costs_and_stays_near_it() {
    let sizes: &[usize] = if cfg!(miri) {
        &[300]
    } else {
        &[1_000, 10_000, 100_000]
    };
    let steps = if cfg!(miri) { 20 } else { 1_000 };
    for &n in sizes {
        let (insert, update) = measured(n, steps);
        let (insert_est, update_est) = (snapshot_step_bytes(n, true), snapshot_step_bytes(n, false));
        eprintln!(
            "{n} objects: insertion {insert} B (estimate {insert_est}), change {update} B (estimate {update_est})"
        );
        assert!(
            insert <= insert_est,
            "{n}: an insertion costs {insert} B, estimated {insert_est}"
        );
        assert!(
            update <= update_est,
            "{n}: a change costs {update} B, estimated {update_est}"
        );
        assert!(
            insert_est <= 4 * insert.max(1024),
            "{n}: {insert_est} B estimated for {insert}"
        );
        assert!(
            update_est <= 4 * update.max(1024),
            "{n}: {update_est} B estimated for {update}"
        );
    }
}
