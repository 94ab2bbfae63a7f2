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
//!    (Release) and stores `floor` (Release): the entry is *staged*. Committing stores `head`
//!    (Release), then `tail = s + 1` (Release), for every entry staged since the last commit
//!    at once. A reader loads `tail` (Acquire) before a slot (Acquire). So a reader that sees
//!    `tail > s` finds in slot `s` the entry for `s` or a later one, whole: stamp, revision,
//!    floor and value were written before the pointer that publishes them. A reader is never
//!    handed an entry for another sequence than it asked, and never a torn one; a staged
//!    entry is at or past the tail it loaded, so it reads as not there yet.
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
//! # Wake-ups ([`Watcher`](crate::Watcher), the interest registry)
//!
//! Every watcher is registered for its whole life in one bucket of the hub's registry (by
//! object name, trigger value, namespace, or "all"; see `interest.rs`). Buckets are found by
//! key: the writer's cost per event is a few hash lookups plus the watchers it wakes, whatever
//! the number of watchers. The registry's mutex is taken only by watch starts and ends and by
//! the writer, never by a delivery or a park; a park takes only its bucket shard's lock and
//! its own wake cell's.
//!
//! 5. **No lost wake-up.** A watcher that finds nothing to read stores its waker in its wake
//!    cell, files the cell in its bucket under the shard's lock, then looks again: at the
//!    ring's `tail` when scanning, at its chain's link when on a chain (claim 7). The writer,
//!    after storing `tail` and the link, takes the same shard lock to drain the bucket.
//!    Either the writer's critical section follows the watcher's (it finds and wakes the
//!    watcher), or it precedes it, and then the stores that precede it happen-before the
//!    watcher's second look, which sees the event and does not sleep. *Models:
//!    `wakeup_scan` and `chain` (a watcher blocked forever is a deadlock loom reports);
//!    without the look again they deadlock (`weaken-no-recheck`, `weaken-no-link-recheck`).
//!    `wakeup` covers a watcher filed when it starts (claim 6).*
//! 6. **Resuming at the stamp.** The writer stamps a drained watcher's wake cell with the
//!    event's sequence (Release, under the shard's lock) before waking it. A watcher that
//!    verified it was idle when it filed itself knows every event between its position and
//!    the stamp went through the registry without touching its bucket, so it resumes at the
//!    stamp: an idle, selective watcher is never lapped by traffic it would have filtered
//!    out. A poll it was not woken for (a bookmark tick, or a spurious one) leaves it filed
//!    and changes only its waker, so the promise holds across such polls too. A watcher that
//!    leaves its bucket by itself (its second look found something) unfiles under the
//!    shard's lock and ignores any stamp. A watcher that has nothing to read when it starts
//!    (its start at the tail, after passing over the published entries its filter rejects) is
//!    filed at once, under the registry's lock, where the writer is not publishing, so it is
//!    verified idle from its first instant: traffic it would filter out cannot lap it before
//!    its first poll, however late that comes (a watch sends its initial events first).
//!    *Models: `register_deregister`, `wakeup`, `park_at_start`; filing only at the first poll
//!    lets others' events lap a watcher that was never polled (`weaken-no-park-at-start`).*
//! 7. **Chains.** Each entry has one link per role it plays for a bucket (namespace, trigger
//!    value, previous trigger value, name). Holding the registry's lock across the push, the
//!    writer publishes entry `t`, then, for each bucket it is in, stores `t` in the link of
//!    that bucket's previous entry (Release) and drains the bucket. A watcher that has read an
//!    entry of its bucket loads that entry's link (Acquire): a sequence number means the
//!    entry there is published (its slot and the tail were stored before the link), so the
//!    watcher reads it next and skips everything between, none of which is in its bucket;
//!    "pending" means its bucket has had no later event, and it parks (claim 5). Only entries
//!    published while the bucket was registered are chained (from the tail at its
//!    registration, under the same lock); a watcher scans below that. If the entry it waits
//!    on is overwritten, it scans on from just past it, and is lapped only if an entry it
//!    needs is gone. *Model: `chain`.*
//! 8. **Bookmarks** take no history slot. The hub's progress revision is stored by the
//!    writer (Release) after every event up to it was pushed, linked and drained. A bookmark
//!    tick flags one group of the watchers that asked for bookmarks (Release) and then wakes
//!    them through their wake cells. A flagged watcher loads the progress `R` (Acquire) and
//!    only then checks it has nothing left to read (not stamped while filed; or nothing past
//!    its cursor or link): then every event up to `R` it selects was delivered, and it sends
//!    a bookmark at `R`. The same order answers whether a parked watcher has delivered every
//!    event up to a revision (`Watcher::delivered_through`), which lets a watch that reaches
//!    its deadline end between revisions rather than inside one. *Model: `bookmark`; checking
//!    first and loading the progress after lets a bookmark overtake an event
//!    (`weaken-bookmark-progress-late`).*
//!
//! # Snapshot and revision publication ([`Cache`](crate::Cache))
//!
//! 9. The reflector publishes the hub, the current snapshot and the cache's revision as one
//!    immutable `View` (ArcSwap), and only then announces the revision (a tokio watch
//!    channel); both steps are `Store::publish` in `store.rs`, the only place views are
//!    stored. A reader that waited for revision `N` and then loads the state sees a state at
//!    `N` or later, never a half-applied write. *Model: `snapshot_publication`, with loom
//!    stand-ins for ArcSwap and the channel (neither runs under loom); announcing first makes
//!    it fail (`weaken-announce-early`).*
//! 10. **Progress.** A progress notification moves the hub's progress revision (claim 8) and
//!     publishes a new view at the notified revision with the same snapshot (claim 9). It
//!     takes no history slot and wakes no watcher.
//!
//! # The ring's length ([`EventRing::len`](crate::EventRing::len))
//!
//! 11. The length (the cache's history metric) is `tail - oldest`, with `oldest` computed from
//!     the same load of `tail` and clamped to it. Loading the tail a second time for `oldest`
//!     can see the writer's later pushes and a trim bound past the first load, and the
//!     subtraction underflows. *Model: `len`; with two loads it fails
//!     (`weaken-len-two-loads`: a length of 2^64 - 2 for a ring of 2).*
//!
//! # Revisions ([`Publisher::publish_revision`](crate::Publisher::publish_revision))
//!
//! 12. **A revision is published whole.** Several events may share a revision (one write that
//!     changed several keys). The hub stages every event of a revision, commits them with one
//!     tail store (claim 1), and only then links them into their buckets' chains and drains
//!     those buckets, in order, all under the registry's lock; the progress revision moves
//!     after the last drain (claim 8). A watcher therefore reads all of a revision or none of
//!     it: it cannot see a tail that covers one of its events but not another, a link is
//!     stored only after the tail that covers both, and a bookmark at the revision follows
//!     all of it. A revision is published once: a later event at the same revision is refused.
//!     *Model: `revision`, a watcher scanning the ring as the revision is committed;
//!     committing each event on its own lets it read half of the revision
//!     (`weaken-commit-each`).*
//!
//! # Laps ([`Watcher`](crate::Watcher))
//!
//! 13. **A lap is a loss only when something needed went.** A watcher keeps `complete`: the
//!     revision every entry up to which it has read, passed over as not its own (claim 6), or
//!     skipped as at or below its start. It moves to the previous revision when the watcher
//!     reads the first entry of a newer one (a revision's entries are adjacent and published
//!     together, claim 12), and to the last one read when nothing more is there. When the
//!     entry at its cursor is gone, the watcher asks the ring where the first entry after
//!     `complete` (or its start) is (claim 4): if that is still held, every entry that went
//!     had a revision at or below the floor, so at or below `complete`, and it resumes there;
//!     only otherwise is it `Expired`. So a watcher woken by an entry it would have skipped,
//!     which is then overwritten, goes on. A watcher's start passes over entries the same way
//!     (claim 6) and sets `complete` by the same rule: stopped at an entry of a revision it has
//!     passed other entries of, it has not completed that revision, and a lap before its first
//!     poll is a 410 (test `a_watcher_that_starts_inside_a_revision_never_resumes_past_it_after_a_lap`).
//!     *Model: `harmless_lap`; treating every lap as a 410 fails it (`weaken-no-lap-resume`).*
//!
//! # Catch-up ([`WatchHub::hand_over`](crate::WatchHub::hand_over), `catchup/`)
//!
//! 14. **The hand-over from the store to the ring loses nothing and repeats nothing.** A
//!     watcher the window cannot serve reads the store's history, a whole revision at a time,
//!     and after each one knows the revision `P` it has delivered every event up to. It then
//!     asks the current hub for a watcher *after `P`* (never *from now*): the start is found
//!     under the registry's lock, where the writer is not publishing (claim 6), so whatever
//!     the writer published since the catch-up last looked, above `P`, is delivered by the
//!     watcher, and nothing at or below `P` is. If the window no longer reaches back to `P`
//!     (the writer lapped it meanwhile) the hub refuses, and the catch-up reads on from the
//!     store; a `P` ahead of the ring is skipped up to as its events come. A watcher lapped
//!     later catches up again from the revision of its last delivery, skipping the events of
//!     that revision it already delivered. *Model: `handover`, a catch-up reading the store
//!     and handing over as the writer publishes, lapped and catching up again; handing over
//!     with a watch from now once the hub's revision looks caught up loses the events
//!     published in between (`weaken-handover-now`).*
