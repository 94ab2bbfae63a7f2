//! The interest index: parked watchers, filed by what they can possibly match, so that an
//! event wakes only the watchers that may care.
//!
//! This is the apiserver's watcher indexing (`cacher.go` keeps `valueWatchers` per index
//! value, e.g. pods by `spec.nodeName`) adapted to parked cursors. A watcher is filed under
//! exactly one [`Interest`]: the value its field selector requires for the hub's trigger
//! field, else the namespace it is restricted to, else "all". For an event the writer drains
//! the buckets of the object's namespace, of the trigger values of its new and previous
//! versions, and "all"; a bookmark drains everything.
//!
//! Draining stamps each parked watcher's wake cell with the sequence number of the event
//! that woke it. A watcher that had verified, after parking, that nothing was pending knows
//! that every event between its cursor and that stamp passed through this index without
//! touching its bucket, so it resumes at the stamp: an idle watcher is not lapped by traffic
//! it would have filtered out anyway.

use std::collections::HashMap;
use std::task::Waker;

use crate::loom::sync::Arc;
use crate::loom::sync::atomic::{AtomicU64, Ordering};
use crate::ring::Seq;

/// The wake cell value of a watcher that has not been woken since it parked. A wake cell
/// otherwise holds a [`Seq`], raw.
pub(crate) const NOT_WOKEN: u64 = u64::MAX;

/// Where a watcher is filed while parked.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Interest {
    /// Only objects whose trigger field has this value (in the new or previous version).
    Trigger(Box<str>),
    /// Only objects in this namespace.
    Namespace(Box<str>),
    /// Anything.
    All,
}

#[derive(Debug)]
struct Parked {
    waker: Waker,
    wake_at: Arc<AtomicU64>,
}

type Bucket = HashMap<u64, Parked>;

/// Parked watchers by interest. Lives behind the hub's mutex.
#[derive(Debug, Default)]
pub(crate) struct Index {
    by_trigger: HashMap<Box<str>, Bucket>,
    by_namespace: HashMap<Box<str>, Bucket>,
    all: Bucket,
    parked: usize,
}

impl Index {
    fn bucket(&mut self, interest: &Interest) -> Option<&mut Bucket> {
        match interest {
            Interest::Trigger(v) => self.by_trigger.get_mut(v),
            Interest::Namespace(ns) => self.by_namespace.get_mut(ns),
            Interest::All => Some(&mut self.all),
        }
    }

    /// Files watcher `id`, or replaces its waker if it is already filed.
    pub(crate) fn park(&mut self, id: u64, interest: &Interest, waker: &Waker, wake_at: &Arc<AtomicU64>) {
        let bucket = match interest {
            Interest::Trigger(v) => self.by_trigger.entry(v.clone()).or_default(),
            Interest::Namespace(ns) => self.by_namespace.entry(ns.clone()).or_default(),
            Interest::All => &mut self.all,
        };
        let parked = Parked {
            waker: waker.clone(),
            wake_at: Arc::clone(wake_at),
        };
        if bucket.insert(id, parked).is_none() {
            self.parked += 1;
        }
    }

    /// Replaces the waker of watcher `id` if it is still filed; false once it was drained.
    pub(crate) fn refresh(&mut self, id: u64, interest: &Interest, waker: &Waker) -> bool {
        match self.bucket(interest).and_then(|b| b.get_mut(&id)) {
            Some(p) => {
                if !p.waker.will_wake(waker) {
                    p.waker = waker.clone();
                }
                true
            }
            None => false,
        }
    }

    /// Removes watcher `id` if it is still filed; false once it was drained.
    pub(crate) fn unpark(&mut self, id: u64, interest: &Interest) -> bool {
        let removed = self.bucket(interest).and_then(|b| b.remove(&id)).is_some();
        if removed {
            self.parked -= 1;
            // Drop emptied buckets so the index holds only parked watchers.
            match interest {
                Interest::Trigger(v) if self.by_trigger.get(v).is_some_and(HashMap::is_empty) => {
                    self.by_trigger.remove(v);
                }
                Interest::Namespace(ns) if self.by_namespace.get(ns).is_some_and(HashMap::is_empty) => {
                    self.by_namespace.remove(ns);
                }
                _ => {}
            }
        }
        removed
    }

    /// The number of parked watchers.
    pub(crate) fn parked(&self) -> usize {
        self.parked
    }

    fn drain(parked: &mut usize, bucket: Bucket, seq: Seq, wakers: &mut Vec<Waker>) {
        *parked -= bucket.len();
        for (_, p) in bucket {
            // Release pairs with the Acquire load in `Watcher::take_wake`: the watcher that
            // sees the stamp sees everything the writer did before waking it (the stamp is
            // stored under the index lock, which orders it after the event's publication).
            p.wake_at.store(seq.get(), Ordering::Release);
            wakers.push(p.waker);
        }
    }

    /// Drains the watchers an object event at `seq` may concern: those filed under
    /// `namespace`, under one of `triggers`, or under "all". Their wakers go to `wakers`.
    pub(crate) fn drain_for(
        &mut self,
        seq: Seq,
        namespace: &str,
        triggers: [Option<&str>; 2],
        wakers: &mut Vec<Waker>,
    ) {
        if self.parked == 0 {
            return;
        }
        if let Some(b) = self.by_namespace.remove(namespace) {
            Self::drain(&mut self.parked, b, seq, wakers);
        }
        for t in triggers.into_iter().flatten() {
            if let Some(b) = self.by_trigger.remove(t) {
                Self::drain(&mut self.parked, b, seq, wakers);
            }
        }
        let all = std::mem::take(&mut self.all);
        Self::drain(&mut self.parked, all, seq, wakers);
    }

    /// Drains every parked watcher (for a bookmark at `seq`).
    pub(crate) fn drain_all(&mut self, seq: Seq, wakers: &mut Vec<Waker>) {
        if self.parked == 0 {
            return;
        }
        for (_, b) in std::mem::take(&mut self.by_trigger) {
            Self::drain(&mut self.parked, b, seq, wakers);
        }
        for (_, b) in std::mem::take(&mut self.by_namespace) {
            Self::drain(&mut self.parked, b, seq, wakers);
        }
        let all = std::mem::take(&mut self.all);
        Self::drain(&mut self.parked, all, seq, wakers);
    }
}
