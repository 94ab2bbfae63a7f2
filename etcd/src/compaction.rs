//! Compaction as the apiserver compacts: one replica elected per interval by a compare-and-swap
//! on `compact_rev_key`, and every replica learning the compacted revision from that key once
//! etcd has made the compaction it names (and from etcd's own refusals of compacted reads).

use super::*;
use crate::members::Conn;
use crate::writes::write_failed;

impl EtcdSource {
    /// The newest compacted revision this replica knows of (0 when none).
    pub fn compacted(&self) -> Revision {
        Revision::new(self.inner.compacted.load(Ordering::Relaxed))
    }

    pub(crate) fn learn_compacted(&self, revision: u64) {
        let before = self.inner.compacted.fetch_max(revision, Ordering::Relaxed);
        if revision > before {
            debug!(revision, "learned of a compaction");
        }
    }

    /// What the compaction key says, learned once etcd has made that compaction. The key is
    /// written before the compaction is asked for, and the compaction may fail (its member
    /// killed mid-call): believed at once, it would make every replica answer 410 for
    /// revisions etcd still holds, until the next round. Etcd refuses a read below a revision
    /// it compacted: until it refuses one at `revision - 1`, the claim waits, and
    /// [`confirm_claimed`](Self::confirm_claimed) tries it again.
    ///
    /// A claim above `head`, the revision etcd answered at, is none this cluster can make (a
    /// key written by hand, or restored from another cluster): it is ignored, or it would hold
    /// the place of every later claim below it.
    pub(crate) async fn learn_claimed(&self, revision: u64, head: Revision) {
        if revision > head.get() {
            debug!(revision, %head, "a compaction claim above etcd's revision, ignored");
            return;
        }
        self.inner.claimed.fetch_max(revision, Ordering::Relaxed);
        self.confirm_claimed().await;
    }

    /// Learns the claimed compaction if etcd has made it.
    pub(crate) async fn confirm_claimed(&self) {
        let claimed = self.inner.claimed.load(Ordering::Relaxed);
        if claimed > self.compacted().get() && self.made(claimed).await {
            self.learn_compacted(claimed);
        }
    }

    /// Whether etcd has compacted at `revision`: it refuses a read at `revision - 1`. `false`
    /// when it answers the read, or does not answer.
    async fn made(&self, revision: u64) -> bool {
        let Some(below) = revision.checked_sub(1).and_then(|r| i64::try_from(r).ok()) else {
            return false;
        };
        if below < 1 {
            return false;
        }
        let below = GetOptions::new().with_revision(below).with_limit(1);
        let read = self
            .reading(|mut kv| {
                let below = below.clone();
                async move { kv.get(COMPACT_KEY, Some(below)).await }
            })
            .await;
        matches!(read, Err(e) if is_compacted(&e))
    }

    /// Learns from the compaction key as read: its claim, and, while that claim is not made
    /// (or is ignored, above the key's write), the claim before it. A replica starting in the moment between a compactor's key and its
    /// compaction (or after a compactor that died in it) would otherwise know of no compaction
    /// at all until the next round's is made.
    async fn learn_key(&self, kv: &KeyValue, head: Revision) {
        let Some(claim) = parse_revision(kv) else {
            return;
        };
        // A claim is of a revision before the key's write.
        self.learn_claimed(claim, head.min(rev(kv.mod_revision()))).await;
        if self.compacted().get() >= claim || kv.version() < 2 || kv.mod_revision() < 2 {
            return;
        }
        let before = GetOptions::new().with_revision(kv.mod_revision() - 1);
        let read = self
            .reading(|mut kv| {
                let before = before.clone();
                async move { kv.get(COMPACT_KEY, Some(before)).await }
            })
            .await;
        match read {
            Ok(resp) => {
                if let Some(previous) = resp.kvs().first().and_then(parse_revision)
                    && previous > self.compacted().get()
                    && self.made(previous).await
                {
                    self.learn_compacted(previous);
                }
            }
            // Etcd holds nothing below the key's write, which came after its claim: both made.
            Err(e) if is_compacted(&e) => self.learn_compacted(kv.mod_revision() as u64),
            // Tried again at the next round.
            Err(_) => {}
        }
    }

    /// Reads the compaction key and learns what it says once etcd has made it (a claim is
    /// believed once etcd refuses a read below it), and the claim before it if that one is made;
    /// returns the newest compaction this replica knows of.
    pub async fn refresh_compacted(&self) -> Result<Revision, SourceError> {
        let resp = self
            .reading(|mut kv| async move { kv.get(COMPACT_KEY, None).await })
            .await
            .map_err(unavailable)?;
        let head = revision_of(resp.header())?;
        if let Some(kv) = resp.kvs().first() {
            self.learn_key(kv, head).await;
        }
        Ok(self.compacted())
    }

    /// One round of the apiserver's compaction protocol. `round` is the compaction key's
    /// version this replica last saw and `seen` the store's revision it saw then. If the key's
    /// version is still `round`, this replica wins the round: it records `seen` in the key and
    /// compacts at it. Either way it returns the version and revision to use next round.
    pub async fn compact_round(&self, round: i64, seen: Revision) -> Result<(i64, Revision), SourceError> {
        let resp = self
            .txn(|| {
                Txn::new()
                    .when([Compare::version(COMPACT_KEY, CompareOp::Equal, round)])
                    .and_then([TxnOp::put(COMPACT_KEY, seen.get().to_string(), None)])
                    .or_else([TxnOp::get(COMPACT_KEY, None)])
            })
            .await?;
        let now = revision_of(resp.header())?;
        if !resp.succeeded() {
            // Another replica won this round; its target is what is (being) compacted.
            let kv = resp.op_responses().into_iter().find_map(|r| match r {
                TxnOpResponse::Get(g) => g.kvs().first().cloned(),
                _ => None,
            });
            let Some(kv) = kv else {
                return Ok((0, now));
            };
            if let Some(r) = parse_revision(&kv) {
                self.learn_claimed(r, now.min(rev(kv.mod_revision()))).await;
            }
            return Ok((kv.version(), now));
        }
        if seen.get() > 0 {
            let started = std::time::Instant::now();
            let compacted = self
                .inner
                .members
                .call(Kind::Write, |_, c| async move {
                    kv(c).compact(seen.get() as i64, None).await
                })
                .await;
            match compacted {
                Ok(_) => {}
                Err(e) if is_compacted(&e) => {}
                Err(e) => return Err(write_failed(e)),
            }
            self.learn_compacted(seen.get());
            info!(revision = %seen, took = ?started.elapsed(), "compacted etcd");
        }
        Ok((round + 1, now))
    }

    /// Runs the compactor until the future is dropped: a round every `interval`, so etcd
    /// keeps between one and two intervals of history.
    pub async fn compact_every(self, interval: Duration) {
        let mut round = 0;
        let mut seen = Revision::ZERO;
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match self.compact_round(round, seen).await {
                Ok((r, s)) => (round, seen) = (r, s),
                Err(e) => warn!(error = %e, "compaction round failed"),
            }
        }
    }

    /// Follows the compaction key until the future is dropped, so that this replica learns of
    /// every compaction any replica (or apiserver) makes, whether or not it compacts itself.
    pub async fn follow_compactions(self) {
        loop {
            if let Err(e) = self.follow_compactions_once().await {
                debug!(error = %e, "following the compaction key; again shortly");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    pub(crate) async fn follow_compactions_once(&self) -> Result<(), SourceError> {
        let resp = self
            .reading(|mut kv| async move { kv.get(COMPACT_KEY, None).await })
            .await
            .map_err(unavailable)?;
        let head = revision_of(resp.header())?;
        let from = head.get() as i64 + 1;
        if let Some(kv) = resp.kvs().first() {
            self.learn_key(kv, head).await;
        }
        let options = WatchOptions::new().with_start_revision(from);
        let (stream, member) = self
            .open_watch(COMPACT_KEY, options, Conn::Requests)
            .await
            .map_err(unavailable)?;
        let (_sender, mut responses) = stream.split();
        // A claim etcd has not made yet is tried again every second.
        let mut recheck = tokio::time::interval(Duration::from_secs(1));
        // A probe that took long is followed by one a second later, not a burst.
        recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let resp = tokio::select! {
                resp = responses.next() => match resp {
                    Some(resp) => resp,
                    None => break,
                },
                _ = recheck.tick() => {
                    self.confirm_claimed().await;
                    continue;
                }
            };
            let resp = resp.map_err(|e| self.watch_broke(member, e))?;
            if resp.canceled() {
                return Err(SourceError::Unavailable(format!(
                    "watch canceled: {}",
                    resp.cancel_reason()
                )));
            }
            for kv in resp.events().iter().filter_map(|e| e.kv()) {
                if let Some(r) = parse_revision(kv) {
                    // A claim is of a revision before the key's write.
                    self.learn_claimed(r, rev(kv.mod_revision())).await;
                }
            }
        }
        Ok(())
    }
}

/// The revision a compaction key's value records.
pub(crate) fn parse_revision(kv: &KeyValue) -> Option<u64> {
    std::str::from_utf8(kv.value()).ok()?.parse().ok()
}
