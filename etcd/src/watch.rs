//! Watches: one gRPC watch stream per prefix (and its fence key), events and progress
//! notifications turned into [`SourceEvent`]s, a broken stream said as the error it is.

use super::*;

impl EtcdSource {
    /// Opens a watch of `key` on a member in rotation; the stream, and the member's index.
    pub(crate) async fn open_watch(
        &self,
        key: &str,
        options: WatchOptions,
    ) -> Result<(WatchStream, usize), etcd_client::Error> {
        let timeout = self.inner.request_timeout;
        self.inner
            .members
            .call(Kind::Read, |i, c| {
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

/// A watch on etcd: its changes a revision at a time, progress notifications the source
/// trusts, and compaction or a lost connection as errors.
pub struct EtcdWatch {
    pub(crate) responses: Responses,
    /// The watched prefix: changes of other keys in the watch's range are not the cache's.
    pub(crate) prefix: String,
    /// Kept for progress requests; the source holds it weakly.
    pub(crate) _sender: Arc<tokio::sync::Mutex<WatchRequestSender>>,
    pub(crate) pending: VecDeque<SourceEvent>,
    /// Whether requested notifications (watch id -1) are ordered with events.
    pub(crate) ordered_progress: bool,
    pub(crate) source: EtcdSource,
    /// The member the watch is on (an index into the source's endpoints).
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
pub(crate) fn delayed(mut responses: WatchResponseStream, delay: Duration) -> Responses {
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

    /// Turns one response into events, or the error that ends the watch.
    fn take(&mut self, resp: WatchResponse) -> Result<(), SourceError> {
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
            let trusted = self.ordered_progress || resp.watch_id() != REQUESTED_PROGRESS_ID;
            if trusted && let Ok(revision) = revision_of(resp.header()) {
                self.pending.push_back(SourceEvent::Progress { revision });
            }
            return Ok(());
        }
        // etcd sends every event of a revision (one request that changed several keys) in one
        // response: each revision goes on as one `Changes`, never split.
        for e in resp.events() {
            let Some(kv) = e.kv() else { continue };
            let Ok(key) = std::str::from_utf8(kv.key()) else {
                continue;
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
                continue;
            }
            match self.pending.back_mut() {
                Some(SourceEvent::Changes { revision: r, changes }) if *r == revision => changes.push(change),
                Some(SourceEvent::Progress { revision: r }) if *r == revision => {
                    *self.pending.back_mut().expect("just matched") = SourceEvent::single(revision, change);
                }
                _ => self.pending.push_back(SourceEvent::single(revision, change)),
            }
        }
        Ok(())
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
                    return Poll::Ready(Some(Err(this.source.watch_broke(this.member, e))));
                }
                Poll::Ready(Some(Ok(resp))) => {
                    if let Err(e) = this.take(resp) {
                        this.ended = true;
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
        }
    }
}

pub(crate) type Responses = Pin<Box<dyn Stream<Item = Result<WatchResponse, etcd_client::Error>> + Send>>;

/// The id etcd answers progress requests under.
pub(crate) const REQUESTED_PROGRESS_ID: i64 = -1;
