//! What history a cache keeps, and for how long: the reflector's bookkeeping of the ring's
//! entries, bounded by count, by age and by bytes.
//!
//! The version an event replaced or deleted (its `prev`) is what history alone keeps alive:
//! its ring entry holds it. Those are the bytes counted. Ring entries are kept up to the ring's
//! capacity (it overwrites the oldest), released early once older than the freshness window
//! beyond the newest `retain_min_events`, and released from the oldest whenever their bytes
//! exceed `history_bytes`.
//!
//! Snapshots are not history: the cache keeps only the current one, and the state at an older
//! revision of the window is made on demand from it and the ring (see `store.rs`); the
//! snapshots paginated LISTs read are pinned while they are used, for `snapshot_retention`
//! after their last page.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::CacheConfig;
use crate::ring::Seq;

/// One published event's record.
#[derive(Copy, Clone, Debug)]
struct Step {
    at: Instant,
    seq: Seq,
    /// Bytes of the version the event superseded (0 for additions).
    bytes: usize,
}

/// The reflector's bookkeeping; see the module docs.
#[derive(Debug)]
pub(crate) struct Retention {
    capacity: usize,
    retain_min_events: usize,
    fresh_window: Duration,
    history_bytes: usize,
    /// The events whose ring entries are held, oldest first.
    ring: VecDeque<Step>,
    ring_bytes: usize,
}

impl Retention {
    pub(crate) fn new(config: &CacheConfig) -> Self {
        Retention {
            capacity: config.capacity,
            retain_min_events: config.retain_min_events,
            fresh_window: config.fresh_window,
            history_bytes: config.history_bytes,
            ring: VecDeque::new(),
            ring_bytes: 0,
        }
    }

    /// A new generation: nothing is held.
    pub(crate) fn clear(&mut self) {
        self.ring.clear();
        self.ring_bytes = 0;
    }

    /// The bytes history holds now.
    pub(crate) fn bytes(&self) -> usize {
        self.ring_bytes
    }

    /// Records an event published at `seq`, which superseded a version of `bytes` bytes.
    pub(crate) fn published(&mut self, at: Instant, seq: Seq, bytes: usize) {
        let step = Step { at, seq, bytes };
        self.ring.push_back(step);
        self.ring_bytes += step.bytes;
        if self.ring.len() > self.capacity {
            // The ring overwrote its oldest entry.
            self.pop_ring();
        }
    }

    fn pop_ring(&mut self) -> Option<Step> {
        let step = self.ring.pop_front()?;
        self.ring_bytes -= step.bytes;
        Some(step)
    }

    /// The sequence number below which the ring's entries are to be released at `now`, if any.
    pub(crate) fn release(&mut self, now: Instant) -> Option<Seq> {
        let mut ring_below = None;
        let fresh_after = now.checked_sub(self.fresh_window);
        while let Some(front) = self.ring.front() {
            let over_bytes = self.ring_bytes > self.history_bytes;
            let stale = self.ring.len() > self.retain_min_events && fresh_after.is_some_and(|t| front.at < t);
            if !(over_bytes || stale) {
                break;
            }
            ring_below = self.pop_ring().map(|s| s.seq.next());
        }
        ring_below
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retention(capacity: usize, min: usize, fresh: u64, bytes: usize) -> Retention {
        let mut c = CacheConfig::new("pods", "pods/");
        c.capacity = capacity;
        c.retain_min_events = min;
        c.fresh_window = Duration::from_secs(fresh);
        c.history_bytes = bytes;
        Retention::new(&c)
    }

    #[test]
    fn bytes_bound_the_ring_whatever_its_age() {
        let t0 = Instant::now();
        let mut r = retention(64, 4, 3600, 3 * 300 + 100);
        for i in 0..10 {
            r.published(t0, Seq::new(i), 300);
        }
        // 3 entries fit: the ring keeps the last 3 (entries 7, 8, 9).
        assert_eq!(r.release(t0), Some(Seq::new(7)));
        assert_eq!(r.bytes(), 3 * 300);
    }

    #[test]
    fn the_capacity_bounds_what_is_counted() {
        let t0 = Instant::now();
        let mut r = retention(4, 1, 3600, usize::MAX);
        for i in 0..10 {
            r.published(t0, Seq::new(i), 10);
        }
        assert_eq!(r.release(t0), None, "the ring overwrote the rest itself");
        assert_eq!(r.bytes(), 4 * 10);
    }

    #[test]
    fn stale_entries_go_beyond_the_lower_bound() {
        let t0 = Instant::now();
        let mut r = retention(64, 2, 75, usize::MAX);
        for i in 0..5 {
            r.published(t0, Seq::new(i), 1);
        }
        assert_eq!(r.release(t0 + Duration::from_secs(10)), None);
        assert_eq!(r.release(t0 + Duration::from_secs(90)), Some(Seq::new(3)));
    }
}
