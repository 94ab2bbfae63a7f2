//! The watch path: where a watch starts (the table in [`cache`](crate::cache)), its initial
//! events when it asks for them, and then its live [`Watcher`] on the current generation's
//! hub.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;

use crate::cache::{Basis, Cache, CacheError, Corrupt};
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
            match view.hub.watch(spec) {
                Ok(live) => {
                    return Ok(CacheWatch {
                        initial,
                        end_bookmark: (opts.send_initial_events == Some(true)).then_some(after),
                        live,
                    });
                }
                Err(WatchError::Expired(e)) if with_state || e.requested >= self.oldest_watch_revision() => {
                    continue;
                }
                Err(WatchError::Expired(e)) => return Err(CacheError::Expired(e)),
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

/// A watch on the cache: initial events when asked for, then the live watcher.
#[derive(Debug)]
pub struct CacheWatch {
    /// Boxed: freed once delivered, so that a watch idling for hours does not carry its
    /// space.
    initial: Option<Box<ListItems>>,
    end_bookmark: Option<Revision>,
    live: Watcher,
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
        self.live.poll_next_with(cx, f)
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
        self.live.position()
    }
}

impl Stream for CacheWatch {
    type Item = Result<WatchEvent, Expired>;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_next_with(cx, |d| d.to_owned())
    }
}
