//! The lock-free protocols of this crate, stated once. Each claim names the loom model in
//! `loom-tests/` that checks it (`LOOM_MAX_PREEMPTIONS=3`; figures in its README).
//!
//! # The ring ([`EventRing`](crate::EventRing))
//!
//! **State.** `capacity` slots (a power of two), each an epoch-managed pointer to an immutable
//! entry `{seq, revision, floor, value}` (`seq` a [`Seq`](crate::Seq), a position in the
//! history, never a revision); `tail`, the number of entries published; `floor`, the
//! revision every retained-or-later entry exceeds; `head`, the newest revision; `trimmed`, a
//! lower bound below which entries were released early. Only the single [`RingWriter`](crate::RingWriter)
//! (not `Clone`) stores into any of these.
//!
//! **Slot states.** A slot is *empty* (null, never written), *holding* the entry for some
//! sequence `s ≡ slot (mod capacity)`, or *released* (null again after a trim). It moves
//! forward only: empty → holding `s` → holding `s + capacity` → …, or holding → released →
//! holding a later sequence. No slot ever holds an older sequence than it held before.
//!
//! 1. **Publication.** For entry `s` the writer swaps the slot's pointer to the new entry
//!    (Release), then stores `floor` and `head` (Release), then `tail = s + 1` (Release).
//!    A reader loads `tail` (Acquire) before a slot (Acquire). So a reader that sees
//!    `tail > s` finds in slot `s` the entry for `s` or a later one, whole: stamp, revision,
//!    floor and value were written before the pointer that publishes them. A reader is never
//!    handed an entry for another sequence than it asked, and never a torn one.
//!    *Models: `publish_against_read`; with a Relaxed tail store the model fails
//!    (`weaken-tail-relaxed`: a reader is told "lapped" for an entry not yet written).*
//! 2. **Lap and expiry.** A reader at sequence `s` compares the entry's stamp with `s`:
//!    equal is its entry; greater means the writer lapped it (`Read::Lapped`, the watcher's
//!    `Expired`); a null slot below `tail` means the entry was released by a trim, also lapped.
//!    *Model: `lap_boundary`.*
//! 3. **Reclamation (the epoch rule).** An overwritten or released entry is unlinked by the
//!    swap, then handed to crossbeam-epoch (`defer_destroy`); it is dropped only after every
//!    thread pinned before the swap has unpinned. Readers hold a guard only for the duration
//!    of a read or a poll, never across an await or I/O, so reclamation is never blocked for
//!    long, and a reference obtained under a guard stays valid until the guard drops, even if
//!    the ring is dropped meanwhile: its drop hands the entries it still holds to the
//!    collector the same way. Reads accept only guards of that collector (crossbeam-epoch's
//!    default one), since a guard of another would hold nothing back. Each entry is dropped
//!    exactly once. *Model: `reclamation` (loom's `Arc` payloads report
//!    leaks and double drops).*
//! 4. **Where a watch starts.** `seq_after(r)` binary-searches the retained stamps for the
//!    first revision above `r`, with the invariant "every entry below `lo` has a revision at
//!    most `r`". It loads `tail`, then `trimmed`, then `floor`: both bounds are stored after
//!    the floor that covers them. If the writer overtakes the search, the lapping entry's own
//!    `floor` field says how far the window moved (no further load is needed, so no stale
//!    load can mislead it), and a released slot's null was stored with Release after the trim
//!    bound. Every restart raises `lo`, so the search ends. `Err(floor)` is returned only when
//!    an entry with a revision above `r` is gone. *Models: `start_search`, `trim`; with a
//!    Relaxed trim bound the `trim` model fails (`weaken-trim-relaxed`: the search skips a
//!    retained entry).*
//!
//! # Wake-ups ([`Watcher`](crate::Watcher), the interest index)
//!
//! 5. **No lost wake-up.** A watcher that finds nothing to read files `(id, waker, wake cell)`
//!    in the interest index under the hub's mutex, then re-loads `tail`. The writer, after
//!    storing `tail`, takes the same mutex to drain the buckets the event may concern. Either
//!    the writer's critical section follows the watcher's (it finds and wakes the watcher), or
//!    it precedes it, and then the tail store happens-before the watcher's re-check, which sees
//!    the event and does not sleep. *Model: `wakeup` (a watcher blocked forever is a deadlock
//!    loom reports); without the re-check the model deadlocks (`weaken-no-recheck`).*
//! 6. **Resuming at the stamp.** The writer stamps a drained watcher's wake cell with the
//!    event's sequence (Release, under the mutex) before waking it. A watcher that verified
//!    it was idle when it filed itself knows every event between its cursor and the stamp went
//!    through the index without touching its bucket, so it resumes at the stamp: an idle,
//!    selective watcher is never lapped by traffic it would have filtered out. A watcher that
//!    leaves the index by itself (the re-check found an event, or a spurious poll) removes its
//!    entry under the mutex and ignores any stamp. *Models: `register_deregister`, `wakeup`.*
//! 7. **Bookmarks** are entries like any other (revision at least the last), so they reach a
//!    watcher after every event before them, and they drain every bucket, so parked watchers
//!    that asked for them are woken. *Model: `bookmark`.*
//!
//! # Snapshot and revision publication ([`Cache`](crate::Cache))
//!
//! 8. The reflector publishes the hub, the snapshots and the cache's revision as one
//!    immutable `View` (ArcSwap), and only then announces the revision (a tokio watch
//!    channel); both steps are `Store::publish` in `store.rs`, the only place views are
//!    stored. A reader that waited for revision `N` and then loads the state sees a state at
//!    `N` or later, never a half-applied write. *Model: `snapshot_publication`, with loom
//!    stand-ins for ArcSwap and the channel (neither runs under loom); announcing first makes
//!    it fail (`weaken-announce-early`).*
//! 9. **Progress.** A progress notification becomes a bookmark entry and a new state at the
//!    notified revision (same snapshot contents), by the same path as events: claims 1, 7 and
//!    8 cover it.
//!
//! # The ring's length ([`EventRing::len`](crate::EventRing::len))
//!
//! 10. The length (the cache's history metric) is `tail - oldest`, with `oldest` computed from
//!     the same load of `tail` and clamped to it. Loading the tail a second time for `oldest`
//!     can see the writer's later pushes and a trim bound past the first load, and the
//!     subtraction underflows. *Model: `len`; with two loads it fails
//!     (`weaken-len-two-loads`: a length of 2^64 - 2 for a ring of 2).*
