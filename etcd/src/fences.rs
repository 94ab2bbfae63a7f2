//! Progress fences, on etcd versions whose requested progress notifications may overtake
//! events (see the crate docs): one write serves every cache of the source.
//!
//! A fence is a put of a prefix's *fence key* ([`fence_key`]), which that prefix's watch
//! covers and no list of the prefix includes: its event comes on the watch's ordered channel
//! after every change before it, and the watch yields it as progress at its revision. But
//! every fence moves etcd's revision, and so leaves every *other* cache of the source behind:
//! written one prefix at a time, consistent reads spread over several resources cost a raft
//! write each (each read's fence makes the next read's cache stale). So a fence is never
//! written alone:
//!
//! - **A round** puts the fence key of every prefix with an open watch, and of every prefix
//!   whose request waits, in one transaction: one revision, which every watch of the source
//!   brings to its cache. With more keys than etcd takes operations in a transaction
//!   ([`MAX_TXN_OPS`], its default `--max-txn-ops`), a transaction per [`MAX_TXN_OPS`] keys.
//! - **Requests are coalesced.** Rounds are written one at a time. A request is answered by
//!   the first round *begun* after the request started: that round fences the request's
//!   prefix at a revision above every revision its caller read before asking. A request made
//!   while a round is in flight waits for it and then shares the next one with every other
//!   request made meanwhile: one more round, never one per caller.
//! - **No round while etcd has not moved.** A request whose prefix's newest fence is still
//!   etcd's current revision writes nothing: its watch brings that fence, which is at or above
//!   every revision its caller read before asking. So a read of resource B right after a round
//!   made for resource A writes nothing, even while B's watch is still delivering the fence.
//!
//! Fences any replica writes serve every replica's watch of the prefix; rounds are coalesced
//! within one source.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Mutex, MutexGuard};

use tracing::debug;
use watchcache_core::{Revision, SourceError};

/// Operations etcd takes in one transaction by default (`--max-txn-ops`): a round with more
/// fence keys is written as a transaction per this many.
pub(crate) const MAX_TXN_OPS: usize = 128;

/// What a fence holds: only its revision matters.
pub(crate) const FENCE_VALUE: &[u8] = b"watchcache progress fence";

/// The key a watch of `prefix` covers besides the prefix, where its fences are written: the
/// prefix without its trailing slash, outside every list of the prefix. `None` for a prefix
/// without one (such a watch gets no fences).
pub(crate) fn fence_key(prefix: &str) -> Option<&str> {
    prefix.strip_suffix('/').filter(|k| !k.is_empty())
}

/// What a round needs of etcd.
pub(crate) trait FenceStore: Sync {
    /// The prefixes with an open watch now.
    fn watched_prefixes(&self) -> Vec<String>;

    /// etcd's current revision, read linearizably.
    fn revision_now(&self) -> impl Future<Output = Result<Revision, SourceError>> + Send;

    /// Puts [`FENCE_VALUE`] at every key of `keys` (at most [`MAX_TXN_OPS`]) in one
    /// transaction; its revision.
    fn put_fences(&self, keys: Vec<String>) -> impl Future<Output = Result<Revision, SourceError>> + Send;
}

/// The fence rounds of one source.
#[derive(Debug, Default)]
pub(crate) struct Fences {
    state: Mutex<State>,
    /// Held by the one request that writes a round (or checks whether it needs one): rounds go
    /// one at a time, and the requests made meanwhile queue here, in order.
    writing: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct State {
    /// Rounds begun. A round's number is taken, and its keys chosen, under the state's lock
    /// before its first transaction is sent.
    begun: u64,
    /// The newest round that ended (rounds end in order: one is written at a time).
    ended: u64,
    /// How round `ended` failed, if it did.
    failed: Option<SourceError>,
    /// The prefixes of the requests waiting now, each with how many: every round fences them,
    /// whether or not their watch is open (a fence written while a watch is down is in etcd's
    /// history, where the watch opened again from its last revision finds it).
    asking: BTreeMap<String, usize>,
    /// Each prefix's newest fence revision.
    fenced: HashMap<String, Revision>,
}

/// A request's place in [`State::asking`], given back when the request ends or is dropped.
struct Asking<'a> {
    fences: &'a Fences,
    prefix: &'a str,
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        let mut state = self.fences.state();
        if let Some(n) = state.asking.get_mut(self.prefix) {
            *n -= 1;
            if *n == 0 {
                state.asking.remove(self.prefix);
            }
        }
    }
}

impl Fences {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes sure a fence of `prefix` is written at a revision at or above every revision
    /// read before this call: by the round that answers it (its own or one it shares), or, when
    /// etcd has not moved since the prefix's newest fence, by that fence.
    pub(crate) async fn request(&self, store: &impl FenceStore, prefix: &str) -> Result<(), SourceError> {
        if fence_key(prefix).is_none() {
            return Ok(());
        }
        let (_asking, wanted) = {
            let mut state = self.state();
            *state.asking.entry(prefix.to_owned()).or_default() += 1;
            (Asking { fences: self, prefix }, state.begun + 1)
        };
        let _writing = self.writing.lock().await;
        let fenced = {
            let state = self.state();
            if state.ended >= wanted {
                // Begun after this request started, with this prefix among those it fenced.
                return state.failed.clone().map_or(Ok(()), Err);
            }
            state.fenced.get(prefix).copied()
        };
        if let Some(fenced) = fenced
            && store.revision_now().await? <= fenced
        {
            return Ok(());
        }
        self.round(store).await
    }

    /// Writes a round; the caller holds `writing`.
    async fn round(&self, store: &impl FenceStore) -> Result<(), SourceError> {
        let watched = store.watched_prefixes();
        let (round, keys) = {
            let mut state = self.state();
            state.begun += 1;
            let prefixes: BTreeSet<&str> = watched
                .iter()
                .map(String::as_str)
                .chain(state.asking.keys().map(String::as_str))
                .collect();
            (state.begun, fence_keys(&prefixes))
        };
        let mut outcome = Ok(());
        let mut transactions = 0;
        for chunk in keys.chunks(MAX_TXN_OPS) {
            let keys = chunk.iter().map(|(_, key)| key.clone()).collect();
            match store.put_fences(keys).await {
                Ok(revision) => {
                    transactions += 1;
                    let mut state = self.state();
                    for (prefix, _) in chunk {
                        let newest = state.fenced.entry(prefix.clone()).or_insert(revision);
                        *newest = (*newest).max(revision);
                    }
                }
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        debug!(
            round,
            prefixes = keys.len(),
            transactions,
            ok = outcome.is_ok(),
            "fence round"
        );
        let mut state = self.state();
        state.ended = round;
        state.failed = outcome.clone().err();
        outcome
    }
}

/// The fence keys of `prefixes`, with their prefixes, in key order. A fence key under another
/// of the prefixes (`/registry/a/b` for `/registry/a/b/`, under `/registry/a/`) is left out:
/// that prefix's lists and watch would take it for an object.
fn fence_keys(prefixes: &BTreeSet<&str>) -> Vec<(String, String)> {
    let mut keys: Vec<(String, String)> = prefixes
        .iter()
        .filter_map(|&prefix| {
            let key = fence_key(prefix)?;
            if let Some(outer) = prefixes.iter().find(|&&p| key.starts_with(p)) {
                debug!(prefix, outer, "no fence for a prefix under another one");
                return None;
            }
            Some((prefix.to_owned(), key.to_owned()))
        })
        .collect();
    keys.sort_by(|a, b| a.1.cmp(&b.1));
    keys
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::Semaphore;

    use super::*;

    /// A store that records the transactions it is sent. With a gate, each put and each read
    /// of the revision waits for a permit of it, so a test can hold one in flight.
    #[derive(Default)]
    struct Fake {
        watched: Vec<String>,
        state: Mutex<FakeState>,
        gate: Option<Arc<Semaphore>>,
    }

    #[derive(Default)]
    struct FakeState {
        revision: u64,
        puts: Vec<Vec<String>>,
        /// Reads of the revision.
        reads: usize,
        /// Calls waiting at the gate.
        at_gate: usize,
    }

    impl Fake {
        fn new(watched: &[&str]) -> Fake {
            Fake {
                watched: watched.iter().map(|p| p.to_string()).collect(),
                ..Fake::default()
            }
        }

        fn state(&self) -> MutexGuard<'_, FakeState> {
            self.state.lock().unwrap()
        }

        /// Someone else writes: etcd moves.
        fn write(&self) {
            self.state().revision += 1;
        }

        async fn pass_gate(&self) {
            if let Some(gate) = &self.gate {
                self.state().at_gate += 1;
                gate.acquire().await.unwrap().forget();
                self.state().at_gate -= 1;
            }
        }
    }

    impl FenceStore for Fake {
        fn watched_prefixes(&self) -> Vec<String> {
            self.watched.clone()
        }

        async fn revision_now(&self) -> Result<Revision, SourceError> {
            self.pass_gate().await;
            let mut state = self.state();
            state.reads += 1;
            Ok(Revision::new(state.revision))
        }

        async fn put_fences(&self, keys: Vec<String>) -> Result<Revision, SourceError> {
            self.pass_gate().await;
            assert!(
                keys.len() <= MAX_TXN_OPS,
                "{} operations in one transaction",
                keys.len()
            );
            let mut state = self.state();
            state.revision += 1;
            state.puts.push(keys);
            Ok(Revision::new(state.revision))
        }
    }

    /// Yields until `done`, a bounded number of times: on the test's one thread, every other
    /// task that can run does between two yields, so this counts steps, not time.
    async fn until(mut done: impl FnMut() -> bool) {
        for _ in 0..10_000 {
            if done() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("never happened");
    }

    #[tokio::test]
    async fn a_round_fences_every_watched_prefix_in_one_transaction() {
        let store = Fake::new(&["/registry/pods/", "/registry/secrets/", "/registry/configmaps/"]);
        let fences = Fences::default();
        fences.request(&store, "/registry/secrets/").await.unwrap();
        assert_eq!(
            store.state().puts,
            [vec![
                "/registry/configmaps".to_owned(),
                "/registry/pods".to_owned(),
                "/registry/secrets".to_owned()
            ]]
        );
        // etcd has not moved: every watch brings that fence, nothing more is written.
        for prefix in ["/registry/pods/", "/registry/configmaps/", "/registry/secrets/"] {
            fences.request(&store, prefix).await.unwrap();
        }
        assert_eq!(store.state().puts.len(), 1);
        // Once it moves, the next request writes the next round, for every prefix again.
        store.write();
        fences.request(&store, "/registry/pods/").await.unwrap();
        assert_eq!(store.state().puts.len(), 2);
        assert_eq!(store.state().puts[1].len(), 3);
        // A prefix asked for without an open watch is fenced too, with the others.
        fences.request(&store, "/registry/nodes/").await.unwrap();
        let puts = store.state().puts.clone();
        assert_eq!(puts.len(), 3);
        assert!(puts[2].contains(&"/registry/nodes".to_owned()) && puts[2].len() == 4);
        // A prefix without a fence key writes nothing.
        store.write();
        fences.request(&store, "").await.unwrap();
        assert_eq!(store.state().puts.len(), 3);
    }

    #[tokio::test]
    async fn more_keys_than_a_transaction_takes_go_in_several() {
        let watched: Vec<String> = (0..300).map(|i| format!("/registry/r{i:03}/")).collect();
        let store = Fake::new(&watched.iter().map(String::as_str).collect::<Vec<_>>());
        let fences = Fences::default();
        fences.request(&store, "/registry/r000/").await.unwrap();
        let puts = store.state().puts.clone();
        assert_eq!(puts.iter().map(Vec::len).collect::<Vec<_>>(), [128, 128, 44]);
        let all: BTreeSet<&String> = puts.iter().flatten().collect();
        assert_eq!(all.len(), 300, "every prefix, once");
        // Fenced in different transactions, the prefixes' newest fences are not all at etcd's
        // revision: a request of one in an earlier transaction writes another round.
        fences.request(&store, "/registry/r299/").await.unwrap();
        assert_eq!(store.state().puts.len(), 3, "the last transaction's prefix");
        fences.request(&store, "/registry/r000/").await.unwrap();
        assert_eq!(store.state().puts.len(), 6, "the first transaction's prefix");
    }

    #[tokio::test]
    async fn a_fence_key_under_another_prefix_is_not_written() {
        let store = Fake::new(&["/registry/a/", "/registry/a/b/", "/registry/a-b/"]);
        let fences = Fences::default();
        fences.request(&store, "/registry/a/b/").await.unwrap();
        assert_eq!(
            store.state().puts,
            [vec!["/registry/a".to_owned(), "/registry/a-b".to_owned()]],
            "/registry/a/b would be an object of /registry/a/"
        );
    }

    #[tokio::test]
    async fn concurrent_requests_share_the_round_in_flight_and_one_more() {
        let gate = Arc::new(Semaphore::new(0));
        let store = Arc::new(Fake {
            gate: Some(gate.clone()),
            ..Fake::new(&["/registry/pods/", "/registry/secrets/"])
        });
        let fences = Arc::new(Fences::default());
        let request = |prefix: &'static str| {
            let (store, fences) = (store.clone(), fences.clone());
            tokio::spawn(async move { fences.request(&*store, prefix).await })
        };
        let asking = || fences.state().asking.values().sum::<usize>();
        let at_gate = || store.state().at_gate;
        let prefix = |i: usize| ["/registry/pods/", "/registry/secrets/"][i % 2];
        // Every request ends, within a bounded number of steps (one held at the gate forever
        // fails the test rather than hang it).
        async fn ended(requests: Vec<tokio::task::JoinHandle<Result<(), SourceError>>>) {
            until(|| requests.iter().all(|r| r.is_finished())).await;
            for r in requests {
                r.await.unwrap().unwrap();
            }
        }

        // A round in flight, held at the gate.
        let first = request("/registry/pods/");
        until(|| at_gate() == 1).await;
        // Twenty requests made meanwhile: they started after it was sent, so they wait for it,
        // and then for one more round, which they share.
        let meanwhile: Vec<_> = (0..20).map(|i| request(prefix(i))).collect();
        until(|| asking() == 21).await;
        gate.add_permits(1);
        ended(vec![first]).await;
        // The first of them reads etcd's revision, which someone else's write moved past the
        // fence: a round is due.
        until(|| at_gate() == 1).await;
        store.write();
        gate.add_permits(1);
        until(|| at_gate() == 1).await;
        gate.add_permits(1);
        ended(meanwhile).await;
        assert_eq!(store.state().puts.len(), 2, "the round in flight and one more");
        assert_eq!(store.state().reads, 1, "one request checked, for all of them");

        // Requests made before a round is sent are answered by it: here while the one that
        // writes it still reads etcd's revision.
        store.write();
        let first = request("/registry/secrets/");
        until(|| at_gate() == 1).await;
        let before: Vec<_> = (0..10).map(|i| request(prefix(i))).collect();
        until(|| asking() == 11).await;
        gate.add_permits(1);
        until(|| at_gate() == 1).await;
        gate.add_permits(1);
        ended(before).await;
        ended(vec![first]).await;
        assert_eq!(store.state().puts.len(), 3, "one round for the eleven");
        assert_eq!(asking(), 0, "every request gave its place back");
    }
}
