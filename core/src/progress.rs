//! The progress requester: one per cache, it asks the source for a progress notification on
//! the cache's prefix while reads wait for the cache to reach a revision, as the apiserver's
//! conditional progress requester does.
//!
//! However many reads wait, one request is in flight at a time, and another follows every
//! [`RETRY`] while any still waits (a request made while the reflector's watch was down, between
//! a break and its re-watch, reaches no watch and would otherwise be lost). With no read
//! waiting, it sends nothing. On etcd each request is a message on a watch stream or, on
//! versions whose requested notifications may overtake events, at most one small write,
//! shared by every cache of the source; either way its cost no longer grows with the number
//! of waiting reads.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::source::Source;
use crate::store::Store;

/// How often the requester asks again while reads still wait.
pub(crate) const RETRY: Duration = Duration::from_millis(100);

/// The waits a cache's requester serves; shared by the cache's reads and the requester's task.
#[derive(Debug, Default)]
pub(crate) struct Requester {
    /// Reads waiting now. Relaxed: a count; the wake-up is ordered by `Notify`.
    waiting: AtomicUsize,
    wake: Notify,
}

/// A read's registration with the requester: counted while it lives.
#[derive(Debug)]
pub(crate) struct Waiting<'a>(&'a Requester);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An owned registration with the requester (see [`Requester::wait_owned`]).
#[derive(Debug)]
pub(crate) struct OwnedWaiting(Arc<Requester>);

impl Drop for OwnedWaiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Requester {
    /// Registers a read that waits for the cache: the requester asks the source at once if it
    /// was idle, and keeps asking while the registration lives.
    pub(crate) fn wait(&self) -> Waiting<'_> {
        self.register();
        Waiting(self)
    }

    fn register(&self) {
        if self.waiting.fetch_add(1, Ordering::Relaxed) == 0 {
            // A permit is stored if the task is not waiting yet: the wake is never lost.
            self.wake.notify_one();
        }
    }

    /// As [`wait`](Self::wait), for a waiter that is not a future's borrow: a catch-up at the
    /// head of the source's history, whose hand-over waits for a revision its prefix has had
    /// no change at (a progress notification moves it there).
    pub(crate) fn wait_owned(self: &Arc<Self>) -> OwnedWaiting {
        self.register();
        OwnedWaiting(Arc::clone(self))
    }

    /// Runs the requester for the cache of `prefix` until the task is aborted.
    pub(crate) async fn run<S: Source>(self: Arc<Self>, source: Arc<S>, prefix: String, store: Arc<Store>) {
        loop {
            while self.waiting.load(Ordering::Relaxed) == 0 {
                self.wake.notified().await;
            }
            // A failed request only means the next one, or a write, brings the revision.
            let _ = source.request_progress(&prefix).await;
            store.stats.progress_requests.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(RETRY).await;
        }
    }
}
