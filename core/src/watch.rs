//! The watch path: where a watch starts (the table in [`cache`](crate::cache)), its initial
//! events when it asks for them, and then its live [`Watcher`] on the current generation's
//! hub.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;

use crate::cache::{Basis, Cache, CacheError, Corrupt};
use crate::catchup::{CatchUp, Caught, Upstream};
use crate::event::{Delivery, EventKind, WatchEvent};
use crate::filter::Filter;
use crate::page::page;
use crate::rv::Revision;
use crate::snapshot::{ListItems, Snapshot, Step};
use crate::source::Source;
use crate::watcher::{Expired, WatchError, WatchSpec, Watcher};

/// How many candidates of the initial events one poll looks at before it yields (fewer under
/// Miri, so that a test can make it yield over a collection Miri builds in reasonable time).
const INITIAL_SCAN_BUDGET: usize = if cfg!(watchcache_loom) {
    2
} else if cfg!(miri) {
    64
} else {
    512
};

/// A WATCH request.
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    /// `resourceVersion`: `None` or `Some(ZERO)` start with the current state.
    pub resource_version: Option<Revision>,
    /// `sendInitialEvents`: `Some(true)` sends ADDED for the state and then a bookmark marking
    /// their end; `Some(false)` sends no initial events; unset sends them (without the
    /// bookmark) only when `resource_version` is unset or `0`, as the apiserver's legacy watch.
    pub send_initial_events: Option<bool>,
    /// `allowWatchBookmarks`.
    pub allow_bookmarks: bool,
    /// Namespace and selectors.
    pub filter: Filter,
}

impl<S: Source> Cache<S> {
    /// WATCH; see the module docs for the resourceVersion rules. A watch from a revision the
    /// cache has not reached yet starts at once and delivers the events after it, as the
    /// apiserver's does; only initial events need the cache to have reached the revision.
    pub async fn watch(&self, opts: WatchOptions) -> Result<CacheWatch, CacheError> {
        opts.filter.check_fields(&self.config().fields)?;
        let rv = opts.resource_version;
        let with_state = opts
            .send_initial_events
            .unwrap_or(matches!(rv, None | Some(Revision::ZERO)));
        // A relist may close the hub between loading the view and starting the watcher:
        // then the newer view has a new hub; try again with it.
        for _ in 0..3 {
            let basis = match rv {
                Some(n) if n != Revision::ZERO && !with_state => Basis::of(self.ready_view().await?),
                _ => self.basis_for(rv).await?,
            };
            let view = &basis.view;
            if with_state {
                Corrupt::in_scope(&basis.snapshot, &opts.filter)?;
            }
            let (after, initial) = if with_state {
                // The state may come from the source, ahead of the hub: the live part then
                // starts after it, which a hub allows (see above).
                (
                    basis.revision,
                    Some(Box::new(initial_events(&basis.snapshot, &opts.filter))),
                )
            } else {
                // rv "0" without initial events: from now.
                (
                    rv.filter(|&n| n != Revision::ZERO).unwrap_or(basis.revision),
                    None,
                )
            };
            let mut spec = WatchSpec::new(opts.filter.clone()).after(after);
            spec.bookmarks = opts.allow_bookmarks;
            let watch = |live| CacheWatch {
                initial,
                end_bookmark: (opts.send_initial_events == Some(true)).then_some(after),
                live,
                upstream: self.upstream().cloned(),
                last: after,
                at_last: 0,
            };
            match view.hub.watch(spec) {
                Ok(live) => return Ok(watch(Live::Ring(live))),
                Err(WatchError::Expired(e)) if with_state || e.requested >= self.oldest_watch_revision() => {
                    continue;
                }
                // Below the window: from the source's history while it still holds it.
                Err(WatchError::Expired(e)) => match self.upstream() {
                    // Strictly above the compaction: etcd sends an event at the compacted
                    // revision without the value before it.
                    Some(upstream) if e.requested >= upstream.compacted() => {
                        let catch_up = CatchUp::start(
                            Arc::clone(upstream),
                            opts.filter.clone(),
                            opts.allow_bookmarks,
                            e.requested.successor(),
                            0,
                        );
                        return Ok(watch(Live::CatchUp(Box::new(catch_up))));
                    }
                    // Compacted: a watch can start after the compacted revision (it reads from
                    // the store), or after the window's floor, if lower.
                    Some(upstream) => {
                        let oldest = e.oldest.min(upstream.compacted());
                        return Err(CacheError::Expired(Expired { oldest, ..e }));
                    }
                    None => return Err(CacheError::Expired(e)),
                },
                Err(WatchError::Selector(e)) => return Err(CacheError::Selector(e)),
            }
        }
        Err(CacheError::NotReady {
            retry_after: Duration::from_secs(1),
        })
    }
}

/// The objects of `snapshot` that `filter` selects, as ADDED events to come, with their
/// exact count.
fn initial_events(snapshot: &Arc<Snapshot>, filter: &Filter) -> ListItems {
    let plan = snapshot.plan(filter);
    let all = page(
        snapshot,
        plan,
        None,
        None,
        filter,
        filter.selects_all_in_namespace(),
    );
    ListItems::from_span(Arc::clone(snapshot), all.span, filter.clone(), all.count)
}

/// A watch on the cache: initial events when asked for, then the live watcher, or a
/// catch-up from the source while the window does not reach back to where it stands.
pub struct CacheWatch {
    /// Boxed: freed once delivered, so that a watch idling for hours does not carry its
    /// space.
    initial: Option<Box<ListItems>>,
    end_bookmark: Option<Revision>,
    live: Live,
    /// What a watcher the writer laps catches up from (`None` with catch-up off).
    upstream: Option<Arc<dyn Upstream>>,
    /// The revision of the last live delivery (the start before any), and how many events of
    /// it were delivered (0 after a bookmark): where a catch-up resumes.
    last: Revision,
    at_last: usize,
}

/// Where a watch's live part reads from.
#[derive(Debug)]
enum Live {
    /// The history window.
    Ring(Watcher),
    /// The source's history, until the window reaches back to it. Boxed: most watches never
    /// need one.
    CatchUp(Box<CatchUp>),
    /// Ended (after an `Expired`).
    Ended,
}

impl std::fmt::Debug for CacheWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheWatch")
            .field("initial", &self.initial_remaining())
            .field("live", &self.live)
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl CacheWatch {
    /// Polls for the next delivery and lends it to `f`; `Ready(None)` once the watch ended.
    pub fn poll_next_with<R>(
        &mut self,
        cx: &mut Context<'_>,
        f: impl FnOnce(Delivery<'_>) -> R,
    ) -> Poll<Option<Result<R, Expired>>> {
        if let Some(items) = &mut self.initial {
            match items.step(INITIAL_SCAN_BUDGET) {
                Step::Item(object) => {
                    let revision = object.revision();
                    let d = Delivery {
                        kind: EventKind::Added,
                        revision,
                        object: Some(object),
                        initial_events_end: false,
                    };
                    return Poll::Ready(Some(Ok(f(d))));
                }
                // Many candidates filtered out: yield to the executor, as live delivery does.
                Step::Exhausted => {
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Step::Done => self.initial = None,
            }
        }
        if let Some(revision) = self.end_bookmark.take() {
            let d = Delivery {
                kind: EventKind::Bookmark,
                revision,
                object: None,
                initial_events_end: true,
            };
            return Poll::Ready(Some(Ok(f(d))));
        }
        self.poll_live(cx, f)
    }

    /// The live part: the ring, or a catch-up; a lapped watcher catches up from where its
    /// client stands, while the source holds that revision.
    fn poll_live<R>(
        &mut self,
        cx: &mut Context<'_>,
        f: impl FnOnce(Delivery<'_>) -> R,
    ) -> Poll<Option<Result<R, Expired>>> {
        let tracked = Cell::new((self.last, self.at_last));
        let polled = self.poll_tracked(cx, f, &tracked);
        (self.last, self.at_last) = tracked.get();
        polled
    }

    /// [`poll_live`](Self::poll_live), keeping `tracked` (the last revision delivered and how
    /// many of its events) up to date with every delivery.
    fn poll_tracked<R>(
        &mut self,
        cx: &mut Context<'_>,
        f: impl FnOnce(Delivery<'_>) -> R,
        tracked: &Cell<(Revision, usize)>,
    ) -> Poll<Option<Result<R, Expired>>> {
        let mut f = Some(f);
        let mut deliver = |d: Delivery<'_>| {
            let (last, at_last) = tracked.get();
            tracked.set(if d.kind == EventKind::Bookmark {
                (d.revision, 0)
            } else if d.revision == last {
                (last, at_last + 1)
            } else {
                (d.revision, 1)
            });
            let f = f.take().expect("one delivery per poll");
            f(d)
        };
        loop {
            match &mut self.live {
                Live::Ring(watcher) => match std::task::ready!(watcher.poll_next_with(cx, &mut deliver)) {
                    Some(Err(expired)) => {
                        // Resume after the last revision delivered whole, or within the last
                        // one, not delivering again what of it was.
                        // (Or after what it completed, if that is further: events it passed
                        // over as not its own since its last delivery.)
                        let (from, skip) = match tracked.get() {
                            (last, _) if watcher.complete() >= last => (watcher.complete().successor(), 0),
                            (last, 0) => (last.successor(), 0),
                            (last, n) => (last, n),
                        };
                        match &self.upstream {
                            // The cache was dropped (its resource served anew, or no longer
                            // served): between two revisions the watch ends cleanly, as the
                            // apiserver ends the watches of a CRD it serves anew, and its client
                            // resumes from its last resourceVersion. No hub would take it back
                            // from a catch-up.
                            Some(upstream) if upstream.closed() && skip == 0 => {
                                self.live = Live::Ended;
                                return Poll::Ready(None);
                            }
                            // Lapped, or cut off by a new generation: caught up from the store.
                            Some(upstream) if from > upstream.compacted() && !upstream.closed() => {
                                upstream.stats().catch_ups_lapped.fetch_add(1, Ordering::Relaxed);
                                let catch_up = CatchUp::start(
                                    Arc::clone(upstream),
                                    watcher.take_filter(),
                                    watcher.bookmarks(),
                                    from,
                                    skip,
                                );
                                self.live = Live::CatchUp(Box::new(catch_up));
                            }
                            // Compacted: a new watch can start after the compaction (from the
                            // store), or after the window's floor, if lower.
                            Some(upstream) => {
                                self.live = Live::Ended;
                                let oldest = expired.oldest.min(upstream.compacted());
                                return Poll::Ready(Some(Err(Expired { oldest, ..expired })));
                            }
                            None => {
                                self.live = Live::Ended;
                                return Poll::Ready(Some(Err(expired)));
                            }
                        }
                    }
                    other => return Poll::Ready(other),
                },
                Live::CatchUp(catch_up) => match std::task::ready!(catch_up.poll_next_with(cx, &mut deliver))
                {
                    Caught::Delivered(out) => return Poll::Ready(Some(Ok(out))),
                    Caught::HandedOver(watcher) => {
                        // Everything up to the hand-over was delivered: a later lap resumes there.
                        tracked.set((catch_up.position(), 0));
                        self.live = Live::Ring(watcher);
                    }
                    Caught::Expired(expired) => {
                        self.live = Live::Ended;
                        return Poll::Ready(Some(Err(expired)));
                    }
                    Caught::Closed => {
                        self.live = Live::Ended;
                        return Poll::Ready(None);
                    }
                },
                Live::Ended => return Poll::Ready(None),
            }
        }
    }

    /// Waits for the next delivery and lends it to `f`; `None` once the watch ended.
    pub async fn next_with<R>(&mut self, mut f: impl FnMut(Delivery<'_>) -> R) -> Option<Result<R, Expired>> {
        std::future::poll_fn(|cx| self.poll_next_with(cx, &mut f)).await
    }

    /// Waits for the next delivery, owned; `None` once the watch ended.
    pub async fn next(&mut self) -> Option<Result<WatchEvent, Expired>> {
        self.next_with(|d| d.to_owned()).await
    }

    /// How many initial events are still to come (0 once they are all delivered, or for a
    /// watch that did not ask for them).
    pub fn initial_remaining(&self) -> usize {
        self.initial.as_ref().map_or(0, |items| items.remaining())
    }

    /// The revision the live part has seen everything up to.
    pub fn position(&self) -> Revision {
        match &self.live {
            Live::Ring(watcher) => watcher.position(),
            Live::CatchUp(catch_up) => catch_up.position(),
            Live::Ended => self.last,
        }
    }

    /// Whether the watch is reading the source's history now (a catch-up), not the window.
    pub fn is_catching_up(&self) -> bool {
        matches!(self.live, Live::CatchUp(_))
    }

    /// The revision of the last event delivered (the start, before the first): where a client
    /// that received it would resume.
    pub fn last_revision(&self) -> Revision {
        self.last
    }

    /// Whether every event of the last revision delivered was delivered, so that a clean end
    /// here loses nothing for a client that resumes from that revision: one write that changed
    /// several keys (a transaction, a prefix delete) is several events of one revision. True
    /// before the first event and after a bookmark. After a revision's last event, the watch
    /// may not know it yet: it learns it at its next poll, from the next delivery (of another
    /// revision) or from having read all there is.
    pub fn at_revision_boundary(&self) -> bool {
        if self.at_last == 0 {
            return true;
        }
        match &self.live {
            Live::Ring(watcher) => watcher.delivered_through(self.last),
            Live::CatchUp(catch_up) => catch_up.position() >= self.last,
            Live::Ended => true,
        }
    }
}

impl Stream for CacheWatch {
    type Item = Result<WatchEvent, Expired>;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_next_with(cx, |d| d.to_owned())
    }
}
