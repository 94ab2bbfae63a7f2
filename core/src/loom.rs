//! The concurrency facade: every atomic, `Arc` and `Mutex` in core comes from here.
//!
//! With `--cfg watchcache_loom` (and `--cfg crossbeam_loom`, which switches crossbeam-epoch
//! to loom too) these are loom's model-checked types; otherwise they are std's. The cfg is
//! namespaced on purpose: a bare `--cfg loom` would also change tokio, which does not support
//! being built that way (the same reason crossbeam uses `crossbeam_loom`).

#[cfg(not(watchcache_loom))]
pub(crate) mod sync {
    pub(crate) use std::sync::{Arc, Mutex, MutexGuard};

    pub(crate) mod atomic {
        pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    }
}

#[cfg(watchcache_loom)]
pub(crate) mod sync {
    pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};

    pub(crate) mod atomic {
        pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    }
}

/// Where a task leaves its waker for another thread to wake: `futures`' lock-free
/// `AtomicWaker` (a register is one compare-and-swap, a wake one swap), or under loom a mutex
/// with the same contract, whose interleavings loom can explore. A wake takes the waker: the
/// task registers again on its next `Pending`.
#[cfg(not(watchcache_loom))]
pub(crate) use futures_util::task::AtomicWaker as WakerSlot;

/// See the non-loom `WakerSlot`.
#[cfg(watchcache_loom)]
#[derive(Debug, Default)]
pub(crate) struct WakerSlot(sync::Mutex<Option<std::task::Waker>>);

#[cfg(watchcache_loom)]
impl WakerSlot {
    pub(crate) fn new() -> Self {
        WakerSlot(sync::Mutex::new(None))
    }

    pub(crate) fn register(&self, waker: &std::task::Waker) {
        let mut slot = lock(&self.0);
        match &mut *slot {
            Some(w) if w.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
    }

    pub(crate) fn wake(&self) {
        let waker = lock(&self.0).take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// Locks a facade mutex, ignoring poison (see [`unpoisoned`]).
pub(crate) fn lock<T>(mutex: &sync::Mutex<T>) -> sync::MutexGuard<'_, T> {
    unpoisoned(mutex.lock())
}

/// The guard of a lock result, poisoned or not: core's one policy on poisoning, for the facade
/// mutexes and std's alike (loom's `lock` returns std's `LockResult` too). Every critical
/// section in core leaves the protected data consistent before anything in it can panic (they
/// insert into, remove from or drain collections), so a panic elsewhere in the holding thread
/// leaves nothing half-done to hide.
pub(crate) fn unpoisoned<G>(result: std::sync::LockResult<G>) -> G {
    result.unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Orderings the loom models weaken on purpose (see the `loom-weaken-*` features), so that a
/// model can show it catches the bug the real ordering prevents. Outside loom builds with
/// those features they are the real orderings.
pub(crate) mod weaken {
    use super::sync::atomic::Ordering;

    /// The ring's tail store in `RingWriter::push`.
    pub(crate) const TAIL_STORE: Ordering =
        if cfg!(all(watchcache_loom, feature = "loom-weaken-tail-relaxed")) {
            Ordering::Relaxed
        } else {
            Ordering::Release
        };

    /// The trim bound's store in `RingWriter::trim`.
    pub(crate) const TRIM_STORE: Ordering =
        if cfg!(all(watchcache_loom, feature = "loom-weaken-trim-relaxed")) {
            Ordering::Relaxed
        } else {
            Ordering::Release
        };

    /// Whether a parking watcher re-checks the tail after filing itself.
    pub(crate) const RECHECK_AFTER_PARK: bool =
        !cfg!(all(watchcache_loom, feature = "loom-weaken-no-recheck"));

    /// Whether a watcher parking at the end of its bucket's chain re-checks the link after
    /// filing itself.
    pub(crate) const RECHECK_LINK_AFTER_PARK: bool =
        !cfg!(all(watchcache_loom, feature = "loom-weaken-no-link-recheck"));

    /// Whether a watcher reads the hub's progress before checking it is idle when it emits a
    /// bookmark (after, a bookmark can overtake an event below its revision).
    pub(crate) const PROGRESS_BEFORE_IDLE_CHECK: bool = !cfg!(all(
        watchcache_loom,
        feature = "loom-weaken-bookmark-progress-late"
    ));

    /// Whether the hub commits a revision's entries to the ring together (else one by one,
    /// and a watcher can see part of a revision).
    pub(crate) const COMMIT_REVISION_WHOLE: bool =
        !cfg!(all(watchcache_loom, feature = "loom-weaken-commit-each"));

    /// Whether a watcher with nothing to read is filed in its bucket when it starts (else only
    /// at its first poll, and traffic it would filter out can lap it before).
    pub(crate) const PARK_AT_START: bool =
        !cfg!(all(watchcache_loom, feature = "loom-weaken-no-park-at-start"));

    /// Whether a lapped watcher resumes when the window still holds everything it needs
    /// (else every lap is a 410).
    pub(crate) const RESUME_AFTER_HARMLESS_LAP: bool =
        !cfg!(all(watchcache_loom, feature = "loom-weaken-no-lap-resume"));

    /// Whether a catch-up hands over with a watch after the revision it delivered up to
    /// (else, when the hub's revision looked no newer, with a watch from now, which misses
    /// what the writer publishes in between).
    pub(crate) const HANDOVER_AFTER_POSITION: bool =
        !cfg!(all(watchcache_loom, feature = "loom-weaken-handover-now"));

    /// Whether `EventRing::len` reads the tail once (it read it twice, and underflowed when the
    /// writer trimmed in between).
    pub(crate) const LEN_ONE_TAIL_LOAD: bool =
        !cfg!(all(watchcache_loom, feature = "loom-weaken-len-two-loads"));
}
