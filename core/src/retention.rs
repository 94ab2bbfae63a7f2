//! What history a cache keeps, and for how long: the reflector's bookkeeping of the ring's
//! entries and of the snapshots, bounded by count, by age and by bytes.
//!
//! Every published event is one ring entry and one new snapshot. The version an event
//! replaced or deleted (its `prev`) is what history alone keeps alive: the entry holds it, and
//! so does the snapshot before the event. Those are the bytes counted.
//!
//! * **Ring entries** are kept up to the ring's capacity (it overwrites the oldest), released
//!   early once older than the freshness window beyond the newest `retain_min_events`, and
//!   released from the oldest whenever their bytes exceed `history_bytes`.
//! * **Snapshots** are kept for every retained entry plus the one the oldest entry applies to
//!   (so Exact reads and watches share the window), and beyond that for `snapshot_retention`
//!   after the event that superseded them (so a paginated LIST's snapshot outlives a burst
//!   of writes), within `history_bytes`.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::CacheConfig;
use crate::ring::Seq;

/// What one snapshot costs beyond the versions it keeps alive: the nodes its change copied in
/// the persistent vector of items and in the field index. Counted so that a high rate of
/// changes cannot keep an unbounded number of snapshots for their retention period.
///
/// A change in place copies one path: 4–6 KB at 10,000 to 100,000 objects. An insertion or a
/// removal splits and joins the vector (imbl's RRB tree), and copies far more, growing with
/// the collection: 38 KB at 10,000 objects and 79 KB at 100,000
/// (`core/tests/snapshot_cost.rs` measures it and checks this estimate bounds it). The
/// estimate: 6 KiB in place; 9 KiB per doubling of the collection beyond 128 objects (at
/// least 9 KiB) for an insertion or a removal.
#[doc(hidden)]
pub fn snapshot_step_bytes(len: usize, structural: bool) -> usize {
    if !structural {
        return 6 << 10;
    }
    let doublings = (usize::BITS - len.max(1).leading_zeros()) as usize;
    (9 << 10) * doublings.saturating_sub(7).max(1)
}

/// One published event's record.
#[derive(Copy, Clone, Debug)]
struct Step {
    at: Instant,
    seq: Seq,
    /// Bytes of the version the event superseded (0 for additions and bookmarks).
    bytes: usize,
}

/// The reflector's bookkeeping; see the module docs.
#[derive(Debug)]
pub(crate) struct Retention {
    capacity: usize,
    retain_min_events: usize,
    fresh_window: Duration,
    snapshot_retention: Duration,
    history_bytes: usize,
    /// The events whose ring entries are held, oldest first.
    ring: VecDeque<Step>,
    ring_bytes: usize,
    /// One per snapshot after the oldest, oldest first: the event that made it.
    snapshots: VecDeque<Step>,
    snapshot_bytes: usize,
}

/// What to release.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Release {
    /// Release the ring's entries below this sequence number.
    pub(crate) ring_below: Option<Seq>,
    /// Drop this many of the oldest snapshots.
    pub(crate) snapshots: usize,
}

impl Retention {
    pub(crate) fn new(config: &CacheConfig) -> Self {
        Retention {
            capacity: config.capacity,
            retain_min_events: config.retain_min_events,
            fresh_window: config.fresh_window,
            snapshot_retention: config.snapshot_retention,
            history_bytes: config.history_bytes,
            ring: VecDeque::new(),
            ring_bytes: 0,
            snapshots: VecDeque::new(),
            snapshot_bytes: 0,
        }
    }

    /// A new generation: nothing is held.
    pub(crate) fn clear(&mut self) {
        self.ring.clear();
        self.snapshots.clear();
        self.ring_bytes = 0;
        self.snapshot_bytes = 0;
    }

    /// The bytes history holds now (the snapshots' window covers the ring's).
    pub(crate) fn bytes(&self) -> usize {
        self.snapshot_bytes.max(self.ring_bytes)
    }

    /// Records an event published at `seq`, which superseded a version of `bytes` bytes and
    /// made a snapshot costing `snapshot` bytes of its own ([`snapshot_step_bytes`]). Its step
    /// costs both, in the ring's window as in the snapshots': the ring's entries each come with
    /// a snapshot.
    pub(crate) fn published(&mut self, at: Instant, seq: Seq, bytes: usize, snapshot: usize) {
        let step = Step {
            at,
            seq,
            bytes: bytes + snapshot,
        };
        self.ring.push_back(step);
        self.ring_bytes += step.bytes;
        if self.ring.len() > self.capacity {
            // The ring overwrote its oldest entry.
            self.pop_ring();
        }
        self.snapshots.push_back(step);
        self.snapshot_bytes += step.bytes;
    }

    /// The view now keeps only its newest snapshot (a history fill's replay, whose older
    /// states the source serves): no snapshot step is held any more.
    pub(crate) fn forget_snapshots(&mut self) {
        self.snapshots.clear();
        self.snapshot_bytes = 0;
    }

    fn pop_ring(&mut self) -> Option<Step> {
        let step = self.ring.pop_front()?;
        self.ring_bytes -= step.bytes;
        Some(step)
    }

    /// What to release at `now`.
    pub(crate) fn release(&mut self, now: Instant) -> Release {
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
        let mut snapshots = 0;
        let kept_after = now.checked_sub(self.snapshot_retention);
        while let Some(front) = self.snapshots.front() {
            // The oldest snapshot is needed while the ring still holds the event after it.
            let beyond_ring = self.snapshots.len() > self.ring.len();
            let over_bytes = self.snapshot_bytes > self.history_bytes;
            let expired = kept_after.is_some_and(|t| front.at <= t);
            if !(beyond_ring && (over_bytes || expired)) {
                break;
            }
            self.snapshot_bytes -= front.bytes;
            self.snapshots.pop_front();
            snapshots += 1;
        }
        Release {
            ring_below,
            snapshots,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEP: usize = 2048;

    fn retention(capacity: usize, min: usize, fresh: u64, kept: u64, bytes: usize) -> Retention {
        let mut c = CacheConfig::new("pods", "pods/");
        c.capacity = capacity;
        c.retain_min_events = min;
        c.fresh_window = Duration::from_secs(fresh);
        c.snapshot_retention = Duration::from_secs(kept);
        c.history_bytes = bytes;
        Retention::new(&c)
    }

    #[test]
    fn bytes_bound_the_ring_and_the_snapshots_whatever_their_age() {
        let t0 = Instant::now();
        let mut r = retention(64, 4, 3600, 3600, 3 * (300 + STEP) + 100);
        for i in 0..10 {
            r.published(t0, Seq::new(i), 300, STEP);
        }
        let release = r.release(t0);
        // 3 steps fit: the ring keeps the last 3 (entries 7, 8, 9), the snapshots one per
        // held entry plus the base, so 3 records.
        assert_eq!(release.ring_below, Some(Seq::new(7)));
        assert_eq!(release.snapshots, 7);
        assert_eq!(r.bytes(), 3 * (300 + STEP));
    }

    #[test]
    fn snapshots_outlive_the_ring_for_their_retention_then_go() {
        let t0 = Instant::now();
        let mut r = retention(4, 1, 3600, 75, usize::MAX);
        for i in 0..10 {
            r.published(t0, Seq::new(i), 10, STEP);
        }
        // The ring holds 4 (it overwrote 6); all 10 snapshots are younger than 75 s.
        assert_eq!(r.release(t0 + Duration::from_secs(10)), Release::default());
        assert_eq!(r.bytes(), 10 * (10 + STEP));
        // Past the retention, those beyond the ring's window go.
        let release = r.release(t0 + Duration::from_secs(80));
        assert_eq!(
            release,
            Release {
                ring_below: None,
                snapshots: 6
            }
        );
        assert_eq!(r.bytes(), 4 * (10 + STEP));
    }

    #[test]
    fn stale_entries_go_beyond_the_lower_bound_and_take_their_snapshots_along() {
        let t0 = Instant::now();
        let mut r = retention(64, 2, 75, 0, usize::MAX);
        for i in 0..5 {
            r.published(t0, Seq::new(i), 1, STEP);
        }
        assert_eq!(r.release(t0 + Duration::from_secs(10)), Release::default());
        let release = r.release(t0 + Duration::from_secs(90));
        assert_eq!(
            release,
            Release {
                ring_below: Some(Seq::new(3)),
                snapshots: 3
            }
        );
    }

    #[test]
    fn insertions_are_costed_above_changes_in_place_and_grow_with_the_collection() {
        assert_eq!(snapshot_step_bytes(100_000, false), 6 << 10);
        assert!(snapshot_step_bytes(100_000, true) > snapshot_step_bytes(10_000, true));
        assert!(snapshot_step_bytes(10, true) >= 8 << 10);
        assert!(
            snapshot_step_bytes(100_000, true) >= 79_212,
            "the cost measured at 100,000"
        );
    }

    #[test]
    fn many_small_changes_cannot_keep_snapshots_without_bound() {
        let t0 = Instant::now();
        let mut r = retention(4, 1, 3600, 3600, 100 * STEP);
        for i in 0..1000 {
            r.published(t0, Seq::new(i), 0, STEP);
        }
        // Each snapshot costs its copied path: 100 of them fit, not 1,000.
        assert_eq!(r.release(t0).snapshots, 900);
        assert!(r.bytes() <= 100 * STEP);
    }
}
