//! Watches: one gRPC watch stream per prefix (and its fence key), events and progress
//! notifications turned into [`SourceEvent`]s, a broken stream said as the error it is.

use super::*;
use crate::members::Conn;

impl EtcdSource {
    /// Opens a watch of `key` on a member in rotation, over its `conn` connection; the
    /// stream, and the member's index.
    pub(crate) async fn open_watch(
        &self,
        key: &str,
        options: WatchOptions,
        conn: Conn,
    ) -> Result<(WatchStream, usize), etcd_client::Error> {
        let timeout = self.inner.request_timeout;
        self.inner
            .members
            .call_on(Kind::Read, conn, |i, c| {
                let options = options.clone();
                async move {
                    // The watch client takes responses of any size (one revision's events come
                    // whole).
                    let mut client = c.watch_client().max_decoding_message_size(MAX_MESSAGE);
                    match tokio::time::timeout(timeout, client.watch(key, Some(options))).await {
                        Ok(stream) => stream.map(|s| (s, i)),
                        Err(_) => Err(etcd_client::Error::WatchError(
                            "opening the watch timed out".into(),
                        )),
                    }
                }
            })
            .await
    }

    /// Opens the watch of `prefix` and its fence key from `from` (see the module docs) over
    /// `conn`, registered for progress requests while its sender lives.
    pub(crate) async fn open_prefix_watch(
        &self,
        prefix: &str,
        from: Revision,
        conn: Conn,
    ) -> Result<Opened, SourceError> {
        let options = WatchOptions::new()
            .with_range(prefix_end(prefix))
            .with_start_revision(from.get() as i64)
            .with_prev_key()
            .with_progress_notify();
        let start = fence_key(prefix).unwrap_or(prefix);
        let (stream, member) = self.open_watch(start, options, conn).await.map_err(unavailable)?;
        let (sender, responses) = stream.split();
        let sender = Arc::new(tokio::sync::Mutex::new(sender));
        self.register(prefix, &sender);
        if conn == Conn::History {
            self.inner.history_opened.fetch_add(1, Ordering::Relaxed);
        }
        debug!(prefix, %from, endpoint = self.inner.members.endpoint(member), ?conn, "watching etcd");
        Ok(Opened {
            sender,
            responses,
            member,
        })
    }

    /// A watch of `prefix` from `from` read at its consumer's pace (see
    /// [`EtcdOptions::history_backlog`]): a task reads etcd's responses as they come, so that
    /// the connection never waits for the consumer, and cancels the watch while the consumer
    /// is behind by more than the backlog.
    pub(crate) async fn watch_history_from(
        &self,
        prefix: &str,
        from: Revision,
    ) -> Result<EtcdWatch, SourceError> {
        let opened = self.open_prefix_watch(prefix, from, Conn::History).await?;
        let member = opened.member;
        let backlog = Arc::new(Backlog {
            bytes: AtomicUsize::new(0),
            all: Arc::clone(&self.inner.history_waiting),
            drained: tokio::sync::Notify::new(),
            limit: self.inner.history_backlog,
        });
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let pump = Pump {
            source: self.clone(),
            prefix: prefix.to_owned(),
            next: from,
            tx,
            backlog: Arc::clone(&backlog),
            conv: EtcdWatch::new(
                self,
                prefix,
                Box::pin(futures_util::stream::empty()),
                None,
                member,
            ),
        };
        tokio::spawn(pump.run(opened));
        let responses = futures_util::stream::unfold(rx, move |mut rx| {
            let backlog = Arc::clone(&backlog);
            async move {
                let taken = rx.recv().await?;
                Some((
                    taken.map(|(event, size)| {
                        backlog.take(size);
                        Incoming::Event(event)
                    }),
                    rx,
                ))
            }
        });
        Ok(EtcdWatch::new(self, prefix, Box::pin(responses), None, member))
    }

    /// A watch on member `member` ended with `e`: the error to pass on. A broken connection
    /// takes the member out of rotation, so that the watch opened next goes to another at once
    /// (the probe puts it back if it answers).
    pub(crate) fn watch_broke(&self, member: usize, e: etcd_client::Error) -> SourceError {
        if members::broken(&e) {
            self.inner.members.set_up(
                member,
                false,
                &format!("a watch broke: {e}"),
                tokio::time::Instant::now(),
            );
        }
        unavailable(e)
    }

    pub(crate) fn register(&self, prefix: &str, sender: &Arc<tokio::sync::Mutex<WatchRequestSender>>) {
        let mut watches = self.inner.watches.lock().unwrap_or_else(|p| p.into_inner());
        watches.retain(|(_, w)| w.strong_count() > 0);
        watches.push((prefix.to_owned(), Arc::downgrade(sender)));
    }
}

/// An open etcd watch: the sender progress requests go through (the source holds it weakly),
/// its responses, and the member it is on. Dropping it cancels the watch in etcd.
pub(crate) struct Opened {
    pub(crate) sender: Arc<tokio::sync::Mutex<WatchRequestSender>>,
    pub(crate) responses: WatchResponseStream,
    pub(crate) member: usize,
}

/// The revisions a history read's task has sent and its consumer has not taken yet.
struct Backlog {
    /// Their bytes. Relaxed: a count; `drained` orders the task's wait with the consumer's
    /// takes (a `notify_one` before the task waits is kept for it).
    bytes: AtomicUsize,
    /// The source's count of every history read's `bytes`.
    all: Arc<AtomicUsize>,
    /// Told when `bytes` falls to the limit's [`RESUME`] fraction or below.
    drained: tokio::sync::Notify,
    limit: usize,
}

impl Backlog {
    /// The task sent an event of `size` bytes: the bytes now waiting.
    fn put(&self, size: usize) -> usize {
        self.all.fetch_add(size, Ordering::Relaxed);
        self.bytes.fetch_add(size, Ordering::Relaxed) + size
    }

    /// The consumer took an event of `size` bytes.
    fn take(&self, size: usize) {
        self.all.fetch_sub(size, Ordering::Relaxed);
        let left = self.bytes.fetch_sub(size, Ordering::Relaxed) - size;
        if left <= self.limit / RESUME {
            self.drained.notify_one();
        }
    }
}

impl Drop for Backlog {
    /// The task and the consumer are both gone: what was sent and never taken is no longer held.
    fn drop(&mut self) {
        self.all.fetch_sub(*self.bytes.get_mut(), Ordering::Relaxed);
    }
}

/// A paused history read is opened again once what waits for its reader has fallen to this
/// fraction of the backlog.
const RESUME: usize = 8;

/// What a history read's task sends: one revision's changes (or a notification) and its size,
/// or the error that ends the read.
type Sent = Result<(SourceEvent, usize), SourceError>;

/// The task behind a history read.
struct Pump {
    source: EtcdSource,
    prefix: String,
    /// The revision the watch opens from next: past every revision sent.
    next: Revision,
    tx: tokio::sync::mpsc::UnboundedSender<Sent>,
    backlog: Arc<Backlog>,
    /// Turns etcd's responses into events as a watch does, a revision at a time (it reads
    /// nothing itself).
    conv: EtcdWatch,
}

impl Pump {
    /// Reads `opened`, and the watches opened after it, until an error or the consumer is gone.
    async fn run(mut self, mut opened: Opened) {
        loop {
            if !self.read(&mut opened).await {
                return;
            }
            // Behind by more than the backlog: etcd's watch is canceled rather than left to
            // buffer for a consumer that is not reading, and opened again once it has read all
            // but an eighth: each reopen makes etcd send a batch, so it should bring many
            // revisions in.
            drop(opened);
            self.source.inner.history_paused.fetch_add(1, Ordering::Relaxed);
            loop {
                let drained = self.backlog.drained.notified();
                tokio::pin!(drained);
                drained.as_mut().enable();
                if self.backlog.bytes.load(Ordering::Relaxed) <= self.backlog.limit / RESUME {
                    break;
                }
                tokio::select! {
                    () = drained => {}
                    () = self.tx.closed() => return,
                }
            }
            opened = match self
                .source
                .open_prefix_watch(&self.prefix, self.next, Conn::History)
                .await
            {
                Ok(o) => o,
                Err(e) => {
                    let _ = self.tx.send(Err(e));
                    return;
                }
            };
        }
    }

    /// Passes `opened`'s responses on until the backlog is over its limit (true) or the read
    /// ends (false: an error sent, or no one to send to).
    async fn read(&mut self, opened: &mut Opened) -> bool {
        loop {
            let next = tokio::select! {
                r = opened.responses.next() => r,
                () = self.tx.closed() => return false,
            };
            let resp = match next {
                None => {
                    let _ = self
                        .tx
                        .send(Err(SourceError::Unavailable("the watch stream ended".into())));
                    return false;
                }
                Some(Err(e)) => {
                    let _ = self.tx.send(Err(self.source.watch_broke(opened.member, e)));
                    return false;
                }
                Some(Ok(resp)) => resp,
            };
            let inner = &self.source.inner;
            let received = events_size(resp.events());
            inner
                .history_received
                .fetch_add(received as u64, Ordering::Relaxed);
            if let Err(e) = self.conv.take_response(resp) {
                let _ = self.tx.send(Err(e));
                return false;
            }
            // A batch of etcd's (up to 1,000 revisions for a watch behind) is copied out a
            // revision at a time, and what the backlog has no room for is dropped at once, to
            // be read again: a read holds its backlog, not etcd's batch.
            loop {
                let event = match self.conv.pending.pop_front() {
                    Some(e) => e,
                    None if self.conv.raw.is_some() => {
                        self.conv.next_revision();
                        continue;
                    }
                    None => break,
                };
                // Each event is a whole revision (or a notification the consumer trusts): the
                // next watch starts after the last one sent.
                self.next = self.next.max(event.revision().successor());
                let size = event_size(&event);
                let queued = self.backlog.put(size);
                if self.tx.send(Ok((event, size))).is_err() {
                    return false;
                }
                if queued > self.backlog.limit {
                    if let Some((resp, at)) = self.conv.raw.take() {
                        let dropped = events_size(&resp.events()[at..]);
                        inner.history_dropped.fetch_add(dropped as u64, Ordering::Relaxed);
                    }
                    self.conv.pending.clear();
                    return true;
                }
            }
        }
    }
}

/// The bytes of keys and values etcd's `events` carry (with their previous values).
fn events_size(events: &[etcd_client::Event]) -> usize {
    let kv = |kv: Option<&KeyValue>| kv.map_or(0, |kv| kv.key().len() + kv.value().len());
    events.iter().map(|e| kv(e.kv()) + kv(e.prev_kv())).sum()
}

/// The bytes of keys and values an event carries (its changes and their previous values).
fn event_size(event: &SourceEvent) -> usize {
    let SourceEvent::Changes { changes, .. } = event else {
        return 1;
    };
    changes.iter().map(SourceChange::bytes).sum::<usize>().max(1)
}

/// A watch on etcd: its changes a revision at a time, progress notifications the source
/// trusts, and compaction or a lost connection as errors.
pub struct EtcdWatch {
    pub(crate) responses: Responses,
    /// The watched prefix: changes of other keys in the watch's range are not the cache's.
    pub(crate) prefix: String,
    /// Kept for progress requests; the source holds it weakly. (A history read's task holds
    /// its own, as it opens watches again.)
    pub(crate) _sender: Option<Arc<tokio::sync::Mutex<WatchRequestSender>>>,
    /// The response whose events are being passed on, a revision at a time (a response holds
    /// up to 1,000 revisions: they are copied out one by one, not all at once), and the index
    /// of its next event.
    pub(crate) raw: Option<(WatchResponse, usize)>,
    pub(crate) pending: VecDeque<SourceEvent>,
    /// Whether requested notifications (watch id -1) are ordered with events.
    pub(crate) ordered_progress: bool,
    pub(crate) source: EtcdSource,
    /// The member the watch was opened on (an index into the source's endpoints).
    pub(crate) member: usize,
    pub(crate) ended: bool,
}

impl std::fmt::Debug for EtcdWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdWatch")
            .field("endpoint", &self.endpoint())
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

/// `responses`, each passed on `delay` after it arrived, in order (see
/// [`EtcdOptions::watch_delay`]).
pub(crate) fn delayed(mut responses: Responses, delay: Duration) -> Responses {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(r) = responses.next().await {
            if tx.send((tokio::time::Instant::now() + delay, r)).is_err() {
                return;
            }
        }
    });
    Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
        let (due, r) = rx.recv().await?;
        tokio::time::sleep_until(due).await;
        Some((r, rx))
    }))
}

impl EtcdWatch {
    /// The endpoint of the member the watch is on.
    pub fn endpoint(&self) -> &str {
        self.source.inner.members.endpoint(self.member)
    }

    /// A watch of `prefix` reading `responses`, opened on member `member`.
    pub(crate) fn new(
        source: &EtcdSource,
        prefix: &str,
        responses: Responses,
        sender: Option<Arc<tokio::sync::Mutex<WatchRequestSender>>>,
        member: usize,
    ) -> EtcdWatch {
        EtcdWatch {
            responses,
            prefix: prefix.to_owned(),
            _sender: sender,
            raw: None,
            pending: VecDeque::new(),
            ordered_progress: source.inner.ordered_progress,
            source: source.clone(),
            member,
            ended: false,
        }
    }

    /// Takes one response: its events to pass on a revision at a time, a notification, or the
    /// error that ends the watch.
    fn take_response(&mut self, resp: WatchResponse) -> Result<(), SourceError> {
        if resp.canceled() {
            if resp.compact_revision() > 0 {
                self.source.learn_compacted(resp.compact_revision() as u64);
                return Err(SourceError::Compacted {
                    compact_revision: rev(resp.compact_revision()),
                });
            }
            return Err(SourceError::Unavailable(format!(
                "watch canceled: {}",
                resp.cancel_reason()
            )));
        }
        if resp.created() {
            return Ok(());
        }
        if resp.events().is_empty() {
            let trusted = trusted_progress(self.ordered_progress, &resp);
            if trusted && let Ok(revision) = revision_of(resp.header()) {
                self.pending.push_back(SourceEvent::Progress { revision });
            }
            return Ok(());
        }
        self.raw = Some((resp, 0));
        Ok(())
    }

    /// Copies the next revision of the response being passed on into `pending`. etcd sends
    /// every event of a revision (one request that changed several keys) in one response:
    /// each revision goes on as one `Changes`, never split.
    fn next_revision(&mut self) {
        let Some((resp, mut at)) = self.raw.take() else {
            return;
        };
        let events = resp.events();
        let mut revision = None;
        while let Some(e) = events.get(at) {
            let r = e.kv().map(|kv| kv.mod_revision());
            if revision.is_some() && r.is_some() && r != revision {
                break;
            }
            revision = revision.or(r);
            at += 1;
            self.push(e);
        }
        if at < events.len() {
            self.raw = Some((resp, at));
        }
    }

    /// Turns one event into a change (or, for a fence, a notification) in `pending`.
    fn push(&mut self, e: &etcd_client::Event) {
        let Some(kv) = e.kv() else { return };
        let Ok(key) = std::str::from_utf8(kv.key()) else {
            return;
        };
        let prev = e.prev_kv().map(|p| PrevValue {
            value: Bytes::copy_from_slice(p.value()),
            mod_revision: rev(p.mod_revision()),
        });
        let change = match e.event_type() {
            EventType::Put => SourceChange::Put {
                key: key.to_owned(),
                value: Bytes::copy_from_slice(kv.value()),
                prev,
                created: kv.version() == 1,
            },
            EventType::Delete => SourceChange::Delete {
                key: key.to_owned(),
                prev,
            },
        };
        let revision = rev(kv.mod_revision());
        if !key.starts_with(&self.prefix) {
            // A fence (or another key the watch's range takes in): everything before it
            // came first, on this ordered channel, so the source is at its revision. A
            // fence round's revision holds this prefix's fence key and any other fence
            // keys in the range (`/registry/configmaps-x` for `/registry/configmaps/`),
            // which come in this one response: one progress notification, never a change.
            // The round's keys outside the range never reach this watch.
            if !matches!(self.pending.back(), Some(e) if e.revision() >= revision) {
                self.pending.push_back(SourceEvent::Progress { revision });
            }
            return;
        }
        match self.pending.back_mut() {
            Some(SourceEvent::Changes { revision: r, changes }) if *r == revision => changes.push(change),
            Some(SourceEvent::Progress { revision: r }) if *r == revision => {
                *self.pending.back_mut().expect("just matched") = SourceEvent::single(revision, change);
            }
            _ => self.pending.push_back(SourceEvent::single(revision, change)),
        }
    }
}

impl Stream for EtcdWatch {
    type Item = Result<SourceEvent, SourceError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(e) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(e)));
            }
            if this.raw.is_some() {
                this.next_revision();
                continue;
            }
            if this.ended {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.responses).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(SourceError::Unavailable(
                        "the watch stream ended".into(),
                    ))));
                }
                Poll::Ready(Some(Err(e))) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(Some(Ok(Incoming::Event(e)))) => this.pending.push_back(e),
                Poll::Ready(Some(Ok(Incoming::Response(resp)))) => {
                    if let Err(e) = this.take_response(resp) {
                        this.ended = true;
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
        }
    }
}

/// What a watch reads: etcd's responses, or (from a history read's task) events already
/// copied out of them.
pub(crate) enum Incoming {
    Response(WatchResponse),
    Event(SourceEvent),
}

/// A watch's input, a broken stream already said as the error to pass on.
pub(crate) type Responses = Pin<Box<dyn Stream<Item = Result<Incoming, SourceError>> + Send>>;

/// The id etcd answers progress requests under.
pub(crate) const REQUESTED_PROGRESS_ID: i64 = -1;

/// Whether a notification (a response without events) is one a watch passes on: any but a
/// requested one on an etcd that does not order those with events.
fn trusted_progress(ordered_progress: bool, resp: &WatchResponse) -> bool {
    ordered_progress || resp.watch_id() != REQUESTED_PROGRESS_ID
}
