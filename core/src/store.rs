//! The store: the state the [reflector](crate::reflector) writes and the
//! [cache](crate::Cache) reads, as one immutable [`View`] at a time.
//!
//! A view holds the hub of the current list-watch generation, the snapshots of the history
//! window (one per ring entry plus the one the oldest entry applies to, oldest first) and the
//! cache's revision. The reflector builds each view whole and [`Store::publish`]es it: stored
//! through `ArcSwap` first, then its revision announced on a tokio watch channel. A reader
//! that waited for revision `N` on the channel and then loads the view sees `N` or later, and
//! a reader that loads the view once sees the hub, the snapshots and the revision agree
//! (claim 9 of [`protocol`](crate::protocol), model `snapshot_publication`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwapOption;
use tokio::sync::watch;

use crate::continue_token::Tokens;
use crate::rv::Revision;
use crate::snapshot::{Snapshot, partition_point};
use crate::stats::CacheStats;
use crate::watcher::{Expired, WatchHub};

/// What readers see, published as a whole.
#[derive(Debug)]
pub(crate) struct View {
    pub(crate) hub: WatchHub,
    /// One snapshot per entry of the history window plus the generation's first, oldest first.
    pub(crate) snapshots: imbl::Vector<Arc<Snapshot>>,
    /// The cache's revision: at least the newest snapshot's (progress notifications raise it).
    pub(crate) revision: Revision,
}

impl View {
    /// The newest snapshot: the current state.
    pub(crate) fn current(&self) -> &Arc<Snapshot> {
        self.snapshots
            .back()
            .expect("a view always has its generation's first snapshot")
    }

    /// The oldest revision a watch can start after, or a LIST match exactly: the oldest
    /// snapshot's.
    pub(crate) fn oldest(&self) -> Revision {
        self.snapshots.front().map_or(self.revision, |s| s.revision())
    }

    /// The snapshot that is the state at `revision` (at most the cache's revision).
    pub(crate) fn at(&self, revision: Revision) -> Result<Arc<Snapshot>, Expired> {
        let oldest = self.oldest();
        if revision < oldest {
            return Err(Expired {
                requested: revision,
                oldest,
            });
        }
        let after = partition_point(&self.snapshots, |s| s.revision() <= revision);
        Ok(Arc::clone(&self.snapshots[after - 1]))
    }
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
    pub(crate) stats: CacheStats,
}

impl Store {
    /// A store with no view yet (before the first list).
    pub(crate) fn new() -> Self {
        Store {
            view: ArcSwapOption::empty(),
            revision: watch::channel(Revision::ZERO).0,
            up: AtomicBool::new(false),
            tokens: OnceLock::new(),
            stats: CacheStats::default(),
        }
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
