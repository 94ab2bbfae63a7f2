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
        pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
    }
}

#[cfg(watchcache_loom)]
pub(crate) mod sync {
    pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};

    pub(crate) mod atomic {
        pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
    }
}

/// Locks a facade mutex. Poisoning is ignored: every critical section in core leaves the
/// protected data consistent before it can panic (they only insert into or drain maps).
pub(crate) fn lock<T>(mutex: &sync::Mutex<T>) -> sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
