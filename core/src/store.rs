//! The store: the state the [reflector](crate::reflector) writes and the
//! [cache](crate::Cache) reads, as one immutable [`View`] at a time.
//!
//! A view holds the hub of the current list-watch generation, the current snapshot and the
//! cache's revision. The state at an older revision of the history window is made on demand
//! from the current snapshot and the ring ([`View::at`]); the snapshots paginated LISTs are
//! reading are pinned in the store for as long as they are used ([`Store::pin`]), so that the
//! pages of one LIST read one snapshot however many writes go by, and snapshots no LIST asked
//! for cost nothing. The reflector builds each view whole and [`Store::publish`]es it: stored
//! through `ArcSwap` first, then its revision announced on a tokio watch channel. A reader
//! that waited for revision `N` on the channel and then loads the view sees `N` or later, and
//! a reader that loads the view once sees the hub, the snapshots and the revision agree
//! (claim 9 of [`protocol`](crate::protocol), model `snapshot_publication`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::sync::watch;

use tokio::time::Instant;

use crate::continue_token::Tokens;
use crate::loom::unpoisoned;
use crate::rv::Revision;
use crate::snapshot::Snapshot;
use crate::stats::CacheStats;
use crate::watcher::{Expired, WatchHub};

/// What readers see, published as a whole.
#[derive(Debug)]
pub(crate) struct View {
    pub(crate) hub: WatchHub,
    /// The current state: the snapshot after the last event the view includes.
    pub(crate) current: Arc<Snapshot>,
    /// The cache's revision: at least the snapshot's (progress notifications raise it).
    pub(crate) revision: Revision,
}

impl View {
    /// The current state.
    pub(crate) fn current(&self) -> &Arc<Snapshot> {
        &self.current
    }

    /// The oldest revision a watch can start after, or a LIST read exactly: the history
    /// window's floor (every event after it is still in the ring).
    pub(crate) fn oldest(&self) -> Revision {
        self.hub.floor()
    }

    /// The state at `revision` (at most the cache's revision): the current snapshot when no
    /// event the view includes came after it, else the current snapshot with the ring's
    /// events after `revision` undone. `Expired` once the window no longer holds them all.
    pub(crate) fn at(&self, revision: Revision) -> Result<Arc<Snapshot>, Expired> {
        let current = &self.current;
        if revision >= current.revision() {
            return Ok(Arc::clone(current));
        }
        let events = self.hub.events_between(revision, current.revision())?;
        Ok(Arc::new(current.undo(&events, revision)))
    }
}

/// How many snapshots paginated LISTs may keep pinned per cache. Beyond it the least recently
/// used goes: its next page is then made from the ring, or read from the source, or 410.
const MAX_PINNED: usize = if cfg!(miri) { 4 } else { 64 };

/// A snapshot a paginated LIST is reading, and when a page of it was last served.
#[derive(Debug)]
struct Pinned {
    revision: Revision,
    snapshot: Arc<Snapshot>,
    used: Instant,
}

/// The published view, its announcements and the counters; shared by a cache and its
/// reflector.
#[derive(Debug)]
pub(crate) struct Store {
    view: ArcSwapOption<View>,
    revision: watch::Sender<Revision>,
    /// Whether a reflector is following the source (false before the first list and while a
    /// panicked one waits to be replaced). Relaxed: a health flag, ordered with nothing.
    up: AtomicBool,
    /// Continue tokens, signed with the source's key: set once, before the first view.
    tokens: OnceLock<Tokens>,
    /// The snapshots paginated LISTs are reading (at most `MAX_PINNED`), each kept while its
    /// pages are asked for within the snapshot retention. Locked by a LIST page that mints or
    /// follows a continue token, and by the reflector's retention tick; never by a watcher.
    pinned: Mutex<Vec<Pinned>>,
    /// Shared: a metrics exporter adds what they count after the cache is gone (its last
    /// watches and catch-ups) too.
    pub(crate) stats: Arc<CacheStats>,
}

impl Store {
    /// A store with no view yet (before the first list).
    pub(crate) fn new() -> Self {
        Store {
            view: ArcSwapOption::empty(),
            revision: watch::channel(Revision::ZERO).0,
            up: AtomicBool::new(false),
            tokens: OnceLock::new(),
            pinned: Mutex::new(Vec::new()),
            stats: Arc::default(),
        }
    }

    /// Keeps `snapshot`, the state at `revision`, for the next pages of a LIST: until no page
    /// of it was asked for within `retention`, or until `MAX_PINNED` more recently used
    /// snapshots push it out.
    pub(crate) fn pin(&self, revision: Revision, snapshot: &Arc<Snapshot>, retention: Duration) {
        let now = Instant::now();
        let mut pinned = unpoisoned(self.pinned.lock());
        match pinned.iter_mut().find(|p| p.revision == revision) {
            Some(p) => p.used = now,
            None => pinned.push(Pinned {
                revision,
                snapshot: Arc::clone(snapshot),
                used: now,
            }),
        }
        prune(&mut pinned, now, retention);
        self.stats
            .pinned_snapshots
            .store(pinned.len() as u64, Ordering::Relaxed);
    }

    /// The pinned snapshot at `revision`, if a LIST pinned one.
    pub(crate) fn pinned(&self, revision: Revision) -> Option<Arc<Snapshot>> {
        let pinned = unpoisoned(self.pinned.lock());
        pinned
            .iter()
            .find(|p| p.revision == revision)
            .map(|p| Arc::clone(&p.snapshot))
    }

    /// Unpins the snapshots no page was asked for within `retention`, and those below the
    /// source's `compacted` revision: a continue token there is answered 410 whatever the
    /// cache keeps (as the apiserver answers it), so such a snapshot serves no page again.
    pub(crate) fn prune_pinned(&self, retention: Duration, compacted: Revision) {
        let mut pinned = unpoisoned(self.pinned.lock());
        pinned.retain(|p| p.revision >= compacted);
        prune(&mut pinned, Instant::now(), retention);
        self.stats
            .pinned_snapshots
            .store(pinned.len() as u64, Ordering::Relaxed);
    }

    /// The continue tokens, once the reflector has the source's signing key.
    pub(crate) fn tokens(&self) -> Option<&Tokens> {
        self.tokens.get()
    }

    /// Sets the continue tokens; the first set wins (the key never changes for a store).
    pub(crate) fn set_tokens(&self, tokens: Tokens) {
        let _ = self.tokens.set(tokens);
    }

    /// Whether a reflector is following the source.
    pub(crate) fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    pub(crate) fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::Relaxed);
    }

    /// The current view, `None` before the first list.
    pub(crate) fn load(&self) -> Option<Arc<View>> {
        self.view.load_full()
    }

    /// Whether a view has been published.
    pub(crate) fn is_ready(&self) -> bool {
        self.view.load().is_some()
    }

    /// Stores `view`, then announces its revision: in that order, so a reader woken by the
    /// announcement loads this view or a newer one.
    pub(crate) fn publish(&self, view: View) {
        self.publish_arc(Arc::new(view));
    }

    /// As [`publish`](Self::publish), for a view already shared.
    pub(crate) fn publish_arc(&self, view: Arc<View>) {
        let revision = view.revision;
        self.view.store(Some(view));
        self.revision.send_replace(revision);
    }

    /// A receiver of the announced revisions.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Revision> {
        self.revision.subscribe()
    }
}

/// Drops the pinned snapshots idle beyond `retention`, then the least recently used beyond
/// `MAX_PINNED`.
fn prune(pinned: &mut Vec<Pinned>, now: Instant, retention: Duration) {
    pinned.retain(|p| now.saturating_duration_since(p.used) <= retention);
    if pinned.len() > MAX_PINNED {
        pinned.sort_by_key(|p| std::cmp::Reverse(p.used));
        pinned.truncate(MAX_PINNED);
    }
}
