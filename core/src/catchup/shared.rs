//! Shared reads of the source's history: the catch-ups of one cache that need overlapping
//! ranges read the source once, each change decoded once, and each catch-up is a cursor into
//! what was read, as watchers are cursors into the ring.
//!
//! - **One read, many cursors.** A read keeps the revisions it read (decoded events, or a
//!   progress notification) in order, numbered. A catch-up joins a read whose kept revisions
//!   reach back to where the catch-up stands, at the first revision after it; it then needs no
//!   read of its own, nor a place in line ([`CatchUpReads`](crate::CatchUpReads)).
//! - **Paced by its fastest reader.** The read's task reads the source while the fastest
//!   reader has less than an eighth of its bound in bytes ahead of it, so a read nobody reads stops
//!   (the source bounds what it holds meanwhile: etcd's watch is canceled and opened again).
//! - **Bounded in bytes.** What the fastest reader has passed is kept up to the bound
//!   ([`CatchUpReads::with_read_bytes`](crate::CatchUpReads::with_read_bytes)) for
//!   the slower ones, and what every reader passed an eighth of that for catch-ups that join
//!   later; beyond that the oldest goes. A
//!   reader whose next revision went is *lapped*: it leaves and reads on from where it stands
//!   with a read of its own, which later catch-ups may join in turn. A slow client never holds
//!   a fast one back.
//! - **The end.** The read ends when its last reader leaves, or with the source's error: a
//!   compaction is the 410 of every reader below it, any other failure each reader's pause and
//!   a new read. It also ends when it gives its place in line up: its clients stopped reading,
//!   or it had its slice (from its first revision) and another waits. An ended read drops what
//!   it kept at once; its readers read on from where they stand with the next read they get.

use std::collections::{BTreeMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::Upstream;
use crate::event::Event;
use crate::rv::Revision;
use crate::source::{SourceChange, SourceError, SourceEvent};

/// What every reader has passed is kept up to this fraction of the bound, for catch-ups that
/// join later.
const TAIL: u64 = 8;

/// The read reads on while its fastest reader has less than this fraction of the bound ahead
/// of it. The source buffers what comes after (etcd's history reads, a backlog of their own).
const AHEAD: u64 = 8;

/// What one entry costs at least, whatever it holds (a notification holds no value).
const ENTRY_BYTES: usize = 64;

/// How far past a read's newest revision a catch-up may stand and still join it (it then waits
/// for the read to get there, rather than open a read of its own).
const JOIN_AHEAD: u64 = 4096;

/// How long a read that took a place may go without a first revision before its slice is
/// over all the same: opening a read of the source far behind may take a while, but one that
/// delivers nothing (a source that answers no longer) must not hold the place for good.
const FIRST_REVISION_LIMIT: Duration = Duration::from_secs(30);

/// One revision as a read of the source gave it.
pub(crate) enum Entry {
    /// The changes of one revision under the prefix, decoded once for every reader.
    Changes {
        revision: Revision,
        events: Vec<Decoded>,
    },
    /// Nothing under the prefix changed up to `revision`.
    Progress { revision: Revision },
}

impl Entry {
    fn revision(&self) -> Revision {
        match self {
            Entry::Changes { revision, .. } | Entry::Progress { revision } => *revision,
        }
    }
}

/// One change, decoded.
pub(crate) enum Decoded {
    Event(Event),
    /// A key outside the resource's layout: nobody's event.
    Outside,
    /// A deletion without the value it deleted (the source compacted it meanwhile): it cannot
    /// be delivered, and leaving it out would be a gap.
    LostPrev,
    /// The codec panicked on it (a bug the reflector's supervisor survives): it ends the watch
    /// of each reader that reaches it, not the task that reads.
    Panicked,
}

/// How a read ended.
#[derive(Clone, Copy, Debug)]
pub(crate) enum End {
    /// The source compacted the revisions it was to read, up to this one.
    Compacted(Revision),
    /// It broke (the source is unavailable, or the read's stream ended).
    Broken,
    /// It gave its place in line up (its clients stopped reading, or its slice is over): its
    /// readers go back in line at once, with no pause.
    GivenUp,
}

/// What a reader gets next.
pub(crate) enum Next {
    Entry(Arc<Entry>),
    /// What the reader needs next is gone from the read: it reads on with one of its own.
    Lapped,
    End(End),
}

struct State {
    /// Every revision above this one is in `entries` or yet to be read.
    floor: Revision,
    /// The number of `entries[0]`.
    base: u64,
    /// Each entry with the running total of bytes through it.
    entries: VecDeque<(Arc<Entry>, u64)>,
    /// The running total of bytes before `entries[0]`.
    base_total: u64,
    /// The number of the entry each reader takes next, and how many readers take it.
    readers: BTreeMap<u64, usize>,
    /// The bytes kept for slower readers; an eighth of it is read ahead of the fastest.
    limit: u64,
    /// Readers waiting at the head.
    waiting: Vec<Waker>,
    end: Option<End>,
    /// When a reader last took an entry, or every reader, waiting at the head, got one to
    /// take: the start of their idle time.
    taken: tokio::time::Instant,
}

impl State {
    fn head(&self) -> u64 {
        self.base + self.entries.len() as u64
    }

    /// The running total of bytes before entry `n` (`base <= n <= head`).
    fn total_before(&self, n: u64) -> u64 {
        match n.checked_sub(self.base + 1) {
            Some(i) => self.entries[i as usize].1,
            None => self.base_total,
        }
    }

    fn newest(&self) -> Revision {
        self.entries.back().map_or(self.floor, |(e, _)| e.revision())
    }

    /// The number of the entry the fastest reader takes next (`base` at least: the head when
    /// there is none).
    fn wanted(&self) -> u64 {
        self.readers
            .last_key_value()
            .map_or(self.head(), |(n, _)| *n)
            .clamp(self.base, self.head())
    }

    /// The number of the entry the slowest reader still in the read takes next: the head when
    /// there is none. A reader below `base` was lapped (it leaves when it next looks): it holds
    /// nothing back.
    fn slowest(&self) -> u64 {
        self.readers
            .range(self.base..)
            .next()
            .map_or(self.head(), |(n, _)| *n)
            .min(self.head())
    }

    /// Bytes read and not yet taken by the fastest reader.
    fn ahead(&self) -> u64 {
        self.total_before(self.head()) - self.total_before(self.wanted())
    }

    /// A reader comes to take entry `n` next.
    fn add_reader(&mut self, n: u64) {
        *self.readers.entry(n).or_default() += 1;
    }

    /// A reader that was to take entry `n` next leaves.
    fn remove_reader(&mut self, n: u64) {
        if let Some(count) = self.readers.get_mut(&n) {
            *count -= 1;
            if *count == 0 {
                self.readers.remove(&n);
            }
        }
    }
}

/// One read of the source's history, shared by the catch-ups that joined it.
pub(crate) struct SharedRead {
    state: Mutex<State>,
    /// Wakes the read's task when its fastest reader wants more, or a reader left.
    pump: Notify,
    /// Whose [`CacheStats::catch_up_bytes`](crate::CacheStats::catch_up_bytes) counts what
    /// `state` keeps.
    upstream: Arc<dyn Upstream>,
}

impl Drop for SharedRead {
    fn drop(&mut self) {
        let s = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        let held = s.total_before(s.head()) - s.base_total;
        self.upstream
            .stats()
            .catch_up_bytes
            .fetch_sub(held, Ordering::Relaxed);
    }
}

impl SharedRead {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A catch-up's place in a shared read; leaving the read when dropped.
pub(crate) struct Cursor {
    read: Arc<SharedRead>,
    /// The number of the entry this reader takes next.
    next: u64,
}

impl std::fmt::Debug for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursor")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl Cursor {
    /// The next entry, or `Pending` (with `cx` woken when the read has more) at the head.
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Next> {
        let mut s = self.read.lock();
        if self.next < s.base {
            return Poll::Ready(Next::Lapped);
        }
        let next = if let Some((entry, _)) = s.entries.get((self.next - s.base) as usize) {
            let entry = Arc::clone(entry);
            s.taken = tokio::time::Instant::now();
            s.remove_reader(self.next);
            self.next += 1;
            s.add_reader(self.next);
            Poll::Ready(Next::Entry(entry))
        } else if let Some(end) = s.end {
            Poll::Ready(Next::End(end))
        } else {
            if !s.waiting.iter().any(|w| w.will_wake(cx.waker())) {
                s.waiting.push(cx.waker().clone());
            }
            Poll::Pending
        };
        let wake_pump = s.ahead() < s.limit / AHEAD;
        drop(s);
        if wake_pump {
            self.read.pump.notify_one();
        }
        next
    }
}

impl Drop for Cursor {
    fn drop(&mut self) {
        self.read.lock().remove_reader(self.next);
        self.read.pump.notify_one();
    }
}

/// The shared reads of one cache.
#[derive(Default)]
pub(crate) struct SharedReads {
    reads: Mutex<Vec<Weak<SharedRead>>>,
    /// Wakes the catch-ups in line when a read starts, or reaches further than before: one
    /// may join it rather than wait on.
    pub(crate) joinable: Notify,
    /// Wakes the catch-ups in line when the cache is dropped.
    pub(crate) closing: Notify,
}

impl SharedReads {
    /// A place in a read whose kept revisions reach back to `position` (every revision above
    /// it is kept or yet to be read), at the first revision above it.
    pub(crate) fn join(&self, position: Revision) -> Option<Cursor> {
        let mut reads = self.reads.lock().unwrap_or_else(|p| p.into_inner());
        reads.retain(|r| r.strong_count() > 0);
        for read in reads.iter().filter_map(Weak::upgrade) {
            let mut s = read.lock();
            if s.end.is_some() || s.floor > position || position.get() > s.newest().get() + JOIN_AHEAD {
                continue;
            }
            let next = s.base
                + s.entries
                    .iter()
                    .take_while(|(e, _)| e.revision() <= position)
                    .count() as u64;
            s.add_reader(next);
            drop(s);
            return Some(Cursor { read, next });
        }
        None
    }

    /// Ends every read under way, waking its readers and the catch-ups in line (the cache is
    /// dropped).
    pub(crate) fn end_all(&self) {
        let reads = self.reads.lock().unwrap_or_else(|p| p.into_inner());
        for read in reads.iter().filter_map(Weak::upgrade) {
            finish(&read, End::Broken);
        }
        drop(reads);
        self.closing.notify_waiters();
    }

    /// A new read of `upstream`'s source from revision `from` (inclusive), holding `permit`
    /// while it reads; its first reader's place, at its start.
    pub(crate) fn start(
        &self,
        upstream: Arc<dyn Upstream>,
        from: Revision,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Cursor {
        let read = Arc::new(SharedRead {
            state: Mutex::new(State {
                floor: Revision::new(from.get().saturating_sub(1)),
                base: 0,
                entries: VecDeque::new(),
                base_total: 0,
                readers: BTreeMap::from([(0, 1)]),
                limit: upstream.reads().read_bytes as u64,
                waiting: Vec::new(),
                end: None,
                taken: tokio::time::Instant::now(),
            }),
            pump: Notify::new(),
            upstream: Arc::clone(&upstream),
        });
        upstream.stats().catch_up_reads.fetch_add(1, Ordering::Relaxed);
        self.reads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::downgrade(&read));
        tokio::spawn(pump(Arc::clone(&read), upstream, from, permit));
        self.joinable.notify_waiters();
        Cursor { read, next: 0 }
    }
}

/// The read's task: reads the source while its fastest reader wants more, decodes each
/// revision once, and ends with its last reader, the source's error, or when it gives its place
/// up (its clients stopped reading, or its slice is over and another waits in line).
async fn pump(
    read: Arc<SharedRead>,
    upstream: Arc<dyn Upstream>,
    from: Revision,
    permit: Option<OwnedSemaphorePermit>,
) {
    // However the task ends (a panic in the source's stream included), no reader waits on.
    let _end = EndOnDrop(Arc::clone(&read));
    let mut history = upstream.history(from);
    let reads = upstream.reads();
    // Only a read that took a place in line gives it up for the next, and only once it had its
    // slice from its first revision (or `FIRST_REVISION_LIMIT` went by without one): opening a
    // read of the source far behind may take a while, and a read given up before it delivered
    // anything would make no progress.
    let slice = permit.as_ref().map(|_| reads.slice);
    let mut first_revision = true;
    // The newest revision the catch-ups in line were last told this read reaches.
    let mut told = from;
    let mut turn = Turn {
        idle: reads.idle,
        slice_end: slice
            .and_then(|slice| tokio::time::Instant::now().checked_add(slice.max(FIRST_REVISION_LIMIT))),
        recheck: (reads.slice / 8).max(Duration::from_millis(10)),
        in_line: &reads.in_line,
        permits: &reads.permits,
    };
    loop {
        // Until a reader wants more (or none is left). A notification sent before `enable`
        // is kept for it (`notify_one`).
        let look_again = loop {
            let notified = read.pump.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let look_again = {
                let mut s = read.lock();
                if s.readers.is_empty() {
                    // Under the lock: no catch-up joins a read that is going.
                    s.end = Some(End::Broken);
                    return;
                }
                // Ended from outside (its cache was dropped): the place goes back.
                if s.end.is_some() {
                    return;
                }
                let Some(look_again) = turn.look(&s) else {
                    return give_up(&read, &mut s);
                };
                if s.ahead() < s.limit / AHEAD {
                    break look_again;
                }
                look_again
            };
            drop(tokio::time::timeout_at(look_again, notified).await);
        };
        let next = tokio::select! {
            next = history.next() => next,
            // A reader left (the read may have none left) or wants more: looked at again.
            () = read.pump.notified() => continue,
            // Its readers may have stopped reading, or its slice be over.
            () = tokio::time::sleep_until(look_again) => continue,
        };
        let (entry, bytes) = match next {
            Some(Ok(SourceEvent::Changes { revision, changes })) => {
                let bytes = changes.iter().map(SourceChange::bytes).sum::<usize>();
                let events = changes
                    .into_iter()
                    .map(|change| {
                        std::panic::catch_unwind(AssertUnwindSafe(|| decoded(&*upstream, revision, change)))
                            .unwrap_or(Decoded::Panicked)
                    })
                    .collect();
                (Entry::Changes { revision, events }, bytes)
            }
            Some(Ok(SourceEvent::Progress { revision })) => (Entry::Progress { revision }, 0),
            Some(Err(SourceError::Compacted { compact_revision })) => {
                return finish(&read, End::Compacted(compact_revision));
            }
            Some(Err(_)) | None => return finish(&read, End::Broken),
        };
        let mut s = read.lock();
        if s.end.is_some() {
            return;
        }
        if s.newest() >= entry.revision() {
            // Not above what was read (a source repeating a notification): nothing new.
            continue;
        }
        let total = s.total_before(s.head()) + (bytes + ENTRY_BYTES) as u64;
        if s.wanted() >= s.head() {
            // Every reader waited at the head: from now on they have an entry to take, and
            // their idle time starts (not while the source was read, however slow).
            s.taken = tokio::time::Instant::now();
        }
        s.entries.push_back((Arc::new(entry), total));
        if std::mem::take(&mut first_revision) {
            turn.slice_end = slice.and_then(|slice| tokio::time::Instant::now().checked_add(slice));
        }
        // Catch-ups in line too far ahead to join it at its start may join it now.
        let newest = s.newest();
        let reaches_further = newest.get() >= told.get().saturating_add(JOIN_AHEAD / 2);
        let kept_before = s.base_total;
        // What the fastest reader passed is kept for the others up to the bound; what every
        // reader passed, only as a short tail for catch-ups that join later.
        while (s.base < s.wanted() && total - s.base_total > s.limit)
            || (s.base < s.slowest() && s.total_before(s.slowest()) - s.base_total > s.limit / TAIL)
        {
            let (gone, through) = s.entries.pop_front().expect("below a reader, so kept");
            s.base += 1;
            s.base_total = through;
            s.floor = gone.revision();
        }
        // What came in, less what went.
        let gauge = &upstream.stats().catch_up_bytes;
        gauge.fetch_add((bytes + ENTRY_BYTES) as u64, Ordering::Relaxed);
        gauge.fetch_sub(s.base_total - kept_before, Ordering::Relaxed);
        let waiting = std::mem::take(&mut s.waiting);
        drop(s);
        waiting.into_iter().for_each(Waker::wake);
        if reaches_further {
            told = newest;
            upstream.shared().joinable.notify_waiters();
        }
    }
}

/// When a read gives its place in line up.
struct Turn<'a> {
    /// When every reader leaves what it read untaken this long (their clients stopped
    /// reading).
    idle: Duration,
    /// When its slice is over, if it took a place (from its first revision on): it then gives
    /// it up once another waits.
    slice_end: Option<tokio::time::Instant>,
    /// How often it looks whether another waits, once its slice is over.
    recheck: Duration,
    /// How many wait in line.
    in_line: &'a AtomicUsize,
    /// The places: one free serves the next in line without this read giving its own up.
    permits: &'a Semaphore,
}

impl Turn<'_> {
    /// `None`: the read gives its place up now. Otherwise when to look again (at the latest:
    /// the read looks at every turn of its task).
    fn look(&self, s: &State) -> Option<tokio::time::Instant> {
        let now = tokio::time::Instant::now();
        // A day: as good as never, and within the clock's range.
        let mut at = now + Duration::from_secs(86_400);
        if let Some(idle_at) = idle_at(s, self.idle) {
            if idle_at <= now {
                return None;
            }
            at = at.min(idle_at);
        }
        if let Some(end) = self.slice_end {
            if end > now {
                at = at.min(end);
            } else if self.in_line.load(Ordering::Relaxed) > 0 && self.permits.available_permits() == 0 {
                return None;
            } else {
                at = at.min(now + self.recheck);
            }
        }
        Some(at)
    }
}

/// When the read gives its place up if no reader takes an entry meanwhile: `idle` after the
/// last one taken, while every reader has entries to take (their clients stopped reading; one
/// waiting at the head waits for the source, not for its client). `None`: not while a reader
/// waits at the head (or never, for an `idle` past the clock's range).
fn idle_at(s: &State, idle: Duration) -> Option<tokio::time::Instant> {
    if s.wanted() >= s.head() {
        return None;
    }
    s.taken.checked_add(idle)
}

/// The clients of every reader stopped reading, or its slice is over and another waits: the
/// read's place in line goes to the next, and what it holds goes. It drops every entry, as if
/// every reader were lapped, and ends; its readers, when they look again, read on from where
/// they stand with the next read they get.
fn give_up(read: &SharedRead, s: &mut State) {
    s.end = Some(End::GivenUp);
    drop_entries(read, s);
}

/// Drops every entry the read keeps, as if every reader were lapped.
fn drop_entries(read: &SharedRead, s: &mut State) {
    let held = s.total_before(s.head()) - s.base_total;
    s.floor = s.newest();
    s.base = s.head();
    s.base_total += held;
    s.entries.clear();
    read.upstream
        .stats()
        .catch_up_bytes
        .fetch_sub(held, Ordering::Relaxed);
}

/// Ends its read as broken when the read's task ends without saying how.
struct EndOnDrop(Arc<SharedRead>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        finish(&self.0, End::Broken);
    }
}

/// Ends the read with `end` (unless it ended already), waking its readers. What it holds goes
/// at once: its task no longer trims it, so a reader whose client stopped reading would
/// otherwise hold it until its watch ends. Readers behind the head read on from where they
/// stand with the next read they get, as after a give-up; readers at the head meet `end`.
fn finish(read: &SharedRead, end: End) {
    let mut s = read.lock();
    s.end.get_or_insert(end);
    drop_entries(read, &mut s);
    let waiting = std::mem::take(&mut s.waiting);
    drop(s);
    waiting.into_iter().for_each(Waker::wake);
    // Its task, if it still runs, stops reading and gives its place back.
    read.pump.notify_one();
}

/// The event one change of the source makes: paired with the previous value the source sent
/// along (the reflector pairs it with the version its snapshot holds, the same one).
fn decoded(upstream: &dyn Upstream, revision: Revision, change: SourceChange) -> Decoded {
    let event = match change {
        // etcd leaves the previous value out when it cannot read it (compacted meanwhile): an
        // update's watchers cannot be told what it changed (a selective one, that the object
        // left its selection).
        SourceChange::Put {
            key,
            value,
            prev: None,
            created: false,
        } => {
            return match upstream.decode(&key, &value, revision) {
                Some(_) => Decoded::LostPrev,
                None => Decoded::Outside,
            };
        }
        SourceChange::Put { key, value, prev, .. } => upstream.decode(&key, &value, revision).map(|object| {
            match prev.and_then(|p| upstream.decode(&key, &p.value, p.mod_revision)) {
                Some(prev) => Event::Modified { object, prev },
                None => Event::Added { object },
            }
        }),
        SourceChange::Delete { prev: None, .. } => return Decoded::LostPrev,
        SourceChange::Delete {
            key,
            prev: Some(prev),
        } => upstream
            .decode(&key, &prev.value, prev.mod_revision)
            .map(|prev| Event::Deleted { revision, prev }),
    };
    event.map_or(Decoded::Outside, Decoded::Event)
}
