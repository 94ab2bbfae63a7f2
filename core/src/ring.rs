//! The event ring: the history window. One writer, any number of readers, fixed capacity.
//!
//! The algorithm is a sequence-stamped circular buffer in the manner of Vyukov's bounded
//! queue (crossbeam-channel's `flavors/array.rs`), changed in two ways because readers never
//! consume:
//!
//! * A slot holds an epoch-managed pointer ([`crossbeam_epoch::Atomic`]) to an immutable
//!   [`Entry`] that carries its own sequence stamp and revision. The writer replaces a slot's
//!   entry with one `swap`, so a reader sees either the old entry or the new one, whole: the
//!   stamp and the payload can never be torn apart. The replaced entry is handed to the epoch
//!   collector and dropped once no pinned reader can still hold a reference to it.
//! * A reader is a cursor (a sequence number). It reads slot `seq % capacity` and compares
//!   the entry's stamp with `seq`: equal is the event, greater means the writer has lapped the
//!   cursor (the reader is [`Read::Lapped`], never handed a wrong event), and `seq >= tail`
//!   means there is nothing yet.
//!
//! Positions in the history are [`Seq`]s, never bare integers, so a sequence number cannot be
//! passed where a [`Revision`] is meant.
//!
//! Readers write nothing shared: a read is a pin (thread-local), three `Acquire` loads (the
//! tail, the trim bound and the slot) and a comparison. The writer never waits for anybody.
//! The protocol, with the loom model that checks each claim, is stated in
//! [`protocol`](crate::protocol).

use std::fmt;

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned};

use crate::loom::sync::Arc;
use crate::loom::sync::atomic::{AtomicU64, Ordering};
use crate::loom::weaken;
use crate::rv::Revision;

/// A position in a ring's history: the number of entries published before it, from 0.
///
/// A newtype rather than a bare `u64` so that a sequence number is never taken for a
/// [`Revision`] (both count upwards; only revisions mean anything outside the ring).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seq(u64);

impl Seq {
    /// The first position.
    pub const ZERO: Seq = Seq(0);

    /// Wraps a raw position.
    pub const fn new(value: u64) -> Self {
        Seq(value)
    }

    /// The raw position.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The position after this one.
    pub const fn next(self) -> Seq {
        Seq(self.0 + 1)
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// A ring capacity that is not a power of two of at least 2.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CapacityError(pub usize);

impl fmt::Display for CapacityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ring capacity {} is not a power of two of at least 2", self.0)
    }
}

impl std::error::Error for CapacityError {}

/// An event the publisher refused; the ring is unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublishError {
    /// Object events need a revision above the last published one.
    RevisionNotIncreasing {
        /// The last published revision.
        last: Revision,
        /// The revision of the refused event.
        got: Revision,
    },
    /// A bookmark was published as an event (see `Publisher::progress`).
    Bookmark,
    /// The events of one revision's publication carried different revisions.
    RevisionMixed {
        /// The revision of the first event.
        revision: Revision,
        /// Another event's revision.
        other: Revision,
    },
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishError::RevisionNotIncreasing { last, got } => write!(
                f,
                "event revision {got} does not follow the last published revision {last}"
            ),
            PublishError::Bookmark => write!(
                f,
                "bookmarks take no history slot: move the hub's revision with Publisher::progress"
            ),
            PublishError::RevisionMixed { revision, other } => write!(
                f,
                "the events of revision {revision} include one at revision {other}: a revision is published whole, alone"
            ),
        }
    }
}

impl std::error::Error for PublishError {}

/// One published item: its sequence stamp, its revision and the payload. Immutable.
#[derive(Debug)]
pub struct Entry<T> {
    seq: u64,
    revision: Revision,
    /// The ring's floor once this entry was published: every entry with a sequence number at
    /// or below `seq - capacity` has a revision at most this. A reader lapped by this entry
    /// learns from it, with no further load, how far the window moved.
    floor: Revision,
    value: T,
}

impl<T> Entry<T> {
    /// The entry's position in the ring's history.
    pub fn seq(&self) -> Seq {
        Seq(self.seq)
    }

    /// The revision the entry was published at.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// The payload.
    pub fn value(&self) -> &T {
        &self.value
    }
}

/// The outcome of reading one sequence number.
#[derive(Debug)]
pub enum Read<'g, T> {
    /// The entry at that sequence number, valid while the guard is held.
    Ready(&'g Entry<T>),
    /// Nothing has been published at that sequence number yet.
    Empty,
    /// The writer has overwritten it: the reader fell out of the window.
    Lapped,
}

/// A fixed-capacity history of published items; see the module docs.
///
/// Created with its unique [`RingWriter`] by [`EventRing::new`]; readers share it as an `Arc`.
///
/// ```
/// use watchcache_core::{EventRing, Read, Revision, Seq};
///
/// let (ring, mut writer) = EventRing::new(2, Revision::new(10))?;
/// for (rev, v) in [(11, "a"), (12, "b"), (13, "c")] {
///     writer.push(Revision::new(rev), v)?;
/// }
/// let guard = crossbeam_epoch::pin();
/// // Sequence 0 ("a") was overwritten by "c": a reader there is lapped, not misled.
/// assert!(matches!(ring.read(Seq::ZERO, &guard), Read::Lapped));
/// assert!(matches!(ring.read(Seq::new(2), &guard), Read::Ready(e) if *e.value() == "c"));
/// assert!(matches!(ring.read(Seq::new(3), &guard), Read::Empty));
/// // Every event after revision 11 is still here, starting at sequence 1; after 10 is not.
/// assert_eq!(ring.seq_after(Revision::new(11), &guard), Ok(Seq::new(1)));
/// assert_eq!(ring.seq_after(Revision::new(10), &guard), Err(Revision::new(11)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct EventRing<T> {
    slots: Box<[Atomic<Entry<T>>]>,
    mask: u64,
    /// The number of entries ever published: the next entry's sequence number.
    tail: AtomicU64,
    /// Every entry with a revision above `floor` is still in the ring: the revision of the
    /// newest overwritten entry, or the start revision while nothing has been overwritten.
    floor: AtomicU64,
    /// The revision of the newest entry, or the start revision.
    head: AtomicU64,
    /// Entries below this sequence number were released early by [`RingWriter::trim`].
    trimmed: AtomicU64,
}

impl<T: Send + Sync + 'static> EventRing<T> {
    /// A ring of `capacity` slots (a power of two, at least 2) whose history starts after
    /// `start`: a reader may ask for every entry after any revision from `start` on.
    pub fn new(capacity: usize, start: Revision) -> Result<(Arc<Self>, RingWriter<T>), CapacityError> {
        if capacity < 2 || !capacity.is_power_of_two() {
            return Err(CapacityError(capacity));
        }
        let ring = Arc::new(EventRing {
            slots: (0..capacity).map(|_| Atomic::null()).collect(),
            mask: capacity as u64 - 1,
            tail: AtomicU64::new(0),
            floor: AtomicU64::new(start.get()),
            head: AtomicU64::new(start.get()),
            trimmed: AtomicU64::new(0),
        });
        let writer = RingWriter {
            ring: Arc::clone(&ring),
            next: 0,
            last: start,
            floor: start,
        };
        Ok((ring, writer))
    }
}

impl<T> EventRing<T> {
    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The sequence number the next entry will get; entries below `tail()` have been published.
    pub fn tail(&self) -> Seq {
        Seq(self.load_tail())
    }

    fn load_tail(&self) -> u64 {
        // Acquire pairs with the Release store in `RingWriter::commit`: a reader that sees tail
        // `t` sees every slot write of the entries below `t`.
        self.tail.load(Ordering::Acquire)
    }

    /// The oldest sequence number still held.
    pub fn oldest_seq(&self) -> Seq {
        Seq(self.oldest_below(self.load_tail()))
    }

    /// The oldest sequence number held while the tail is `tail`: never above it.
    fn oldest_below(&self, tail: u64) -> u64 {
        // The trim bound is clamped to the tail when it is set, and `tail` was loaded before
        // it, so the bound may have passed `tail` since: clamp again.
        tail.saturating_sub(self.slots.len() as u64)
            .max(self.trimmed())
            .min(tail)
    }

    /// How many entries the ring holds now (at most the capacity), from one load of the tail:
    /// a second load could see a tail and a trim bound past the first (model `len`).
    pub fn len(&self) -> usize {
        let tail = self.load_tail();
        let oldest = if weaken::LEN_ONE_TAIL_LOAD {
            self.oldest_below(tail)
        } else {
            // The old computation, kept for the loom model that shows why it was wrong.
            self.load_tail()
                .saturating_sub(self.slots.len() as u64)
                .max(self.trimmed())
        };
        tail.wrapping_sub(oldest) as usize
    }

    /// Whether the ring holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn trimmed(&self) -> u64 {
        // Acquire pairs with the Release store in `RingWriter::trim`: a reader that sees the
        // new bound also sees the floor stored before it.
        self.trimmed.load(Ordering::Acquire)
    }

    /// The revision of the newest entry (the start revision before any).
    pub fn head_revision(&self) -> Revision {
        // Acquire pairs with the Release store in `RingWriter::commit`.
        Revision::new(self.head.load(Ordering::Acquire))
    }

    /// The oldest revision a reader can ask for "every entry after": all entries with a
    /// higher revision are still in the ring.
    pub fn floor(&self) -> Revision {
        // Acquire pairs with the Release store in `RingWriter::stage`.
        Revision::new(self.floor.load(Ordering::Acquire))
    }

    /// Reads the entry at sequence number `seq`. Takes no lock and writes nothing shared.
    ///
    /// The entry is borrowed from the guard: it is valid while the guard pins the epoch, and
    /// the compiler enforces it. This compiles:
    ///
    /// ```
    /// use watchcache_core::{EventRing, Read, Revision, Seq};
    ///
    /// let (ring, mut writer) = EventRing::new(2, Revision::ZERO).unwrap();
    /// writer.push(Revision::new(1), String::from("a")).unwrap();
    /// let guard = crossbeam_epoch::pin();
    /// if let Read::Ready(entry) = ring.read(Seq::ZERO, &guard) {
    ///     assert_eq!(entry.value(), "a");
    /// }
    /// ```
    ///
    /// and this does not, since the entry would outlive its guard (and could be reclaimed):
    ///
    /// ```compile_fail
    /// use watchcache_core::{EventRing, Read, Revision, Seq};
    ///
    /// let (ring, mut writer) = EventRing::new(2, Revision::ZERO).unwrap();
    /// writer.push(Revision::new(1), String::from("a")).unwrap();
    /// let entry = {
    ///     let guard = crossbeam_epoch::pin();
    ///     match ring.read(Seq::ZERO, &guard) {
    ///         Read::Ready(entry) => entry,
    ///         _ => return,
    ///     }
    /// };
    /// assert_eq!(entry.value(), "a");
    /// ```
    ///
    /// An entry stays valid while its guard pins, even if the ring itself is dropped meanwhile
    /// (its entries are reclaimed through the collector, never freed at once).
    ///
    /// # Panics
    ///
    /// If `guard` is not a guard of crossbeam-epoch's default collector (`crossbeam_epoch::pin()`):
    /// reclamation goes through that collector, so only its guards keep an entry alive.
    pub fn read<'g>(&self, seq: Seq, guard: &'g Guard) -> Read<'g, T> {
        check_collector(guard);
        // SAFETY: `guard` pins the default collector: checked just above.
        unsafe { self.read_unchecked(seq, guard) }
    }

    /// [`read`](Self::read) without the collector check, for a reader that pinned the guard
    /// itself in the same scope (a watcher's poll reads many entries under one guard).
    ///
    /// # Safety
    ///
    /// `guard` must pin crossbeam-epoch's default collector (come from `crossbeam_epoch::pin()`):
    /// reclamation goes through that collector, so a guard of another one keeps nothing alive.
    pub(crate) unsafe fn read_unchecked<'g>(&self, seq: Seq, guard: &'g Guard) -> Read<'g, T> {
        debug_assert!(guard.collector() == Some(epoch::default_collector()));
        let seq = seq.0;
        let tail = self.load_tail();
        if seq >= tail {
            return Read::Empty;
        }
        if tail - seq > self.slots.len() as u64 || seq < self.trimmed() {
            return Read::Lapped;
        }
        let slot = &self.slots[(seq & self.mask) as usize];
        // Acquire pairs with the Release `swap` in `RingWriter::stage`: the entry's fields
        // were written before it was linked.
        let shared = slot.load(Ordering::Acquire, guard);
        // SAFETY: the pointer is null or points to an entry: entries are only freed through
        // `defer_destroy` on the default collector after being unlinked, and `guard` pins that
        // collector (this function's precondition), so one we loaded stays allocated for `'g`.
        let Some(entry) = (unsafe { shared.as_ref() }) else {
            // `seq < tail`, so the entry for `seq` was linked here before the tail we saw was
            // stored; a null now means `trim` released it since.
            return Read::Lapped;
        };
        debug_assert!(entry.seq >= seq, "a slot never goes back in time");
        if entry.seq == seq {
            Read::Ready(entry)
        } else {
            Read::Lapped
        }
    }

    /// The sequence number of the first entry with a revision above `after`: where a reader
    /// that has seen everything up to `after` starts. A binary search over the stamps of the
    /// retained entries, not a scan. If entries above `after` have already been overwritten,
    /// returns `Err(floor)`, the oldest revision that can still be asked for.
    ///
    /// A search the writer overtakes restarts from what it learned: a lapping entry carries
    /// the floor that covers everything it overwrote, and a trimmed (null) slot makes the trim
    /// bound visible. Each restart raises the lower bound, so the search ends once the writer
    /// lets it (checked by the loom models `start_search` and `trim`).
    ///
    /// # Panics
    ///
    /// If `guard` is not a guard of crossbeam-epoch's default collector, as for [`read`](Self::read).
    pub fn seq_after(&self, after: Revision, guard: &Guard) -> Result<Seq, Revision> {
        check_collector(guard);
        let cap = self.slots.len() as u64;
        let mut tail = self.load_tail();
        // Loaded after `tail` and then `trimmed`: the writer stores the floor before the
        // Release stores of the tail that makes an overwrite visible and of the trim bound,
        // so this floor covers every entry below `lo`.
        let mut lo = tail.saturating_sub(cap).max(self.trimmed());
        let mut floor = self.floor();
        'restart: loop {
            if after < floor {
                return Err(floor);
            }
            // Invariant: every entry below `lo` has a revision at most `after`.
            let (mut l, mut h) = (lo, tail);
            while l < h {
                let mid = l + (h - l) / 2;
                // Acquire pairs with the Release swaps in `RingWriter::stage` and `trim`.
                let shared = self.slots[(mid & self.mask) as usize].load(Ordering::Acquire, guard);
                // SAFETY: null or an entry kept alive by `guard`, as in `read`.
                match unsafe { shared.as_ref() } {
                    Some(e) if e.seq == mid => {
                        if e.revision > after {
                            h = mid;
                        } else {
                            l = mid + 1;
                        }
                    }
                    Some(e) => {
                        // Lapped by `e`: everything at or below `e.seq - cap` is gone and had
                        // revisions at most `e.floor`; `e.seq` itself is published.
                        debug_assert!(e.seq > mid, "a slot never goes back in time");
                        floor = floor.max(e.floor);
                        lo = lo.max(e.seq + 1 - cap);
                        tail = tail.max(e.seq + 1);
                        continue 'restart;
                    }
                    None => {
                        // Trimmed since we loaded `lo`: the null was stored with Release after
                        // the floor and the trim bound, so both are visible now, and the bound
                        // is above `mid`.
                        lo = lo.max(self.trimmed()).max(mid + 1);
                        floor = floor.max(self.floor());
                        continue 'restart;
                    }
                }
            }
            return Ok(Seq(l));
        }
    }
}

impl<T> Drop for EventRing<T> {
    fn drop(&mut self) {
        // Pinned readers may still hold entries: `read` ties an entry to the reader's guard,
        // not to the ring, so a reader can outlive the last `Arc` of the ring while pinned.
        // The entries are therefore handed to the collector like overwritten ones, never freed
        // here.
        let guard = epoch::pin();
        for slot in self.slots.iter() {
            // Relaxed: `&mut self` means no other thread stores into the slots any more.
            let shared = slot.swap(epoch::Shared::null(), Ordering::Relaxed, &guard);
            if !shared.is_null() {
                // SAFETY: (1) unlinked from its only slot just now, so no new reader can reach
                // it; (2) every reader that loaded it did so through `read` or `seq_after`,
                // which accept only guards of the default collector (`check_collector`), the
                // collector this guard pins, so it is freed only after those readers unpin;
                // (3) rings are only built by `EventRing::new`, which requires
                // `T: Send + 'static`, so the drop may run later on another thread.
                unsafe { guard.defer_destroy(shared) };
            }
        }
    }
}

/// Readers must pin the collector the writer defers its reclamation to: an entry freed through
/// one collector is not protected by a guard of another.
///
/// # Panics
///
/// If `guard` is not a guard of crossbeam-epoch's default collector (one from `epoch::pin()`),
/// e.g. `epoch::unprotected()` or a guard of a `Collector` of the caller's own.
fn check_collector(guard: &Guard) {
    assert!(
        guard.collector() == Some(epoch::default_collector()),
        "EventRing readers must pin crossbeam-epoch's default collector (crossbeam_epoch::pin())"
    );
}

/// The ring's only writer. Not `Clone`: there is exactly one per ring.
#[derive(Debug)]
pub struct RingWriter<T> {
    ring: Arc<EventRing<T>>,
    next: u64,
    last: Revision,
    /// The ring's floor, as this writer last set it.
    floor: Revision,
}

impl<T: Send + Sync + 'static> RingWriter<T> {
    /// The ring this writer publishes into.
    pub fn ring(&self) -> &Arc<EventRing<T>> {
        &self.ring
    }

    /// Publishes `value` at `revision` and returns its sequence number. Revisions must not
    /// go back; the ring is unchanged when they do. Never blocks: the oldest entry is
    /// overwritten and reclaimed once no reader can still see it.
    pub fn push(&mut self, revision: Revision, value: T) -> Result<Seq, PublishError> {
        let seq = self.stage(revision, value)?;
        self.commit();
        Ok(seq)
    }

    /// Writes `value` at `revision` into the next slot without publishing it: readers see
    /// nothing of it (they find `Read::Empty` at its sequence number) until [`commit`]
    /// publishes every staged entry at once. Entries of one revision are staged one by one and
    /// committed together, so that no reader ever sees part of a revision. Revisions must not
    /// go back; the ring is unchanged when they do.
    ///
    /// Staging overwrites the slot's old entry at once (a reader there is lapped, as it would
    /// be after the commit), and more entries than the capacity staged before a commit
    /// overwrite each other: only the last `capacity` of them are ever read.
    ///
    /// [`commit`]: Self::commit
    pub fn stage(&mut self, revision: Revision, value: T) -> Result<Seq, PublishError> {
        if revision < self.last {
            return Err(PublishError::RevisionNotIncreasing {
                last: self.last,
                got: revision,
            });
        }
        let ring = &*self.ring;
        let seq = self.next;
        let slot = &ring.slots[(seq & ring.mask) as usize];
        let guard = epoch::pin();
        // Relaxed: only this writer stores into slots, so it reads its own latest store.
        let current = slot.load(Ordering::Relaxed, &guard);
        // SAFETY: null or an entry this writer linked and has not unlinked yet (only it
        // unlinks), so still allocated.
        let floor = match unsafe { current.as_ref() } {
            Some(evicted) => evicted.revision.max(self.floor),
            None => self.floor,
        };
        let entry = Owned::new(Entry {
            seq,
            revision,
            floor,
            value,
        });
        // Release pairs with the Acquire loads in `EventRing::read` and `seq_after`: a reader
        // that loads this pointer sees the entry's fields. Acquire is not needed: the old
        // entry was written by this thread.
        let old = slot.swap(entry, Ordering::Release, &guard);
        self.floor = floor;
        if !old.is_null() {
            // Release pairs with the Acquire load in `EventRing::floor`. Stored before the
            // tail in `commit`, so a reader that sees the new tail sees this floor too.
            ring.floor.store(floor.get(), Ordering::Release);
            // SAFETY: `old` is unlinked from the only slot that held it, so no new reader can
            // reach it; readers that loaded it are pinned, and the collector frees it only
            // after every guard pinned before this call is dropped. `T: Send` lets the drop
            // run on another thread.
            unsafe { guard.defer_destroy(old) };
        }
        self.next = seq + 1;
        self.last = revision;
        Ok(Seq(seq))
    }

    /// Publishes every entry staged since the last commit, with one store of the tail: a
    /// reader that sees any of them sees all of them.
    pub fn commit(&mut self) {
        let ring = &*self.ring;
        // Release pairs with the Acquire in `EventRing::head_revision`.
        ring.head.store(self.last.get(), Ordering::Release);
        // Release pairs with the Acquire in `EventRing::tail`: publishes the slot writes of
        // every staged entry. (`weaken::TAIL_STORE` is Release except in the loom model that
        // shows why.)
        ring.tail.store(self.next, weaken::TAIL_STORE);
    }

    /// Releases every entry below sequence number `keep_from` before the ring would overwrite
    /// it (age-based retention): readers there are lapped, starts at revisions below the new
    /// floor are refused, and the entries are reclaimed like overwritten ones. Returns the
    /// new floor. `keep_from` past the tail is clamped to the tail; trimming never goes back.
    pub fn trim(&mut self, keep_from: Seq) -> Revision {
        let keep_from = keep_from.0;
        let ring = &*self.ring;
        // Relaxed: only this writer stores the tail. Entries staged and not yet committed are
        // never released: the trim stops at the committed tail.
        let tail = ring.tail.load(Ordering::Relaxed);
        let held_from = tail
            .saturating_sub(ring.slots.len() as u64)
            .max(ring.trimmed.load(Ordering::Relaxed));
        let keep_from = keep_from.min(tail);
        if keep_from <= held_from {
            return ring.floor();
        }
        let guard = epoch::pin();
        let last = &ring.slots[((keep_from - 1) & ring.mask) as usize];
        // SAFETY: only this writer links and unlinks entries, so the entry for `keep_from - 1`
        // (held: `held_from <= keep_from - 1 < next`) is still linked and allocated.
        let floor = unsafe { last.load(Ordering::Relaxed, &guard).deref() }
            .revision
            .max(self.floor);
        self.floor = floor;
        // Release pairs with the Acquire in `EventRing::floor`; stored before the bound below.
        ring.floor.store(floor.get(), Ordering::Release);
        // Release pairs with the Acquire in `EventRing::trimmed`: a reader that sees the new
        // bound sees the floor that covers the entries below it.
        // (`weaken::TRIM_STORE` is Release except in the loom model that shows why.)
        ring.trimmed.store(keep_from, weaken::TRIM_STORE);
        for seq in held_from..keep_from {
            let slot = &ring.slots[(seq & ring.mask) as usize];
            // Release pairs with the Acquire slot loads in `seq_after`: a reader that finds the
            // null also sees the floor and the bound stored above. Readers that still find the
            // old pointer read a valid entry (reclamation below waits for them).
            let old = slot.swap(epoch::Shared::null(), Ordering::Release, &guard);
            if !old.is_null() {
                // SAFETY: unlinked from its only slot just now; pinned readers keep it alive
                // until their guards drop, as for an overwritten entry in `push`.
                unsafe { guard.defer_destroy(old) };
            }
        }
        // Trimming is how history's memory is given back (by age or by bytes): hand the
        // released entries to the collector now rather than when this thread's bag of
        // deferred drops fills (64 entries, which may be large), and collect what is due.
        guard.flush();
        floor
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    const SIZES: [usize; 3] = if cfg!(miri) { [2, 8, 16] } else { [2, 64, 4096] };

    fn ring_of(cap: usize) -> (Arc<EventRing<u64>>, RingWriter<u64>) {
        EventRing::new(cap, Revision::new(0)).unwrap()
    }

    #[test]
    fn capacity_must_be_a_power_of_two_of_at_least_two() {
        for bad in [0, 1, 3, 100] {
            assert_eq!(
                EventRing::<u8>::new(bad, Revision::ZERO).unwrap_err(),
                CapacityError(bad)
            );
        }
    }

    #[test]
    fn a_lapped_reader_gets_lapped_and_never_a_wrong_entry() {
        for cap in SIZES {
            let (ring, mut w) = ring_of(cap);
            let total = cap as u64 * 3 + 1;
            for i in 0..total {
                w.push(Revision::new(i + 1), i).unwrap();
            }
            let guard = epoch::pin();
            for seq in 0..total + 2 {
                match ring.read(Seq::new(seq), &guard) {
                    Read::Ready(e) => {
                        assert!(seq >= total - cap as u64, "cap {cap}: seq {seq} should be gone");
                        assert_eq!(
                            (e.seq().get(), *e.value(), e.revision().get()),
                            (seq, seq, seq + 1)
                        );
                    }
                    Read::Lapped => assert!(seq < total - cap as u64),
                    Read::Empty => assert!(seq >= total),
                }
            }
        }
    }

    #[test]
    fn revisions_may_not_go_back_and_a_refused_push_changes_nothing() {
        let (ring, mut w) = ring_of(4);
        w.push(Revision::new(5), 1).unwrap();
        w.push(Revision::new(5), 2).unwrap();
        assert_eq!(
            w.push(Revision::new(4), 3),
            Err(PublishError::RevisionNotIncreasing {
                last: Revision::new(5),
                got: Revision::new(4)
            })
        );
        assert_eq!(ring.tail(), Seq::new(2));
        assert_eq!(ring.head_revision(), Revision::new(5));
    }

    #[test]
    fn seq_after_finds_the_first_later_revision_or_reports_the_floor() {
        for cap in SIZES {
            let (ring, mut w) = EventRing::new(cap, Revision::new(100)).unwrap();
            let guard = epoch::pin();
            assert_eq!(ring.seq_after(Revision::new(100), &guard), Ok(Seq::ZERO));
            assert_eq!(ring.seq_after(Revision::new(99), &guard), Err(Revision::new(100)));
            // Revisions 102, 104, …: gaps, as one resource sees a global revision.
            let total = cap as u64 + cap as u64 / 2;
            for i in 0..total {
                w.push(Revision::new(102 + 2 * i), i).unwrap();
            }
            let oldest = total - cap as u64;
            let floor = ring.floor().get();
            assert_eq!(floor, 102 + 2 * (oldest - 1));
            for after in floor..(104 + 2 * total) {
                let want = (0..total).find(|&i| 102 + 2 * i > after).unwrap_or(total);
                assert_eq!(
                    ring.seq_after(Revision::new(after), &guard),
                    Ok(Seq::new(want)),
                    "cap {cap} after {after}"
                );
            }
            assert_eq!(
                ring.seq_after(Revision::new(floor - 1), &guard),
                Err(Revision::new(floor))
            );
        }
    }

    #[test]
    fn trimming_releases_old_entries_early_and_moves_the_floor() {
        for cap in SIZES {
            let (ring, mut w) = ring_of(cap);
            let n = cap as u64;
            for i in 0..n {
                w.push(Revision::new(10 * (i + 1)), i).unwrap();
            }
            let keep = n / 2;
            let floor = w.trim(Seq::new(keep));
            assert_eq!(floor, Revision::new(10 * keep));
            assert_eq!(ring.floor(), floor);
            assert_eq!(ring.oldest_seq(), Seq::new(keep));
            assert_eq!(ring.len(), (n - keep) as usize);
            let guard = epoch::pin();
            for seq in 0..n {
                match ring.read(Seq::new(seq), &guard) {
                    Read::Ready(e) => assert!(seq >= keep && *e.value() == seq),
                    Read::Lapped => assert!(seq < keep),
                    Read::Empty => panic!("{seq} was published"),
                }
            }
            assert_eq!(ring.seq_after(floor, &guard), Ok(Seq::new(keep)));
            assert_eq!(ring.seq_after(Revision::new(floor.get() - 1), &guard), Err(floor));
            // Trimming backwards, or to where it already is, changes nothing.
            assert_eq!(w.trim(Seq::new(keep / 2)), floor);
            // The ring keeps working: pushes overwrite trimmed (null) slots.
            for i in n..3 * n {
                w.push(Revision::new(10 * (i + 1)), i).unwrap();
            }
            assert!(
                matches!(ring.read(Seq::new(3 * n - 1), &guard), Read::Ready(e) if *e.value() == 3 * n - 1)
            );
            assert_eq!(ring.floor(), Revision::new(10 * (2 * n)));
            assert_eq!(
                w.trim(Seq::new(u64::MAX)),
                Revision::new(10 * 3 * n),
                "clamped to the tail"
            );
            assert!(matches!(ring.read(Seq::new(3 * n - 1), &guard), Read::Lapped));
            assert_eq!(
                ring.seq_after(Revision::new(10 * 3 * n), &guard),
                Ok(Seq::new(3 * n))
            );
            assert!(ring.is_empty(), "everything trimmed");
        }
    }

    #[test]
    fn overwritten_entries_are_dropped_exactly_once() {
        struct Counted(Arc<AtomicUsize>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let drops = Arc::new(AtomicUsize::new(0));
        let n = if cfg!(miri) { 20 } else { 5000 };
        {
            let (_ring, mut w) = EventRing::new(8, Revision::ZERO).unwrap();
            for i in 0..n {
                w.push(Revision::new(i as u64 + 1), Counted(drops.clone()))
                    .unwrap();
            }
            // Deferred drops run once the epoch advances; flush until they have.
            for _ in 0..1000 {
                if drops.load(std::sync::atomic::Ordering::SeqCst) >= n - 8 {
                    break;
                }
                epoch::pin().flush();
            }
            assert!(
                drops.load(std::sync::atomic::Ordering::SeqCst) <= n - 8,
                "never more than the evicted"
            );
        }
        // Dropping the ring hands what the slots still hold to the collector, which drops it
        // once the epoch advances: other tests of this binary may be pinned meanwhile, so give
        // it time (bounded), not a fixed number of flushes.
        for _ in 0..20_000 {
            if drops.load(std::sync::atomic::Ordering::SeqCst) == n {
                break;
            }
            epoch::pin().flush();
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), n);
    }

    #[test]
    fn an_entry_stays_valid_while_pinned_after_the_ring_is_dropped() {
        // Run under Miri (`.ci/run`), this is the use-after-free check: the ring's drop must
        // defer its entries to the collector rather than free them under a pinned reader.
        let (ring, mut w) = EventRing::new(2, Revision::ZERO).unwrap();
        w.push(Revision::new(1), String::from("kept")).unwrap();
        let guard = epoch::pin();
        let Read::Ready(entry) = ring.read(Seq::ZERO, &guard) else {
            panic!("entry 0 was just published");
        };
        drop(w);
        drop(ring);
        assert_eq!(entry.value(), "kept");
        assert_eq!(entry.seq(), Seq::ZERO);
    }

    #[test]
    #[should_panic(expected = "default collector")]
    fn a_guard_of_another_collector_is_refused() {
        let (ring, mut w) = EventRing::new(2, Revision::ZERO).unwrap();
        w.push(Revision::new(1), 1u64).unwrap();
        let collector = epoch::Collector::new();
        let handle = collector.register();
        let foreign = handle.pin();
        let _ = ring.read(Seq::ZERO, &foreign);
    }

    #[test]
    #[should_panic(expected = "default collector")]
    fn an_unprotected_guard_is_refused() {
        let (ring, _w) = EventRing::<u64>::new(2, Revision::ZERO).unwrap();
        // SAFETY: the guard is only handed to `seq_after`, which must refuse it before any load.
        let guard = unsafe { epoch::unprotected() };
        let _ = ring.seq_after(Revision::ZERO, guard);
    }
}
