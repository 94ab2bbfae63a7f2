//! Catch-up from the source: a watch the history window cannot serve is served from the
//! source's own history instead, and then handed over to the ring.
//!
//! The window holds the newest events only. A watch that starts below it, or a watcher the
//! writer laps while its client still reads, would end with 410 Expired and make its client
//! list everything again; yet the source (etcd, or the embedded store's change log) still holds
//! every revision since its last compaction. So such a watcher reads the source instead: a
//! watch of the resource's prefix from the revision it needs, each change decoded as the
//! reflector decodes it and paired with the previous value the source sends along, then
//! filtered as the ring's events are. After each whole revision it tries to attach to the
//! current hub after that revision; once the window reaches back that far, it does, and reads
//! on from the ring. Every revision up to the hand-over came from the source, every one after
//! it from the ring: no gap, no duplicate (claim 14 of [`protocol`](crate::protocol)). A
//! revision the source compacted ends the watch with 410; so do, as the only other cases, what
//! a catch-up cannot deliver (an update or deletion whose previous value the source lost, a
//! codec's panic), a cache dropped under it, and, only where the reads are told to bound it,
//! a wait in line longer than [`CatchUpReads::with_queue_wait`].
//!
//! Catch-ups over overlapping ranges share one read of the source, each change decoded once
//! (the `shared` module). How many reads of the source run at once is bounded
//! ([`CatchUpReads`]); a catch-up no read can take waits in line, first come first served,
//! reading nothing meanwhile (it joins a read another starts meanwhile, if that one serves
//! it), and the places go round: a read gives its place to the next in line after a slice
//! from its first revision, or at once when its clients stop reading.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use futures_util::StreamExt;

use crate::config::{CacheConfig, CatchUpReads};
use crate::event::{Delivery, EventKind};
use crate::filter::Filter;
use crate::object::{Codec, ObjectVersion};
use crate::progress::{OwnedWaiting, Requester};
use crate::reflector::decode_checked;
use crate::rv::Revision;
mod shared;

use crate::source::{Source, SourceError, SourceEvent};
use crate::stats::CacheStats;
use crate::store::Store;
use crate::watcher::{Expired, Watcher};
pub(crate) use shared::SharedReads;
use shared::{Cursor, Decoded, End, Entry, Next};

/// The events of one revision of the source, as a watch of the source yields them.
type History = Pin<Box<dyn Stream<Item = Result<SourceEvent, SourceError>> + Send>>;

/// What a catch-up needs of its cache: its source's history, its decoder, and its current hub.
pub(crate) trait Upstream: Send + Sync + 'static {
    /// The source's changes from revision `from` on (inclusive).
    fn history(&self, from: Revision) -> History;
    /// One value decoded as the reflector decodes it (`None`: a key outside the layout).
    fn decode(&self, key: &str, value: &[u8], revision: Revision) -> Option<Arc<ObjectVersion>>;
    /// Hands the catch-up over to the current hub: a watcher of every event after
    /// `position` (`None` while the window does not reach back to it).
    fn attach(&self, filter: &Filter, bookmarks: bool, position: Revision) -> Option<Watcher>;
    /// The source's compacted revision, as far as it is known (0 when not).
    fn compacted(&self) -> Revision;
    /// The oldest revision a watch can start after in the current window.
    fn floor(&self) -> Revision;
    /// Whether the current window holds a change above `position`.
    fn changed_above(&self, position: Revision) -> bool;
    /// The bound on reads at once.
    fn reads(&self) -> &CatchUpReads;
    /// Asks the source for progress notifications on the prefix while the registration lives
    /// (one request at a time for the whole cache).
    fn want_progress(&self) -> OwnedWaiting;
    /// The cache's counters.
    fn stats(&self) -> &CacheStats;
    /// How often a watcher that asked for bookmarks gets one.
    fn bookmark_interval(&self) -> Duration;
    /// The reads of the source under way, which catch-ups join.
    fn shared(&self) -> &SharedReads;
    /// Marks the cache dropped: no hub will follow the last one, so catch-ups end (cleanly
    /// between two revisions) rather than read on for a hand-over that cannot come.
    fn close(&self);
    /// Whether the cache was dropped.
    fn closed(&self) -> bool;
}

/// A cache's [`Upstream`]: holds what the reflector holds, not the cache (a watch does not
/// keep a dropped cache's reflector running).
pub(crate) struct CacheUpstream<S> {
    pub(crate) source: Arc<S>,
    pub(crate) codec: Arc<dyn Codec>,
    pub(crate) config: Arc<CacheConfig>,
    pub(crate) store: Arc<Store>,
    pub(crate) reads: CatchUpReads,
    pub(crate) requester: Arc<Requester>,
    pub(crate) shared: SharedReads,
    /// Set when the cache is dropped.
    pub(crate) dropped: AtomicBool,
}

impl<S: Source> Upstream for CacheUpstream<S> {
    fn history(&self, from: Revision) -> History {
        let source = Arc::clone(&self.source);
        let prefix = self.config.prefix.clone();
        let open = async move { source.watch_history(&prefix, from).await };
        Box::pin(
            futures_util::stream::once(open)
                .map(|opened| match opened {
                    Ok(watch) => futures_util::future::Either::Left(watch),
                    Err(e) => futures_util::future::Either::Right(futures_util::stream::iter([Err(e)])),
                })
                .flatten(),
        )
    }

    fn decode(&self, key: &str, value: &[u8], revision: Revision) -> Option<Arc<ObjectVersion>> {
        decode_checked(&self.codec, &self.config, key, value, revision, |_| {})
    }

    fn attach(&self, filter: &Filter, bookmarks: bool, position: Revision) -> Option<Watcher> {
        let view = self.store.load()?;
        // Tried after every revision read: refused before the filter is cloned for a watcher.
        if position < view.hub.floor() {
            return None;
        }
        view.hub.hand_over(filter.clone(), bookmarks, position).ok()
    }

    fn compacted(&self) -> Revision {
        self.source.compacted_revision()
    }

    fn floor(&self) -> Revision {
        self.store.load().map_or(Revision::ZERO, |v| v.hub.floor())
    }

    fn changed_above(&self, position: Revision) -> bool {
        self.store
            .load()
            .and_then(|v| v.hub.newest_event())
            .is_some_and(|newest| newest > position)
    }

    fn reads(&self) -> &CatchUpReads {
        &self.reads
    }

    fn want_progress(&self) -> OwnedWaiting {
        self.requester.wait_owned()
    }

    fn stats(&self) -> &CacheStats {
        &self.store.stats
    }

    fn bookmark_interval(&self) -> Duration {
        self.config.bookmark_interval
    }

    fn close(&self) {
        // Release pairs with the Acquire load in `closed`. Stored before the cache's drop
        // aborts the reflector, whose publisher closes the hub as it drops: a watcher that
        // finds the hub closed finds this too.
        self.dropped.store(true, Ordering::Release);
        // Catch-ups waiting on a read wake, and find the cache gone.
        self.shared.end_all();
    }

    fn closed(&self) -> bool {
        // Acquire pairs with the Release store in `close`.
        self.dropped.load(Ordering::Acquire)
    }

    fn shared(&self) -> &SharedReads {
        &self.shared
    }
}

/// The first pause before a broken read of the source is opened again; doubles up to
/// `MAX_PAUSE`.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(5);

enum State {
    /// In line for a read: a task of its own waits for the place and starts the read, whether
    /// or not the watch is polled meanwhile, so that a client that stopped reading while in
    /// line holds the place it is given no longer than a read's idle time. `None` once it
    /// waited longer than it was told to.
    Queued(tokio::sync::oneshot::Receiver<Option<Cursor>>),
    /// Reading the source, in a read it may share with other catch-ups.
    Reading {
        cursor: Cursor,
        /// At the head of the source's history with the hand-over refused (the window starts
        /// above where the catch-up stands, and the prefix has had no change since): the
        /// progress notifications asked for move it up to the window.
        waiting: Option<OwnedWaiting>,
    },
    /// The read broke: opened again after a pause, in line again.
    Paused(Pin<Box<tokio::time::Sleep>>),
}

/// What one poll of a catch-up came to.
pub(crate) enum Caught<R> {
    /// A delivery, lent to the caller's closure.
    Delivered(R),
    /// The window reaches back to where the catch-up stands: the watcher to read on from.
    HandedOver(Watcher),
    /// The source compacted the revision the catch-up needed.
    Expired(Expired),
    /// The cache was dropped (its resource served anew, or no longer served) while the
    /// catch-up stood between two revisions: the watch ends cleanly, and its client resumes
    /// from its last resourceVersion, losing nothing.
    Closed,
}

/// One watcher's catch-up: where it stands in the source's history, the revision it is
/// delivering, and its read.
pub(crate) struct CatchUp {
    upstream: Arc<dyn Upstream>,
    filter: Filter,
    bookmarks: bool,
    state: State,
    /// Every event up to this revision was delivered (or does not concern the watcher).
    position: Revision,
    /// The revision being delivered, and the index of its next change to look at.
    current: Option<(Arc<Entry>, usize)>,
    /// Deliveries of revision `skip_at` the watcher had before it was lapped, not delivered
    /// again; no hand-over until they are passed.
    skip: usize,
    skip_at: Revision,
    pause: Duration,
    /// When a watcher that asked for bookmarks gets its next one, and the revision of its last
    /// (a long catch-up tells its client how far it got, as the window's bookmarks do). Looked
    /// at as the catch-up reads: one waiting in line or paused gets none meanwhile.
    next_bookmark: tokio::time::Instant,
    bookmarked: Revision,
}

impl fmt::Debug for CatchUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CatchUp")
            .field("filter", &self.filter)
            .field("position", &self.position)
            .field("skip", &self.skip)
            .finish_non_exhaustive()
    }
}

impl CatchUp {
    /// A catch-up of `filter` from revision `from` (inclusive), not delivering again the first
    /// `skip` deliveries of that revision.
    pub(crate) fn start(
        upstream: Arc<dyn Upstream>,
        filter: Filter,
        bookmarks: bool,
        from: Revision,
        skip: usize,
    ) -> CatchUp {
        upstream.stats().catch_ups.fetch_add(1, Ordering::Relaxed);
        let state = join_or_queue(&upstream, Revision::new(from.get().saturating_sub(1)));
        let next_bookmark = tokio::time::Instant::now() + upstream.bookmark_interval();
        CatchUp {
            upstream,
            filter,
            bookmarks,
            state,
            position: Revision::new(from.get().saturating_sub(1)),
            current: None,
            skip,
            skip_at: from,
            pause: FIRST_PAUSE,
            next_bookmark,
            // A lapped watcher's last bookmark may be at its start: none again there.
            bookmarked: Revision::new(from.get().saturating_sub(1)),
        }
    }

    /// The revision every event up to which was delivered.
    pub(crate) fn position(&self) -> Revision {
        self.position
    }

    /// Polls for the next delivery, the hand-over, or the end.
    pub(crate) fn poll_next_with<R>(
        &mut self,
        cx: &mut Context<'_>,
        f: impl FnOnce(Delivery<'_>) -> R,
    ) -> Poll<Caught<R>> {
        loop {
            // Its cache dropped, the revision it is delivering is finished from what it holds
            // (its events are all in `current`); then, between two revisions, it ends cleanly.
            // Inside one (a resume within a revision it has not reached again) a clean end
            // would lose the revision's rest: 410.
            if self.upstream.closed() && self.current.is_none() {
                return Poll::Ready(if self.skip == 0 {
                    Caught::Closed
                } else {
                    Caught::Expired(Expired {
                        requested: self.position,
                        oldest: self.upstream.floor(),
                    })
                });
            }
            if let Some((entry, next)) = &mut self.current {
                let Entry::Changes { revision, events } = &**entry else {
                    unreachable!("only changes are delivered");
                };
                let revision = *revision;
                while let Some(decoded) = events.get(*next) {
                    *next += 1;
                    let event = match decoded {
                        Decoded::Event(event) => event,
                        Decoded::Outside => continue,
                        // A deletion that cannot be delivered, or a codec that panicked: this
                        // watch ends as a closed hub ends its watchers.
                        Decoded::LostPrev | Decoded::Panicked => {
                            self.current = None;
                            return Poll::Ready(Caught::Expired(Expired {
                                requested: self.position,
                                oldest: self.upstream.floor(),
                            }));
                        }
                    };
                    let Some(delivery) = self.filter.deliver(event) else {
                        continue;
                    };
                    if self.skip > 0 && revision == self.skip_at {
                        self.skip -= 1;
                        continue;
                    }
                    self.upstream
                        .stats()
                        .catch_up_events
                        .fetch_add(1, Ordering::Relaxed);
                    return Poll::Ready(Caught::Delivered(f(delivery)));
                }
                self.current = None;
                self.position = revision;
                if revision >= self.skip_at {
                    self.skip = 0;
                }
            }
            if self.skip == 0
                && let Some(watcher) = self.upstream.attach(&self.filter, self.bookmarks, self.position)
            {
                self.upstream
                    .stats()
                    .catch_up_handovers
                    .fetch_add(1, Ordering::Relaxed);
                return Poll::Ready(Caught::HandedOver(watcher));
            }
            if self.bookmarks && self.skip == 0 && self.position > self.bookmarked {
                let now = tokio::time::Instant::now();
                if now >= self.next_bookmark {
                    self.next_bookmark = now + self.upstream.bookmark_interval();
                    self.bookmarked = self.position;
                    return Poll::Ready(Caught::Delivered(f(Delivery {
                        kind: EventKind::Bookmark,
                        revision: self.position,
                        object: None,
                        initial_events_end: false,
                    })));
                }
            }
            match &mut self.state {
                State::Queued(place) => match std::task::ready!(Pin::new(place).poll(cx)) {
                    Ok(Some(cursor)) => {
                        self.state = State::Reading {
                            cursor,
                            waiting: None,
                        };
                    }
                    // The cache was dropped while this catch-up was in line: its end, above.
                    Ok(None) if self.upstream.closed() => {}
                    Ok(None) => {
                        self.upstream
                            .stats()
                            .catch_ups_refused
                            .fetch_add(1, Ordering::Relaxed);
                        return Poll::Ready(Caught::Expired(Expired {
                            requested: self.position,
                            oldest: self.upstream.floor(),
                        }));
                    }
                    // The task in line ended without an answer (its runtime shuts down): in line
                    // again after a pause, as after a broken read.
                    Err(_) => {
                        let pause = self.pause;
                        self.pause = (self.pause * 2).min(MAX_PAUSE);
                        self.state = State::Paused(Box::pin(tokio::time::sleep(pause)));
                    }
                },
                State::Paused(sleep) => {
                    std::task::ready!(sleep.as_mut().poll(cx));
                    self.state = join_or_queue(&self.upstream, self.position);
                }
                State::Reading { cursor, waiting } => match cursor.poll_next(cx) {
                    Poll::Pending => {
                        // Progress is asked for only where it is what moves the catch-up: when
                        // the window holds no change above where it stands, its read may have
                        // reached the head of the source's history. A change above it in the
                        // window is in the source's history too, and the read brings it (asking
                        // would cost etcd a write per request where its notifications are not
                        // ordered).
                        if self.skip == 0 && waiting.is_none() && !self.upstream.changed_above(self.position)
                        {
                            *waiting = Some(self.upstream.want_progress());
                        }
                        return Poll::Pending;
                    }
                    Poll::Ready(Next::Entry(entry)) => {
                        *waiting = None;
                        match &*entry {
                            Entry::Changes { revision, .. } => {
                                if *revision > self.position {
                                    self.pause = FIRST_PAUSE;
                                    self.current = Some((entry, 0));
                                }
                            }
                            Entry::Progress { revision } => {
                                // Nothing under the prefix changed up to `revision`: a watcher in
                                // the middle of skipping stays where it is (the skipped revision
                                // is ahead).
                                if self.skip == 0 && *revision > self.position {
                                    self.position = *revision;
                                }
                            }
                        }
                    }
                    // Its read went on without it: it reads on from where it stands.
                    Poll::Ready(Next::Lapped) => {
                        self.state = join_or_queue(&self.upstream, self.position);
                    }
                    // A read shared from below this catch-up may end at a compaction this
                    // one is above: it reads on alone.
                    Poll::Ready(Next::End(End::Compacted(compact_revision)))
                        if compact_revision <= self.position =>
                    {
                        self.state = join_or_queue(&self.upstream, self.position);
                    }
                    Poll::Ready(Next::End(End::Compacted(compact_revision))) => {
                        return Poll::Ready(Caught::Expired(Expired {
                            requested: self.position,
                            oldest: compact_revision.max(self.upstream.compacted()),
                        }));
                    }
                    // Its read gave its place to the next in line: back in line at once.
                    Poll::Ready(Next::End(End::GivenUp)) => {
                        self.state = join_or_queue(&self.upstream, self.position);
                    }
                    Poll::Ready(Next::End(End::Broken)) => {
                        let pause = self.pause;
                        self.pause = (self.pause * 2).min(MAX_PAUSE);
                        self.state = State::Paused(Box::pin(tokio::time::sleep(pause)));
                    }
                },
            }
        }
    }
}

/// A place in a read of `upstream`'s source that serves every revision above `position`, or
/// in line for a read of its own.
fn join_or_queue(upstream: &Arc<dyn Upstream>, position: Revision) -> State {
    match upstream.shared().join(position) {
        Some(cursor) => State::Reading {
            cursor,
            waiting: None,
        },
        None => queue(upstream, position),
    }
}

/// In line for a read of `upstream`'s source serving every revision above `position`: until a
/// place is free, or (if the reads are told so) until the wait is too long. A task waits in
/// line and starts the read as soon as it has the place: a place given to a watch that is not
/// polled (its client stopped reading) would otherwise stay unused, and the line behind it
/// stuck, until the watch ends. Started, the read gives the place up after its idle time.
fn queue(upstream: &Arc<dyn Upstream>, position: Revision) -> State {
    let reads = upstream.reads();
    let (permits, wait) = (Arc::clone(&reads.permits), reads.queue_wait);
    let in_line = InLine::new(&reads.in_line);
    let upstream = Arc::clone(upstream);
    let (mut answer, place) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let acquire = async {
            match wait {
                Some(wait) => tokio::time::timeout(wait, permits.acquire_owned())
                    .await
                    .ok()
                    .and_then(Result::ok),
                None => permits.acquire_owned().await.ok(),
            }
        };
        tokio::pin!(acquire);
        let shared = upstream.shared();
        // Created before the cache's state is looked at: no wake-up between is lost
        // (`notify_waiters` reaches every `Notified` created before it).
        let closing = shared.closing.notified();
        tokio::pin!(closing);
        let permit = loop {
            let joinable = shared.joinable.notified();
            tokio::pin!(joinable);
            if upstream.closed() {
                let _ = answer.send(None);
                return;
            }
            // A read started, or reaching further, since this catch-up queued (or since it last
            // looked) may serve it: it joins it and leaves the line, needing no place.
            if let Some(cursor) = shared.join(position) {
                drop(in_line);
                let _ = answer.send(Some(cursor));
                return;
            }
            tokio::select! {
                permit = &mut acquire => break permit,
                // The watch ended while in line: it leaves the line.
                () = answer.closed() => return,
                // The cache was dropped: the watch, woken, finds it closed.
                () = &mut closing => {
                    let _ = answer.send(None);
                    return;
                }
                () = &mut joinable => {}
            }
        };
        drop(in_line);
        // The cache was dropped meanwhile: no read (the watch, woken, finds it closed).
        let permit = permit.filter(|_| !upstream.closed());
        let cursor = permit.map(|permit| match upstream.shared().join(position) {
            // A read another catch-up started meanwhile may serve this one after all.
            Some(cursor) => cursor,
            None => upstream
                .shared()
                .start(Arc::clone(&upstream), position.successor(), Some(permit)),
        });
        // A watch gone meanwhile drops the cursor with the answer: its read ends.
        let _ = answer.send(cursor);
    });
    State::Queued(place)
}

/// Counts a catch-up in line while it lives: from when it queues until it has its place, or
/// its watch ends first.
struct InLine(Arc<AtomicUsize>);

impl InLine {
    fn new(count: &Arc<AtomicUsize>) -> InLine {
        count.fetch_add(1, Ordering::Relaxed);
        InLine(Arc::clone(count))
    }
}

impl Drop for InLine {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
