//! The [`Source`] the caches read (lists in pages at one revision, watches, progress,
//! the signing key, consistent reads) and the fence rounds' store.

use super::*;
use crate::members::Conn;
use crate::watch::{Incoming, Opened, Responses, delayed};

impl EtcdSource {
    pub(crate) async fn list_at(
        &self,
        prefix: &str,
        at: Option<Revision>,
    ) -> Result<SourceList, SourceError> {
        let end = prefix_end(prefix);
        let mut revision = at.map_or(0, |r| r.get() as i64);
        let mut from = prefix.as_bytes().to_vec();
        let mut items = Vec::new();
        loop {
            let options = GetOptions::new()
                .with_range(end.clone())
                .with_limit(self.inner.list_page)
                .with_revision(revision);
            let page = self
                .reading(|mut kv| {
                    let (from, options) = (from.clone(), options.clone());
                    async move { kv.get(from, Some(options)).await }
                })
                .await;
            let resp = match page {
                Ok(r) => r,
                Err(e) if is_compacted(&e) => {
                    // The compacted revision is at least the one asked for + 1.
                    self.learn_compacted(revision as u64 + 1);
                    let _ = self.refresh_compacted().await;
                    return Err(SourceError::Compacted {
                        compact_revision: self.compacted(),
                    });
                }
                Err(e) => return Err(unavailable(e)),
            };
            if revision == 0 {
                revision = revision_of(resp.header())?.get() as i64;
            }
            items.extend(resp.kvs().iter().filter_map(item));
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
        }
        Ok(SourceList {
            items,
            revision: rev(revision),
        })
    }
}

pub(crate) fn item(kv: &KeyValue) -> Option<SourceItem> {
    Some(SourceItem {
        key: std::str::from_utf8(kv.key()).ok()?.to_owned(),
        value: Bytes::copy_from_slice(kv.value()),
        mod_revision: rev(kv.mod_revision()),
    })
}

impl FenceStore for EtcdSource {
    fn watched_prefixes(&self) -> Vec<String> {
        let watches = self.inner.watches.lock().unwrap_or_else(|p| p.into_inner());
        watches
            .iter()
            .filter(|(_, w)| w.strong_count() > 0)
            .map(|(p, _)| p.clone())
            .collect()
    }

    async fn revision_now(&self) -> Result<Revision, SourceError> {
        Source::current_revision(self).await
    }

    /// Puts, not transactions on the keys' revisions: any number of fences, from any replica,
    /// at any time, is as good as one (a retried fence is harmless).
    async fn put_fences(&self, keys: Vec<String>) -> Result<Revision, SourceError> {
        let resp = self
            .txn(|| {
                let puts: Vec<TxnOp> = keys
                    .iter()
                    .map(|k| TxnOp::put(k.as_str(), FENCE_VALUE, None))
                    .collect();
                Txn::new().and_then(puts)
            })
            .await?;
        revision_of(resp.header())
    }
}

impl Source for EtcdSource {
    type Watch = EtcdWatch;

    async fn list(&self, prefix: &str, at: Option<Revision>) -> Result<SourceList, SourceError> {
        self.list_at(prefix, at).await
    }

    /// Watches the prefix and its fence key (see the module docs): one range from the fence
    /// key to the prefix's end.
    async fn watch(&self, prefix: &str, from: Revision) -> Result<Self::Watch, SourceError> {
        let Opened {
            sender,
            responses,
            member,
        } = self.open_prefix_watch(prefix, from, Conn::Requests).await?;
        let source = self.clone();
        let responses: Responses = Box::pin(responses.map(move |r| {
            r.map(Incoming::Response)
                .map_err(|e| source.watch_broke(member, e))
        }));
        let responses = if self.inner.watch_delay.is_zero() {
            responses
        } else {
            delayed(responses, self.inner.watch_delay)
        };
        Ok(EtcdWatch::new(self, prefix, responses, Some(sender), member))
    }

    /// The same watch as [`watch`](Source::watch), over the members' history connections and
    /// bounded by [`EtcdOptions::history_backlog`](crate::EtcdOptions::history_backlog).
    async fn watch_history(&self, prefix: &str, from: Revision) -> Result<Self::Watch, SourceError> {
        self.watch_history_from(prefix, from).await
    }

    async fn current_revision(&self) -> Result<Revision, SourceError> {
        // A linearizable count of an empty range: the header carries the store's revision.
        let resp = self
            .reading(|mut kv| async move {
                kv.get(COMPACT_KEY, Some(GetOptions::new().with_count_only()))
                    .await
            })
            .await
            .map_err(unavailable)?;
        revision_of(resp.header())
    }

    /// On an etcd that orders requested notifications, a request on every open watch of
    /// `prefix`; on one that does not, a fence its watches bring back in order, written in one
    /// transaction with the fences of every other watched prefix and shared by the requests
    /// made meanwhile (see the module docs).
    async fn request_progress(&self, prefix: &str) -> Result<(), SourceError> {
        if !self.inner.ordered_progress {
            return self.inner.fences.request(self, prefix).await;
        }
        let senders: Vec<_> = {
            let watches = self.inner.watches.lock().unwrap_or_else(|p| p.into_inner());
            watches
                .iter()
                .filter(|(p, _)| p == prefix)
                .filter_map(|(_, w)| w.upgrade())
                .collect()
        };
        // Every open watch of the prefix is asked, even after one failed (its member may have
        // just died); the first failure is told.
        let mut failed = Ok(());
        for s in senders {
            if let Err(e) = s.lock().await.request_progress().await {
                failed = failed.and(Err(unavailable(e)));
            }
        }
        failed
    }

    async fn signing_key(&self) -> Result<[u8; 16], SourceError> {
        let mut fresh = [0u8; 16];
        getrandom::fill(&mut fresh).map_err(|e| SourceError::Unavailable(format!("no randomness: {e}")))?;
        // Created by the first replica; every other one reads it back.
        let resp = self
            .txn(|| {
                Txn::new()
                    .when([Compare::create_revision(SIGNING_KEY, CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(SIGNING_KEY, fresh.to_vec(), None)])
                    .or_else([TxnOp::get(SIGNING_KEY, None)])
            })
            .await?;
        if resp.succeeded() {
            return Ok(fresh);
        }
        let stored = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        });
        stored
            .and_then(|v| <[u8; 16]>::try_from(v.as_slice()).ok())
            .ok_or_else(|| SourceError::Unavailable(format!("{SIGNING_KEY} does not hold a 16-byte key")))
    }

    fn compacted_revision(&self) -> Revision {
        self.compacted()
    }

    async fn read(&self, key: &str) -> Result<(Option<SourceItem>, Revision), SourceError> {
        let resp = self
            .reading(|mut kv| async move { kv.get(key, None).await })
            .await
            .map_err(unavailable)?;
        Ok((resp.kvs().first().and_then(item), revision_of(resp.header())?))
    }
}
