//! One test per row of the resourceVersion table and per error, plus readiness, relist after
//! compaction, the quiet resource, bookmarks, the consistency check and paging under writes.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use std::time::Duration;

use common::{CountingWaker, PanicsOnBoom, TextCodec, text_pod};
use watchcache_core::{
    Cache, CacheConfig, CacheError, EventKind, Expired, Filter, ListOptions, MemorySource,
    ResourceVersionMatch, Revision, SourceError, WatchEvent, WatchOptions,
};

fn config() -> CacheConfig {
    let mut c = CacheConfig::new("pods", "pods/");
    c.capacity = 8;
    c.fresh_timeout = Duration::from_millis(300);
    c.ready_timeout = Duration::from_millis(300);
    c.backoff_initial = Duration::from_millis(5);
    c.backoff_max = Duration::from_millis(20);
    c.trigger_field = Some("spec.nodeName".into());
    // Snapshots as long as the ring's window only, unless a test says otherwise.
    c.snapshot_retention = Duration::ZERO;
    c
}

fn create(s: &MemorySource, ns: &str, name: &str) -> Revision {
    s.create(&format!("pods/{ns}/{name}"), text_pod(ns, name, "web", "n1"))
        .unwrap()
}

/// A cache over an empty store, once its first list has completed (so that history starts
/// before the test's first write).
async fn started(config: CacheConfig) -> (MemorySource, Cache<MemorySource>) {
    let s = MemorySource::new();
    let cache = Cache::new(s.clone(), Arc::new(TextCodec), config).unwrap();
    cache
        .list(&ListOptions {
            resource_version: rv(0),
            ..Default::default()
        })
        .await
        .unwrap();
    (s, cache)
}

fn names(list: watchcache_core::ListResult) -> Vec<String> {
    list.items.map(|o| o.key().to_string()).collect()
}

/// LIST at exactly revision `n`.
fn exact(n: Revision) -> ListOptions {
    ListOptions {
        resource_version: Some(n),
        resource_version_match: Some(ResourceVersionMatch::Exact),
        ..Default::default()
    }
}

fn rv(n: u64) -> Option<Revision> {
    Some(Revision::new(n))
}

async fn next(w: &mut watchcache_core::CacheWatch) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(10), w.next())
        .await
        .expect("an event in time")
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn a_list_without_resource_version_is_a_consistent_read() {
    let (s, cache) = started(config()).await;
    for i in 0..20 {
        create(&s, "ns", &format!("p{i:02}"));
        // Every write is visible to the very next consistent read.
        let list = cache.list(&ListOptions::default()).await.unwrap();
        assert!(list.revision >= s.revision());
        assert_eq!(list.items.len(), i + 1);
    }
}

#[tokio::test]
async fn a_consistent_read_asks_for_progress_again_while_the_watch_is_down() {
    let mut c = config();
    // The re-watch comes well after the read started; the read still has time to wait.
    c.backoff_initial = Duration::from_millis(150);
    c.backoff_max = Duration::from_millis(150);
    c.fresh_timeout = Duration::from_secs(2);
    let (s, cache) = started(c).await;
    // The store moves on under another prefix: only a progress notification can tell this
    // cache that it is current.
    s.create("other/x", Bytes::from_static(b"x")).unwrap();
    // The cache's watch breaks; its first progress request reaches no watch.
    s.pause_watches(true);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let resume = {
        let s = s.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            s.pause_watches(false);
        })
    };
    let list = cache
        .list(&ListOptions::default())
        .await
        .expect("the read asks again once the watch is back");
    assert_eq!(list.revision, s.revision());
    resume.await.unwrap();
}

#[tokio::test]
async fn resource_version_zero_serves_the_current_snapshot_and_honours_limit() {
    let (s, cache) = started(config()).await;
    for i in 0..5 {
        create(&s, "ns", &format!("p{i}"));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    let opts = ListOptions {
        resource_version: rv(0),
        limit: Some(2),
        ..Default::default()
    };
    let first = cache.list(&opts).await.unwrap();
    assert_eq!(first.remaining_item_count, Some(3));
    let token = first.continue_token.clone().expect("more pages");
    assert_eq!(names(first), vec!["ns/p0", "ns/p1"]);
    let second = cache
        .list(&ListOptions {
            continue_token: Some(token),
            limit: Some(10),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(second.continue_token, None);
    assert_eq!(second.remaining_item_count, None);
    assert_eq!(names(second), vec!["ns/p2", "ns/p3", "ns/p4"]);
}

#[tokio::test]
async fn not_older_than_waits_for_the_revision_or_reports_too_large() {
    let (s, cache) = started(config()).await;
    let r = create(&s, "ns", "a");
    let list = cache
        .list(&ListOptions {
            resource_version: Some(r),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(list.revision >= r);
    assert_eq!(names(list), vec!["ns/a"]);
    let future = Revision::new(r.get() + 100);
    let err = cache
        .list(&ListOptions {
            resource_version: Some(future),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        err,
        CacheError::TooLargeResourceVersion {
            requested: future,
            current: r
        }
    );
    assert!(err.to_string().contains("Too large resource version"));
    let err = cache
        .get(&watchcache_core::ObjectKey::new("ns", "a"), Some(future))
        .await
        .unwrap_err();
    assert!(matches!(err, CacheError::TooLargeResourceVersion { .. }));
}

#[tokio::test]
async fn exact_serves_the_cache_snapshot_then_the_store_then_expired() {
    let (s, cache) = started(config()).await;
    let r1 = create(&s, "ns", "a");
    let r2 = create(&s, "ns", "b");
    s.delete("pods/ns/a", None).unwrap();
    cache.list(&ListOptions::default()).await.unwrap();
    let at1 = cache.list(&exact(r1)).await.unwrap();
    assert_eq!(at1.revision, r1);
    assert_eq!(names(at1), vec!["ns/a"]);
    assert_eq!(names(cache.list(&exact(r2)).await.unwrap()), vec!["ns/a", "ns/b"]);
    // Push r1 out of the window of 8.
    for i in 0..10 {
        create(&s, "other", &format!("x{i}"));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    assert!(cache.oldest_revision() > r1, "r1 has left the cache");
    // The store still has r1: it answers, as etcd answers the apiserver.
    let reads = source_reads(&cache);
    let at1 = cache.list(&exact(r1)).await.unwrap();
    assert_eq!((at1.revision, names(at1)), (r1, vec!["ns/a".to_owned()]));
    assert_eq!(source_reads(&cache), reads + 1);
    // Compacted past r1: 410, with the oldest revision the store keeps.
    s.compact(r2);
    match cache.list(&exact(r1)).await {
        Err(CacheError::Expired(Expired { requested, oldest })) => {
            assert_eq!(requested, r1);
            assert_eq!(oldest, r2);
        }
        other => panic!("{other:?}"),
    }
}

fn source_reads<S: watchcache_core::Source>(cache: &Cache<S>) -> u64 {
    cache
        .stats()
        .source_reads
        .load(std::sync::atomic::Ordering::Relaxed)
}

#[tokio::test]
async fn a_revision_with_a_limit_and_no_match_lists_exactly_that_revision() {
    let (s, cache) = started(config()).await;
    let r1 = create(&s, "ns", "a");
    create(&s, "ns", "b");
    create(&s, "ns", "c");
    cache.list(&ListOptions::default()).await.unwrap();
    let opts = ListOptions {
        resource_version: Some(r1),
        limit: Some(10),
        ..Default::default()
    };
    let list = cache.list(&opts).await.unwrap();
    // The state at r1 (only "a"), with r1 as the list's revision, not the newest state.
    assert_eq!(list.revision, r1);
    assert_eq!(names(list), vec!["ns/a"]);
    // Without a limit the same revision is NotOlderThan: the newest state.
    let newest = cache
        .list(&ListOptions {
            resource_version: Some(r1),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(names(newest), vec!["ns/a", "ns/b", "ns/c"]);
}

#[tokio::test]
async fn contradictory_parameters_are_invalid_requests() {
    let (s, cache) = started(config()).await;
    create(&s, "ns", "a");
    create(&s, "ns", "b");
    let token = cache
        .list(&ListOptions {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap()
        .continue_token
        .unwrap();
    let cases = [
        ListOptions {
            resource_version_match: Some(ResourceVersionMatch::Exact),
            ..Default::default()
        },
        ListOptions {
            resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
            ..Default::default()
        },
        ListOptions {
            resource_version: rv(0),
            resource_version_match: Some(ResourceVersionMatch::Exact),
            ..Default::default()
        },
        ListOptions {
            resource_version: rv(5),
            continue_token: Some(token.clone()),
            ..Default::default()
        },
        ListOptions {
            continue_token: Some(token.clone()),
            resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
            ..Default::default()
        },
    ];
    for opts in cases {
        assert!(
            matches!(cache.list(&opts).await, Err(CacheError::InvalidRequest(_))),
            "{opts:?}"
        );
    }
    // rv "0" with a continue token is allowed, as the apiserver allows it.
    let ok = ListOptions {
        resource_version: rv(0),
        continue_token: Some(token),
        ..Default::default()
    };
    assert_eq!(names(cache.list(&ok).await.unwrap()), vec!["ns/b"]);
    let bad_field = ListOptions {
        filter: Filter::parse(None, "", "status.phase=x").unwrap(),
        ..Default::default()
    };
    assert!(matches!(
        cache.list(&bad_field).await,
        Err(CacheError::Selector(_))
    ));
}

#[tokio::test]
async fn malformed_tampered_foreign_and_expired_continue_tokens() {
    let (s, cache) = started(config()).await;
    for i in 0..3 {
        create(&s, "ns", &format!("p{i}"));
    }
    let page = |token: &str| ListOptions {
        continue_token: Some(token.to_owned()),
        ..Default::default()
    };
    for bad in [
        "",
        "garbage!",
        "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6Mywic3RhcnQiOiJucy9hXHUwMDAwIn0",
    ] {
        assert!(
            matches!(cache.list(&page(bad)).await, Err(CacheError::InvalidContinue(_))),
            "{bad:?}"
        );
    }
    // A token from another resource's cache over the same store.
    let mut cm_config = config();
    cm_config.resource = "configmaps".into();
    cm_config.prefix = "configmaps/".into();
    let other = Cache::new(s.clone(), Arc::new(TextCodec), cm_config).unwrap();
    s.create("configmaps/ns/c1", text_pod("ns", "c1", "x", "n"))
        .unwrap();
    s.create("configmaps/ns/c2", text_pod("ns", "c2", "x", "n"))
        .unwrap();
    let foreign = other
        .list(&ListOptions {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap()
        .continue_token
        .unwrap();
    assert!(matches!(
        cache.list(&page(&foreign)).await,
        Err(CacheError::InvalidContinue(_))
    ));
    // A valid token whose snapshot has left the window: 410, as the apiserver answers.
    let token = cache
        .list(&ListOptions {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap()
        .continue_token
        .unwrap();
    for i in 0..12 {
        create(&s, "ns", &format!("q{i:02}"));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    // Its snapshot has left the cache, but the store still has that revision: it answers.
    let from_store = cache.list(&page(&token)).await.unwrap();
    assert_eq!(from_store.items.len(), 2, "the two items after the first page");
    // Once the store has compacted it too: 410.
    s.compact(s.revision());
    let gone = cache.list(&page(&token)).await;
    assert!(matches!(gone, Err(CacheError::ContinueExpired(_))), "{gone:?}");
    assert!(
        gone.unwrap_err()
            .to_string()
            .starts_with("The provided continue parameter is too old"),
        "the apiserver's message"
    );
}

#[tokio::test]
async fn a_continue_token_verifies_on_any_cache_over_the_same_store() {
    // A restarted server, or another replica, over the same store.
    let (s, first) = started(config()).await;
    for name in ["a", "b", "c"] {
        create(&s, "ns", name);
    }
    let page1 = first
        .list(&ListOptions {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap();
    let token = page1.continue_token.clone().unwrap();
    assert_eq!(names(page1), vec!["ns/a"]);
    let second = Cache::new(s.clone(), Arc::new(TextCodec), config()).unwrap();
    let rest = second
        .list(&ListOptions {
            continue_token: Some(token),
            ..Default::default()
        })
        .await
        .expect("the token verifies: it was signed with the store's key");
    assert_eq!(names(rest), vec!["ns/b", "ns/c"]);
    // Another store's cache refuses it as not its own (400), not as gone (410).
    let token = first
        .list(&ListOptions {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap()
        .continue_token
        .unwrap();
    let (other_store, elsewhere) = started(config()).await;
    create(&other_store, "ns", "z");
    let refused = elsewhere
        .list(&ListOptions {
            continue_token: Some(token),
            ..Default::default()
        })
        .await;
    assert!(
        matches!(refused, Err(CacheError::InvalidContinue(_))),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_paged_list_returns_exactly_the_snapshot_of_its_first_page_while_writes_go_on() {
    let mut c = config();
    c.capacity = 1024;
    let (s, cache) = started(c).await;
    for i in 0..100 {
        create(&s, &format!("ns{}", i % 3), &format!("p{i:03}"));
    }
    let first = cache
        .list(&ListOptions {
            limit: Some(7),
            ..Default::default()
        })
        .await
        .unwrap();
    let revision = first.revision;
    let mut token = first.continue_token.clone();
    let mut got = names(first);
    let mut i = 0;
    while let Some(t) = token {
        // Writes between pages: creates, updates and deletes of keys before and after the cursor.
        i += 1;
        create(&s, "ns1", &format!("new{i:03}"));
        s.delete(&format!("pods/ns{}/p{:03}", i % 3, i), None).ok();
        let page = cache
            .list(&ListOptions {
                continue_token: Some(t),
                limit: Some(7),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(page.revision, revision);
        token = page.continue_token.clone();
        got.extend(names(page));
    }
    let want: Vec<String> = watchcache_core::Source::list(&s, "pods/", Some(revision))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|i| i.key.trim_start_matches("pods/").to_owned())
        .collect();
    assert_eq!(got, want);
}

#[tokio::test]
async fn watch_without_resource_version_starts_with_the_current_state_then_live() {
    let (s, cache) = started(config()).await;
    create(&s, "ns", "a");
    for (i, rv) in [None, rv(0)].into_iter().enumerate() {
        let mut w = cache
            .watch(WatchOptions {
                resource_version: rv,
                ..Default::default()
            })
            .await
            .unwrap();
        let e = next(&mut w).await;
        assert_eq!((e.kind, e.object.unwrap().key().name()), (EventKind::Added, "a"));
        // The second round's initial state also holds the first round's live object.
        for _ in 0..i {
            assert_eq!(next(&mut w).await.kind, EventKind::Added);
        }
        let r = create(&s, "ns", &format!("live-{i}"));
        let e = next(&mut w).await;
        assert_eq!((e.kind, e.revision), (EventKind::Added, r));
    }
}

#[tokio::test]
async fn watch_from_a_revision_replays_what_followed_or_is_expired() {
    let (s, cache) = started(config()).await;
    let r1 = create(&s, "ns", "a");
    let r2 = s
        .update("pods/ns/a", text_pod("ns", "a", "api", "n2"), None)
        .unwrap();
    let (r3, _) = s.delete("pods/ns/a", None).unwrap();
    cache.list(&ListOptions::default()).await.unwrap();
    let mut w = cache
        .watch(WatchOptions {
            resource_version: Some(r1),
            ..Default::default()
        })
        .await
        .unwrap();
    let e = next(&mut w).await;
    assert_eq!((e.kind, e.revision), (EventKind::Modified, r2));
    let e = next(&mut w).await;
    assert_eq!(
        (e.kind, e.revision, e.object.unwrap().revision()),
        (EventKind::Deleted, r3, r2)
    );
    let mut xs = Vec::new();
    for i in 0..10 {
        xs.push(create(&s, "ns", &format!("x{i}")));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    assert!(
        cache.oldest_watch_revision() > r1,
        "the window no longer reaches r1"
    );
    // Below the window, the store still holds r1's successors: they are read from it, the
    // DELETED with the object's last state, and the watch goes on live from the window.
    let mut w = cache
        .watch(WatchOptions {
            resource_version: Some(r1),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(w.is_catching_up());
    let e = next(&mut w).await;
    assert_eq!((e.kind, e.revision), (EventKind::Modified, r2));
    let e = next(&mut w).await;
    assert_eq!(
        (e.kind, e.revision, e.object.unwrap().revision()),
        (EventKind::Deleted, r3, r2)
    );
    for x in &xs {
        let e = next(&mut w).await;
        assert_eq!((e.kind, e.revision), (EventKind::Added, *x));
    }
    let live = create(&s, "ns", "live");
    let e = next(&mut w).await;
    assert_eq!((e.kind, e.revision), (EventKind::Added, live));
    assert!(!w.is_catching_up(), "handed over to the window");
    // Below the store's compaction: 410 (a watch from r1 needs r2, which compaction at r3
    // removed; at r2 it would still be there).
    s.compact(r3);
    match cache
        .watch(WatchOptions {
            resource_version: Some(r1),
            ..Default::default()
        })
        .await
    {
        Err(CacheError::Expired(e)) => assert_eq!((e.requested, e.oldest), (r1, r3)),
        other => panic!("{other:?}"),
    }
    // Without catch-up, the apiserver's answer: 410 below the window.
    let mut c = config();
    c.catch_up = None;
    let (s, cache) = started(c).await;
    let r1 = create(&s, "ns", "a");
    for i in 0..10 {
        create(&s, "ns", &format!("x{i}"));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    match cache
        .watch(WatchOptions {
            resource_version: Some(r1),
            ..Default::default()
        })
        .await
    {
        Err(CacheError::Expired(e)) => assert_eq!(e.requested, r1),
        other => panic!("{other:?}"),
    }
    // A revision ahead of the cache starts at once (see the test below), as the apiserver's.
    let future = Revision::new(s.revision().get() + 50);
    let ahead = cache
        .watch(WatchOptions {
            resource_version: Some(future),
            ..Default::default()
        })
        .await;
    assert!(ahead.is_ok(), "{ahead:?}");
}

#[tokio::test]
async fn a_watch_from_a_revision_ahead_of_the_cache_starts_at_once() {
    let (s, cache) = started(config()).await;
    create(&s, "ns", "a");
    cache.list(&ListOptions::default()).await.unwrap();
    let ahead = Revision::new(cache.revision().get() + 2);
    let opts = WatchOptions {
        resource_version: Some(ahead),
        ..Default::default()
    };
    // No write will bring the cache to `ahead` within the fresh timeout: the watch must not
    // wait for it (it used to end in TooLargeResourceVersion).
    let mut w = cache
        .watch(opts)
        .await
        .expect("a watch ahead of the cache starts");
    create(&s, "ns", "b"); // at ahead - 1: not after the requested revision
    create(&s, "ns", "c"); // at ahead: neither
    let d = create(&s, "ns", "d");
    let e = next(&mut w).await;
    assert_eq!(
        (e.kind, e.revision, e.object.unwrap().key().name().to_owned()),
        (EventKind::Added, d, "d".to_owned())
    );
}

#[tokio::test]
async fn send_initial_events_false_sends_none_and_unset_sends_them_only_from_zero_or_unset() {
    let (s, cache) = started(config()).await;
    create(&s, "ns", "a");
    let none = |rv, send| WatchOptions {
        resource_version: rv,
        send_initial_events: send,
        ..Default::default()
    };
    for (rv, send) in [(None, Some(false)), (rv(0), Some(false))] {
        let mut w = cache.watch(none(rv, send)).await.unwrap();
        let b = create(&s, "ns", &format!("b{}", cache.revision()));
        let e = next(&mut w).await;
        assert_eq!(
            (e.kind, e.revision),
            (EventKind::Added, b),
            "{rv:?} {send:?}: no initial events"
        );
    }
    // Unset, from "0": the state first (no end bookmark), then live.
    let mut w = cache.watch(none(rv(0), None)).await.unwrap();
    let first = next(&mut w).await;
    assert_eq!(
        (first.kind, first.object.unwrap().key().name().to_owned()),
        (EventKind::Added, "a".to_owned())
    );
}

/// Initial events look at no more than a bounded number of candidates per poll: a selector
/// that matches one object in thousands yields to the executor instead of scanning them all
/// in one poll, and an indexed field's initial events look at that value's objects only.
#[tokio::test]
async fn initial_events_yield_while_they_scan_and_use_the_index() {
    let (s, cache) = started(config()).await;
    // More pods than one poll's budget (512 candidates, 64 under Miri) several times over.
    let (pods, budget) = if cfg!(miri) { (200, 64) } else { (2000, 512) };
    for i in 0..pods {
        let node = if i == 1234 % pods { "lone" } else { "busy" };
        s.create(
            &format!("pods/ns/p{i:04}"),
            text_pod("ns", &format!("p{i:04}"), "web", node),
        )
        .unwrap();
    }
    s.create("pods/ns/special", text_pod("ns", "special", "rare", "busy"))
        .unwrap();
    let waker = Arc::new(CountingWaker::default());
    let waker_ref = std::task::Waker::from(Arc::clone(&waker));
    let mut cx = std::task::Context::from_waker(&waker_ref);
    let initial = |filter: Filter| WatchOptions {
        resource_version: None,
        send_initial_events: Some(true),
        allow_bookmarks: true,
        filter,
    };
    // By label: every pod is a candidate; one matches, the last.
    let mut w = cache
        .watch(initial(Filter::parse(None, "app=rare", "").unwrap()))
        .await
        .unwrap();
    let mut pendings = 0;
    let got = loop {
        match w.poll_next_with(&mut cx, |d| (d.kind, d.object.map(|o| o.key().to_string()))) {
            std::task::Poll::Pending => pendings += 1,
            std::task::Poll::Ready(e) => break e.unwrap().unwrap(),
        }
    };
    assert_eq!(got, (EventKind::Added, Some("ns/special".to_owned())));
    assert!(
        pendings >= pods / budget,
        "yielded {pendings} times over {pods} candidates"
    );
    assert_eq!(waker.count(), pendings, "each yield woke the task to come back");
    // By the indexed field: the one pod on its node, at once.
    let mut w = cache
        .watch(initial(Filter::parse(None, "", "spec.nodeName=lone").unwrap()))
        .await
        .unwrap();
    match w.poll_next_with(&mut cx, |d| d.object.map(|o| o.key().to_string())) {
        std::task::Poll::Ready(Some(Ok(key))) => assert_eq!(key, Some(format!("ns/p{:04}", 1234 % pods))),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn send_initial_events_ends_with_an_annotated_bookmark_then_goes_live() {
    let (s, cache) = started(config()).await;
    create(&s, "a", "1");
    create(&s, "b", "1");
    create(&s, "b", "2");
    // rv unset: the initial state comes from a consistent read, so it holds the writes above.
    let opts = WatchOptions {
        resource_version: None,
        send_initial_events: Some(true),
        allow_bookmarks: true,
        filter: Filter::everything().in_namespace("b"),
    };
    let mut w = cache.watch(opts).await.unwrap();
    let mut initial = Vec::new();
    let end = loop {
        let e = next(&mut w).await;
        if e.kind == EventKind::Bookmark {
            break e;
        }
        assert_eq!(e.kind, EventKind::Added);
        initial.push(e.object.unwrap().key().to_string());
    };
    assert_eq!(initial, vec!["b/1", "b/2"]);
    assert!(end.initial_events_end);
    assert_eq!(end.revision, cache.revision());
    let r = create(&s, "b", "3");
    create(&s, "a", "2");
    let e = next(&mut w).await;
    assert_eq!(
        (e.kind, e.revision, e.initial_events_end),
        (EventKind::Added, r, false)
    );
}

#[tokio::test]
async fn filtered_initial_events_report_exactly_the_selected_objects_as_remaining() {
    let (s, cache) = started(config()).await;
    for (ns, name, app) in [
        ("a", "1", "web"),
        ("a", "2", "db"),
        ("a", "3", "web"),
        ("b", "1", "web"),
    ] {
        s.create(&format!("pods/{ns}/{name}"), text_pod(ns, name, app, "n1"))
            .unwrap();
    }
    let opts = WatchOptions {
        resource_version: None,
        send_initial_events: Some(true),
        filter: Filter::parse(Some("a"), "app=web", "").unwrap(),
        ..Default::default()
    };
    let mut w = cache.watch(opts).await.unwrap();
    // Two of the three objects in "a" are selected: the count says two, not three.
    assert_eq!(w.initial_remaining(), 2);
    assert_eq!(next(&mut w).await.object.unwrap().key().to_string(), "a/1");
    assert_eq!(w.initial_remaining(), 1);
    assert_eq!(next(&mut w).await.object.unwrap().key().to_string(), "a/3");
    assert_eq!(w.initial_remaining(), 0);
    assert!(next(&mut w).await.initial_events_end);
}

#[tokio::test]
async fn bookmarks_arrive_periodically_even_when_the_resource_is_quiet() {
    let mut c = config();
    c.bookmark_interval = Duration::from_millis(30);
    let (s, cache) = started(c).await;
    let r = create(&s, "ns", "a");
    cache.list(&ListOptions::default()).await.unwrap();
    let mut w = cache
        .watch(WatchOptions {
            resource_version: Some(r),
            allow_bookmarks: true,
            ..Default::default()
        })
        .await
        .unwrap();
    for _ in 0..2 {
        let e = next(&mut w).await;
        assert_eq!(
            (e.kind, e.revision, e.initial_events_end),
            (EventKind::Bookmark, r, false)
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_progress_notification_lets_a_quiet_resource_answer_at_once() {
    let mut c = config();
    c.fresh_timeout = Duration::from_secs(30);
    let (s, cache) = started(c).await;
    create(&s, "ns", "a");
    cache.list(&ListOptions::default()).await.unwrap();
    // Writes elsewhere in the store move its revision; pods stay quiet.
    for i in 0..5 {
        s.create(&format!("configmaps/ns/c{i}"), text_pod("ns", "c", "x", "n"))
            .unwrap();
    }
    let target = s.revision();
    let before = tokio::time::Instant::now();
    let mut w = cache
        .watch(WatchOptions {
            resource_version: rv(0),
            allow_bookmarks: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let list = cache
        .list(&ListOptions {
            resource_version: Some(target),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(list.revision, target);
    let consistent = cache.list(&ListOptions::default()).await.unwrap();
    assert_eq!(consistent.revision, target);
    // The clock is paused: it only moves if something waited on a timer.
    assert!(
        before.elapsed() < Duration::from_secs(30),
        "answered without waiting for the bound"
    );
    // Watchers that asked for bookmarks learn the new revision too.
    let added = next(&mut w).await;
    assert_eq!(added.kind, EventKind::Added);
    let bookmark = next(&mut w).await;
    assert_eq!((bookmark.kind, bookmark.revision), (EventKind::Bookmark, target));
}

/// The "quiet resource" failure (kubernetes #91073): consistent reads of a resource that does
/// not change, while another one churns, must neither use up its history window nor wake its
/// watchers. Before, each read that found the cache behind pushed a bookmark into the ring and
/// woke every parked watcher; after the ring's capacity in such reads a watch from the
/// resource's last revision got 410.
#[tokio::test]
async fn a_quiet_resource_keeps_its_window_and_its_watchers_sleep_through_consistent_reads() {
    let (s, cache) = started(config()).await;
    let old = create(&s, "ns", "a");
    cache.list(&ListOptions::default()).await.unwrap();
    let waker = Arc::new(CountingWaker::default());
    let waker_ref = std::task::Waker::from(Arc::clone(&waker));
    let mut cx = std::task::Context::from_waker(&waker_ref);
    let mut parked = Vec::new();
    for filter in [
        Filter::everything(),
        Filter::everything().in_namespace("ns"),
        Filter::parse(None, "", "spec.nodeName=n1").unwrap(),
        Filter::parse(None, "", "metadata.name=a").unwrap(),
    ] {
        let mut w = cache
            .watch(WatchOptions {
                resource_version: Some(old),
                allow_bookmarks: false,
                filter,
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(w.poll_next_with(&mut cx, |_| ()).is_pending());
        parked.push(w);
    }
    let wakeups = cache.watch_wakeups();
    let reads = if cfg!(miri) { 40 } else { 1000 };
    for i in 0..reads {
        // Another resource in the same store churns: the store's revision moves on.
        s.create(&format!("configmaps/ns/c{i}"), text_pod("ns", "c", "x", "n"))
            .unwrap();
        let list = cache.list(&ListOptions::default()).await.unwrap();
        assert_eq!(
            list.revision,
            s.revision(),
            "a consistent read is at the store's revision"
        );
        assert_eq!(list.items.count(), 1);
    }
    assert_eq!(cache.revision(), Revision::new(old.get() + reads));
    assert_eq!(cache.watch_wakeups(), wakeups, "no parked watcher was woken");
    assert_eq!(waker.count(), 0);
    assert_eq!(cache.history_len(), 1, "progress took no history slot");
    assert!(cache.oldest_watch_revision() < old);
    cache
        .watch(WatchOptions {
            resource_version: Some(old),
            ..Default::default()
        })
        .await
        .expect("a watch from the quiet resource's last revision still starts");
}

#[tokio::test]
async fn requests_wait_for_the_first_list_then_get_not_ready() {
    let s = MemorySource::new();
    s.set_available(false);
    let cache = Cache::new(s.clone(), Arc::new(TextCodec), config()).unwrap();
    assert!(!cache.is_ready());
    let err = cache
        .list(&ListOptions {
            resource_version: rv(0),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        err,
        CacheError::NotReady {
            retry_after: Duration::from_secs(1)
        }
    );
    assert!(matches!(
        cache.watch(WatchOptions::default()).await,
        Err(CacheError::NotReady { .. })
    ));
    s.set_available(true);
    let list = cache
        .list(&ListOptions {
            resource_version: rv(0),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(list.items.len(), 0);
    assert!(cache.is_ready());
}

#[tokio::test]
async fn after_compaction_the_cache_relists_expires_old_watchers_and_serves_new_ones() {
    let (s, cache) = started(config()).await;
    create(&s, "ns", "a");
    let list = cache.list(&ListOptions::default()).await.unwrap();
    let mut old = cache
        .watch(WatchOptions {
            resource_version: Some(list.revision),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(cache.stats().lists.load(std::sync::atomic::Ordering::Relaxed), 1);
    // Partition the cache's watch, write and compact past it, heal.
    s.pause_watches(true);
    let b = create(&s, "ns", "b");
    s.delete("pods/ns/a", None).unwrap();
    s.compact(s.revision());
    s.pause_watches(false);
    // The cache recovers: the consistent read sees the new state.
    let list = cache.list(&ListOptions::default()).await.unwrap();
    assert_eq!(names(list), vec!["ns/b"]);
    assert!(cache.stats().lists.load(std::sync::atomic::Ordering::Relaxed) >= 2);
    // The old watcher's cursor cannot be honoured: Expired, then the end.
    let end = tokio::time::timeout(Duration::from_secs(10), old.next())
        .await
        .unwrap();
    match end {
        Some(Err(Expired { requested, oldest })) => assert!(requested < b && oldest >= b),
        other => panic!("{other:?}"),
    }
    assert!(old.next().await.is_none());
    // A new watcher from the new state misses nothing and repeats nothing.
    let now = cache.revision();
    let mut fresh = cache
        .watch(WatchOptions {
            resource_version: Some(now),
            ..Default::default()
        })
        .await
        .unwrap();
    let c = create(&s, "ns", "c");
    let d = create(&s, "ns", "d");
    assert_eq!(next(&mut fresh).await.revision, c);
    assert_eq!(next(&mut fresh).await.revision, d);
    assert!(cache.check_consistency().await.unwrap().is_consistent());
}

#[tokio::test]
async fn a_broken_watch_is_reopened_without_a_relist_and_without_losing_events() {
    let (s, cache) = started(config()).await;
    let r = create(&s, "ns", "a");
    cache.list(&ListOptions::default()).await.unwrap();
    let mut w = cache
        .watch(WatchOptions {
            resource_version: Some(r),
            ..Default::default()
        })
        .await
        .unwrap();
    s.pause_watches(true);
    let b = create(&s, "ns", "b");
    s.pause_watches(false);
    let c = create(&s, "ns", "c");
    assert_eq!(next(&mut w).await.revision, b);
    assert_eq!(next(&mut w).await.revision, c);
    assert_eq!(cache.stats().lists.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[tokio::test]
async fn the_consistency_check_compares_cache_and_source_at_one_revision() {
    let (s, cache) = started(config()).await;
    for i in 0..6 {
        create(&s, "ns", &format!("p{i}"));
    }
    s.update("pods/ns/p1", text_pod("ns", "p1", "x", "n"), None)
        .unwrap();
    s.delete("pods/ns/p2", None).unwrap();
    cache.list(&ListOptions::default()).await.unwrap();
    let c = cache.check_consistency().await.unwrap();
    assert!(c.is_consistent(), "{c:?}");
    assert_eq!(c.revision, s.revision());
}

#[tokio::test]
async fn a_value_that_does_not_decode_is_a_corrupt_object_reads_name_and_never_skip_or_serve_stale() {
    let (s, cache) = started(config()).await;
    let r = create(&s, "ns", "good");
    let was = create(&s, "ns", "turned");
    let mut watch = cache
        .watch(WatchOptions {
            resource_version: Some(was),
            filter: Filter::parse(Some("ns"), "", "").unwrap(),
            ..Default::default()
        })
        .await
        .unwrap();
    // A kubelet-like watcher, selecting by a field: a corrupt object has none it can read.
    let mut on_node = cache
        .watch(WatchOptions {
            resource_version: Some(was),
            filter: Filter::parse(None, "", "spec.nodeName=n1").unwrap(),
            ..Default::default()
        })
        .await
        .unwrap();
    s.create("pods/ns/bad", bytes::Bytes::from_static(b"\xff\xfe"))
        .unwrap();
    s.create("pods/ns/liar", text_pod("other", "liar", "x", "n"))
        .unwrap();
    // A value that decoded once and no longer does is not served as what it was.
    let turned = s
        .update("pods/ns/turned", bytes::Bytes::from_static(b"not json"), None)
        .unwrap();
    let corrupt_keys = |e: CacheError| match e {
        CacheError::CorruptObjects { objects, more } => {
            assert!(!more);
            objects.into_iter().map(|c| c.key).collect::<Vec<_>>()
        }
        other => panic!("not a corrupt-objects error: {other:?}"),
    };
    let err = cache.list(&ListOptions::default()).await.unwrap_err();
    assert_eq!(
        corrupt_keys(err),
        ["pods/ns/bad", "pods/ns/liar", "pods/ns/turned"]
    );
    match cache
        .get(&watchcache_core::ObjectKey::new("ns", "turned"), None)
        .await
    {
        Err(CacheError::CorruptObject(c)) => {
            assert_eq!((c.key.as_str(), c.revision), ("pods/ns/turned", turned))
        }
        other => panic!("{other:?}"),
    }
    // Only reads that include one fail: another namespace, another name, or a selector on
    // labels (which a corrupt object has none of) read on.
    let good = cache
        .get(&watchcache_core::ObjectKey::new("ns", "good"), None)
        .await
        .unwrap();
    assert_eq!(good.0.map(|o| o.revision()), Some(r));
    let elsewhere = ListOptions {
        filter: Filter::parse(Some("other"), "", "").unwrap(),
        ..Default::default()
    };
    assert!(names(cache.list(&elsewhere).await.unwrap()).is_empty());
    let by_label = ListOptions {
        filter: Filter::parse(None, "app=web", "").unwrap(),
        ..Default::default()
    };
    assert_eq!(names(cache.list(&by_label).await.unwrap()), ["ns/good"]);
    let by_name = ListOptions {
        filter: Filter::parse(None, "", "metadata.name=bad").unwrap(),
        ..Default::default()
    };
    assert_eq!(
        corrupt_keys(cache.list(&by_name).await.unwrap_err()),
        ["pods/ns/bad"]
    );
    // A watch of the namespace is told of each: the corrupt object is delivered (the server
    // frames it as an ERROR naming its key), never skipped.
    let mut delivered = Vec::new();
    for _ in 0..3 {
        let e = next(&mut watch).await;
        let o = e.object.unwrap();
        delivered.push((e.kind, o.key().name().to_owned(), o.is_corrupt()));
    }
    assert_eq!(
        delivered,
        [
            (EventKind::Added, "bad".to_owned(), true),
            (EventKind::Added, "liar".to_owned(), true),
            (EventKind::Modified, "turned".to_owned(), true),
        ]
    );
    // The kubelet-like watcher had `turned`: it is told, as the others are, not told that the
    // object was deleted (it was not); it never had the others.
    let e = next(&mut on_node).await;
    let o = e.object.unwrap();
    assert_eq!(
        (e.kind, o.key().name(), o.is_corrupt()),
        (EventKind::Modified, "turned", true)
    );
    // Deleted or written anew, it is an object like any other again.
    s.delete("pods/ns/bad", None).unwrap();
    s.delete("pods/ns/liar", None).unwrap();
    s.update("pods/ns/turned", text_pod("ns", "turned", "web", "n1"), None)
        .unwrap();
    assert_eq!(
        names(cache.list(&ListOptions::default()).await.unwrap()),
        ["ns/good", "ns/turned"]
    );
    assert_eq!(
        cache
            .stats()
            .decode_errors
            .load(std::sync::atomic::Ordering::Relaxed),
        3
    );
}

#[tokio::test]
async fn a_consistent_read_fails_cleanly_when_the_source_is_down() {
    let (s, cache) = started(config()).await;
    create(&s, "ns", "a");
    cache.list(&ListOptions::default()).await.unwrap();
    s.set_available(false);
    assert!(matches!(
        cache.list(&ListOptions::default()).await,
        Err(CacheError::Source(SourceError::Unavailable(_)))
    ));
    // Reads that need no consistent revision are still served from the cache.
    assert_eq!(
        cache
            .list(&ListOptions {
                resource_version: rv(0),
                ..Default::default()
            })
            .await
            .unwrap()
            .items
            .len(),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn events_older_than_the_freshness_window_are_released_beyond_the_lower_bound() {
    let mut c = config();
    c.capacity = 64;
    c.retain_min_events = 4;
    c.fresh_window = Duration::from_secs(75);
    c.bookmark_interval = Duration::from_secs(3600);
    // The window's own floor is what is tested: no catch-up from the store below it.
    c.catch_up = None;
    let (s, cache) = started(c).await;
    // An old version that only history holds: created, then replaced at once.
    let mut revs = vec![create(&s, "ns", "p00")];
    let (old, _) = cache
        .get(&watchcache_core::ObjectKey::new("ns", "p00"), None)
        .await
        .unwrap();
    let old = old.unwrap();
    revs.push(
        s.update("pods/ns/p00", text_pod("ns", "p00", "api", "n2"), None)
            .unwrap(),
    );
    for i in 1..20 {
        revs.push(create(&s, "ns", &format!("p{i:02}")));
    }
    let list = cache.list(&ListOptions::default()).await.unwrap();
    assert_eq!(
        cache.oldest_revision(),
        Revision::new(1),
        "all 21 events are young"
    );
    assert!(Arc::strong_count(&old) > 1, "history holds the old version");
    drop(list);

    tokio::time::sleep(Duration::from_secs(90)).await;
    // The newest 4 events are kept whatever their age: the floor is the 17th event's revision.
    let floor = revs[16];
    assert_eq!(cache.oldest_revision(), floor);
    // Released: only the store can answer for it now.
    let reads = source_reads(&cache);
    cache.list(&exact(revs[10])).await.unwrap();
    assert_eq!(source_reads(&cache), reads + 1);
    assert_eq!(cache.list(&exact(floor)).await.unwrap().items.len(), 16);
    assert!(matches!(
        cache
            .watch(WatchOptions {
                resource_version: Some(revs[10]),
                ..Default::default()
            })
            .await,
        Err(CacheError::Expired(_))
    ));
    let mut w = cache
        .watch(WatchOptions {
            resource_version: Some(floor),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(next(&mut w).await.revision, revs[17]);
    // The released entries' memory returns once the epoch moves on.
    for _ in 0..10_000 {
        if Arc::strong_count(&old) == 1 {
            break;
        }
        crossbeam_epoch::pin().flush();
        tokio::task::yield_now().await;
    }
    assert_eq!(
        Arc::strong_count(&old),
        1,
        "nothing but this test holds the released version"
    );
}

#[test]
fn cache_futures_are_send_so_multi_threaded_servers_can_hold_them() {
    fn is_send<T: Send>(_: &T) {}
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let cache = Cache::new(MemorySource::new(), Arc::new(TextCodec), config()).unwrap();
    is_send(&cache.list(&ListOptions::default()));
    is_send(&cache.watch(WatchOptions::default()));
    is_send(&cache.get(&watchcache_core::ObjectKey::new("a", "b"), None));
    is_send(&cache.check_consistency());
}

async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out waiting until {what}");
}

#[tokio::test]
async fn a_panicking_reflector_is_replaced_its_watchers_end_and_the_cache_is_not_ready_meanwhile() {
    let s = MemorySource::new();
    let cache = Cache::new(s.clone(), Arc::new(PanicsOnBoom::always()), config()).unwrap();
    create(&s, "ns", "a");
    cache.list(&ListOptions::default()).await.unwrap();
    assert!(cache.is_ready());
    let mut w = cache
        .watch(WatchOptions {
            resource_version: Some(cache.revision()),
            ..Default::default()
        })
        .await
        .unwrap();
    let boom = create(&s, "ns", "boom");
    // The watch does not hang: the dead reflector's hub is closed and the watcher expires.
    let end = tokio::time::timeout(Duration::from_secs(10), w.next())
        .await
        .expect("the watch ends rather than waiting forever");
    assert!(matches!(end, Some(Err(_)) | None), "{end:?}");
    until("the cache reports not ready", || !cache.is_ready()).await;
    assert!(
        cache
            .stats()
            .reflector_restarts
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    // Each replacement lists, meets the same object and panics again; once it is gone, the
    // next one lists cleanly and the cache serves again.
    s.delete("pods/ns/boom", Some(boom)).unwrap();
    until("the cache is ready again", || cache.is_ready()).await;
    let names = names(cache.list(&ListOptions::default()).await.unwrap());
    assert_eq!(names, vec!["ns/a"]);
}

#[tokio::test]
async fn a_paged_lists_snapshot_outlives_a_burst_that_laps_the_history_window() {
    let mut c = config();
    c.snapshot_retention = Duration::from_secs(75);
    // Watches from below the window are 410 here, as the apiserver's: no catch-up.
    c.catch_up = None;
    let (s, cache) = started(c).await;
    for name in ["a", "b", "c"] {
        create(&s, "ns", name);
    }
    let first = cache
        .list(&ListOptions {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap();
    let (at, token) = (first.revision, first.continue_token.clone().unwrap());
    // Twenty writes through a window of 8: the ring laps, watches from `at` expire...
    for i in 0..20 {
        create(&s, "ns", &format!("z{i:02}"));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    let watch = cache
        .watch(WatchOptions {
            resource_version: Some(at),
            ..Default::default()
        })
        .await;
    assert!(matches!(watch, Err(CacheError::Expired(_))), "{watch:?}");
    // ...but the LIST's next page still reads its own snapshot.
    let rest = cache
        .list(&ListOptions {
            continue_token: Some(token),
            ..Default::default()
        })
        .await
        .expect("the snapshot is kept for the retention period");
    assert_eq!(rest.revision, at);
    assert_eq!(names(rest), vec!["ns/b", "ns/c"]);
    // Not because every state since was kept: the one snapshot the LIST reads is pinned.
    assert!(cache.oldest_revision() > at && cache.oldest_watch_revision() > at);
    assert_eq!(
        cache
            .stats()
            .pinned_snapshots
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[tokio::test]
async fn history_is_bounded_by_bytes_whatever_its_count_or_age() {
    let mut c = config();
    c.capacity = 1024;
    c.snapshot_retention = Duration::from_secs(3600);
    c.fresh_window = Duration::from_secs(3600);
    let (s, cache) = started(c.clone()).await;
    let first = create(&s, "ns", "p");
    let mut last = first;
    for i in 0..200 {
        last = s
            .update("pods/ns/p", text_pod("ns", "p", &format!("v{i}"), "n1"), None)
            .unwrap();
    }
    cache.list(&ListOptions::default()).await.unwrap();
    let unbounded = cache
        .stats()
        .history_bytes
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        unbounded > 4096,
        "200 superseded versions held: {unbounded} bytes"
    );
    assert!(
        cache.list(&exact(first)).await.is_ok(),
        "within count, age and bytes"
    );

    // The same writes with a quarter of what they hold for history (each step costs the
    // version it superseded, a few hundred bytes here): the oldest go, whatever count and age
    // allow.
    let mut bounded = c;
    bounded.history_bytes = (unbounded / 4) as usize;
    let (s, cache) = started(bounded).await;
    let first = create(&s, "ns", "p");
    for i in 0..200 {
        last = s
            .update("pods/ns/p", text_pod("ns", "p", &format!("v{i}"), "n1"), None)
            .unwrap();
    }
    cache.list(&ListOptions::default()).await.unwrap();
    let held = cache
        .stats()
        .history_bytes
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(held <= unbounded / 4, "{held} of {unbounded} bytes held");
    assert!(cache.oldest_revision() > first, "the oldest versions went");
    assert!(cache.oldest_watch_revision() > first && cache.oldest_watch_revision() < last);
}

#[tokio::test(start_paused = true)]
async fn every_key_a_write_changes_at_one_revision_is_applied_and_delivered_together() {
    use watchcache_core::source::memory::TxnWrite;
    let mut c = config();
    c.capacity = 64;
    let (s, cache) = started(c).await;
    for name in ["a", "b", "c"] {
        create(&s, "ns", name);
    }
    let before = cache.list(&ListOptions::default()).await.unwrap().revision;
    let mut watch = cache
        .watch(WatchOptions {
            resource_version: Some(before),
            ..Default::default()
        })
        .await
        .unwrap();
    // A prefix delete: three keys at one revision.
    let (deleted, n) = s.delete_prefix("pods/ns/").unwrap();
    assert_eq!(n, 3);
    assert!(
        names(cache.list(&ListOptions::default()).await.unwrap()).is_empty(),
        "none is left behind"
    );
    for name in ["a", "b", "c"] {
        let e = next(&mut watch).await;
        assert_eq!((e.kind, e.revision), (EventKind::Deleted, deleted));
        assert_eq!(e.object.unwrap().key().name(), name);
    }
    // A transaction that creates two keys: both are there, at its revision.
    let created = s
        .txn(vec![
            TxnWrite::Put {
                key: "pods/ns/x".into(),
                value: text_pod("ns", "x", "web", "n1"),
            },
            TxnWrite::Put {
                key: "pods/ns/y".into(),
                value: text_pod("ns", "y", "web", "n2"),
            },
        ])
        .unwrap();
    let (y, at) = cache
        .get(&watchcache_core::ObjectKey::new("ns", "y"), None)
        .await
        .unwrap();
    assert_eq!((y.map(|o| o.revision()), at), (Some(created), created));
    for name in ["x", "y"] {
        let e = next(&mut watch).await;
        assert_eq!(
            (e.kind, e.revision, e.object.unwrap().key().name().to_owned()),
            (EventKind::Added, created, name.to_owned())
        );
    }
    // A lease holding three keys expires: they go together too.
    let lease = s.grant_lease(Duration::from_secs(3600)).unwrap();
    for name in ["e1", "e2", "e3"] {
        s.create_with_lease(
            &format!("pods/ns/{name}"),
            text_pod("ns", name, "web", "n1"),
            Some(lease),
        )
        .unwrap();
    }
    for _ in 0..3 {
        next(&mut watch).await;
    }
    tokio::time::advance(Duration::from_secs(3601)).await;
    assert_eq!(s.expire_leases(), 1);
    let expired = s.revision();
    let list = cache.list(&ListOptions::default()).await.unwrap();
    assert_eq!(names(list), vec!["ns/x", "ns/y"]);
    for name in ["e1", "e2", "e3"] {
        let e = next(&mut watch).await;
        assert_eq!(
            (e.kind, e.revision, e.object.unwrap().key().name().to_owned()),
            (EventKind::Deleted, expired, name.to_owned())
        );
    }
    // The states between are made on demand from the window, each whole.
    assert_eq!(
        names(cache.list(&exact(before)).await.unwrap()),
        vec!["ns/a", "ns/b", "ns/c"]
    );
    assert!(names(cache.list(&exact(deleted)).await.unwrap()).is_empty());
    assert_eq!(
        names(cache.list(&exact(created)).await.unwrap()),
        vec!["ns/x", "ns/y"]
    );
    assert_eq!(
        names(
            cache
                .list(&exact(Revision::new(expired.get() - 1)))
                .await
                .unwrap()
        ),
        vec!["ns/e1", "ns/e2", "ns/e3", "ns/x", "ns/y"]
    );
}

#[tokio::test]
async fn a_paged_list_the_source_answers_pins_nothing_and_reads_the_source_for_each_page() {
    let mut c = config();
    c.snapshot_retention = Duration::from_secs(75);
    // Watches from below the window are 410 here, as the apiserver's: no catch-up.
    c.catch_up = None;
    let (s, cache) = started(c).await;
    for name in ["a", "b", "c"] {
        create(&s, "ns", name);
    }
    let at = s.revision();
    // Twenty writes through a window of 8: the state at `at` is the source's alone.
    for i in 0..20 {
        create(&s, "ns", &format!("z{i:02}"));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    assert!(cache.oldest_revision() > at);
    let page = |token: Option<String>| ListOptions {
        resource_version: token.is_none().then_some(at),
        resource_version_match: token.is_none().then_some(ResourceVersionMatch::Exact),
        limit: Some(1),
        continue_token: token,
        ..Default::default()
    };
    let reads = || {
        cache
            .stats()
            .source_reads
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let before = reads();
    let mut names_seen = Vec::new();
    let mut token = None;
    loop {
        let list = cache.list(&page(token.take())).await.unwrap();
        assert_eq!(list.revision, at);
        token = list.continue_token.clone();
        names_seen.extend(names(list));
        if token.is_none() {
            break;
        }
    }
    assert_eq!(names_seen, ["ns/a", "ns/b", "ns/c"]);
    // A copy of the whole resource per LIST, kept for its pages, would be a copy per client:
    // none is kept; each page read the source.
    assert_eq!(
        cache
            .stats()
            .pinned_snapshots
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert_eq!(reads() - before, 3);
}

#[tokio::test(start_paused = true)]
async fn a_pinned_snapshot_goes_once_the_store_compacted_past_it() {
    let mut c = config();
    c.snapshot_retention = Duration::from_secs(3600);
    c.fresh_window = Duration::from_secs(8);
    let (s, cache) = started(c).await;
    for name in ["a", "b", "c"] {
        create(&s, "ns", name);
    }
    let first = cache
        .list(&ListOptions {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap();
    let pinned = || {
        cache
            .stats()
            .pinned_snapshots
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert_eq!(pinned(), 1);
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(pinned(), 1, "kept for its next pages");
    // Compacted past it: its next page is 410 whatever the cache keeps, so it is not kept.
    create(&s, "ns", "d");
    s.compact(s.revision());
    tokio::time::advance(Duration::from_secs(2)).await;
    tokio::task::yield_now().await;
    assert_eq!(pinned(), 0);
    let next = cache
        .list(&ListOptions {
            continue_token: first.continue_token,
            ..Default::default()
        })
        .await;
    assert!(matches!(next, Err(CacheError::ContinueExpired(_))), "{next:?}");
}
