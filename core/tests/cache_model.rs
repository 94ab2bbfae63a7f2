//! The cache against a trivially correct reference model: a BTreeMap per revision and the
//! list of events. Random creates, updates and deletes; lists with random limits and
//! continues at random revisions and matches; watches from random revisions with random
//! selectors and namespaces, some lapped. Every answer must equal the model's: items, order,
//! revisions and errors. 1,000 seeded cases; a failure names its seed.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::{TextCodec, text_pod};
use watchcache_core::{
    Cache, CacheConfig, CacheError, CacheWatch, EventKind, Filter, ListOptions, MemorySource,
    ResourceVersionMatch, Revision, WatchOptions,
};

const CASES: u64 = if cfg!(miri) { 3 } else { 1_000 };
// "a-b" sorts before "a/…" in key order (etcd's): the model orders keys as strings too.
const NAMESPACES: [&str; 3] = ["a", "a-b", "b"];
const APPS: [&str; 2] = ["web", "api"];
const NODES: [&str; 3] = ["n1", "n2", "n3"];
const NAMES: [&str; 4] = ["p0", "p1", "p2", "p3"];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Obj {
    ns: String,
    name: String,
    app: String,
    node: String,
    rev: u64,
}

/// Keyed by `ns/name`, so iteration is etcd's key order.
type State = BTreeMap<String, Obj>;

#[derive(Clone, Debug)]
enum Change {
    Added(Obj),
    Modified(Obj, Obj),
    Deleted(u64, Obj),
}

impl Change {
    fn rev(&self) -> u64 {
        match self {
            Change::Added(o) | Change::Modified(o, _) => o.rev,
            Change::Deleted(r, _) => *r,
        }
    }
}

/// The reference model.
struct Model {
    /// The state after each revision, from the cache's first list on.
    states: Vec<(u64, State)>,
    changes: Vec<Change>,
    capacity: usize,
}

impl Model {
    fn current(&self) -> &(u64, State) {
        self.states.last().unwrap()
    }
    fn state_at(&self, rev: u64) -> &State {
        &self.states.iter().rev().find(|(r, _)| *r <= rev).unwrap().1
    }
    /// The oldest revision still in the window: every change after it is retained.
    fn floor(&self) -> u64 {
        let n = self.changes.len();
        if n > self.capacity {
            self.changes[n - self.capacity - 1].rev()
        } else {
            self.states[0].0
        }
    }
}

/// Selectors the model matches by hand, independently of the engine's parser.
#[derive(Clone, Copy, Debug)]
enum Sel {
    All,
    Ns(&'static str),
    App(&'static str),
    NotApp(&'static str),
    Node(&'static str),
    NsNode(&'static str, &'static str),
    Name(&'static str),
    NsName(&'static str, &'static str),
}

impl Sel {
    fn random(rng: &mut Rng) -> Sel {
        match rng.below(8) {
            0 => Sel::All,
            1 => Sel::Ns(rng.pick(&NAMESPACES)),
            2 => Sel::App(rng.pick(&APPS)),
            3 => Sel::NotApp(rng.pick(&APPS)),
            4 => Sel::Node(rng.pick(&NODES)),
            5 => Sel::NsNode(rng.pick(&NAMESPACES), rng.pick(&NODES)),
            6 => Sel::Name(rng.pick(&NAMES)),
            _ => Sel::NsName(rng.pick(&NAMESPACES), rng.pick(&NAMES)),
        }
    }
    fn filter(self) -> Filter {
        match self {
            Sel::All => Filter::everything(),
            Sel::Ns(ns) => Filter::everything().in_namespace(ns),
            Sel::App(a) => Filter::parse(None, &format!("app={a}"), "").unwrap(),
            Sel::NotApp(a) => Filter::parse(None, &format!("app notin ({a})"), "").unwrap(),
            Sel::Node(n) => Filter::parse(None, "", &format!("spec.nodeName={n}")).unwrap(),
            Sel::NsNode(ns, n) => Filter::parse(Some(ns), "", &format!("spec.nodeName=={n}")).unwrap(),
            Sel::Name(n) => Filter::parse(None, "", &format!("metadata.name={n}")).unwrap(),
            Sel::NsName(ns, n) => Filter::parse(Some(ns), "", &format!("metadata.name={n}")).unwrap(),
        }
    }
    fn matches(self, o: &Obj) -> bool {
        match self {
            Sel::All => true,
            Sel::Ns(ns) => o.ns == ns,
            Sel::App(a) => o.app == a,
            Sel::NotApp(a) => o.app != a,
            Sel::Node(n) => o.node == n,
            Sel::NsNode(ns, n) => o.ns == ns && o.node == n,
            Sel::Name(n) => o.name == n,
            Sel::NsName(ns, n) => o.ns == ns && o.name == n,
        }
    }
    /// Whether the engine may report remainingItemCount (no label or field selector).
    fn counts(self) -> bool {
        matches!(self, Sel::All | Sel::Ns(_))
    }
}

/// `(type, stamped revision, object revision, key)`
type Seen = (&'static str, u64, u64, String);

fn key(o: &Obj) -> String {
    format!("{}/{}", o.ns, o.name)
}

fn expected_events(model: &Model, after: u64, sel: Sel) -> Vec<Seen> {
    let mut out = Vec::new();
    for c in model.changes.iter().filter(|c| c.rev() > after) {
        let e = match c {
            Change::Added(o) => sel.matches(o).then(|| ("ADDED", o.rev, o.rev, key(o))),
            Change::Deleted(r, p) => sel.matches(p).then(|| ("DELETED", *r, p.rev, key(p))),
            Change::Modified(o, p) => match (sel.matches(p), sel.matches(o)) {
                (true, true) => Some(("MODIFIED", o.rev, o.rev, key(o))),
                (false, true) => Some(("ADDED", o.rev, o.rev, key(o))),
                (true, false) => Some(("DELETED", o.rev, p.rev, key(p))),
                (false, false) => None,
            },
        };
        out.extend(e);
    }
    out
}

fn write(rng: &mut Rng, store: &MemorySource, model: &mut Model) {
    let (_, mut state) = model.current().clone();
    let ns = rng.pick(&NAMESPACES).to_string();
    let name = rng.pick(&NAMES).to_owned();
    let k = format!("{ns}/{name}");
    let skey = format!("pods/{ns}/{name}");
    let (app, node) = (rng.pick(&APPS).to_string(), rng.pick(&NODES).to_string());
    let value = text_pod(&ns, &name, &app, &node);
    let change = match state.get(&k).cloned() {
        None => {
            let rev = store.create(&skey, value).unwrap().get();
            Change::Added(Obj {
                ns,
                name,
                app,
                node,
                rev,
            })
        }
        Some(prev) if rng.chance(30) => {
            let rev = store
                .delete(&skey, Some(Revision::new(prev.rev)))
                .unwrap()
                .0
                .get();
            Change::Deleted(rev, prev)
        }
        Some(prev) => {
            let rev = store
                .update(&skey, value, Some(Revision::new(prev.rev)))
                .unwrap()
                .get();
            Change::Modified(
                Obj {
                    ns,
                    name,
                    app,
                    node,
                    rev,
                },
                prev,
            )
        }
    };
    match &change {
        Change::Added(o) | Change::Modified(o, _) => {
            state.insert(k, o.clone());
        }
        Change::Deleted(..) => {
            state.remove(&k);
        }
    }
    model.states.push((change.rev(), state));
    model.changes.push(change);
}

/// Everything a watch has ready now (the cache has caught up), ending at Pending or Expired.
/// A catch-up's read of the store is a task of its own: the watch yields to it, a bounded
/// number of times in a row, before it takes Pending for the end.
async fn drain(w: &mut CacheWatch) -> (Vec<Seen>, bool) {
    let mut cx = Context::from_waker(Waker::noop());
    let mut seen = Vec::new();
    let mut idle = 0;
    loop {
        let polled = w.poll_next_with(&mut cx, |d| {
            let kind = match d.kind {
                EventKind::Added => "ADDED",
                EventKind::Modified => "MODIFIED",
                EventKind::Deleted => "DELETED",
                EventKind::Bookmark => "BOOKMARK",
            };
            match d.object {
                Some(o) => (kind, d.revision.get(), o.revision().get(), o.key().to_string()),
                None => (kind, d.revision.get(), 0, String::new()),
            }
        });
        match polled {
            Poll::Ready(Some(Ok(s))) => {
                idle = 0;
                seen.push(s);
            }
            Poll::Ready(Some(Err(_))) => return (seen, true),
            Poll::Ready(None) => return (seen, false),
            Poll::Pending if idle < 20 => {
                idle += 1;
                tokio::task::yield_now().await;
            }
            Poll::Pending => return (seen, false),
        }
    }
}

async fn check_list(seed: u64, rng: &mut Rng, cache: &Cache<MemorySource>, model: &Model) {
    let (current, _) = *model.current();
    let floor = model.floor();
    let sel = Sel::random(rng);
    let rv = match rng.below(10) {
        0 => None,
        1 => Some(0),
        2 if rng.chance(20) => Some(current + 1 + rng.below(3)),
        _ => Some(model.states[rng.below(model.states.len() as u64) as usize].0),
    };
    let exact = rng.chance(40);
    let limit = if rng.chance(70) {
        Some(1 + rng.below(5) as usize)
    } else {
        None
    };
    let opts = ListOptions {
        resource_version: rv.map(Revision::new),
        resource_version_match: exact.then_some(ResourceVersionMatch::Exact),
        limit,
        continue_token: None,
        filter: sel.filter(),
    };
    let ctx = format!("seed {seed}: list {opts:?} (current {current}, floor {floor})");
    let got = cache.list(&opts).await;
    // The model's answer. A revision with a limit and no match is Exact too (API concepts).
    if matches!(rv, None | Some(0)) && exact {
        assert!(
            matches!(got, Err(CacheError::InvalidRequest(_))),
            "{ctx}: {got:?}"
        );
        return;
    }
    let exact = exact || (limit.is_some() && rv.is_some_and(|n| n != 0));
    let want_rev = match (rv, exact) {
        (Some(n), _) if n > current => {
            assert!(
                matches!(got, Err(CacheError::TooLargeResourceVersion { .. })),
                "{ctx}: {got:?}"
            );
            return;
        }
        (Some(n), true) if n < floor => {
            match got {
                Err(CacheError::Expired(e)) => {
                    assert_eq!((e.requested.get(), e.oldest.get()), (n, floor), "{ctx}")
                }
                other => panic!("{ctx}: {other:?}"),
            }
            return;
        }
        (Some(n), true) => n,
        _ => current,
    };
    let want: Vec<(String, u64)> = model
        .state_at(want_rev)
        .values()
        .filter(|o| sel.matches(o))
        .map(|o| (key(o), o.rev))
        .collect();
    let mut page = got.unwrap_or_else(|e| panic!("{ctx}: {e:?}"));
    let mut all = Vec::new();
    loop {
        assert_eq!(page.revision.get(), want_rev, "{ctx}");
        let items: Vec<(String, u64)> = page
            .items
            .by_ref()
            .map(|o| (o.key().to_string(), o.revision().get()))
            .collect();
        if let Some(l) = limit {
            assert!(items.len() <= l, "{ctx}: page of {} over limit", items.len());
        }
        all.extend(items);
        let rest = want.len() - all.len().min(want.len());
        assert_eq!(
            page.continue_token.is_some(),
            rest > 0,
            "{ctx}: continue iff more (have {})",
            all.len()
        );
        let want_count = (page.continue_token.is_some() && sel.counts()).then_some(rest as u64);
        assert_eq!(page.remaining_item_count, want_count, "{ctx}");
        let Some(token) = page.continue_token.take() else {
            break;
        };
        let next = ListOptions {
            limit,
            continue_token: Some(token),
            filter: sel.filter(),
            ..Default::default()
        };
        page = cache
            .list(&next)
            .await
            .unwrap_or_else(|e| panic!("{ctx}: continue: {e:?}"));
    }
    assert_eq!(all, want, "{ctx}");
}

async fn run_case(seed: u64) -> (u64, u64) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let capacity = rng.pick(&[2usize, 4, 8, 16, 64]);
    let store = MemorySource::new();
    let mut config = CacheConfig::new("pods", "pods/");
    config.capacity = capacity;
    config.fresh_timeout = Duration::from_millis(20);
    config.bookmark_interval = Duration::from_secs(3600);
    config.trigger_field = Some("spec.nodeName".into());
    // The model's window is the ring's for LISTs too: no snapshot is kept beyond it.
    config.snapshot_retention = Duration::ZERO;
    // With catch-up, a watch the window cannot serve reads the store's history; without it,
    // the apiserver's 410.
    let catch_up = rng.chance(50);
    if !catch_up {
        config.catch_up = None;
    }
    let cache = Cache::new(store.clone(), Arc::new(TextCodec), config).unwrap();
    let first = cache
        .list(&ListOptions {
            resource_version: Some(Revision::ZERO),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut model = Model {
        states: vec![(first.revision.get(), State::new())],
        changes: Vec::new(),
        capacity,
    };

    // Phase 1: writes; then the cache catches up (a consistent read).
    for _ in 0..rng.below(20) {
        write(&mut rng, &store, &mut model);
    }
    cache.list(&ListOptions::default()).await.unwrap();

    // The store compacts somewhere below the window (or nowhere): starts below it are 410
    // even with catch-up.
    let compacted = if rng.chance(50) {
        let below: Vec<u64> = model
            .states
            .iter()
            .map(|s| s.0)
            .filter(|&r| r <= model.floor())
            .collect();
        let at = below[rng.below(below.len() as u64) as usize];
        store.compact(Revision::new(at));
        at
    } else {
        0
    };

    // Phase 2: watches from random revisions with random selectors.
    let mut watches = Vec::new();
    for _ in 0..3 {
        let sel = Sel::random(&mut rng);
        let (current, state) = model.current().clone();
        let (rv, initial) = match rng.below(4) {
            0 => (None, true),
            1 => (Some(0), true),
            _ => (
                Some(model.states[rng.below(model.states.len() as u64) as usize].0),
                false,
            ),
        };
        let send_initial = !initial && rng.chance(25);
        let opts = WatchOptions {
            resource_version: rv.map(Revision::new),
            send_initial_events: send_initial.then_some(true),
            allow_bookmarks: false,
            filter: sel.filter(),
        };
        let ctx = format!(
            "seed {seed}: watch {opts:?} (current {current}, floor {})",
            model.floor()
        );
        let got = cache.watch(opts).await;
        match rv {
            // Below the window: 410, or with catch-up, 410 only below the store's compaction
            // (a watch from n reads revision n + 1 on, which must be above the compaction: etcd
            // sends an event at the compacted revision without the value before it).
            Some(n) if !send_initial && n != 0 && n < model.floor() && (!catch_up || n < compacted) => {
                assert!(matches!(got, Err(CacheError::Expired(_))), "{ctx}: {got:?}");
            }
            _ => {
                let with_state = initial || send_initial;
                let init: Vec<Seen> = if with_state {
                    state
                        .values()
                        .filter(|o| sel.matches(o))
                        .map(|o| ("ADDED", o.rev, o.rev, key(o)))
                        .collect()
                } else {
                    Vec::new()
                };
                let after = if with_state { current } else { rv.unwrap() };
                watches.push((ctx, got.unwrap(), sel, init, after, send_initial));
            }
        }
    }

    // Phase 3: more writes, then catch up.
    for _ in 0..rng.below(20) {
        write(&mut rng, &store, &mut model);
    }
    cache.list(&ListOptions::default()).await.unwrap();

    for (ctx, mut w, sel, init, after, send_initial) in watches {
        let (seen, expired) = drain(&mut w).await;
        let live = expected_events(&model, after, sel);
        // Lapped: more changes after its start than the window holds.
        let lapped = model.changes.iter().filter(|c| c.rev() > after).count() > capacity;
        let mut want = init;
        if send_initial {
            want.push(("BOOKMARK", 0, 0, String::new()));
        }
        let seen: Vec<Seen> = seen
            .into_iter()
            .map(|s| {
                if s.0 == "BOOKMARK" {
                    ("BOOKMARK", 0, 0, String::new())
                } else {
                    s
                }
            })
            .collect();
        want.extend(live);
        if expired {
            // A 410 only where an entry it had to look at was overwritten before it read it
            // (one of its bucket's: its namespace's, its trigger value's, which its filter may
            // still reject), and never with catch-up while the store holds its history; what
            // it saw before is exactly the start of what it should see.
            assert!(
                lapped,
                "{ctx}: expired, yet the window held every change after its start"
            );
            assert!(
                !catch_up,
                "{ctx}: expired, yet the store holds every revision after {after}"
            );
            assert!(
                seen.len() <= want.len() && seen[..] == want[..seen.len()],
                "{ctx}: {seen:?} before the 410, want {want:?}"
            );
        } else {
            // Lapped or not: a watcher that was not ended saw every event, none twice.
            assert_eq!(seen, want, "{ctx}");
        }
    }

    // Lists. The store compacts at the window's floor, as etcd compacts under an apiserver:
    // an Exact LIST below it is 410, and at or above it the cache's own snapshots serve it.
    store.compact(Revision::new(model.floor()));
    for _ in 0..6 {
        check_list(seed, &mut rng, &cache, &model).await;
    }
    assert!(
        cache.check_consistency().await.unwrap().is_consistent(),
        "seed {seed}"
    );
    let stats = cache.stats();
    (
        stats.catch_ups.load(Ordering::Relaxed),
        stats.catch_up_handovers.load(Ordering::Relaxed),
    )
}

#[test]
fn the_cache_answers_as_the_reference_model_does() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let (mut catch_ups, mut handovers) = (0, 0);
    rt.block_on(async {
        for seed in 0..CASES {
            let (c, h) = run_case(seed).await;
            catch_ups += c;
            handovers += h;
        }
    });
    // The cases reach the catch-up path (starts below the window, laps) and its hand-over.
    // (Miri runs three cases only.)
    let least = if cfg!(miri) { 1 } else { 10 };
    assert!(
        catch_ups >= least && handovers > 0,
        "{catch_ups} catch-ups, {handovers} hand-overs"
    );
}
