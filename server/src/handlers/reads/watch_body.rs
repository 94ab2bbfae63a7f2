//! A watch response body: frames written as events arrive, bounded per connection.
//!
//! The body is a `Stream` that hyper polls only when the connection can take more. Each poll
//! copies every frame that is ready (up to `FLUSH_BYTES`) into a buffer of its own, handed to
//! hyper whole. A client that stops reading stops this watcher's cursor and nothing else: the
//! writer never waits for it and may lap it. While the client does not read, hyper does not
//! poll the body for more, and an end written at the deadline or at shutdown cannot be
//! flushed: the connection is then dropped by its kill switch (see `connection.rs`), a grace
//! period later. A client that reads again before that gets what is left; a watch the writer
//! lapped meanwhile goes on from the store's history (a catch-up, see core's `catchup` module), and
//! ends with an ERROR frame carrying a 410 Expired Status only when the store no longer holds
//! its revision. The watcher parks with the connection task's waker, so an idle watch costs
//! no polling.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_core::Stream;
use watchcache_core::{CacheWatch, EventKind, Expired};
use watchcache_encoders::FrameEncoder;

use crate::handlers::errors;
use crate::handlers::reads::partial::MetadataRequest;
use crate::handlers::reads::table::TableFrames;
use crate::metrics::{self, Metrics};
use crate::transport::switch::Signal;

/// How much one poll copies before handing the chunk to hyper.
const FLUSH_BYTES: usize = 64 * 1024;

/// The most spare capacity a watch keeps in its frame buffer between polls.
const RETAIN_BYTES: usize = 16 * 1024;

/// How long a watch past its deadline may go on to finish the revision it is in: the rest of
/// a revision in the window is readable at once, so this only bounds a bug's cost.
const ENDING_LIMIT: Duration = Duration::from_secs(1);

/// The same for a watch catching up from the store, whose rest of a revision may wait for a
/// read of the store: in line (the places go round, each read giving its place up after
/// 10 s while another waits), then after a failure (5 s at most between tries). A watch
/// still inside its revision at the limit ends with 410: its client could not resume inside
/// the revision, and would lose its rest. At the server's shutdown the limit is half the grace
/// period, if that is sooner: the 410 must be written before the connections are dropped.
const CATCH_UP_ENDING_LIMIT: Duration = Duration::from_secs(20);

/// How often a watch ending inside a revision looks whether the revision became whole
/// without its watcher being woken (a parked watcher is woken for its own events only).
const ENDING_RECHECK: Duration = Duration::from_millis(5);

pub(crate) struct WatchBody {
    pub(crate) watch: Option<CacheWatch>,
    pub(crate) frames: FrameEncoder,
    pub(crate) deadline: Pin<Box<tokio::time::Sleep>>,
    /// Before its deadline or past it.
    pub(crate) phase: Phase,
    pub(crate) shutdown: Signal,
    /// The server's shutdown grace period (`ServeConfig::shutdown_grace`), in milliseconds
    /// (the body stays small).
    pub(crate) grace_ms: u32,
    /// Whether a 410 now is one at its start: it began below the window, reading the store's
    /// history, and has delivered nothing and not reached the window yet (a read of the store
    /// finds a compaction the server had not learned of).
    pub(crate) at_start: bool,
    /// This resource's counters, looked up once: a poll allocates and locks nothing for them.
    pub(crate) counters: WatchCounters,
    /// Frames written before the stream starts (an in-stream error at the start).
    pub(crate) pending: Option<Bytes>,
    /// Where frames are written; each chunk handed to hyper is split off it, and once hyper
    /// has written and dropped the chunks, the allocation is reused (`BytesMut::reserve`).
    /// Empty, allocating nothing, until the first frame.
    pub(crate) buf: BytesMut,
    pub(crate) guard: Option<WatcherGuard>,
    /// Frames as Tables or as metadata only, when the client asked for them.
    pub(crate) transform: Option<Transform>,
    /// Where an object's JSON (a Table row's) or a whole frame (a metadata frame's) is put on
    /// its way.
    pub(crate) scratch: BytesMut,
}

/// Where a watch is in its life (one field: an idle watch stays small).
pub(crate) enum Phase {
    /// Before its deadline: the waker `deadline` was last polled with. It is polled again (to
    /// register) only when the task's waker changes, and otherwise checked with `is_elapsed`.
    Open(Option<std::task::Waker>),
    /// Past its deadline (or the server's shutdown), since this instant: it finishes the
    /// revision it is in, within [`ENDING_LIMIT`] (or [`CATCH_UP_ENDING_LIMIT`] while it
    /// catches up, half the grace period once the server shuts down, if that is sooner), and
    /// ends. `deadline` then times its rechecks.
    Ending(tokio::time::Instant),
}

/// Frames in a form other than the objects': what each event is turned into.
pub(crate) enum Transform {
    /// Tables (`kubectl get -w`).
    Table(TableFrames),
    /// PartialObjectMetadata (kube-rs's metadata watcher, client-go's metadata informers).
    Metadata(MetadataRequest),
}

/// The counters a watch body bumps.
pub(crate) struct WatchCounters {
    pub(crate) events: Counter,
    pub(crate) bookmarks: Counter,
    /// In-stream 410s.
    pub(crate) expired: Counter,
    /// Watches the server ended (the in-stream 410s, and stalled clients dropped).
    pub(crate) terminated: Counter,
}

impl WatchCounters {
    pub(crate) fn new(metrics: &Metrics, resource: &str) -> Self {
        let labels = metrics::resource(resource);
        WatchCounters {
            events: metrics.events_dispatched.get_or_create(&labels).clone(),
            bookmarks: metrics.bookmarks_sent.get_or_create(&labels).clone(),
            expired: metrics.watch_expired_in_stream.get_or_create(&labels).clone(),
            terminated: metrics.terminated_watchers.get_or_create(&labels).clone(),
        }
    }
}

/// Counts an open watch while it lives.
pub(crate) struct WatcherGuard {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) resource: Arc<str>,
    pub(crate) open: Arc<std::sync::atomic::AtomicUsize>,
}

impl Drop for WatcherGuard {
    fn drop(&mut self) {
        self.metrics
            .watchers
            .get_or_create(&metrics::resource(&self.resource))
            .dec();
        self.open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A grace period in whole milliseconds, as a watch body keeps it (saturating: over 49 days
/// is as good as never).
pub(crate) fn grace_ms(grace: Duration) -> u32 {
    u32::try_from(grace.as_millis()).unwrap_or(u32::MAX)
}

/// Half a grace period kept in milliseconds.
fn half(grace_ms: u32) -> Duration {
    Duration::from_millis(u64::from(grace_ms / 2))
}

/// Whether `deadline` has passed; registers the task of `cx` with it only when that task's
/// waker is new to it (polling a `Sleep` registers with the timer every time).
fn poll_deadline(
    deadline: &mut Pin<Box<tokio::time::Sleep>>,
    registered: &mut Option<std::task::Waker>,
    cx: &mut Context<'_>,
) -> bool {
    if deadline.is_elapsed() {
        return true;
    }
    if registered.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
        return false;
    }
    // A task out of its coop budget polls the timer without registering with it (tokio wakes
    // the task to poll again instead): the waker counts as registered only when the poll can
    // register it, or a quiet watch would miss its deadline for good.
    let registers = tokio::task::coop::has_budget_remaining();
    let elapsed = deadline.as_mut().poll(cx).is_ready();
    if registers {
        *registered = Some(cx.waker().clone());
    }
    elapsed
}

impl Drop for WatchBody {
    /// A body dropped with its watch still open after its deadline was never polled to its
    /// clean end: its client had stopped reading, and the connection was dropped (the kill
    /// switch, a grace period after the deadline). The server ended that watcher.
    fn drop(&mut self) {
        if self.watch.is_some() && (matches!(self.phase, Phase::Ending(_)) || self.deadline.is_elapsed()) {
            self.counters.terminated.inc();
        }
    }
}

impl WatcherGuard {
    /// Counts one for its resource in `family` (for what happens once in a watch's life).
    fn count(&self, family: &prometheus_client::metrics::family::Family<metrics::Labels, Counter>) {
        family.get_or_create(&metrics::resource(&self.resource)).inc();
    }
}

impl WatchBody {
    fn finish(&mut self) {
        self.watch = None;
        self.guard = None;
    }
}

impl Stream for WatchBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(first) = this.pending.take() {
            return Poll::Ready(Some(Ok(first)));
        }
        if let Phase::Open(registered) = &mut this.phase
            && (this.shutdown.poll_thrown(cx) || poll_deadline(&mut this.deadline, registered, cx))
        {
            this.phase = Phase::Ending(tokio::time::Instant::now());
        }
        // A clean end: the client re-watches from the last resourceVersion it received, so the
        // watch ends between revisions. Past the deadline it delivers the rest of the revision
        // it is in (its events are readable together; a write that changed several keys is
        // several events) and leaves the next one for the watch the client opens.
        let ending = matches!(this.phase, Phase::Ending(_));
        if ending && this.watch.as_ref().is_none_or(CacheWatch::at_revision_boundary) {
            this.finish();
            return Poll::Ready(None);
        }
        let Some(watch) = this.watch.as_mut() else {
            return Poll::Ready(None);
        };
        let buf = &mut this.buf;
        let mut ended = false;
        let (mut events, mut bookmarks) = (0u64, 0u64);
        while buf.len() < FLUSH_BYTES {
            let frames = &this.frames;
            let transform = &mut this.transform;
            let scratch = &mut this.scratch;
            let last = watch.last_revision();
            let polled = watch.poll_next_with(cx, |d| {
                let is_bookmark = d.kind == EventKind::Bookmark;
                if ending && (is_bookmark || d.revision != last) {
                    // The revision it was in is whole: this one comes again after the resume.
                    return Ok(None);
                }
                match transform {
                    None => frames.write(&d, buf).map(|()| Some(is_bookmark)),
                    Some(Transform::Metadata(metadata)) => {
                        // The metadata part of the object's shared encoding, when its codec
                        // recorded one; otherwise read out of the whole frame.
                        if let Some(object) = d.object
                            && metadata.write_event(frames, d.kind, object, d.revision, buf)?
                        {
                            return Ok(Some(is_bookmark));
                        }
                        scratch.clear();
                        frames.write(&d, scratch)?;
                        if let Err(status) = metadata.write_frame(scratch, buf) {
                            frames.write_error(&status, buf);
                        }
                        Ok(Some(is_bookmark))
                    }
                    Some(Transform::Table(table)) => {
                        scratch.clear();
                        if let Some(object) = d.object {
                            frames.write_object(object, d.revision, scratch)?;
                        }
                        let object = d.object.is_some().then_some(&scratch[..]);
                        if let Err(status) = table.write(d.kind, d.revision, object, buf) {
                            frames.write_error(&status, buf);
                        }
                        Ok(Some(is_bookmark))
                    }
                }
            });
            match polled {
                Poll::Ready(Some(Ok(Ok(Some(bookmark))))) => {
                    if bookmark {
                        bookmarks += 1;
                    } else {
                        events += 1;
                    }
                }
                Poll::Ready(Some(Ok(Ok(None)))) => {
                    ended = true;
                    break;
                }
                Poll::Ready(Some(Ok(Err(e)))) => {
                    this.frames.write_error(&errors::codec(&e), buf);
                    ended = true;
                    break;
                }
                Poll::Ready(Some(Err(expired))) => {
                    if this.at_start && events + bookmarks == 0 {
                        // Its revision was gone when it asked: the store had compacted it,
                        // which its catch-up's read found.
                        if let Some(guard) = &this.guard {
                            guard.count(&guard.metrics.watch_starts_expired);
                        }
                    } else {
                        this.counters.expired.inc();
                        this.counters.terminated.inc();
                    }
                    this.frames.write_error(&errors::expired(&expired), buf);
                    ended = true;
                    break;
                }
                Poll::Ready(None) => {
                    if !ending && let Some(guard) = &this.guard {
                        // Not its deadline: the cache serving it was dropped.
                        guard.count(&guard.metrics.watches_closed);
                    }
                    ended = true;
                    break;
                }
                Poll::Pending => {
                    // Ending, the watch may learn only now that its revision is whole; or, the
                    // rest of it being published at this moment, it looks again shortly. A
                    // catch-up wakes the task itself as the rest comes; it is looked at again
                    // at its limit. Past the limit, a watch still inside its revision ends
                    // with 410.
                    if let Phase::Ending(since) = this.phase {
                        let now = tokio::time::Instant::now();
                        let catching_up = watch.is_catching_up();
                        let limit = since
                            + if !catching_up {
                                ENDING_LIMIT
                            } else if this.shutdown.poll_thrown(cx) {
                                // Its 410 is written before the connections are dropped (a
                                // shutdown after the deadline shortens the limit too).
                                CATCH_UP_ENDING_LIMIT.min(half(this.grace_ms))
                            } else {
                                CATCH_UP_ENDING_LIMIT
                            };
                        if watch.at_revision_boundary() {
                            ended = true;
                        } else if now >= limit {
                            let expired = Expired {
                                requested: watch.position(),
                                oldest: watch.position(),
                            };
                            this.counters.expired.inc();
                            this.counters.terminated.inc();
                            this.frames.write_error(&errors::expired(&expired), buf);
                            ended = true;
                        } else {
                            let recheck = if catching_up { limit } else { now + ENDING_RECHECK };
                            this.deadline.as_mut().reset(recheck.min(limit));
                            if this.deadline.as_mut().poll(cx).is_ready() {
                                cx.waker().wake_by_ref();
                            }
                        }
                    }
                    break;
                }
            }
        }
        this.at_start &=
            events + bookmarks == 0 && this.watch.as_ref().is_some_and(CacheWatch::is_catching_up);
        if events > 0 {
            this.counters.events.inc_by(events);
        }
        if bookmarks > 0 {
            this.counters.bookmarks.inc_by(bookmarks);
        }
        let chunk = (!buf.is_empty()).then(|| buf.split().freeze());
        if buf.capacity() > RETAIN_BYTES {
            // After a burst: let the big allocation go with its last chunk rather than hold it
            // while the watch idles.
            *buf = BytesMut::new();
        }
        if this.scratch.capacity() > RETAIN_BYTES {
            // The same for a Table's or metadata watch's copy of its largest object.
            this.scratch = BytesMut::new();
        }
        if ended {
            this.finish();
        }
        if let Some(chunk) = chunk {
            Poll::Ready(Some(Ok(chunk)))
        } else if ended {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    //! What a watch keeps between events.
    use super::*;
    use crate::handlers::reads::table::{TableRequest, TableVersion};
    use crate::handlers::target::Target;
    use futures_util::StreamExt;
    use serde_json::json;
    use std::time::Duration;
    use watchcache_core::{Revision, WatchOptions};

    /// A deadline first looked at by a task out of its coop budget (a connection that has just
    /// written much) still wakes the task when it passes: a quiet watch, sent nothing more,
    /// ends at its timeout. It hung before the poll took the budget into account.
    #[tokio::test]
    async fn a_deadline_first_polled_out_of_budget_still_fires() {
        let mut deadline = Box::pin(tokio::time::sleep(Duration::from_millis(50)));
        let mut registered = None;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..1_000 {
            tx.send(i).unwrap();
        }
        let mut first = true;
        let ended = std::future::poll_fn(|cx| {
            if std::mem::take(&mut first) {
                while tokio::task::coop::has_budget_remaining() {
                    let _ = rx.poll_recv(cx);
                }
            }
            if poll_deadline(&mut deadline, &mut registered, cx) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        });
        tokio::time::timeout(Duration::from_secs(5), ended)
            .await
            .expect("the deadline woke the task");
    }

    /// A server on the embedded store, its ConfigMaps in `ns`, and the body of a watch of them
    /// from now (in `transform`'s form), its deadline ten minutes away.
    async fn configmaps_watch(transform: Option<Transform>) -> (crate::Server, Target, WatchBody) {
        let config = crate::ServeConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            ..crate::ServeConfig::default()
        };
        let server = crate::Server::start(config).await.unwrap();
        let (t, body) = configmaps_watch_on(&server, transform).await;
        (server, t, body)
    }

    /// [`configmaps_watch`] on `server`.
    async fn configmaps_watch_on(
        server: &crate::Server,
        transform: Option<Transform>,
    ) -> (Target, WatchBody) {
        let state = server.state();
        let t = Target::resolve(state, "v1", "configmaps", Some("ns".into()), None).unwrap();
        let r = &t.resource;
        let watch = r
            .cache
            .watch(WatchOptions {
                send_initial_events: Some(false),
                ..WatchOptions::default()
            })
            .await
            .unwrap();
        let body = WatchBody {
            watch: Some(watch),
            frames: r.frames.clone(),
            deadline: Box::pin(tokio::time::sleep(Duration::from_secs(600))),
            phase: Phase::Open(None),
            shutdown: state.shutdown.signal(),
            grace_ms: grace_ms(state.config.shutdown_grace),
            at_start: false,
            buf: BytesMut::new(),
            counters: WatchCounters::new(&state.metrics, "configmaps"),
            pending: None,
            guard: None,
            scratch: BytesMut::new(),
            transform,
        };
        (t, body)
    }

    /// One write of 20 ConfigMaps of 8 KiB each, named by `batch`: a revision whose frames
    /// take more than one chunk.
    fn big_revision(server: &crate::Server, t: &Target, batch: usize) -> Revision {
        let writes = (0..20)
            .map(|i| {
                let name = format!("cm-{batch}-{i}");
                let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": "ns"}, "data": {"k": "x".repeat(8 << 10)}});
                watchcache_core::source::memory::TxnWrite::Put {
                    key: t.storage_key(&name),
                    value: Bytes::from(cm.to_string()),
                }
            })
            .collect();
        let store = server.state().store.memory().expect("the embedded store");
        store.txn(writes).unwrap()
    }

    /// How a watch comes to its end.
    #[derive(Clone, Copy)]
    enum EndBy {
        Deadline,
        /// The server's shutdown, with this grace period.
        Shutdown(Duration),
    }

    /// A watch lapped inside a revision, whose catch-up waits in line for a read of the store
    /// (the one read of `reads`, held by a watch of Secrets that read once and stopped), read
    /// until it ends after its deadline passed (or the server's shutdown began): the frames of
    /// the revision it got in all, the last frame, and how long the end took.
    async fn lapped_inside_a_revision_past_its_deadline(
        reads: watchcache_core::CatchUpReads,
        end: EndBy,
    ) -> (usize, String, Duration) {
        let mut config = crate::ServeConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            history: 32,
            catch_up: Some(reads),
            ..crate::ServeConfig::default()
        };
        if let EndBy::Shutdown(grace) = end {
            config.shutdown_grace = grace;
        }
        let server = crate::Server::start(config).await.unwrap();
        let state = server.state();
        let secrets = Target::resolve(state, "v1", "secrets", Some("ns".into()), None).unwrap();
        let secret = |i: usize| {
            let s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("s-{i}"), "namespace": "ns"}});
            Bytes::from(s.to_string())
        };
        let mut first = None;
        for i in 0..40 {
            let r = state
                .store
                .create(&secrets.storage_key(&format!("s-{i}")), secret(i))
                .await
                .unwrap();
            first.get_or_insert(r);
        }
        let mut holder = secrets
            .resource
            .cache
            .watch(WatchOptions {
                resource_version: first,
                send_initial_events: Some(false),
                ..WatchOptions::default()
            })
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), holder.next())
            .await
            .expect("the holder's first event")
            .unwrap()
            .unwrap();
        assert!(holder.is_catching_up());

        let (t, mut body) = configmaps_watch_on(&server, None).await;
        let revision = big_revision(&server, &t, 0);
        let chunk = tokio::time::timeout(Duration::from_secs(30), body.next())
            .await
            .expect("a chunk in time")
            .expect("a chunk")
            .unwrap();
        let revision_frames = |chunk: &[u8]| {
            String::from_utf8_lossy(chunk)
                .lines()
                .filter(|l| l.contains(&format!("\"resourceVersion\":\"{revision}\"")))
                .count()
        };
        let mut got = revision_frames(&chunk);
        assert!(
            got < 20,
            "the revision takes more than one chunk ({got} frames in the first)"
        );
        // Lapped: forty more writes through a window of 32.
        for i in 0..40 {
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("later-{i}"), "namespace": "ns"}});
            state
                .store
                .create(&t.storage_key(&format!("later-{i}")), Bytes::from(cm.to_string()))
                .await
                .unwrap();
        }
        let ending = std::time::Instant::now();
        match end {
            EndBy::Deadline => body.deadline.as_mut().reset(tokio::time::Instant::now()),
            EndBy::Shutdown(_) => state.shutdown.throw(),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut rest = Vec::new();
        while let Some(chunk) = tokio::time::timeout(Duration::from_secs(60), body.next())
            .await
            .expect("the end in time")
        {
            rest.extend_from_slice(&chunk.unwrap());
        }
        let took = ending.elapsed();
        got += revision_frames(&rest);
        let last = String::from_utf8_lossy(&rest)
            .lines()
            .last()
            .unwrap_or_default()
            .to_owned();
        drop((body, holder));
        server.shutdown().await.unwrap();
        (got, last, took)
    }

    /// The read ahead of it is held for good: at the catch-up's ending limit the watch is
    /// still inside the revision, and ends with 410, not a clean end its client would resume
    /// after, losing the revision's rest.
    #[tokio::test]
    async fn a_watch_past_its_deadline_still_inside_a_revision_at_the_limit_ends_with_410() {
        let held = watchcache_core::CatchUpReads::new(1)
            .with_slice(Duration::from_secs(600))
            .with_idle(Duration::from_secs(600));
        let (got, last, _) = lapped_inside_a_revision_past_its_deadline(held, EndBy::Deadline).await;
        assert!(
            last.starts_with(r#"{"type":"ERROR""#) && last.contains(r#""code":410"#),
            "ends with 410: {last}"
        );
        assert!(got < 20, "not all of the revision came ({got})");
    }

    /// At the server's shutdown the same watch has half the grace period, not the catch-up's
    /// 20 s: its 410 is written while the connection is still there to carry it (the server
    /// drops the connections left at the end of the grace, and a client cut inside a revision
    /// would resume after it, losing its rest).
    #[tokio::test]
    async fn a_watch_at_shutdown_still_inside_a_revision_ends_with_410_within_the_grace() {
        let held = watchcache_core::CatchUpReads::new(1)
            .with_slice(Duration::from_secs(600))
            .with_idle(Duration::from_secs(600));
        let grace = Duration::from_secs(4);
        let (got, last, took) =
            lapped_inside_a_revision_past_its_deadline(held, EndBy::Shutdown(grace)).await;
        assert!(
            last.starts_with(r#"{"type":"ERROR""#) && last.contains(r#""code":410"#),
            "ends with 410: {last}"
        );
        assert!(got < 20, "not all of the revision came ({got})");
        assert!(
            took < grace,
            "the 410 came {took:?} after the shutdown began, past its grace of {grace:?}"
        );
    }

    /// With the defaults, the read ahead is given up by its stalled holder after 5 s (or after
    /// its 10 s slice, since another waits): the watch's catch-up gets it, delivers the rest of
    /// its revision, and the watch ends cleanly.
    #[tokio::test]
    async fn a_watch_past_its_deadline_waits_for_its_catch_up_to_finish_the_revision() {
        let (got, last, _) = lapped_inside_a_revision_past_its_deadline(
            watchcache_core::CatchUpReads::new(1),
            EndBy::Deadline,
        )
        .await;
        assert_eq!(got, 20, "the whole revision");
        assert!(!last.contains("ERROR"), "a clean end: {last}");
    }

    /// A watch that reaches its deadline inside a revision (one write of many keys, more than
    /// one chunk of frames) sends the rest of that revision before it ends, and nothing of the
    /// next: the client resumes from the last revision it received and loses nothing.
    #[tokio::test]
    async fn a_watch_past_its_deadline_ends_between_revisions() {
        let (server, t, mut body) = configmaps_watch(None).await;
        let revision = |batch: usize| big_revision(&server, &t, batch);
        let first = revision(0);
        let frames_in = |chunk: &[u8]| chunk.iter().filter(|b| **b == b'\n').count();
        let chunk = tokio::time::timeout(Duration::from_secs(30), body.next())
            .await
            .expect("a chunk in time")
            .expect("a chunk")
            .unwrap();
        let mut sent = frames_in(&chunk);
        assert!(
            sent < 20,
            "the revision takes more than one chunk ({sent} frames in the first)"
        );
        // The deadline passes, and another revision is ready behind this one.
        body.deadline.as_mut().reset(tokio::time::Instant::now());
        let second = revision(1);
        // Fired before the next poll looks at it.
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(second > first);
        let mut rest = Vec::new();
        while let Some(chunk) = tokio::time::timeout(Duration::from_secs(30), body.next())
            .await
            .expect("the end in time")
        {
            rest.extend_from_slice(&chunk.unwrap());
        }
        sent += frames_in(&rest);
        let text = String::from_utf8_lossy(&rest);
        assert_eq!(sent, 20, "the whole first revision, no more");
        assert!(
            !text.contains(&format!("\"resourceVersion\":\"{}\"", second.get())),
            "nothing of the next revision"
        );
        drop(body);
        server.shutdown().await.unwrap();
    }

    /// A watch of ConfigMaps in `transform`'s form, sent one event of a ConfigMap of `size`
    /// bytes and then idle: the capacity its scratch buffer keeps while it idles.
    async fn scratch_kept_after_one_event_of(transform: Transform, size: usize) -> usize {
        let (server, t, mut body) = configmaps_watch(Some(transform)).await;
        let state = server.state();
        let big = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "big", "namespace": "ns"}, "data": {"k": "x".repeat(size)}});
        state
            .store
            .create(&t.storage_key("big"), Bytes::from(big.to_string()))
            .await
            .unwrap();
        let chunk = tokio::time::timeout(Duration::from_secs(30), body.next())
            .await
            .expect("the event in time")
            .expect("a chunk")
            .unwrap();
        assert!(!chunk.is_empty());
        let kept = body.scratch.capacity();
        drop(body);
        server.shutdown().await.unwrap();
        kept
    }

    /// A metadata watch (and a Table watch) sent one large object gives its copy of it back,
    /// as the frame buffer gives a burst back (`RETAIN_BYTES`): otherwise every such watch
    /// would hold the largest object it ever sent (100 GB for 100,000 watches after one 1 MiB
    /// ConfigMap).
    #[tokio::test]
    async fn a_watch_does_not_keep_a_large_objects_scratch_buffer_while_it_idles() {
        let size = 1 << 20;
        let metadata = Transform::Metadata(MetadataRequest {
            version: TableVersion::V1,
            list: false,
        });
        let kept_metadata = scratch_kept_after_one_event_of(metadata, size).await;
        let table = Transform::Table(TableFrames {
            request: TableRequest {
                version: TableVersion::V1,
                include: Default::default(),
            },
            spec: std::sync::Arc::clone(
                watchcache_api::Registry::builtin()
                    .get("v1", "configmaps")
                    .unwrap(),
            ),
            headers_sent: false,
        });
        let kept_table = scratch_kept_after_one_event_of(table, size).await;
        assert!(
            kept_metadata <= RETAIN_BYTES && kept_table <= RETAIN_BYTES,
            "after one {size}-byte object, an idle metadata watch keeps {kept_metadata} bytes of \
             scratch and a Table watch {kept_table} (at most {RETAIN_BYTES} expected)"
        );
    }
}
#[cfg(test)]
mod size {
    /// What an idle watch carries for hours: its body. Its initial events are boxed (freed once
    /// delivered), so they do not count here. (648: 640 and the grace period that bounds a
    /// catch-up's end at shutdown, kept in 4 bytes.)
    #[test]
    fn an_idle_watchs_body_stays_small() {
        let size = std::mem::size_of::<super::WatchBody>();
        assert!(size <= 648, "a watch body is {size} bytes");
    }
}
