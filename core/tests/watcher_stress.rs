//! One writer thread, many watchers on a multi-thread runtime, far more events than the ring
//! holds: every watcher's sequence equals the published one (after its filter), or is a
//! prefix of it ending in a clean Expired.
//!
//! The test paces its writer against the unfiltered watchers' progress so that they reliably
//! keep up (the engine itself never waits for a reader); stalled watchers are lapped for sure.
//! Progress notifications move the hub's revision every so often and bookmark ticks go out
//! with them: the bookmarks a watcher receives never go back and never overtake an event at or
//! below their revision. The writer ends by closing the hub at `EVENTS + 1`, which ends every
//! watcher that read everything with that Expired.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::pod;
use watchcache_core::{Event, EventKind, Expired, Filter, Revision, WatchHub, WatchSpec};

const EVENTS: u64 = if cfg!(miri) { 300 } else { 100_000 };
const CAPACITY: usize = if cfg!(miri) { 16 } else { 1024 };
const KEYS: u64 = 200;
const NODES: u64 = 16;
const NAMESPACES: u64 = 4;
const BOOKMARK_EVERY: u64 = if cfg!(miri) { 97 } else { 997 };
/// Watchers of each kind: unfiltered, by node (×NODES), by namespace (×NAMESPACES), by label,
/// stalled. Miri runs a handful; the real run has 72.
const FAST: usize = if cfg!(miri) { 2 } else { 16 };
const PER_NODE: u64 = if cfg!(miri) { 0 } else { 2 };
const PER_NAMESPACE: u64 = if cfg!(miri) { 1 } else { 2 };
const BY_LABEL: u64 = if cfg!(miri) { 2 } else { 8 };
const STALLED: usize = if cfg!(miri) { 1 } else { 8 };

/// `(type, stamped revision, object revision)`.
type Seen = (EventKind, u64, u64);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Role {
    /// Unfiltered and reading at full speed; the writer paces against these.
    Fast,
    /// Filtered by namespace, node or label.
    Filtered,
    /// Reads a few events, then stops reading until the writer is done: certainly lapped.
    Stalled,
}

/// The published history: a deterministic mix of creates, updates (moving pods between
/// nodes and changing labels) and deletes over a pool of keys, plus periodic bookmarks.
fn history() -> Vec<Event> {
    let mut live: Vec<Option<Arc<watchcache_core::ObjectVersion>>> = vec![None; KEYS as usize];
    let mut out = Vec::with_capacity(EVENTS as usize + 1);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for rev in 1..=EVENTS {
        if rev % BOOKMARK_EVERY == 0 {
            out.push(Event::Bookmark {
                revision: Revision::new(rev),
            });
            continue;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = (x % KEYS) as usize;
        let ns = format!("ns-{}", k as u64 % NAMESPACES);
        let node = format!("node-{}", (x >> 20) % NODES);
        let app = if (x >> 40).is_multiple_of(3) { "web" } else { "api" };
        let next = pod(&ns, &format!("p{k}"), rev, app, &node);
        let event = match live[k].take() {
            None => Event::Added { object: next.clone() },
            Some(prev) if (x >> 50).is_multiple_of(5) => Event::Deleted {
                revision: Revision::new(rev),
                prev,
            },
            Some(prev) => Event::Modified {
                object: next.clone(),
                prev,
            },
        };
        if !matches!(event, Event::Deleted { .. }) {
            live[k] = Some(next);
        }
        out.push(event);
    }
    out.push(Event::Bookmark {
        revision: Revision::new(EVENTS + 1),
    });
    out
}

/// The object events `filter` selects (bookmarks are checked separately: which ones a watcher
/// gets depends on when it was idle).
fn expected(filter: &Filter, history: &[Event]) -> Vec<Seen> {
    history
        .iter()
        .filter(|e| !matches!(e, Event::Bookmark { .. }))
        .filter_map(|e| filter.deliver(e))
        .map(|d| {
            (
                d.kind,
                d.revision.get(),
                d.object.map_or(0, |o| o.revision().get()),
            )
        })
        .collect()
}

#[test]
fn many_watchers_see_the_published_sequence_or_a_clean_expired() {
    let history = Arc::new(history());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let (mut publisher, hub) = WatchHub::builder()
        .capacity(CAPACITY)
        .trigger_field("spec.nodeName")
        .build()
        .unwrap();

    let mut specs: Vec<(Role, Filter)> = Vec::new();
    for _ in 0..FAST {
        specs.push((Role::Fast, Filter::everything()));
    }
    for i in 0..NODES * PER_NODE {
        specs.push((
            Role::Filtered,
            Filter::parse(None, "", &format!("spec.nodeName=node-{}", i % NODES)).unwrap(),
        ));
    }
    for i in 0..NAMESPACES * PER_NAMESPACE {
        specs.push((
            Role::Filtered,
            Filter::everything().in_namespace(&format!("ns-{}", i % NAMESPACES)),
        ));
    }
    for i in 0..BY_LABEL {
        let labels = if i % 2 == 0 { "app=web" } else { "app notin (web)" };
        specs.push((
            Role::Filtered,
            Filter::parse(Some(&format!("ns-{}", i % NAMESPACES)), labels, "").unwrap(),
        ));
    }
    for _ in 0..STALLED {
        specs.push((Role::Stalled, Filter::everything()));
    }
    assert!(cfg!(miri) || specs.len() >= 64);

    let writer_done = Arc::new(tokio::sync::Notify::new());
    let done_flag = Arc::new(AtomicU64::new(0));
    let progress: Vec<Arc<AtomicU64>> = specs.iter().map(|_| Arc::new(AtomicU64::new(0))).collect();
    let tasks: Vec<_> = specs
        .iter()
        .enumerate()
        .map(|(i, (role, filter))| {
            let mut w = hub
                .watch(WatchSpec::new(filter.clone()).with_bookmarks())
                .unwrap();
            let (role, progress) = (*role, Arc::clone(&progress[i]));
            let (writer_done, done_flag) = (Arc::clone(&writer_done), Arc::clone(&done_flag));
            rt.spawn(async move {
                let mut seen: Vec<Seen> = Vec::new();
                loop {
                    if role == Role::Stalled && seen.len() == 10 {
                        let notified = writer_done.notified();
                        if done_flag.load(Ordering::SeqCst) == 0 {
                            notified.await;
                        }
                    }
                    let item = w
                        .next_with(|d| {
                            (
                                d.kind,
                                d.revision.get(),
                                d.object.map_or(0, |o| o.revision().get()),
                            )
                        })
                        .await;
                    match item {
                        Some(Ok(s)) => {
                            seen.push(s);
                            progress.store(s.1, Ordering::Release);
                        }
                        Some(Err(e)) => {
                            assert!(w.next().await.is_none(), "the stream ends after Expired");
                            // The close's Expired: everything was read.
                            let lapped = e.oldest != Revision::new(EVENTS + 1);
                            return (seen, lapped.then_some(e));
                        }
                        None => panic!("a watcher ended without Expired"),
                    }
                }
            })
        })
        .collect();

    let fast: Vec<Arc<AtomicU64>> = specs
        .iter()
        .zip(&progress)
        .filter(|((r, _), _)| *r == Role::Fast)
        .map(|(_, p)| Arc::clone(p))
        .collect();
    let writer = {
        let history = Arc::clone(&history);
        std::thread::spawn(move || {
            for event in history.iter() {
                let rev = event.revision().get();
                // Keep the unfiltered readers within an eighth of a ring (test pacing only), which
                // leaves the filtered ones, scheduled behind them, the rest of the window.
                while fast
                    .iter()
                    .any(|p| p.load(Ordering::Acquire) + (CAPACITY as u64 / 8) < rev)
                {
                    std::thread::sleep(Duration::from_micros(50));
                }
                match event {
                    Event::Bookmark { revision } => {
                        publisher.progress(*revision);
                        publisher.send_bookmarks();
                    }
                    _ => drop(publisher.publish(event.clone()).unwrap()),
                }
            }
            let last = publisher.last_revision();
            publisher.close(Revision::new(EVENTS + 1));
            last
        })
    };
    let last = writer.join().unwrap();
    done_flag.store(1, Ordering::SeqCst);
    writer_done.notify_waiters();

    let results: Vec<_> = rt.block_on(async {
        let mut out = Vec::new();
        for t in tasks {
            out.push(
                tokio::time::timeout(Duration::from_secs(120), t)
                    .await
                    .expect("watcher finished")
                    .unwrap(),
            );
        }
        out
    });
    let (mut complete, mut expired) = (0, 0);
    let mut bookmarks = 0;
    for ((role, filter), (seen, err)) in specs.iter().zip(results) {
        let want = expected(filter, &history);
        // Bookmarks never go back, and no event at or below one follows it.
        let mut floor = 0;
        for s in &seen {
            if s.0 == EventKind::Bookmark {
                assert!(s.1 >= floor, "a bookmark went back: {s:?} after {floor}");
                floor = s.1;
                bookmarks += 1;
            } else {
                assert!(
                    s.1 > floor,
                    "an event at or below a bookmark followed it: {s:?} after {floor}"
                );
            }
        }
        let seen: Vec<Seen> = seen.into_iter().filter(|s| s.0 != EventKind::Bookmark).collect();
        match err {
            None => {
                assert_eq!(
                    seen, want,
                    "a complete watcher saw exactly the published sequence"
                );
                complete += 1;
            }
            Some(Expired { requested, oldest }) => {
                assert_ne!(*role, Role::Fast, "paced watchers are never lapped");
                assert_eq!(seen[..], want[..seen.len()], "an expired watcher saw a prefix");
                assert!(requested.get() >= seen.last().map_or(0, |s| s.1));
                assert!(oldest > requested, "it was lapped: history past it is gone");
                expired += 1;
            }
        }
    }
    let stalled = specs.iter().filter(|(r, _)| *r == Role::Stalled).count();
    assert!(expired >= stalled, "every stalled watcher was lapped");
    assert!(complete >= FAST, "every paced watcher completed");
    assert!(
        last <= Revision::new(EVENTS) && bookmarks > 0,
        "{bookmarks} bookmarks"
    );
    eprintln!(
        "{} watchers: {complete} complete, {expired} expired, {EVENTS} events, ring {CAPACITY}, {bookmarks} bookmarks",
        specs.len()
    );
}
