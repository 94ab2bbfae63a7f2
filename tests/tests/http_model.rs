//! The HTTP facade against a reference model, over random schedules: writes through the API,
//! writes made in the store that change several keys at one revision (a transaction, a prefix
//! delete, a revoked lease: on the embedded store through `MemorySource`, on etcd through its
//! client), GETs, paged LISTs, watches from many resourceVersions and reconnects, with source
//! faults in between (watch streams broken, the store switched off, compaction). Clients
//! select by namespace and by a label that writes move objects in and out of. Every GET is the
//! model's current object; every LIST page set equals the model's state at the list's
//! resourceVersion (never part of a revision); every watch delivers the model's history after
//! its start, filtered with the apiserver's transition rules (entering the selection is ADDED,
//! leaving it DELETED), with no loss, duplicate or reordering, each revision whole and
//! together (its events in any order among themselves, all with its resourceVersion), and
//! ends early only with an in-stream 410, between revisions, where a compaction or the
//! history window allows it.
//!
//! `WATCHCACHE_MODEL_SCHEDULES` sets the number of schedules (200 by default, as CI runs);
//! `WATCHCACHE_MODEL_SEED` runs one seed alone, to replay a failure.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use etcd_client::{DeleteOptions, PutOptions, Txn, TxnOp};
use serde_json::{Value, json};
use watchcache_core::source::memory::{LeaseId, TxnWrite};
use watchcache_server::Backend;
use watchcache_tests::{Backing, Frames, Server, http, request};

/// The history window of the server under test: small, so that laps happen.
const HISTORY: usize = 16;
const NAMESPACES: [&str; 2] = ["a", "a-b"];
const NAMES: [&str; 4] = ["x", "y", "z", "w"];

/// A small deterministic generator (xorshift), so that a seed replays a schedule.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

const TIERS: [&str; 2] = ["front", "back"];

/// One change as the model knows it: the revision, the namespace and name, and the object's
/// `tier` label before and after (`None` where it did not exist).
struct Change {
    rev: u64,
    ns: &'static str,
    name: &'static str,
    before: Option<&'static str>,
    after: Option<&'static str>,
}

/// What a client selects: a namespace, and a `tier` label value.
#[derive(Copy, Clone)]
struct Sel {
    namespace: Option<&'static str>,
    tier: Option<&'static str>,
}

impl Sel {
    fn random(rng: &mut Rng) -> Sel {
        Sel {
            namespace: (rng.below(2) == 0).then(|| rng.pick(&NAMESPACES)),
            tier: (rng.below(2) == 0).then(|| rng.pick(&TIERS)),
        }
    }

    /// The collection's path with the selector, ready for more parameters.
    fn path(&self) -> String {
        let base = match self.namespace {
            Some(ns) => format!("/api/v1/namespaces/{ns}/configmaps?"),
            None => "/api/v1/configmaps?".to_owned(),
        };
        match self.tier {
            Some(t) => format!("{base}labelSelector=tier%3D{t}&"),
            None => base,
        }
    }

    fn in_ns(&self, ns: &str) -> bool {
        self.namespace.is_none_or(|want| want == ns)
    }

    /// Whether the key `ns/name` is in the selected namespace.
    fn in_key(&self, key: &str) -> bool {
        self.in_ns(key.split('/').next().unwrap_or_default())
    }

    /// Whether an object with this `tier` (`None`: no object) is selected.
    fn selects(&self, tier: Option<&str>) -> bool {
        tier.is_some() && (self.tier.is_none() || self.tier == tier)
    }

    /// What this client receives for `c`, by the apiserver's transition rules.
    fn delivery(&self, c: &Change) -> Option<&'static str> {
        if !self.in_ns(c.ns) {
            return None;
        }
        match (self.selects(c.before), self.selects(c.after)) {
            (true, true) => Some("MODIFIED"),
            (false, true) => Some("ADDED"),
            (true, false) => Some("DELETED"),
            (false, false) => None,
        }
    }
}

/// An object in the model's state: its revision and `tier` label.
type Obj = (u64, &'static str);

/// A lease the schedule holds, in whichever store it is.
#[derive(Copy, Clone, Debug)]
enum Lease {
    Memory(LeaseId),
    Etcd(i64),
}

#[derive(Default)]
struct Model {
    /// The state after each write: revision, then `ns/name` → the object.
    states: Vec<(u64, BTreeMap<String, Obj>)>,
    changes: Vec<Change>,
    /// The lease the schedule holds, if any, and the keys attached to it (a put without it
    /// detaches a key, as in etcd).
    lease: Option<Lease>,
    attached: BTreeSet<String>,
    /// The revisions that changed more than one key, and the keys they changed.
    multi_key: (u64, u64),
}

/// What one write leaves at a key: an object with this `tier`, or (`None`) nothing.
type Write = (&'static str, &'static str, Option<&'static str>);

impl Model {
    /// The revision and state after the last write.
    fn now(&self) -> (u64, BTreeMap<String, Obj>) {
        self.states.last().cloned().unwrap_or_default()
    }

    /// Applies one write of the store that changed `writes` (each key once) and moved the
    /// store to `rev`: every change at that one revision, one state after them all. Puts made
    /// `on_lease` attach their keys to the schedule's lease; any other write detaches its key.
    /// A write that changed nothing (deleting only absent keys) left the model's state as it
    /// was.
    fn apply(&mut self, rev: u64, writes: &[Write], on_lease: bool, ctx: &str) {
        let (last, mut state) = self.now();
        let mut changed = 0;
        for &(ns, name, after) in writes {
            let key = format!("{ns}/{name}");
            let before = state.get(&key).map(|o| o.1);
            if on_lease && after.is_some() {
                self.attached.insert(key.clone());
            } else {
                self.attached.remove(&key);
            }
            if before.is_none() && after.is_none() {
                continue;
            }
            changed += 1;
            match after {
                Some(tier) => state.insert(key, (rev, tier)),
                None => state.remove(&key),
            };
            self.changes.push(Change {
                rev,
                ns,
                name,
                before,
                after,
            });
        }
        if changed > 1 {
            self.multi_key.0 += 1;
            self.multi_key.1 += changed;
        }
        if changed > 0 {
            assert!(rev > last, "{ctx}: a write that changed keys moves the revision");
            self.states.push((rev, state));
        } else {
            // Nothing of the model's changed: the revision moved only if something else wrote
            // (on etcd 3.4.23, the fences the caches write to ask for progress).
            assert!(
                rev >= last,
                "{ctx}: a write that changed nothing moved the revision back"
            );
        }
    }

    fn state_at(&self, rev: u64) -> BTreeMap<String, Obj> {
        self.states
            .iter()
            .rev()
            .find(|(r, _)| *r <= rev)
            .map(|(_, s)| s.clone())
            .unwrap_or_default()
    }
}

struct OpenWatch {
    frames: Frames,
    what: String,
    /// The frames the model expects, in order: `(type, ns/name, revision)`.
    initial: Vec<(String, String, u64)>,
    after: u64,
    sel: Sel,
}

fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a resourceVersion in {v}"))
}

async fn write(server: &Server, rng: &mut Rng, model: &mut Model) {
    let (ns, name) = (rng.pick(&NAMESPACES), rng.pick(&NAMES));
    let key = format!("{ns}/{name}");
    let (_, state) = model.now();
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let tier = rng.pick(&TIERS);
    let body =
        json!({"metadata": {"name": name, "labels": {"tier": tier}}, "data": {"n": rng.next().to_string()}});
    let c = http();
    let kind = match state.contains_key(&key) {
        false => {
            let (code, out) = request(&c, server, "POST", &path, Some(body)).await;
            assert_eq!(code, 201, "{}", String::from_utf8_lossy(&out));
            "ADDED"
        }
        true if rng.below(3) == 0 => {
            let (code, out) = request(&c, server, "DELETE", &format!("{path}/{name}"), None).await;
            assert_eq!(code, 200, "{}", String::from_utf8_lossy(&out));
            "DELETED"
        }
        true => {
            let (code, out) = request(&c, server, "PUT", &format!("{path}/{name}"), Some(body)).await;
            assert_eq!(code, 200, "{}", String::from_utf8_lossy(&out));
            "MODIFIED"
        }
    };
    // Writes are sequential: the store's revision now is this write's. A write through the API
    // carries no lease: the key leaves the schedule's.
    let rev = watchcache_tests::current_revision(server).await;
    let after = (kind != "DELETED").then_some(tier);
    model.apply(rev, &[(ns, name, after)], false, kind);
}

/// The storage key of configmap `ns/name`.
fn storage_key(ns: &str, name: &str) -> String {
    format!("/registry/configmaps/{ns}/{name}")
}

/// A ConfigMap's value as the store holds it.
fn stored(ns: &str, name: &str, tier: &str, rng: &mut Rng) -> Bytes {
    let v = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": {"tier": tier}},
        "data": {"n": rng.next().to_string()}});
    Bytes::from(v.to_string())
}

/// `n` distinct keys, at random.
fn some_keys(rng: &mut Rng, n: usize) -> Vec<(&'static str, &'static str)> {
    let mut all: Vec<_> = NAMESPACES
        .iter()
        .flat_map(|ns| NAMES.iter().map(move |name| (*ns, *name)))
        .collect();
    let mut out = Vec::with_capacity(n);
    while out.len() < n && !all.is_empty() {
        out.push(all.swap_remove(rng.below(all.len() as u64) as usize));
    }
    out
}

/// A write made in the store, not through the API, that changes several keys at one revision
/// (etcd's, and the embedded store's): a transaction of puts and deletes, a prefix delete, or a
/// lease's revocation, which deletes every key still attached to it. When the schedule holds
/// no lease, the third grants one and attaches keys to it (on etcd in one transaction; on the
/// embedded store, whose transactions take no lease, one write each).
async fn multi(server: &Server, rng: &mut Rng, model: &mut Model) {
    let store = server.store();
    let (_, state) = model.now();
    match rng.below(3) {
        0 => {
            let n = 2 + rng.below(2) as usize;
            let writes: Vec<Write> = some_keys(rng, n)
                .into_iter()
                .map(|(ns, name)| (ns, name, (rng.below(3) != 0).then(|| rng.pick(&TIERS))))
                .collect();
            // On etcd the transaction's puts may carry the schedule's lease.
            let lease = match model.lease {
                Some(Lease::Etcd(id)) if rng.below(2) == 0 => Some(id),
                _ => None,
            };
            let values: Vec<_> = writes
                .iter()
                .map(|&(ns, name, tier)| tier.map(|t| stored(ns, name, t, rng)))
                .collect();
            match store {
                Backend::Memory(m) => {
                    let ops = writes
                        .iter()
                        .zip(&values)
                        .map(|(&(ns, name, _), v)| match v {
                            Some(value) => TxnWrite::Put {
                                key: storage_key(ns, name),
                                value: value.clone(),
                            },
                            None => TxnWrite::Delete {
                                key: storage_key(ns, name),
                            },
                        })
                        .collect();
                    m.txn(ops).expect("a transaction");
                }
                Backend::Etcd(e) => {
                    let ops: Vec<_> = writes
                        .iter()
                        .zip(&values)
                        .map(|(&(ns, name, _), v)| match v {
                            Some(value) => TxnOp::put(
                                storage_key(ns, name),
                                value.to_vec(),
                                lease.map(|id| PutOptions::new().with_lease(id)),
                            ),
                            None => TxnOp::delete(storage_key(ns, name), None),
                        })
                        .collect();
                    e.client()
                        .txn(Txn::new().and_then(ops))
                        .await
                        .expect("a transaction");
                }
            }
            let rev = watchcache_tests::current_revision(server).await;
            model.apply(rev, &writes, lease.is_some(), "a transaction");
        }
        1 => {
            let ns = (rng.below(2) == 0).then(|| rng.pick(&NAMESPACES));
            let prefix = match ns {
                Some(ns) => format!("/registry/configmaps/{ns}/"),
                None => "/registry/configmaps/".to_owned(),
            };
            let writes: Vec<Write> = state
                .keys()
                .filter_map(|k| {
                    let (kns, kname) = k.split_once('/')?;
                    let ns = *NAMESPACES.iter().find(|n| **n == kns)?;
                    let name = *NAMES.iter().find(|n| **n == kname)?;
                    ns_matches(ns, &prefix).then_some((ns, name, None))
                })
                .collect();
            match store {
                Backend::Memory(m) => {
                    m.delete_prefix(&prefix).expect("a prefix delete");
                }
                Backend::Etcd(e) => {
                    let all = DeleteOptions::new().with_prefix();
                    e.client()
                        .delete(prefix.as_str(), Some(all))
                        .await
                        .expect("a prefix delete");
                }
            }
            let rev = watchcache_tests::current_revision(server).await;
            model.apply(rev, &writes, false, &format!("a delete of {prefix}"));
        }
        _ => match model.lease.take() {
            Some(lease) => {
                let writes: Vec<Write> = model
                    .attached
                    .iter()
                    .map(|k| {
                        let (ns, name) = k.split_once('/').unwrap();
                        let ns = *NAMESPACES.iter().find(|n| **n == ns).unwrap();
                        let name = *NAMES.iter().find(|n| **n == name).unwrap();
                        (ns, name, None)
                    })
                    .collect();
                match lease {
                    Lease::Memory(id) => {
                        let Backend::Memory(m) = store else { unreachable!() };
                        m.revoke_lease(id).expect("a revocation");
                    }
                    Lease::Etcd(id) => {
                        let Backend::Etcd(e) = store else { unreachable!() };
                        e.client().lease_revoke(id).await.expect("a revocation");
                    }
                }
                let rev = watchcache_tests::current_revision(server).await;
                model.apply(rev, &writes, false, "a lease's revocation");
                assert!(model.attached.is_empty(), "the lease took its keys");
            }
            None => {
                let n = 1 + rng.below(3) as usize;
                let writes: Vec<Write> = some_keys(rng, n)
                    .into_iter()
                    .map(|(ns, name)| (ns, name, Some(rng.pick(&TIERS))))
                    .collect();
                let ttl = Duration::from_secs(3600);
                match store {
                    Backend::Memory(m) => {
                        let id = m.grant_lease(ttl).expect("a lease");
                        model.lease = Some(Lease::Memory(id));
                        for &(ns, name, tier) in &writes {
                            let (key, value) = (storage_key(ns, name), stored(ns, name, tier.unwrap(), rng));
                            match m.create_with_lease(&key, value.clone(), Some(id)) {
                                Err(watchcache_core::SourceError::AlreadyExists(_)) => {
                                    m.update_with_lease(&key, value, None, Some(id))
                                        .expect("an update on the lease");
                                }
                                done => {
                                    done.expect("a create on the lease");
                                }
                            }
                            let rev = watchcache_tests::current_revision(server).await;
                            model.apply(rev, &[(ns, name, tier)], true, "a write on a lease");
                        }
                    }
                    Backend::Etcd(e) => {
                        let mut c = e.client();
                        let id = c
                            .lease_grant(ttl.as_secs() as i64, None)
                            .await
                            .expect("a lease")
                            .id();
                        model.lease = Some(Lease::Etcd(id));
                        let ops: Vec<_> = writes
                            .iter()
                            .map(|&(ns, name, tier)| {
                                let value = stored(ns, name, tier.unwrap(), rng);
                                let on_lease = PutOptions::new().with_lease(id);
                                TxnOp::put(storage_key(ns, name), value.to_vec(), Some(on_lease))
                            })
                            .collect();
                        c.txn(Txn::new().and_then(ops))
                            .await
                            .expect("a transaction on the lease");
                        let rev = watchcache_tests::current_revision(server).await;
                        model.apply(rev, &writes, true, "a transaction on a lease");
                    }
                }
            }
        },
    }
}

/// Whether namespace `ns`'s configmaps are under `prefix`.
fn ns_matches(ns: &str, prefix: &str) -> bool {
    storage_key(ns, "x").starts_with(prefix)
}

/// A consistent GET of one object: the model's object now, or 404.
async fn get(server: &Server, rng: &mut Rng, model: &Model, seed: u64) {
    let (ns, name) = (rng.pick(&NAMESPACES), rng.pick(&NAMES));
    let path = format!("/api/v1/namespaces/{ns}/configmaps/{name}");
    let (code, body) = request(&http(), server, "GET", &path, None).await;
    let ctx = format!("seed {seed}: GET {path}: {}", String::from_utf8_lossy(&body));
    match model.now().1.get(&format!("{ns}/{name}")) {
        None => assert_eq!(code, 404, "{ctx}"),
        Some(&(rev, tier)) => {
            assert_eq!(code, 200, "{ctx}");
            let v: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(
                (rv_of(&v), v["metadata"]["labels"]["tier"].as_str()),
                (rev, Some(tier)),
                "{ctx}"
            );
        }
    }
}

/// A paged LIST: the pages together are the model's state at the list's revision, or a page
/// is refused with 410 because its snapshot has gone.
async fn list(server: &Server, rng: &mut Rng, model: &Model, seed: u64) -> Option<u64> {
    let sel = Sel::random(rng);
    let base = sel.path();
    let limit = rng.below(4);
    let first = match (limit, rng.below(2)) {
        (0, 0) => base.clone(),
        (0, _) => format!("{base}resourceVersion=0"),
        (l, _) => format!("{base}limit={l}"),
    };
    let c = http();
    let (code, body) = request(&c, server, "GET", &first, None).await;
    assert_eq!(
        code,
        200,
        "seed {seed}: {first}: {}",
        String::from_utf8_lossy(&body)
    );
    let mut page: Value = serde_json::from_slice(&body).unwrap();
    let rev = rv_of(&page);
    let mut got = Vec::new();
    loop {
        for item in page["items"].as_array().unwrap() {
            let key = format!(
                "{}/{}",
                item["metadata"]["namespace"].as_str().unwrap(),
                item["metadata"]["name"].as_str().unwrap()
            );
            got.push((key, rv_of(item)));
        }
        let Some(token) = page["metadata"]["continue"].as_str().filter(|t| !t.is_empty()) else {
            break;
        };
        let next = format!("{base}limit={limit}&continue={token}");
        let (code, body) = request(&c, server, "GET", &next, None).await;
        if code == 410 {
            return None; // the snapshot left the window between pages: the client lists again
        }
        assert_eq!(
            code,
            200,
            "seed {seed}: {next}: {}",
            String::from_utf8_lossy(&body)
        );
        page = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            rv_of(&page),
            rev,
            "seed {seed}: every page is at the first page's revision"
        );
    }
    let want: Vec<(String, u64)> = model
        .state_at(rev)
        .into_iter()
        .filter(|(k, o)| sel.in_key(k) && sel.selects(Some(o.1)))
        .map(|(k, o)| (k, o.0))
        .collect();
    assert_eq!(got, want, "seed {seed}: LIST {first} at {rev}");
    Some(rev)
}

/// Opens a watch as an informer does, after a consistent read: the cache has every write
/// acknowledged so far, so a watch's history window counts from its start (a watch opened
/// while the cache lags sits behind entries it must skip, and may be lapped by them: legal,
/// but not what the model predicts). `None` when the consistent read is refused.
async fn open_watch(server: &Server, rng: &mut Rng, model: &Model, lists: &[u64]) -> Option<OpenWatch> {
    let (code, _) = request(&http(), server, "GET", "/api/v1/configmaps?limit=1", None).await;
    if code != 200 {
        return None;
    }
    let sel = Sel::random(rng);
    let base = format!("{}watch=1", sel.path());
    let bookmarks = if rng.below(2) == 0 {
        "&allowWatchBookmarks=true"
    } else {
        ""
    };
    let current = watchcache_tests::current_revision(server).await;
    let (path, initial, after) = match rng.below(3) {
        // A consistent read first: the state at the store's revision, then what follows.
        0 => {
            let initial = model
                .state_at(current)
                .into_iter()
                .filter(|(k, o)| sel.in_key(k) && sel.selects(Some(o.1)))
                .map(|(k, o)| ("ADDED".to_owned(), k, o.0))
                .collect();
            (format!("{base}{bookmarks}"), initial, current)
        }
        // Resuming from a LIST's revision, as informers do.
        1 if !lists.is_empty() => {
            let from = lists[rng.below(lists.len() as u64) as usize];
            (
                format!("{base}{bookmarks}&resourceVersion={from}"),
                Vec::new(),
                from,
            )
        }
        // From any revision the store has had.
        _ => {
            let from = 1 + rng.below(current);
            (
                format!("{base}{bookmarks}&resourceVersion={from}"),
                Vec::new(),
                from,
            )
        }
    };
    let (code, frames) = Frames::open_any(server, &path).await;
    assert_eq!(code, 200, "{path}: a watch always answers 200");
    Some(OpenWatch {
        frames,
        what: path,
        initial,
        after,
        sel,
    })
}

/// Injects a fault; returns the revision compacted to, if it compacted. On etcd the one fault
/// is a compaction at the current revision.
async fn fault(server: &Server, rng: &mut Rng) -> Option<u64> {
    let Some(store) = server.store().memory() else {
        let Backend::Etcd(etcd) = server.store() else {
            unreachable!("a server on etcd")
        };
        let to = watchcache_tests::current_revision(server).await;
        // Compacting again at the revision last compacted is refused as compacted: the same.
        if let Err(e) = etcd.client().compact(to as i64, None).await {
            assert!(e.to_string().contains("compacted"), "etcd compacts: {e}");
        }
        return Some(to);
    };
    match rng.below(3) {
        0 => {
            // Watch streams break and stay refused for a moment; the reflector re-watches
            // from where it was, losing nothing.
            store.pause_watches(true);
            tokio::time::sleep(Duration::from_millis(20)).await;
            store.pause_watches(false);
            None
        }
        1 => {
            store.set_available(false);
            tokio::time::sleep(Duration::from_millis(20)).await;
            store.set_available(true);
            None
        }
        _ => {
            // History is gone: the cache relists and its watchers end with 410.
            let to = store.revision();
            store.compact(to);
            Some(to.get())
        }
    }
}

/// `frames` with each run of one revision's events in key order.
fn by_revision(mut frames: Vec<(String, String, u64)>) -> Vec<(String, String, u64)> {
    frames.chunk_by_mut(|a, b| a.2 == b.2).for_each(|run| run.sort());
    frames
}

/// Reads what a watch delivered and checks it against the model.
async fn check_watch(mut w: OpenWatch, model: &Model, start: u64, compactions: &[u64], seed: u64) {
    let live = model.changes.iter().filter(|c| c.rev > w.after).filter_map(|c| {
        let kind = w.sel.delivery(c)?;
        Some((kind.to_owned(), format!("{}/{}", c.ns, c.name), c.rev))
    });
    let mut want = w.initial.clone();
    want.extend(live);
    let changes_since = model.changes.iter().filter(|c| c.rev > w.after).count();
    let mut got = Vec::new();
    let mut ended_410 = None;
    while got.len() < want.len() {
        let frame = match w.frames.next_within(Duration::from_secs(5)).await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(()) => break,
        };
        match frame["type"].as_str().unwrap() {
            "BOOKMARK" => continue,
            "ERROR" => {
                assert_eq!(frame["object"]["code"], 410, "seed {seed}: {}: {frame}", w.what);
                ended_410 = Some(frame["object"]["message"].to_string());
                break;
            }
            kind => {
                let o = &frame["object"];
                let key = format!(
                    "{}/{}",
                    o["metadata"]["namespace"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                );
                got.push((kind.to_owned(), key, rv_of(o)));
            }
        }
    }
    let ctx = format!("seed {seed}: {} after {}", w.what, w.after);
    if let (Some(last), Some(next)) = (got.last(), want.get(got.len())) {
        assert_ne!(
            last.2, next.2,
            "{ctx}: a revision cut in two ({got:?}, then {next:?})"
        );
    }
    // A revision's events come together, in an order the store chose: compared as sets.
    let (got, want) = (by_revision(got), by_revision(want));
    assert_eq!(
        got[..],
        want[..got.len()],
        "{ctx}: a prefix of the model's history, in order"
    );
    if got.len() < want.len() {
        let Some(why) = ended_410 else {
            panic!(
                "{ctx}: ended after {} of {} events without a 410",
                got.len(),
                want.len()
            );
        };
        // "too old resource version: R (O)": O is the oldest revision a new watch can start
        // after. A relist sets it (after a compaction, even one the cache learned of late,
        // having fallen behind during a fault); a lap moves it past R.
        let oldest: u64 = why
            .rsplit_once('(')
            .and_then(|(_, o)| o.trim_end_matches(")\"").parse().ok())
            .unwrap_or_else(|| panic!("{ctx}: a 410 that says where history starts: {why}"));
        let relisted = compactions.iter().any(|&c| c <= oldest);
        assert!(
            w.after < start || relisted || changes_since > HISTORY,
            "{ctx}: a 410 ({why}) with nothing to cause it ({changes_since} changes since its start)"
        );
    }
}

/// Runs schedule `seed`; the revisions it made that changed several keys, and their keys.
async fn schedule(seed: u64, backing: &Backing) -> (u64, u64) {
    let mut cfg = backing.config(0);
    if let Backing::Etcd(cluster) = backing {
        // Each schedule starts from an empty store, and its cache's history from its first
        // list: what earlier schedules left in etcd's history is not the model's.
        let mut c = etcd_client::Client::connect(cluster.endpoints(), None)
            .await
            .unwrap();
        let all = etcd_client::DeleteOptions::new().with_prefix();
        c.delete("/registry/", Some(all)).await.unwrap();
        cfg.history_fill = false;
    }
    cfg.history = HISTORY;
    // Only the model's changes take history slots: no periodic bookmarks.
    cfg.bookmark_interval = Duration::from_secs(3600);
    let server = watchcache_tests::start(cfg).await;
    watchcache_tests::create_namespaces(&server, &NAMESPACES).await;
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut model = Model::default();
    model
        .states
        .push((watchcache_tests::current_revision(&server).await, BTreeMap::new()));
    let mut watches = Vec::new();
    let mut lists = Vec::new();
    // The cache's history starts at its first list: a watch from before it is too old.
    let start = watchcache_tests::current_revision(&server).await;
    let mut compactions = Vec::new();
    for _ in 0..(20 + rng.below(40)) {
        match rng.below(20) {
            0..=8 => write(&server, &mut rng, &mut model).await,
            9..=10 => multi(&server, &mut rng, &mut model).await,
            11 => get(&server, &mut rng, &model, seed).await,
            12..=13 => lists.extend(list(&server, &mut rng, &model, seed).await),
            14..=17 => {
                watches.extend(open_watch(&server, &mut rng, &model, &lists).await);
            }
            _ => {
                compactions.extend(fault(&server, &mut rng).await);
            }
        }
    }
    // The cache catches up (a consistent read), then every watch is read to its end.
    list(&server, &mut rng, &model, seed).await;
    for w in watches {
        check_watch(w, &model, start, &compactions, seed).await;
    }
    server.shutdown().await.unwrap();
    model.multi_key
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_facade_answers_as_the_reference_model_over_random_schedules() {
    if let Some(seed) = std::env::var("WATCHCACHE_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        schedule(seed, &Backing::Memory).await;
        return;
    }
    let n: u64 = std::env::var("WATCHCACHE_MODEL_SCHEDULES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let start = std::time::Instant::now();
    let mut multi = (0, 0);
    for seed in 0..n {
        let (revisions, keys) = schedule(seed, &Backing::Memory).await;
        multi = (multi.0 + revisions, multi.1 + keys);
    }
    eprintln!(
        "{n} schedules in {:.1} s, with {} revisions of several keys ({} keys)",
        start.elapsed().as_secs_f64(),
        multi.0,
        multi.1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_facade_answers_as_the_reference_model_on_etcd() {
    let Some(backing) = Backing::new(true).await else {
        return;
    };
    let n: u64 = std::env::var("WATCHCACHE_MODEL_SCHEDULES_ETCD")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let start = std::time::Instant::now();
    let mut multi = (0, 0);
    for seed in 0..n {
        let (revisions, keys) = schedule(seed, &backing).await;
        multi = (multi.0 + revisions, multi.1 + keys);
    }
    eprintln!(
        "{n} schedules on etcd in {:.1} s, with {} revisions of several keys ({} keys)",
        start.elapsed().as_secs_f64(),
        multi.0,
        multi.1
    );
}
