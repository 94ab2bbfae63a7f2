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
//! Two more kinds of op:
//!
//! - **Values that do not decode** (KEP-3926's corrupt objects), written in the store in one
//!   namespace ([`CORRUPTIBLE`]): not JSON, JSON cut short, JSON of the wrong types, another
//!   object's JSON, protobuf's prefix before no protobuf; then written anew, deleted in the
//!   store, or deleted through the API with the unsafe delete. The model holds them as corrupt
//!   objects: a GET of one is 500 naming its key; a LIST or a watch's initial events that
//!   would include one (its namespace or everything, by no label) is 500 naming every one in
//!   scope, in key order, and one that would not is answered as before; a watch that would
//!   deliver one (by its namespace, or, whatever its selectors, because it had the object
//!   before it stopped decoding) gets every event before it, then an ERROR naming it, and
//!   ends (the model checks such a watch no further); a corrupt object's deletion is a
//!   DELETED of its name alone; API writes to one fail 500, and the unsafe delete of an object
//!   that decodes 422.
//! - **A PUT without resourceVersion racing a write of `/status`** of one pod (both in flight
//!   at once): neither is lost. The model derives from their resourceVersions which landed
//!   first, and from that what each answers, the two events every watcher sees, and the pod a
//!   consistent GET and LIST read afterwards.
//!
//! `WATCHCACHE_MODEL_SCHEDULES` (`WATCHCACHE_MODEL_SCHEDULES_ETCD`) sets the number of
//! schedules (200 by default on the embedded store and 100 on etcd, as CI runs);
//! `WATCHCACHE_MODEL_SEED` runs one seed alone, on the store of the test it is given to, to
//! replay a failure: a failing schedule prints the command.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use etcd_client::{DeleteOptions, PutOptions, Txn, TxnOp};
use serde_json::{Value, json};
use watchcache_core::source::memory::{LeaseId, TxnWrite};
use watchcache_server::Backend;
use watchcache_tests::{Backing, Frames, Server, http, request, request_typed};

/// The history window of the server under test: small, so that laps happen.
const HISTORY: usize = 16;
const NAMESPACES: [&str; 3] = ["a", "a-b", "c"];
/// The one namespace where the store is given values that do not decode (corrupt objects):
/// LISTs and watches of the others, and those that select by label, never include one.
const CORRUPTIBLE: &str = "c";
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

/// What a key holds: an object with this `tier` label, or a value that does not decode (a
/// corrupt object, which has no labels to select it by).
#[derive(Copy, Clone, Debug, PartialEq)]
enum Held {
    Tier(&'static str),
    Corrupt,
}

impl Held {
    /// The `tier` of a value the model writes whole.
    fn tier(self) -> &'static str {
        match self {
            Held::Tier(t) => t,
            Held::Corrupt => unreachable!("only the corruption op writes values that do not decode"),
        }
    }
}

/// One change as the model knows it: the revision, the namespace and name, and what the key
/// held before and after (`None` where it did not exist).
struct Change {
    rev: u64,
    ns: &'static str,
    name: &'static str,
    before: Option<Held>,
    after: Option<Held>,
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

    /// Whether what a key holds (`None`: nothing) is selected, namespace aside. A corrupt
    /// object is selected by a client that selects by namespace only (a read of everything in
    /// its scope includes it), by none that selects by label.
    fn selects(&self, held: Option<Held>) -> bool {
        match held {
            None => false,
            Some(Held::Corrupt) => self.tier.is_none(),
            Some(Held::Tier(t)) => self.tier.is_none_or(|want| want == t),
        }
    }

    /// The storage keys of the corrupt objects this client's reads include in `state`, in
    /// key order: what a LIST (or a watch's initial events) that includes them must name.
    fn corrupt_in(&self, state: &BTreeMap<String, Obj>) -> Vec<String> {
        let mut keys: Vec<(&str, &str)> = state
            .iter()
            .filter(|(k, o)| o.1 == Held::Corrupt && self.in_key(k) && self.selects(Some(o.1)))
            .filter_map(|(k, _)| k.split_once('/'))
            .collect();
        keys.sort();
        keys.into_iter().map(|(ns, name)| storage_key(ns, name)).collect()
    }

    /// What this client receives for `c`, by the apiserver's transition rules. A version that
    /// stops decoding is no deletion, nor an object leaving the selection: a client that had
    /// the object gets the corrupt version (whose frame is an ERROR naming it), whatever its
    /// selectors; one that did not gets nothing.
    fn delivery(&self, c: &Change) -> Option<&'static str> {
        if !self.in_ns(c.ns) {
            return None;
        }
        if c.before.is_some() && c.after == Some(Held::Corrupt) {
            return self.selects(c.before).then_some("MODIFIED");
        }
        match (self.selects(c.before), self.selects(c.after)) {
            (true, true) => Some("MODIFIED"),
            (false, true) => Some("ADDED"),
            (true, false) => Some("DELETED"),
            (false, false) => None,
        }
    }
}

/// An object in the model's state: its revision and what it holds.
type Obj = (u64, Held);

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
    /// The pod the status races write, as the last race left it.
    pod: Option<Value>,
    /// How many compactions the schedule had made when the last race began.
    compactions_seen: usize,
    tally: Tally,
}

/// What a schedule made happen, summed over a run and printed: evidence that each kind of op
/// ran.
#[derive(Default, Debug)]
struct Tally {
    /// Revisions that changed more than one key, and the keys they changed.
    multi_revisions: u64,
    multi_keys: u64,
    /// PUTs without resourceVersion raced against a /status write; of them, those where the
    /// status write landed first (the PUT's body then carried a status older than the
    /// stored one).
    races: u64,
    status_first: u64,
    /// Values that do not decode written in the store; corrupt objects written anew in the
    /// store, deleted in the store, or deleted through the API (the unsafe delete).
    corruptions: u64,
    repairs: u64,
    store_deletes: u64,
    unsafe_deletes: u64,
    /// API writes refused because their object is corrupt (500), or because the unsafe
    /// delete was asked of one that decodes (422).
    refused_writes: u64,
    /// GETs, LISTs and watches with initial events, and of them those answered 500 naming
    /// corrupt objects; watches read to their end, and of them those ended by an ERROR naming
    /// one.
    reads: u64,
    failed_reads: u64,
    watches: u64,
    error_ends: u64,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.multi_revisions += o.multi_revisions;
        self.multi_keys += o.multi_keys;
        self.races += o.races;
        self.status_first += o.status_first;
        self.corruptions += o.corruptions;
        self.repairs += o.repairs;
        self.store_deletes += o.store_deletes;
        self.unsafe_deletes += o.unsafe_deletes;
        self.refused_writes += o.refused_writes;
        self.reads += o.reads;
        self.failed_reads += o.failed_reads;
        self.watches += o.watches;
        self.error_ends += o.error_ends;
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} revisions of several keys ({} keys); {} PUT/status races ({} with the status \
             first); {} values that do not decode, {} repaired, {} deleted in the store, {} \
             deleted unsafely; {} writes refused; {} of {} reads answered 500, {} of {} watches \
             ended by an ERROR naming a corrupt object",
            self.multi_revisions,
            self.multi_keys,
            self.races,
            self.status_first,
            self.corruptions,
            self.repairs,
            self.store_deletes,
            self.unsafe_deletes,
            self.refused_writes,
            self.failed_reads,
            self.reads,
            self.error_ends,
            self.watches
        )
    }
}

/// What one write leaves at a key: what the key holds, or (`None`) nothing.
type Write = (&'static str, &'static str, Option<Held>);

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
            self.tally.multi_revisions += 1;
            self.tally.multi_keys += changed;
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

/// The unsafe delete's parameter (KEP-3926).
const UNSAFE_DELETE: &str = "ignoreStoreReadErrorWithClusterBreakingPotential=true";

/// A write through the API: a create, update or delete of an object; of a corrupt object, a
/// write that must fail naming it, or the unsafe delete that removes it; now and then the
/// unsafe delete of an object that decodes, which must be refused.
async fn write(server: &Server, rng: &mut Rng, model: &mut Model, seed: u64) {
    let (ns, name) = (rng.pick(&NAMESPACES), rng.pick(&NAMES));
    let key = format!("{ns}/{name}");
    let (_, state) = model.now();
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let tier = rng.pick(&TIERS);
    let body =
        json!({"metadata": {"name": name, "labels": {"tier": tier}}, "data": {"n": rng.next().to_string()}});
    let c = http();
    let kind = match state.get(&key).map(|o| o.1) {
        None => {
            let (code, out) = request(&c, server, "POST", &path, Some(body)).await;
            assert_eq!(code, 201, "seed {seed}: {}", String::from_utf8_lossy(&out));
            "ADDED"
        }
        Some(Held::Corrupt) if rng.below(3) == 0 => {
            let target = format!("{path}/{name}?{UNSAFE_DELETE}");
            let (code, out) = request(&c, server, "DELETE", &target, None).await;
            let v: Value = serde_json::from_slice(&out).unwrap_or_default();
            assert_eq!(
                (code, v["status"].as_str()),
                (200, Some("Success")),
                "seed {seed}: DELETE {target} of a corrupt object: {v}"
            );
            model.tally.unsafe_deletes += 1;
            "DELETED"
        }
        Some(Held::Corrupt) => {
            // Any other write to it fails naming it, and changes nothing.
            let (method, body) = match rng.below(2) {
                0 => ("PUT", Some(body)),
                _ => ("DELETE", None),
            };
            let target = format!("{path}/{name}");
            let (code, out) = request(&c, server, method, &target, body).await;
            let v: Value = serde_json::from_slice(&out).unwrap_or_default();
            let names_it = v["message"]
                .as_str()
                .is_some_and(|m| m.contains(&format!("Key: {}", storage_key(ns, name))));
            assert!(
                code == 500 && names_it,
                "seed {seed}: {method} {target} of a corrupt object: {code} {v}"
            );
            model.tally.refused_writes += 1;
            return;
        }
        Some(Held::Tier(_)) if rng.below(12) == 0 => {
            // The unsafe delete is only for corrupt objects.
            let target = format!("{path}/{name}?{UNSAFE_DELETE}");
            let (code, out) = request(&c, server, "DELETE", &target, None).await;
            let v: Value = serde_json::from_slice(&out).unwrap_or_default();
            assert_eq!(
                (code, v["details"]["causes"][0]["field"].as_str()),
                (422, Some("ignoreStoreReadErrorWithClusterBreakingPotential")),
                "seed {seed}: DELETE {target} of an object that decodes: {v}"
            );
            model.tally.refused_writes += 1;
            return;
        }
        Some(_) if rng.below(3) == 0 => {
            let (code, out) = request(&c, server, "DELETE", &format!("{path}/{name}"), None).await;
            assert_eq!(code, 200, "seed {seed}: {}", String::from_utf8_lossy(&out));
            "DELETED"
        }
        Some(_) => {
            let (code, out) = request(&c, server, "PUT", &format!("{path}/{name}"), Some(body)).await;
            assert_eq!(code, 200, "seed {seed}: {}", String::from_utf8_lossy(&out));
            "MODIFIED"
        }
    };
    // Writes are sequential: the store's revision now is this write's. A write through the API
    // carries no lease: the key leaves the schedule's.
    let rev = write_revision(server, model).await;
    let after = (kind != "DELETED").then_some(Held::Tier(tier));
    model.apply(rev, &[(ns, name, after)], false, kind);
}

/// A value at `ns/name` that does not decode, of one of several kinds of badness: not JSON
/// (as a value encrypted with a key that is gone reads), JSON cut short, JSON of the wrong
/// types for a ConfigMap, another object's JSON, and protobuf's prefix before bytes that are
/// no protobuf. Those that are JSON objects carry a `tier` label, which no label selector may
/// read.
fn undecodable(ns: &str, name: &str, rng: &mut Rng) -> Bytes {
    let tier = rng.pick(&TIERS);
    let badness = rng.below(5);
    match badness {
        0 => Bytes::from_static(b"k8s:enc:aescbc:v1:gone:\x8f\x01\x00"),
        1 => {
            let whole = stored(ns, name, tier, rng);
            whole.slice(..whole.len() / 2)
        }
        2 => Bytes::from(
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns, "labels": {"tier": tier}},
                "data": {"n": 1}})
            .to_string(),
        ),
        3 => {
            let other = NAMES.iter().find(|n| **n != name).unwrap();
            stored(ns, other, tier, rng)
        }
        _ => Bytes::from_static(b"k8s\0\xff\xff\xff\xff"),
    }
}

/// A value that does not decode written in the store at a key of [`CORRUPTIBLE`], or a corrupt
/// object made good again: written anew in the store, deleted in the store, or deleted through
/// the API with the unsafe delete. Corrupt objects are made good soon (three times in four
/// while there is one), and made now and then (half the time while there is none; the other
/// half is a write through the API): so that most reads and watches still succeed.
async fn corrupt(server: &Server, rng: &mut Rng, model: &mut Model, seed: u64) {
    let store = server.store();
    let (_, state) = model.now();
    let corrupt: Vec<&'static str> = NAMES
        .iter()
        .copied()
        .filter(|name| state.get(&format!("{CORRUPTIBLE}/{name}")).map(|o| o.1) == Some(Held::Corrupt))
        .collect();
    if corrupt.is_empty() && rng.below(2) == 0 {
        return write(server, rng, model, seed).await;
    }
    if corrupt.is_empty() || rng.below(4) == 0 {
        let name = rng.pick(&NAMES);
        let key = storage_key(CORRUPTIBLE, name);
        let value = undecodable(CORRUPTIBLE, name, rng);
        match state.contains_key(&format!("{CORRUPTIBLE}/{name}")) {
            true => store.update(&key, value, None).await.map(drop),
            false => store.create(&key, value).await.map(drop),
        }
        .unwrap_or_else(|e| panic!("seed {seed}: {key} written in the store: {e}"));
        let rev = write_revision(server, model).await;
        model.apply(
            rev,
            &[(CORRUPTIBLE, name, Some(Held::Corrupt))],
            false,
            "a corruption",
        );
        model.tally.corruptions += 1;
        return;
    }
    let name = rng.pick(&corrupt);
    let key = storage_key(CORRUPTIBLE, name);
    let how = rng.below(3);
    let after = match how {
        0 => {
            let tier = rng.pick(&TIERS);
            let value = stored(CORRUPTIBLE, name, tier, rng);
            store
                .update(&key, value, None)
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: {key} written anew in the store: {e}"));
            model.tally.repairs += 1;
            Some(Held::Tier(tier))
        }
        1 => {
            store
                .delete(&key, None)
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: {key} deleted in the store: {e}"));
            model.tally.store_deletes += 1;
            None
        }
        _ => {
            let target = format!("/api/v1/namespaces/{CORRUPTIBLE}/configmaps/{name}?{UNSAFE_DELETE}");
            let (code, out) = request(&http(), server, "DELETE", &target, None).await;
            let v: Value = serde_json::from_slice(&out).unwrap_or_default();
            assert_eq!(
                (code, v["status"].as_str()),
                (200, Some("Success")),
                "seed {seed}: DELETE {target} of a corrupt object: {v}"
            );
            model.tally.unsafe_deletes += 1;
            None
        }
    };
    let rev = write_revision(server, model).await;
    model.apply(
        rev,
        &[(CORRUPTIBLE, name, after)],
        false,
        "a corrupt object made good",
    );
}

/// The storage key of configmap `ns/name`.
/// The revision of the write the model just made: the store's revision now, unless other
/// writes came after the model's last one (on etcd 3.4.23, the fences a cache writes to ask for
/// progress, as catch-ups at the head of the store do): then the revision of the first change
/// under the model's prefix since its last one.
async fn write_revision(server: &Server, model: &Model) -> u64 {
    let now = watchcache_tests::current_revision(server).await;
    let last = model.now().0;
    let Backend::Etcd(e) = server.store() else {
        return now;
    };
    if now <= last + 1 {
        return now;
    }
    let options = etcd_client::WatchOptions::new()
        .with_prefix()
        .with_start_revision(last as i64 + 1);
    let mut stream = e
        .client()
        .watch("/registry/configmaps/", Some(options))
        .await
        .expect("a watch of the model's prefix");
    // What etcd holds already comes at once; nothing within a moment: the write changed nothing.
    while let Ok(Ok(Some(resp))) = tokio::time::timeout(Duration::from_millis(300), stream.message()).await {
        if let Some(kv) = resp.events().first().and_then(|e| e.kv()) {
            return kv.mod_revision() as u64;
        }
    }
    now
}

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
                .map(|(ns, name)| {
                    let after = (rng.below(3) != 0).then(|| Held::Tier(rng.pick(&TIERS)));
                    (ns, name, after)
                })
                .collect();
            // On etcd the transaction's puts may carry the schedule's lease.
            let lease = match model.lease {
                Some(Lease::Etcd(id)) if rng.below(2) == 0 => Some(id),
                _ => None,
            };
            let values: Vec<_> = writes
                .iter()
                .map(|&(ns, name, held)| held.map(|h| stored(ns, name, h.tier(), rng)))
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
                Backend::Custom(_) => unreachable!("the model runs on the embedded store and on etcd"),
            }
            let rev = write_revision(server, model).await;
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
                Backend::Custom(_) => unreachable!("the model runs on the embedded store and on etcd"),
            }
            let rev = write_revision(server, model).await;
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
                let rev = write_revision(server, model).await;
                model.apply(rev, &writes, false, "a lease's revocation");
                assert!(model.attached.is_empty(), "the lease took its keys");
            }
            None => {
                let n = 1 + rng.below(3) as usize;
                let writes: Vec<Write> = some_keys(rng, n)
                    .into_iter()
                    .map(|(ns, name)| (ns, name, Some(Held::Tier(rng.pick(&TIERS)))))
                    .collect();
                let ttl = Duration::from_secs(3600);
                match store {
                    Backend::Memory(m) => {
                        let id = m.grant_lease(ttl).expect("a lease");
                        model.lease = Some(Lease::Memory(id));
                        for &(ns, name, tier) in &writes {
                            let (key, value) =
                                (storage_key(ns, name), stored(ns, name, tier.unwrap().tier(), rng));
                            match m.create_with_lease(&key, value.clone(), Some(id)) {
                                Err(watchcache_core::SourceError::AlreadyExists(_)) => {
                                    m.update_with_lease(&key, value, None, Some(id))
                                        .expect("an update on the lease");
                                }
                                done => {
                                    done.expect("a create on the lease");
                                }
                            }
                            let rev = write_revision(server, model).await;
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
                                let value = stored(ns, name, tier.unwrap().tier(), rng);
                                let on_lease = PutOptions::new().with_lease(id);
                                TxnOp::put(storage_key(ns, name), value.to_vec(), Some(on_lease))
                            })
                            .collect();
                        c.txn(Txn::new().and_then(ops))
                            .await
                            .expect("a transaction on the lease");
                        let rev = write_revision(server, model).await;
                        model.apply(rev, &writes, true, "a transaction on a lease");
                    }
                    Backend::Custom(_) => unreachable!("the model runs on the embedded store and on etcd"),
                }
            }
        },
    }
}

/// Whether namespace `ns`'s configmaps are under `prefix`.
fn ns_matches(ns: &str, prefix: &str) -> bool {
    storage_key(ns, "x").starts_with(prefix)
}

/// A consistent GET of one object: the model's object now, 404, or (a corrupt object) 500
/// naming its storage key.
async fn get(server: &Server, rng: &mut Rng, model: &mut Model, seed: u64) {
    let (ns, name) = (rng.pick(&NAMESPACES), rng.pick(&NAMES));
    let path = format!("/api/v1/namespaces/{ns}/configmaps/{name}");
    let (code, body) = request(&http(), server, "GET", &path, None).await;
    let ctx = format!("seed {seed}: GET {path}: {}", String::from_utf8_lossy(&body));
    model.tally.reads += 1;
    match model.now().1.get(&format!("{ns}/{name}")) {
        None => assert_eq!(code, 404, "{ctx}"),
        Some(&(_, Held::Corrupt)) => {
            let v: Value = serde_json::from_slice(&body).unwrap_or_default();
            let names_it = v["message"]
                .as_str()
                .is_some_and(|m| m.contains(&format!("Key: {}", storage_key(ns, name))));
            assert!(
                code == 500 && v["reason"] == "InternalError" && names_it,
                "{ctx}: a corrupt object"
            );
            model.tally.failed_reads += 1;
        }
        Some(&(rev, Held::Tier(tier))) => {
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

/// The storage keys a 500 `StorageReadError` names, in its order.
fn named_corrupt(body: &[u8], ctx: &str) -> Vec<String> {
    let v: Value = serde_json::from_slice(body).unwrap_or_default();
    assert_eq!(v["reason"], "StorageReadError", "{ctx}: {v}");
    v["details"]["causes"]
        .as_array()
        .unwrap_or_else(|| panic!("{ctx}: causes in {v}"))
        .iter()
        .map(|c| c["field"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A paged LIST: the pages together are the model's state at the list's revision, or a page
/// is refused with 410 because its snapshot has gone. A LIST that would include a corrupt
/// object is 500 naming every one in its scope, in key order: exactly those of the model's
/// state now when the LIST is consistent; those of some state the model has had when it is
/// served from the cache as it is (`resourceVersion=0`), whose revision the answer does not
/// tell.
async fn list(server: &Server, rng: &mut Rng, model: &mut Model, seed: u64) -> Option<u64> {
    let sel = Sel::random(rng);
    let base = sel.path();
    let limit = rng.below(4);
    let (first, consistent) = match (limit, rng.below(2)) {
        (0, 0) => (base.clone(), true),
        (0, _) => (format!("{base}resourceVersion=0"), false),
        (l, _) => (format!("{base}limit={l}"), true),
    };
    let c = http();
    let (code, body) = request(&c, server, "GET", &first, None).await;
    let ctx = format!("seed {seed}: LIST {first}");
    model.tally.reads += 1;
    if code == 500 {
        let named = named_corrupt(&body, &ctx);
        if consistent {
            assert_eq!(
                named,
                sel.corrupt_in(&model.now().1),
                "{ctx}: the corrupt objects now"
            );
        } else {
            assert!(
                !named.is_empty() && model.states.iter().any(|(_, s)| sel.corrupt_in(s) == named),
                "{ctx}: {named:?} are the corrupt objects of no state the model had"
            );
        }
        model.tally.failed_reads += 1;
        return None;
    }
    assert_eq!(code, 200, "{ctx}: {}", String::from_utf8_lossy(&body));
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
    let state = model.state_at(rev);
    let corrupt = sel.corrupt_in(&state);
    assert!(
        corrupt.is_empty(),
        "{ctx}: answered at {rev}, whose state has corrupt objects it includes: {corrupt:?}"
    );
    let want: Vec<(String, u64)> = state
        .into_iter()
        .filter(|(k, o)| sel.in_key(k) && sel.selects(Some(o.1)))
        .map(|(k, o)| (k, o.0))
        .collect();
    assert_eq!(got, want, "{ctx} at {rev}");
    Some(rev)
}

/// Opens a watch as an informer does, after a consistent read: the cache has every write
/// acknowledged so far, so a watch's history window counts from its start (a watch opened
/// while the cache lags sits behind entries it must skip, and may be lapped by them: legal,
/// but not what the model predicts). `None` when the consistent read is refused, or when the
/// watch's initial events would include a corrupt object (then it is refused, 500 naming each
/// as a LIST names them).
async fn open_watch(
    server: &Server,
    rng: &mut Rng,
    model: &mut Model,
    lists: &[u64],
    seed: u64,
) -> Option<OpenWatch> {
    // A namespace no corrupt object is ever in: the read succeeds whatever is corrupt.
    let (code, _) = request(
        &http(),
        server,
        "GET",
        "/api/v1/namespaces/a/configmaps?limit=1",
        None,
    )
    .await;
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
            let state = model.state_at(current);
            let corrupt = sel.corrupt_in(&state);
            let path = format!("{base}{bookmarks}");
            model.tally.reads += 1;
            if !corrupt.is_empty() {
                let ctx = format!("seed {seed}: WATCH {path} with corrupt objects in its initial state");
                let (code, frames) = Frames::open_any(server, &path).await;
                assert_eq!(code, 500, "{ctx}");
                assert_eq!(named_corrupt(&frames.rest().await, &ctx), corrupt, "{ctx}");
                model.tally.failed_reads += 1;
                return None;
            }
            let initial = state
                .into_iter()
                .filter(|(k, o)| sel.in_key(k) && sel.selects(Some(o.1)))
                .map(|(k, o)| ("ADDED".to_owned(), k, o.0))
                .collect();
            (path, initial, current)
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
    assert_eq!(code, 200, "seed {seed}: {path}: a watch always answers 200");
    Some(OpenWatch {
        frames,
        what: path,
        initial,
        after,
        sel,
    })
}

/// Compacts the store at its current revision; returns that revision.
async fn compact_now(server: &Server) -> u64 {
    let to = watchcache_tests::current_revision(server).await;
    match server.store() {
        Backend::Etcd(etcd) => {
            // Compacting again at the revision last compacted is refused as compacted: the same.
            if let Err(e) = etcd.client().compact(to as i64, None).await {
                assert!(e.to_string().contains("compacted"), "etcd compacts: {e}");
            }
        }
        _ => server
            .store()
            .memory()
            .expect("the embedded store")
            .compact(watchcache_core::Revision::new(to)),
    }
    to
}

/// Injects a fault; returns the revision compacted to, if it compacted. On etcd the one fault
/// is a compaction at the current revision.
async fn fault(server: &Server, rng: &mut Rng) -> Option<u64> {
    let Some(store) = server.store().memory() else {
        return Some(compact_now(server).await);
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

/// The revision of the last event a watch delivered, or its start.
fn reached_any(got: &[(String, String, u64)], after: u64) -> u64 {
    got.last().map_or(after, |e| e.2)
}

/// `frames` with each run of one revision's events in key order.
fn by_revision(mut frames: Vec<(String, String, u64)>) -> Vec<(String, String, u64)> {
    frames.chunk_by_mut(|a, b| a.2 == b.2).for_each(|run| run.sort());
    frames
}

/// The kind a watch frame is compared by: its type, and for a DELETED whether it carries the
/// object or (a corrupt object's deletion) only its name.
const DELETED_BY_NAME: &str = "DELETED (its name only)";

/// Reads what a watch delivered and checks it against the model. A watch that would deliver
/// a corrupt object (other than its deletion) must deliver everything before it, then an
/// ERROR naming it, and end there; the model checks it no further (informers restart such a
/// watch with a LIST, which the model's LISTs check).
async fn check_watch(mut w: OpenWatch, model: &mut Model, compactions: &[u64], seed: u64) {
    let mut want = w.initial.clone();
    // The corrupt object the watch ends at, if it reaches one: its storage key.
    let mut ends_at = None;
    for c in model.changes.iter().filter(|c| c.rev > w.after) {
        let Some(kind) = w.sel.delivery(c) else {
            continue;
        };
        if kind != "DELETED" && c.after == Some(Held::Corrupt) {
            ends_at = Some(storage_key(c.ns, c.name));
            break;
        }
        let kind = match (kind, c.before) {
            ("DELETED", Some(Held::Corrupt)) => DELETED_BY_NAME,
            (kind, _) => kind,
        };
        want.push((kind.to_owned(), format!("{}/{}", c.ns, c.name), c.rev));
    }
    let changes_since = model.changes.iter().filter(|c| c.rev > w.after).count();
    model.tally.watches += 1;
    let mut got = Vec::new();
    // The ERROR the watch ended with, if it did.
    let mut error = None;
    loop {
        if got.len() == want.len() && ends_at.is_none() {
            break;
        }
        let frame = match w.frames.next_within(Duration::from_secs(5)).await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(()) => break,
        };
        match frame["type"].as_str().unwrap() {
            "BOOKMARK" => continue,
            "ERROR" => {
                error = Some(frame["object"].clone());
                break;
            }
            kind => {
                let o = &frame["object"];
                let key = format!(
                    "{}/{}",
                    o["metadata"]["namespace"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                );
                let kind = match kind {
                    "DELETED" if o.get("data").is_none() => DELETED_BY_NAME,
                    kind => kind,
                };
                got.push((kind.to_owned(), key, rv_of(o)));
                if got.len() > want.len() {
                    break;
                }
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
    assert!(
        got.len() <= want.len() && got[..] == want[..got.len()],
        "{ctx}: a prefix of the model's history, in order: got {got:?}, want {want:?}"
    );
    let code = error.as_ref().map(|e| e["code"].as_u64());
    if got.len() == want.len()
        && let Some(key) = &ends_at
        && code != Some(Some(410))
    {
        // Every event before the corrupt object, then an ERROR naming it, and the end.
        let error = error.unwrap_or_else(|| panic!("{ctx}: no ERROR for the corrupt object {key}"));
        let names_it = error["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("Key: {key}")));
        assert!(
            error["code"] == 500 && names_it,
            "{ctx}: an ERROR naming the corrupt object {key}: {error}"
        );
        let end = w.frames.next_within(Duration::from_secs(30)).await;
        assert!(
            matches!(end, Ok(None)),
            "{ctx}: the watch ends after the ERROR naming {key}: {end:?}"
        );
        model.tally.error_ends += 1;
        return;
    }
    if got.len() < want.len() || ends_at.is_some() {
        let Some(Some(410)) = code else {
            panic!(
                "{ctx}: ended after {} of {} events without a 410 ({error:?}; the corrupt object \
                 it would end at: {ends_at:?})",
                got.len(),
                want.len()
            );
        };
        let why = error.unwrap()["message"].to_string();
        // "too old resource version: R (O)": O is the oldest revision a new watch can start
        // after.
        let oldest: Option<u64> = why
            .rsplit_once('(')
            .and_then(|(_, o)| o.trim_end_matches(")\"").parse().ok());
        assert!(
            oldest.is_some_and(|o| o >= reached_any(&got, w.after)),
            "{ctx}: a 410 that says where history starts, past where the watch stood: {why}"
        );
        // With catch-up from the store, neither a lap nor a start below the window is a
        // cause: only a compaction past where the watch stood (it would read on from the
        // revision after its last event, or from within that one's revision).
        let reached = reached_any(&got, w.after);
        let compacted_past = compactions.iter().any(|&c| c > reached);
        assert!(
            compacted_past,
            "{ctx}: a 410 ({why}) with nothing to cause it ({changes_since} changes since its start, \
             compactions {compactions:?})"
        );
    } else {
        assert!(error.is_none(), "{ctx}: an ERROR after every event: {error:?}");
    }
}

/// The pod the status races write, in a namespace the schedule's ConfigMaps share: pods have
/// a `/status`, and their own cache and history.
const POD_NS: &str = "a";
const POD: &str = "racer";

/// The next event a watch delivers, bookmarks skipped.
async fn next_event(frames: &mut Frames, ctx: &str) -> Value {
    loop {
        match frames.next_within(Duration::from_secs(30)).await {
            Ok(Some(f)) if f["type"] == "BOOKMARK" => continue,
            Ok(Some(f)) => return f,
            end => panic!("{ctx}: an event, not {end:?}"),
        }
    }
}

/// A PUT without resourceVersion of the pod and a write of its `/status` (a merge or a
/// strategic merge PATCH, or a PUT without resourceVersion), both in flight at once. The PUT
/// is made as a client makes it: from the pod as read, with other labels and another image,
/// carrying the status it read; the status write sets a new `status.message`. Either may land
/// first (the resourceVersions say which), and neither is lost: the PUT changes neither the
/// status nor reverts one written meanwhile, the status write changes no spec. What each
/// answers, the two events every watcher sees (one watching while they ran, one opened after
/// from before them: both revisions are in the history), and a consistent GET and LIST
/// afterwards are the model's, derived from that order. A PUT to /status carries the labels
/// it read, and sets them as the apiserver lets status writers: landing second, it puts the
/// old labels back, and the model expects so.
async fn race(server: &Server, rng: &mut Rng, model: &mut Model, seed: u64, compactions: usize) {
    let c = http();
    let pods = format!("/api/v1/namespaces/{POD_NS}/pods");
    let path = format!("{pods}/{POD}");
    let created = model.pod.is_none();
    if created {
        let body = json!({"metadata": {"name": POD, "labels": {"tier": "front", "n": "0"}},
            "spec": {"containers": [{"name": "main", "image": "nginx:0"}]}});
        let (code, out) = request(&c, server, "POST", &pods, Some(body)).await;
        assert_eq!(code, 201, "seed {seed}: {}", String::from_utf8_lossy(&out));
        model.pod = Some(serde_json::from_slice(&out).unwrap());
    }
    // Read as an informer reads: a LIST, then a watch from its resourceVersion. The LIST is
    // served from the cache as it is, which has the pod as the last race left it (that race
    // ended with consistent reads); after the pod's creation, and after a compaction, it is a
    // consistent LIST instead, which waits for the cache to have the pod, and to have listed
    // again: a LIST of the cache before it did could give a resourceVersion from before the
    // compaction, which a watch may no longer start from.
    let list = match !created && model.compactions_seen == compactions {
        true => format!("{pods}?resourceVersion=0"),
        false => pods.clone(),
    };
    model.compactions_seen = compactions;
    let (code, out) = request(&c, server, "GET", &list, None).await;
    assert_eq!(code, 200, "seed {seed}: {}", String::from_utf8_lossy(&out));
    let listed: Value = serde_json::from_slice(&out).unwrap();
    let from = rv_of(&listed);
    let before = listed["items"][0].clone();
    assert_eq!(
        (
            listed["items"].as_array().map(Vec::len),
            same_pod(&before, model.pod.as_ref().unwrap())
        ),
        (Some(1), true),
        "seed {seed}: the pod as the last race left it: {listed}, not {:?}",
        model.pod
    );
    let watch = format!("{pods}?watch=1&allowWatchBookmarks=true&resourceVersion={from}");
    let mut live = Frames::open(server, &watch).await;

    let token = (rng.next() % 1_000_000).to_string();
    let mut put = before.clone();
    put["metadata"]["labels"] = json!({"tier": rng.pick(&TIERS), "n": token});
    put["spec"]["containers"][0]["image"] = json!(format!("nginx:{token}"));
    let meta = put["metadata"].as_object_mut().unwrap();
    match rng.below(2) {
        0 => meta.remove("resourceVersion"),
        _ => meta.insert("resourceVersion".into(), json!("0")),
    };
    let message = format!("m{}", rng.next() % 1_000_000);
    let (what, method, content_type, status_body) = match rng.below(3) {
        0 => (
            "merge PATCH",
            "PATCH",
            "application/merge-patch+json",
            json!({"status": {"message": message}}),
        ),
        1 => (
            "strategic merge PATCH",
            "PATCH",
            "application/strategic-merge-patch+json",
            json!({"status": {"message": message}}),
        ),
        _ => {
            let mut body = before.clone();
            body["status"]["message"] = json!(message);
            body["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("resourceVersion");
            ("PUT", "PUT", "application/json", body)
        }
    };
    let (c1, c2) = (http(), http());
    let status_path = format!("{path}/status");
    let ((put_code, put_out), (status_code, status_out)) = tokio::join!(
        request_typed(&c1, server, "PUT", &path, "application/json", put.to_string()),
        request_typed(
            &c2,
            server,
            method,
            &status_path,
            content_type,
            status_body.to_string()
        ),
    );
    let ctx = format!("seed {seed}: a PUT without resourceVersion racing a {what} of its /status");
    assert_eq!(put_code, 200, "{ctx}: the PUT: {put_out}");
    assert_eq!(status_code, 200, "{ctx}: the {what}: {status_out}");
    let (at_put, at_status) = (rv_of(&put_out), rv_of(&status_out));
    assert!(
        at_put > from && at_status > from && at_put != at_status,
        "{ctx}: two writes after {from}, at {at_put} and {at_status}"
    );
    let status_last = at_status > at_put;

    // What each write left, derived from the order they landed in.
    let image = |o: &Value| o["spec"]["containers"][0]["image"].clone();
    let mut new_status = before["status"].clone();
    new_status["message"] = json!(message);
    let new_labels = put["metadata"]["labels"].clone();
    let old_labels = before["metadata"]["labels"].clone();
    let seen = |o: &Value| {
        (
            rv_of(o),
            o["metadata"]["labels"].clone(),
            image(o),
            o["status"].clone(),
        )
    };
    let (want_put, want_status) = if status_last {
        let labels = match what {
            "PUT" => old_labels,
            _ => new_labels.clone(),
        };
        (
            (at_put, new_labels, image(&put), before["status"].clone()),
            (at_status, labels, image(&put), new_status),
        )
    } else {
        (
            (at_put, new_labels, image(&put), new_status.clone()),
            (at_status, old_labels, image(&before), new_status),
        )
    };
    assert_eq!(
        seen(&put_out),
        want_put,
        "{ctx}: what the PUT answered ({put_out})"
    );
    assert_eq!(
        seen(&status_out),
        want_status,
        "{ctx}: what the /status {what} answered ({status_out})"
    );
    let (first, last) = match status_last {
        true => (&put_out, &status_out),
        false => (&status_out, &put_out),
    };

    // Every watcher sees both, in order, nothing between; a watch opened now from before them
    // replays both.
    let mut replay = Frames::open(server, &watch).await;
    for (who, frames) in [
        ("a watch while they ran", &mut live),
        ("a watch opened after", &mut replay),
    ] {
        for want in [first, last] {
            let e = next_event(frames, &format!("{ctx}: {who}")).await;
            assert!(
                e["type"] == "MODIFIED" && same_pod(&e["object"], want),
                "{ctx}: {who} from {from}: {e}, not MODIFIED {want}"
            );
        }
    }

    // A consistent GET and LIST agree.
    let (code, out) = request(&c, server, "GET", &path, None).await;
    let got: Value = serde_json::from_slice(&out).unwrap_or_default();
    assert!(
        code == 200 && same_pod(&got, last),
        "{ctx}: GET {got}, not {last}"
    );
    let (code, out) = request(&c, server, "GET", &pods, None).await;
    let listed: Value = serde_json::from_slice(&out).unwrap_or_default();
    assert!(
        code == 200
            && listed["items"]
                .as_array()
                .is_some_and(|items| items.len() == 1 && same_pod(&items[0], last)),
        "{ctx}: LIST {listed}, not {last}"
    );
    model.pod = Some(last.clone());
    model.tally.races += 1;
    model.tally.status_first += u64::from(!status_last);
}

/// Whether two answers are the same pod: its metadata, spec and status (a LIST's items and
/// watch events carry no `kind` of their own).
fn same_pod(a: &Value, b: &Value) -> bool {
    ["metadata", "spec", "status"].iter().all(|f| a[f] == b[f])
}

/// Prints how to replay a schedule that failed (whatever assertion failed, and whether or not
/// it named the seed).
struct Replay<'a> {
    seed: u64,
    backing: &'a Backing,
}

impl Drop for Replay<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let (store, test) = match self.backing {
                Backing::Memory => (
                    "the embedded store",
                    "the_http_facade_answers_as_the_reference_model_over_random_schedules",
                ),
                Backing::Etcd(_) => ("etcd", "the_http_facade_answers_as_the_reference_model_on_etcd"),
            };
            eprintln!(
                "schedule {} failed on {store}; replay it with WATCHCACHE_MODEL_SEED={} cargo \
                 test -p watchcache-tests --test http_model {test}",
                self.seed, self.seed
            );
        }
    }
}

/// Runs schedule `seed`; what it made happen.
async fn schedule(seed: u64, backing: &Backing) -> Tally {
    let _replay = Replay { seed, backing };
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
    // The model is the store's only writer from here: the server's own controllers (each
    // namespace's default ServiceAccount) are done first.
    watchcache_tests::settle(&server).await;
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut model = Model::default();
    model
        .states
        .push((watchcache_tests::current_revision(&server).await, BTreeMap::new()));
    let mut watches = Vec::new();
    let mut lists = Vec::new();
    // History before the schedule (earlier schedules' on etcd, the server's setup) is not the
    // model's: compacted, so a watch from before the start is a 410 however far back the store
    // could otherwise catch it up.
    let mut compactions = vec![compact_now(&server).await];
    for _ in 0..(20 + rng.below(40)) {
        match rng.below(24) {
            0..=9 => write(&server, &mut rng, &mut model, seed).await,
            10..=11 => multi(&server, &mut rng, &mut model).await,
            12 => get(&server, &mut rng, &mut model, seed).await,
            13..=14 => lists.extend(list(&server, &mut rng, &mut model, seed).await),
            15..=18 => {
                watches.extend(open_watch(&server, &mut rng, &mut model, &lists, seed).await);
            }
            19..=20 => {
                compactions.extend(fault(&server, &mut rng).await);
            }
            21 => race(&server, &mut rng, &mut model, seed, compactions.len()).await,
            _ => corrupt(&server, &mut rng, &mut model, seed).await,
        }
    }
    // The cache catches up (a consistent read), then every watch is read to its end.
    list(&server, &mut rng, &mut model, seed).await;
    for w in watches {
        check_watch(w, &mut model, &compactions, seed).await;
    }
    server.shutdown().await.unwrap();
    model.tally
}

/// `WATCHCACHE_MODEL_SEED`, when set: the one schedule to run.
fn replayed_seed() -> Option<u64> {
    std::env::var("WATCHCACHE_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_facade_answers_as_the_reference_model_over_random_schedules() {
    if let Some(seed) = replayed_seed() {
        eprintln!("seed {seed}: {}", schedule(seed, &Backing::Memory).await);
        return;
    }
    let n: u64 = std::env::var("WATCHCACHE_MODEL_SCHEDULES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let start = std::time::Instant::now();
    let mut tally = Tally::default();
    for seed in 0..n {
        tally.add(&schedule(seed, &Backing::Memory).await);
    }
    eprintln!(
        "{n} schedules in {:.1} s, with {tally}",
        start.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_facade_answers_as_the_reference_model_on_etcd() {
    let Some(backing) = Backing::new(true).await else {
        return;
    };
    if let Some(seed) = replayed_seed() {
        eprintln!("seed {seed} on etcd: {}", schedule(seed, &backing).await);
        return;
    }
    let n: u64 = std::env::var("WATCHCACHE_MODEL_SCHEDULES_ETCD")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let start = std::time::Instant::now();
    let mut tally = Tally::default();
    for seed in 0..n {
        tally.add(&schedule(seed, &backing).await);
    }
    eprintln!(
        "{n} schedules on etcd in {:.1} s, with {tally}",
        start.elapsed().as_secs_f64()
    );
}
