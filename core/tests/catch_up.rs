//! Catch-up from the store: a watcher the writer laps, or a watch that starts below the
//! history window, reads the store's retained history instead of ending with 410, and then
//! goes on from the window; only a revision the store compacted is 410.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{PanicsOnBoom, TextCodec, text_pod};
use futures_util::{FutureExt, StreamExt};
use watchcache_core::source::memory::TxnWrite;
use watchcache_core::{
    Cache, CacheConfig, CacheWatch, CatchUpReads, EventKind, Filter, ListOptions, MemorySource, Revision,
    Source, SourceChange, SourceError, SourceEvent, SourceItem, SourceList, WatchEvent, WatchOptions,
};

fn config() -> CacheConfig {
    let mut c = CacheConfig::new("pods", "pods/");
    c.capacity = 4;
    c.retain_min_events = 4;
    c.fresh_timeout = Duration::from_millis(300);
    c.ready_timeout = Duration::from_millis(300);
    c.snapshot_retention = Duration::ZERO;
    c.bookmark_interval = Duration::from_secs(3600);
    c
}

fn create(s: &MemorySource, name: &str, app: &str) -> Revision {
    s.create(&format!("pods/ns/{name}"), text_pod("ns", name, app, "n1"))
        .unwrap()
}

async fn started(config: CacheConfig) -> (MemorySource, Cache<MemorySource>) {
    let s = MemorySource::new();
    let cache = Cache::new(s.clone(), Arc::new(TextCodec), config).unwrap();
    cache
        .list(&ListOptions {
            resource_version: Some(Revision::ZERO),
            ..Default::default()
        })
        .await
        .unwrap();
    (s, cache)
}

/// A watch from the cache's revision now (no initial events).
async fn watch_from_now<S: Source>(cache: &Cache<S>, filter: Filter) -> CacheWatch {
    cache
        .watch(WatchOptions {
            resource_version: Some(cache.revision()),
            filter,
            ..Default::default()
        })
        .await
        .unwrap()
}

async fn next(w: &mut CacheWatch) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .expect("an event in time")
        .expect("the watch goes on")
        .expect("no 410")
}

/// Whether the watch delivers nothing for `wait`.
async fn quiet(w: &mut CacheWatch, wait: Duration) -> bool {
    tokio::time::timeout(wait, w.next()).await.is_err()
}

#[tokio::test]
async fn a_lapped_watcher_keeps_its_stream_gapless_and_goes_back_to_the_window() {
    let (s, cache) = started(config()).await;
    let mut all = watch_from_now(&cache, Filter::everything()).await;
    let web = Filter::parse(None, "app=web", "").unwrap();
    let mut selective = watch_from_now(&cache, web).await;
    // Fifty writes through a window of four, neither watcher reading: both are lapped.
    let mut revs = Vec::new();
    for i in 0..50 {
        let app = if i % 3 == 0 { "web" } else { "db" };
        revs.push((create(&s, &format!("p{i:02}"), app), app));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    for (rev, _) in &revs {
        let e = next(&mut all).await;
        assert_eq!((e.kind, e.revision), (EventKind::Added, *rev));
    }
    for (rev, _) in revs.iter().filter(|(_, app)| *app == "web") {
        let e = next(&mut selective).await;
        assert_eq!((e.kind, e.revision), (EventKind::Added, *rev));
    }
    assert!(cache.stats().catch_ups.load(Ordering::Relaxed) >= 2);
    assert!(
        cache.stats().catch_ups_lapped.load(Ordering::Relaxed) >= 2,
        "counted as lapped, not as starts below the window"
    );
    // Then live from the window, nothing twice.
    let live = create(&s, "live", "web");
    for w in [&mut all, &mut selective] {
        let e = next(w).await;
        assert_eq!((e.kind, e.revision), (EventKind::Added, live));
        assert!(!w.is_catching_up(), "handed over to the window");
        assert!(quiet(w, Duration::from_millis(50)).await);
    }
    assert!(cache.stats().catch_up_handovers.load(Ordering::Relaxed) >= 2);
}

#[tokio::test]
async fn a_lap_inside_a_revision_resumes_within_it() {
    let mut c = config();
    c.capacity = 8;
    c.retain_min_events = 8;
    let (s, cache) = started(c).await;
    let mut w = watch_from_now(&cache, Filter::everything()).await;
    // One transaction of six keys, then a client that reads two of its events.
    let writes = (0..6)
        .map(|i| TxnWrite::Put {
            key: format!("pods/ns/t{i}"),
            value: text_pod("ns", &format!("t{i}"), "web", "n1"),
        })
        .collect();
    let txn = s.txn(writes).unwrap();
    for i in 0..2 {
        let e = next(&mut w).await;
        assert_eq!(
            (e.revision, e.object.unwrap().key().name()),
            (txn, format!("t{i}").as_str())
        );
    }
    // Twenty more writes lap it in the middle of the transaction.
    let mut revs = Vec::new();
    for i in 0..20 {
        revs.push(create(&s, &format!("p{i:02}"), "web"));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    for i in 2..6 {
        let e = next(&mut w).await;
        assert_eq!(
            (e.revision, e.object.unwrap().key().name()),
            (txn, format!("t{i}").as_str())
        );
    }
    for rev in revs {
        assert_eq!(next(&mut w).await.revision, rev);
    }
    assert_eq!(cache.stats().catch_ups.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn compaction_still_ends_a_lapped_watcher_with_410() {
    let (s, cache) = started(config()).await;
    let mut w = watch_from_now(&cache, Filter::everything()).await;
    let start = w.position();
    let mut last = start;
    for i in 0..20 {
        last = create(&s, &format!("p{i:02}"), "web");
    }
    s.compact(last);
    cache.list(&ListOptions::default()).await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .expect("an answer in time");
    match end {
        Some(Err(e)) => assert_eq!(e.requested, start),
        other => panic!("expected 410, got {other:?}"),
    }
    assert!(w.next().await.is_none(), "the watch ended");
}

/// Two watchers lapped a revision apart on a cache whose catch-ups read with `reads`: the one
/// below cannot share a read of the one above. Returns the store, the cache, the watcher below,
/// the one above (its catch-up started: it has its first event, `revs[1]`), and every
/// revision written (`revs[0]` only the one below needs).
async fn two_a_revision_apart(
    reads: &CatchUpReads,
) -> (
    MemorySource,
    Cache<MemorySource>,
    CacheWatch,
    CacheWatch,
    Vec<Revision>,
) {
    let mut c = config();
    c.catch_up = Some(reads.clone());
    let (s, cache) = started(c).await;
    let below = watch_from_now(&cache, Filter::everything()).await;
    let mut revs = vec![create(&s, "p", "web")];
    cache.list(&ListOptions::default()).await.unwrap();
    let mut above = watch_from_now(&cache, Filter::everything()).await;
    for i in 0..20 {
        revs.push(create(&s, &format!("p{i:02}"), "web"));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    assert_eq!(next(&mut above).await.revision, revs[1]);
    (s, cache, below, above, revs)
}

#[tokio::test]
async fn catch_up_reads_are_bounded_and_the_next_in_line_goes_when_one_ends() {
    let reads = CatchUpReads::new(1);
    // The second stands a revision below the first: the first's read cannot serve it.
    let (s, _cache, mut second, first, revs) = two_a_revision_apart(&reads).await;
    assert_eq!(reads.in_use(), 1);
    // In line behind the first: nothing yet.
    assert!(quiet(&mut second, Duration::from_millis(100)).await);
    assert!(second.is_catching_up());
    drop(first);
    for rev in &revs {
        assert_eq!(next(&mut second).await.revision, *rev);
    }
    // Handed over: the read is returned.
    let live = create(&s, "live", "web");
    assert_eq!(next(&mut second).await.revision, live);
    assert_eq!(reads.in_use(), 0);
}

#[tokio::test]
async fn a_catch_up_told_to_wait_in_line_at_most_so_long_ends_with_410_past_it() {
    // The read ahead belongs to a client that stopped reading: it holds it until the server
    // ends its watch or its read's idle time passes (5 s), longer than the next in line may
    // wait here. Told to wait at most 200 ms (by default it waits as long as its watch lasts),
    // the next in line gives up after its wait, as the apiserver would 410 at once.
    let reads = CatchUpReads::new(1).with_queue_wait(Duration::from_millis(200));
    // Next in line stands below the stalled one's read: it cannot share it.
    let (_s, cache, mut next_in_line, _stalled, _) = two_a_revision_apart(&reads).await;
    let start = next_in_line.position();
    let end = tokio::time::timeout(Duration::from_secs(5), next_in_line.next())
        .await
        .expect("an answer in time");
    match end {
        Some(Err(e)) => assert_eq!(e.requested, start),
        other => panic!("expected 410, got {other:?}"),
    }
    assert_eq!(cache.stats().catch_ups_refused.load(Ordering::Relaxed), 1);
    assert_eq!(reads.in_use(), 1, "the stalled watch still holds its read");
}

/// The places go round: a read whose client reads on, but slower than the events come (its
/// read would never end), gives its place to the next in line once its slice is over. Both
/// read every revision once, and neither is refused, however long the wait. (Time is the
/// test's own: the pacing and the slice do not depend on how fast the machine runs.)
#[tokio::test(start_paused = true)]
async fn a_read_gives_its_place_to_the_next_in_line_after_its_slice_and_both_read_on_gaplessly() {
    let reads = CatchUpReads::new(1)
        .with_slice(Duration::from_millis(300))
        .with_read_bytes(1024);
    // Next in line stands below the busy one's read: it cannot share it.
    let (s, cache, mut next_in_line, mut busy, revs) = two_a_revision_apart(&reads).await;
    assert_eq!(reads.in_use(), 1, "the busy one holds the only read");
    // The busy one takes an event every 100 ms (never idle; it reaches the window, four
    // events long, after about 16 of them); the next in line reads as fast as it can.
    let taken = std::cell::Cell::new(1);
    let slow = async {
        for rev in &revs[2..] {
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(next(&mut busy).await.revision, *rev);
            taken.set(taken.get() + 1);
        }
    };
    let fast = async {
        for rev in &revs {
            assert_eq!(next(&mut next_in_line).await.revision, *rev);
        }
        taken.get()
    };
    let ((), taken_meanwhile) = tokio::join!(slow, fast);
    assert!(
        taken_meanwhile < 10,
        "the next in line had the place after the busy one's slice (3 events), not after its \
         hand-over: it had taken {taken_meanwhile}"
    );
    let live = create(&s, "live", "web");
    for w in [&mut next_in_line, &mut busy] {
        assert_eq!(next(w).await.revision, live);
        assert!(!w.is_catching_up());
        assert!(quiet(w, Duration::from_millis(50)).await, "nothing twice");
    }
    let stats = cache.stats();
    assert_eq!(stats.catch_ups_refused.load(Ordering::Relaxed), 0);
    assert!(
        stats.catch_up_reads.load(Ordering::Relaxed) >= 2,
        "the busy one's read was given up"
    );
    assert_eq!(reads.waiting(), 0);
    drop((next_in_line, busy));
    tokio::time::timeout(Duration::from_secs(5), async {
        while reads.in_use() > 0 || stats.catch_up_bytes.load(Ordering::Relaxed) > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the reads end with their readers, holding nothing");
}

#[tokio::test]
async fn a_read_whose_client_stopped_reading_gives_its_place_up_and_its_reader_reads_on_later() {
    // As above, but the stalled read's reader has left what it read untaken for the read's
    // idle time: the read gives its place to the next in line and drops what it holds. The
    // stalled watcher, reading again, goes back in line and goes on from where it stood.
    let reads = CatchUpReads::new(1)
        .with_queue_wait(Duration::from_secs(5))
        .with_idle(Duration::from_millis(200))
        .with_read_bytes(1024);
    let (s, cache, mut next_in_line, mut stalled, revs) = two_a_revision_apart(&reads).await;
    for rev in &revs {
        assert_eq!(
            next(&mut next_in_line).await.revision,
            *rev,
            "not refused: the read was given up"
        );
    }
    for rev in &revs[2..] {
        assert_eq!(next(&mut stalled).await.revision, *rev);
    }
    let live = create(&s, "live", "web");
    for w in [&mut next_in_line, &mut stalled] {
        assert_eq!(next(w).await.revision, live);
        assert!(!w.is_catching_up());
    }
    assert_eq!(cache.stats().catch_ups_refused.load(Ordering::Relaxed), 0);
    assert_eq!(reads.in_use(), 0);
    // Every read is gone, the one given up included: they hold nothing.
    drop((next_in_line, stalled));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(cache.stats().catch_up_bytes.load(Ordering::Relaxed), 0);
}

/// A client that stops reading while in line does not keep the place it is then given: its
/// read starts without it and, untaken, gives the place up after its idle time to the next in
/// line. The stalled one, reading again, goes on from where it stood.
#[tokio::test]
async fn a_catch_up_whose_client_stopped_reading_in_line_keeps_no_place() {
    let reads = CatchUpReads::new(1)
        .with_idle(Duration::from_millis(200))
        .with_slice(Duration::from_secs(600))
        .with_read_bytes(1024);
    let mut c = config();
    c.catch_up = Some(reads.clone());
    let (s, cache) = started(c).await;
    // Three watchers at three positions, lowest last in line: none can join a read of those
    // ahead of it.
    let mut last = watch_from_now(&cache, Filter::everything()).await;
    let mut revs = vec![create(&s, "a", "web")];
    cache.list(&ListOptions::default()).await.unwrap();
    let mut stalled = watch_from_now(&cache, Filter::everything()).await;
    revs.push(create(&s, "b", "web"));
    cache.list(&ListOptions::default()).await.unwrap();
    let mut first = watch_from_now(&cache, Filter::everything()).await;
    for i in 0..20 {
        revs.push(create(&s, &format!("p{i:02}"), "web"));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    // In line in this order: the first has the place; the stalled one is polled once, then
    // not again until the end.
    assert_eq!(next(&mut first).await.revision, revs[2]);
    assert!(quiet(&mut stalled, Duration::from_millis(50)).await);
    assert!(quiet(&mut last, Duration::from_millis(50)).await);
    assert_eq!(reads.waiting(), 2);
    // The first reads to the end and hands over: its place goes to the stalled one.
    for rev in &revs[3..] {
        assert_eq!(next(&mut first).await.revision, *rev);
    }
    let live = create(&s, "live", "web");
    assert_eq!(next(&mut first).await.revision, live);
    assert!(!first.is_catching_up());
    // The last in line is served, though the stalled one never took its turn.
    for rev in revs.iter().chain([&live]) {
        assert_eq!(next(&mut last).await.revision, *rev);
    }
    // And the stalled one, reading again, loses nothing.
    for rev in revs[1..].iter().chain([&live]) {
        assert_eq!(next(&mut stalled).await.revision, *rev);
    }
    assert_eq!(cache.stats().catch_ups_refused.load(Ordering::Relaxed), 0);
    assert_eq!(reads.waiting(), 0);
}

/// Watchers lapped together share one read of the store, whatever their filters: with room
/// for a single read, ten catch-ups all go at once, none waiting in line, each gapless.
#[tokio::test]
async fn watchers_lapped_together_share_one_read_of_the_store() {
    let reads = CatchUpReads::new(1).with_queue_wait(Duration::from_millis(200));
    let mut c = config();
    c.catch_up = Some(reads.clone());
    let (s, cache) = started(c).await;
    let web = Filter::parse(None, "app=web", "").unwrap();
    let mut watches = Vec::new();
    for i in 0..10 {
        let filter = if i % 2 == 0 {
            Filter::everything()
        } else {
            web.clone()
        };
        watches.push((watch_from_now(&cache, filter).await, i % 2 == 0));
    }
    let mut revs = Vec::new();
    for i in 0..40 {
        let app = if i % 4 == 0 { "web" } else { "db" };
        revs.push((create(&s, &format!("p{i:02}"), app), app));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    // Read in turns, a few events each, so that all ten are in their catch-up at once.
    let mut read = vec![0; watches.len()];
    let wanted = |all: bool| revs.iter().filter(|(_, app)| all || *app == "web").count();
    while read.iter().zip(&watches).any(|(n, (_, all))| *n < wanted(*all)) {
        for (n, (w, all)) in read.iter_mut().zip(&mut watches) {
            let mine: Vec<_> = revs.iter().filter(|(_, app)| *all || *app == "web").collect();
            for _ in 0..3 {
                if let Some((rev, _)) = mine.get(*n) {
                    let e = next(w).await;
                    assert_eq!((e.kind, e.revision), (EventKind::Added, *rev));
                    *n += 1;
                }
            }
        }
    }
    let stats = cache.stats();
    assert_eq!(stats.catch_ups.load(Ordering::Relaxed), 10);
    assert_eq!(
        stats.catch_up_reads.load(Ordering::Relaxed),
        1,
        "one read for all"
    );
    assert_eq!(stats.catch_ups_refused.load(Ordering::Relaxed), 0);
    let live = create(&s, "live", "web");
    for (w, _) in &mut watches {
        assert_eq!(next(w).await.revision, live);
        assert!(!w.is_catching_up());
    }
    // The read's task returns its place once it sees its last reader gone.
    tokio::time::timeout(Duration::from_secs(5), async {
        while reads.in_use() > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the read ended with its last reader");
}

/// A shared read is paced by its fastest reader and keeps only a bounded tail for the slower
/// ones: a reader that stops is not waited for, and once it falls out of that tail it reads on
/// alone from where it stands, losing and repeating nothing.
#[tokio::test]
async fn a_slow_reader_of_a_shared_read_falls_out_to_a_read_of_its_own_and_loses_nothing() {
    let mut c = config();
    c.catch_up = Some(CatchUpReads::new(4).with_read_bytes(2048));
    let (s, cache) = started(c).await;
    let mut fast = watch_from_now(&cache, Filter::everything()).await;
    let mut slow = watch_from_now(&cache, Filter::everything()).await;
    let mut revs = Vec::new();
    for i in 0..60 {
        revs.push(create(&s, &format!("p{i:02}"), "web"));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    // Both start in one read; then the slow one stops.
    assert_eq!(next(&mut fast).await.revision, revs[0]);
    assert_eq!(next(&mut slow).await.revision, revs[0]);
    for rev in &revs[1..] {
        assert_eq!(next(&mut fast).await.revision, *rev);
    }
    // 60 pods of about 100 bytes is far more than the 2 KiB kept for the slow one.
    for rev in &revs[1..] {
        assert_eq!(next(&mut slow).await.revision, *rev);
    }
    assert_eq!(
        cache.stats().catch_up_reads.load(Ordering::Relaxed),
        2,
        "the slow reader fell out of the shared read and read on alone"
    );
    let live = create(&s, "live", "web");
    for w in [&mut fast, &mut slow] {
        assert_eq!(next(w).await.revision, live);
        assert!(quiet(w, Duration::from_millis(50)).await);
    }
}

/// A read keeps an eighth of its bound read ahead of its fastest reader, and what every reader still in
/// it has passed only as a short tail (an eighth of the bound, for catch-ups that join later):
/// a thousand catch-ups of stalled clients each hold that, not more. A reader that stalls is
/// lapped and then holds nothing back, though it has not looked since; it reads on alone,
/// gapless, when its client reads again. Once the watches end, the reads hold nothing.
#[tokio::test]
async fn a_read_holds_its_read_ahead_and_a_short_tail_not_its_bound() {
    let mut c = config();
    let bound = 4096;
    c.catch_up = Some(CatchUpReads::new(4).with_read_bytes(bound));
    let (s, cache) = started(c).await;
    let mut w = watch_from_now(&cache, Filter::everything()).await;
    let mut stalled = watch_from_now(&cache, Filter::everything()).await;
    let revs: Vec<_> = (0..300).map(|i| create(&s, &format!("p{i:03}"), "web")).collect();
    cache.list(&ListOptions::default()).await.unwrap();
    let held = || cache.stats().catch_up_bytes.load(Ordering::Relaxed);
    // Both start in one read; then one stalls. 100 pods of about 100 bytes and the 64 an entry
    // costs are far past the bound: it is lapped by then.
    assert_eq!(next(&mut stalled).await.revision, revs[0]);
    let mut most = 0;
    for (i, rev) in revs.iter().enumerate() {
        assert_eq!(next(&mut w).await.revision, *rev);
        if i >= 100 {
            most = most.max(held());
        }
    }
    assert_eq!(cache.stats().catch_up_reads.load(Ordering::Relaxed), 1);
    // An eighth of the bound ahead, an eighth behind, and the entry that went over either.
    assert!(most > 0, "the catch-up read held nothing");
    assert!(
        most <= (bound / 8 + bound / 8 + 512) as u64,
        "a read held {most} bytes of its {bound} for a reader it lapped"
    );
    for rev in &revs[1..] {
        assert_eq!(next(&mut stalled).await.revision, *rev);
    }
    assert_eq!(cache.stats().catch_up_reads.load(Ordering::Relaxed), 2);
    drop((w, stalled));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while held() != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} bytes held after the watches ended",
            held()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A long catch-up tells a client that asked for bookmarks how far it got, as the window
/// does: a bookmark once per interval, at a revision whose events it has all delivered, never
/// ahead of one it has not.
#[tokio::test]
async fn a_catch_up_sends_bookmarks_at_whole_revisions() {
    let mut c = config();
    c.bookmark_interval = Duration::from_millis(1);
    let (s, cache) = started(c).await;
    let mut w = cache
        .watch(WatchOptions {
            resource_version: Some(cache.revision()),
            allow_bookmarks: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut revs = Vec::new();
    for i in 0..30 {
        revs.push(create(&s, &format!("p{i:02}"), "web"));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    let (mut events, mut bookmarks) = (Vec::new(), Vec::new());
    while events.len() < revs.len() {
        let e = next(&mut w).await;
        if e.kind == EventKind::Bookmark {
            assert_eq!(
                events.last(),
                Some(&e.revision),
                "a bookmark at the revision last delivered"
            );
            bookmarks.push(e.revision);
        } else {
            events.push(e.revision);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    assert_eq!(events, revs, "every event, in order");
    assert_eq!(
        cache.stats().catch_ups.load(Ordering::Relaxed),
        1,
        "it was lapped"
    );
    assert!(
        bookmarks.len() >= 5,
        "bookmarks during the catch-up: {bookmarks:?}"
    );
}

/// A read shared from below a compaction ends at it; a catch-up that joined the read from
/// above the compaction reads on alone: only a watcher that needs a compacted revision is 410.
#[tokio::test]
async fn a_catch_up_above_a_compaction_that_joined_a_read_from_below_it_reads_on() {
    let (s, cache) = started(config()).await;
    let mut low = watch_from_now(&cache, Filter::everything()).await;
    let low_start = low.position();
    let mut revs = Vec::new();
    for i in 0..5 {
        revs.push(create(&s, &format!("p{i:02}"), "web"));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    let mut high = watch_from_now(&cache, Filter::everything()).await;
    for i in 5..25 {
        revs.push(create(&s, &format!("p{i:02}"), "web"));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    // Both lapped: the low one's catch-up starts a read; the store compacts above the low
    // one's start and below the high one's, which joins the read before its task has run.
    assert!(low.next().now_or_never().is_none());
    s.compact(revs[2]);
    assert!(high.next().now_or_never().is_none());
    match tokio::time::timeout(Duration::from_secs(5), low.next()).await {
        Ok(Some(Err(e))) => assert_eq!(e.requested, low_start),
        other => panic!("expected 410 for the low one, got {other:?}"),
    }
    for rev in &revs[5..] {
        assert_eq!(next(&mut high).await.revision, *rev);
    }
    assert_eq!(cache.stats().catch_up_reads.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn a_catch_up_below_a_new_generation_hands_over_though_its_prefix_is_quiet() {
    let s = MemorySource::new();
    let mut c = config();
    c.backoff_initial = Duration::from_millis(5);
    c.backoff_max = Duration::from_millis(20);
    let codec = Arc::new(PanicsOnBoom::once());
    let cache = Cache::new(s.clone(), codec, c).unwrap();
    create(&s, "a", "web");
    cache.list(&ListOptions::default()).await.unwrap();
    let mut w = watch_from_now(&cache, Filter::everything()).await;
    // The reflector panics on it and is replaced: the hub closes, and the watcher catches up
    // from the store, where the object decodes.
    let boom = create(&s, "boom", "web");
    // Writes elsewhere in the store: the new generation starts above them, and nothing under
    // the resource's prefix comes after the catch-up's last event.
    for i in 0..5 {
        s.create(&format!("other/x{i}"), text_pod("ns", "x", "web", "n1"))
            .unwrap();
    }
    let e = next(&mut w).await;
    assert_eq!((e.kind, e.revision), (EventKind::Added, boom));
    for _ in 0..500 {
        if cache.is_ready() && cache.oldest_watch_revision() > boom {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        cache.oldest_watch_revision() > boom,
        "a new generation above the catch-up"
    );
    // With no write to its prefix, progress notifications bring the catch-up up to the new
    // window, and it hands over.
    assert!(quiet(&mut w, Duration::from_millis(500)).await);
    assert!(!w.is_catching_up(), "handed over to the new generation");
    let live = create(&s, "live", "web");
    assert_eq!(next(&mut w).await.revision, live);
}

#[tokio::test]
async fn a_watcher_lapped_again_resumes_from_its_hand_over_not_its_last_delivery() {
    let (s, cache) = started(config()).await;
    let web = Filter::parse(None, "app=web", "").unwrap();
    let mut w = watch_from_now(&cache, web).await;
    let first = create(&s, "w0", "web");
    assert_eq!(next(&mut w).await.revision, first);
    // Others' writes lap it; it catches up (delivering nothing) and hands over far past its
    // last delivery.
    for i in 0..20 {
        create(&s, &format!("a{i:02}"), "db");
    }
    cache.list(&ListOptions::default()).await.unwrap();
    assert!(quiet(&mut w, Duration::from_millis(300)).await);
    assert!(!w.is_catching_up(), "handed over");
    let handed = w.position();
    assert!(handed > first);
    // The store compacts at the hand-over, keeping all the watcher still needs; lapped
    // again, it resumes from there, not from its last delivery.
    s.compact(handed);
    for i in 0..20 {
        create(&s, &format!("b{i:02}"), "db");
    }
    let live = create(&s, "w1", "web");
    cache.list(&ListOptions::default()).await.unwrap();
    assert_eq!(next(&mut w).await.revision, live);
}

/// etcd's previous values: the server reads a key's previous value at the event's revision
/// minus one, which fails, and is left out, for an event at the compacted revision itself;
/// and at `lost_at` too (a compaction etcd made between reading that event and sending it).
struct EtcdLike(MemorySource, Option<Revision>);

fn strip(c: SourceChange) -> SourceChange {
    match c {
        SourceChange::Put {
            key, value, created, ..
        } => SourceChange::Put {
            key,
            value,
            prev: None,
            created,
        },
        SourceChange::Delete { key, .. } => SourceChange::Delete { key, prev: None },
    }
}

impl Source for EtcdLike {
    type Watch = watchcache_core::source::memory::MemoryWatch;

    async fn list(&self, prefix: &str, at: Option<Revision>) -> Result<SourceList, SourceError> {
        Source::list(&self.0, prefix, at).await
    }
    async fn watch(&self, prefix: &str, from: Revision) -> Result<Self::Watch, SourceError> {
        let inner = Source::watch(&self.0, prefix, from).await?;
        let (store, lost_at) = (self.0.clone(), self.1);
        Ok(Box::pin(inner.map(move |item| {
            item.map(|e| match e {
                SourceEvent::Changes { revision, changes }
                    if revision <= store.compacted_revision() || Some(revision) == lost_at =>
                {
                    SourceEvent::Changes {
                        revision,
                        changes: changes.into_iter().map(strip).collect(),
                    }
                }
                other => other,
            })
        })))
    }
    async fn current_revision(&self) -> Result<Revision, SourceError> {
        Source::current_revision(&self.0).await
    }
    async fn request_progress(&self, prefix: &str) -> Result<(), SourceError> {
        Source::request_progress(&self.0, prefix).await
    }
    async fn signing_key(&self) -> Result<[u8; 16], SourceError> {
        Source::signing_key(&self.0).await
    }
    fn compacted_revision(&self) -> Revision {
        self.0.compacted_revision()
    }
    async fn read(&self, key: &str) -> Result<(Option<SourceItem>, Revision), SourceError> {
        Source::read(&self.0, key).await
    }
}

#[tokio::test]
async fn a_watcher_that_needs_the_compacted_revision_is_410_not_a_silent_gap() {
    // A watcher lapped right after its last delivery needs the next revision, a deletion at
    // which the store then compacts: etcd would send it without the deleted value, so it
    // cannot be delivered; the watch ends with 410 rather than go on without it.
    let s = MemorySource::new();
    let cache = Cache::new(EtcdLike(s.clone(), None), Arc::new(TextCodec), config()).unwrap();
    create(&s, "a", "web");
    cache.list(&ListOptions::default()).await.unwrap();
    let mut w = watch_from_now(&cache, Filter::everything()).await;
    let start = w.position();
    let (deleted, _) = s.delete("pods/ns/a", None).unwrap();
    for i in 0..20 {
        create(&s, &format!("p{i:02}"), "web");
    }
    s.compact(deleted);
    cache.list(&ListOptions::default()).await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .expect("an answer in time");
    match end {
        Some(Err(e)) => assert_eq!((e.requested, e.oldest), (start, deleted)),
        other => panic!("expected 410, got {other:?}"),
    }
}

#[tokio::test]
async fn an_update_whose_previous_value_the_store_lost_is_410_not_an_addition() {
    // A selective watcher lapped before an update that takes a pod out of its selection: etcd
    // sends the update without the previous value (compacted meanwhile). As an ADDED of a
    // pod outside the selection it would be filtered out, and the watcher would keep the pod
    // for good; it cannot be told, so it ends with 410.
    let s = MemorySource::new();
    create(&s, "a", "web");
    let moved = Revision::new(s.revision().get() + 1);
    let cache = Cache::new(EtcdLike(s.clone(), Some(moved)), Arc::new(TextCodec), config()).unwrap();
    cache.list(&ListOptions::default()).await.unwrap();
    let web = Filter::parse(None, "app=web", "").unwrap();
    let mut w = watch_from_now(&cache, web).await;
    let start = w.position();
    let updated = s
        .update("pods/ns/a", text_pod("ns", "a", "db", "n1"), None)
        .unwrap();
    assert_eq!(updated, moved);
    for i in 0..20 {
        create(&s, &format!("p{i:02}"), "db");
    }
    cache.list(&ListOptions::default()).await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .expect("an answer in time");
    match end {
        Some(Err(e)) => assert_eq!(e.requested, start),
        other => panic!("expected 410, got {other:?}"),
    }
}

#[tokio::test]
async fn watchers_of_a_dropped_cache_end_cleanly_between_revisions_and_resume_on_the_next() {
    // A cache dropped (a CRD deleted, or served anew): its hub closes. No hub will follow, so
    // neither a watcher in the window nor one catching up reads the store for a hand-over
    // that cannot come; between two revisions each ends cleanly, not with 410, and a resume
    // from the last revision it delivered, on the cache that follows, misses nothing.
    let (s, cache) = started(config()).await;
    let mut lapped = watch_from_now(&cache, Filter::everything()).await;
    let first = create(&s, "first", "web");
    for i in 0..20 {
        create(&s, &format!("p{i:02}"), "web");
    }
    cache.list(&ListOptions::default()).await.unwrap();
    assert_eq!(next(&mut lapped).await.revision, first);
    assert!(lapped.is_catching_up());
    // At the head of the window: the hub's close is all it will see.
    let mut idle = watch_from_now(&cache, Filter::everything()).await;
    let idle_from = cache.revision();
    drop(cache);
    for i in 0..5 {
        create(&s, &format!("q{i:02}"), "web");
    }
    let mut last = [first, idle_from];
    for (w, last) in [&mut lapped, &mut idle].into_iter().zip(&mut last) {
        let end = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match w.next().await {
                    Some(Ok(e)) => *last = e.revision,
                    other => return other,
                }
            }
        })
        .await
        .expect("the watch ends in time");
        assert!(end.is_none(), "expected a clean end, got {end:?}");
        assert!(!w.is_catching_up());
    }
    // The cache that follows (the resource served anew) serves each resume from where it
    // stood: every revision after it, in order, from the store where its window does not
    // reach back.
    let next_cache = Cache::new(s.clone(), Arc::new(TextCodec), config()).unwrap();
    next_cache.list(&ListOptions::default()).await.unwrap();
    let head = next_cache.revision();
    for from in last {
        let mut resumed = next_cache
            .watch(WatchOptions {
                resource_version: Some(from),
                filter: Filter::everything(),
                ..Default::default()
            })
            .await
            .expect("no 410: the store holds the revision");
        let mut want = from.get() + 1;
        while want <= head.get() {
            assert_eq!(
                next(&mut resumed).await.revision.get(),
                want,
                "resumed from {from}"
            );
            want += 1;
        }
    }
}

/// A watch knows whether the revision it last delivered from is whole (a clean end there
/// loses nothing for a client that resumes from it): in the window, scanning or parked on its
/// selector's chain, and in a catch-up from the store.
#[tokio::test]
async fn a_watch_knows_when_the_revision_it_delivers_is_whole() {
    let mut c = config();
    c.capacity = 8;
    c.retain_min_events = 8;
    let (s, cache) = started(c).await;
    let mut all = watch_from_now(&cache, Filter::everything()).await;
    // A namespace's watcher follows its namespace's chain and parks at its end.
    let ns = Filter::parse(Some("ns"), "", "").unwrap();
    let mut selective = watch_from_now(&cache, ns).await;
    assert!(all.at_revision_boundary() && selective.at_revision_boundary());
    let txn = |s: &MemorySource, prefix: &str, n: usize| {
        let writes = (0..n)
            .map(|i| TxnWrite::Put {
                key: format!("pods/ns/{prefix}{i}"),
                value: text_pod("ns", &format!("{prefix}{i}"), "web", "n1"),
            })
            .collect();
        s.txn(writes).unwrap()
    };
    let t = txn(&s, "t", 3);
    for w in [&mut all, &mut selective] {
        assert_eq!(next(w).await.revision, t);
        assert!(!w.at_revision_boundary(), "one event of three");
        next(w).await;
        next(w).await;
        assert!(quiet(w, Duration::from_millis(50)).await);
        assert!(w.at_revision_boundary(), "all three, and nothing more there");
    }
    // A revision of six events through a window of four: a watch from before it reads it from
    // the store.
    let mut c = config();
    c.capacity = 4;
    c.retain_min_events = 4;
    let (s, cache) = started(c).await;
    let before = create(&s, "p0", "db");
    let big = txn(&s, "b", 6);
    cache.list(&ListOptions::default()).await.unwrap();
    let mut w = cache
        .watch(WatchOptions {
            resource_version: Some(before),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(next(&mut w).await.revision, big);
    assert!(w.is_catching_up());
    assert!(!w.at_revision_boundary(), "one event of six, from the store");
    for _ in 1..6 {
        assert_eq!(next(&mut w).await.revision, big);
    }
    assert!(quiet(&mut w, Duration::from_millis(50)).await);
    assert!(w.at_revision_boundary());
}

/// The embedded store, whose history reads (a catch-up's, not the reflector's watch) take
/// `open` to open and `each` per revision, as etcd's may far behind or under load.
struct SlowHistory {
    store: MemorySource,
    open: Duration,
    each: Duration,
}

impl Source for SlowHistory {
    type Watch = watchcache_core::source::memory::MemoryWatch;

    async fn list(&self, prefix: &str, at: Option<Revision>) -> Result<SourceList, SourceError> {
        Source::list(&self.store, prefix, at).await
    }
    async fn watch(&self, prefix: &str, from: Revision) -> Result<Self::Watch, SourceError> {
        Source::watch(&self.store, prefix, from).await
    }
    async fn watch_history(&self, prefix: &str, from: Revision) -> Result<Self::Watch, SourceError> {
        tokio::time::sleep(self.open).await;
        let each = self.each;
        let inner = Source::watch(&self.store, prefix, from).await?;
        Ok(Box::pin(inner.then(move |item| async move {
            tokio::time::sleep(each).await;
            item
        })))
    }
    async fn current_revision(&self) -> Result<Revision, SourceError> {
        Source::current_revision(&self.store).await
    }
    async fn request_progress(&self, prefix: &str) -> Result<(), SourceError> {
        Source::request_progress(&self.store, prefix).await
    }
    async fn signing_key(&self) -> Result<[u8; 16], SourceError> {
        Source::signing_key(&self.store).await
    }
    fn compacted_revision(&self) -> Revision {
        self.store.compacted_revision()
    }
    async fn read(&self, key: &str) -> Result<(Option<SourceItem>, Revision), SourceError> {
        Source::read(&self.store, key).await
    }
}

/// A cache over [`SlowHistory`], and a watcher it lapped, not yet polled; with the revisions
/// written after the watcher's start.
async fn lapped_on_slow_history(
    reads: &CatchUpReads,
    open: Duration,
    each: Duration,
) -> (Cache<SlowHistory>, CacheWatch, Vec<Revision>) {
    let s = MemorySource::new();
    let mut c = config();
    c.catch_up = Some(reads.clone());
    let source = SlowHistory {
        store: s.clone(),
        open,
        each,
    };
    let cache = Cache::new(source, Arc::new(TextCodec), c).unwrap();
    cache.list(&ListOptions::default()).await.unwrap();
    let lapped = watch_from_now(&cache, Filter::everything()).await;
    let revs = (0..20).map(|i| create(&s, &format!("p{i:02}"), "web")).collect();
    cache.list(&ListOptions::default()).await.unwrap();
    (cache, lapped, revs)
}

/// A read's slice counts from its first revision, not from its start: a read of the store
/// that takes longer to open than a slice is not given up before it delivered anything. Two
/// caches share the bound of one read here, so neither catch-up can join the other's read:
/// counted from the start, they would hand the place to each other for ever, neither reading
/// a revision. (Time is the test's own, as above.)
#[tokio::test(start_paused = true)]
async fn a_read_slower_to_open_than_its_slice_delivers_before_it_gives_its_place_up() {
    let reads = CatchUpReads::new(1).with_slice(Duration::from_millis(100));
    let open = Duration::from_millis(400);
    let (_one, mut first, first_revs) = lapped_on_slow_history(&reads, open, Duration::ZERO).await;
    let (_other, mut second, second_revs) = lapped_on_slow_history(&reads, open, Duration::ZERO).await;
    async fn read_all(w: &mut CacheWatch, revs: &[Revision]) {
        let mut got = Vec::new();
        while got.len() < revs.len() {
            got.push(next(w).await.revision);
        }
        assert_eq!(got, revs, "every revision once, in order");
    }
    tokio::time::timeout(Duration::from_secs(20), async {
        tokio::join!(
            read_all(&mut first, &first_revs),
            read_all(&mut second, &second_revs)
        )
    })
    .await
    .expect("both read on: each read delivers before its slice ends");
    assert_eq!(reads.waiting(), 0);
}

/// A read whose source delivers nothing at all does not hold its place for good: past a limit
/// (30 s) without a first revision, its slice is over, and the next in line (another cache's
/// catch-up here) has the place. (Time is the test's own: the 30 s pass at once.)
#[tokio::test(start_paused = true)]
async fn a_read_that_delivers_nothing_gives_its_place_up_past_a_limit() {
    let reads = CatchUpReads::new(1).with_slice(Duration::from_millis(100));
    let (_mute, mut stuck, _) =
        lapped_on_slow_history(&reads, Duration::from_secs(24 * 3600), Duration::ZERO).await;
    let (_other, mut waiting, revs) = lapped_on_slow_history(&reads, Duration::ZERO, Duration::ZERO).await;
    assert!(quiet(&mut stuck, Duration::from_millis(10)).await);
    assert_eq!(reads.in_use(), 1, "the mute read has the place");
    let read = async {
        for rev in &revs {
            let event = tokio::time::timeout(Duration::from_secs(60), waiting.next())
                .await
                .expect("the place in time")
                .expect("the watch goes on")
                .expect("no 410");
            assert_eq!(event.revision, *rev);
        }
    };
    tokio::time::timeout(Duration::from_secs(120), read)
        .await
        .expect("the next in line reads on");
    drop(stuck);
}

/// A catch-up in line joins a read another started while it waited, rather than wait for a
/// place of its own (its read would then make the other give its place up after a slice,
/// each reading the same revisions of the store in turn).
#[tokio::test]
async fn catch_ups_in_line_join_a_read_started_while_they_wait() {
    let reads = CatchUpReads::new(1)
        .with_slice(Duration::from_secs(600))
        .with_idle(Duration::from_secs(600));
    let mut c = config();
    c.catch_up = Some(reads.clone());
    let (s, cache) = started(c).await;
    let mut first = watch_from_now(&cache, Filter::everything()).await;
    let mut second = watch_from_now(&cache, Filter::everything()).await;
    let mut revs = vec![create(&s, "p", "web")];
    cache.list(&ListOptions::default()).await.unwrap();
    // A revision above the two: they cannot join its read.
    let mut holder = watch_from_now(&cache, Filter::everything()).await;
    for i in 0..20 {
        revs.push(create(&s, &format!("p{i:02}"), "web"));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    assert_eq!(next(&mut holder).await.revision, revs[1]);
    assert_eq!(reads.in_use(), 1, "the holder has the one place, and keeps it");
    assert!(quiet(&mut first, Duration::from_millis(100)).await);
    assert!(quiet(&mut second, Duration::from_millis(100)).await);
    assert_eq!(reads.waiting(), 2, "both in line");
    drop(holder);
    // One of them gets the place and starts a read; the other joins it.
    for rev in &revs {
        assert_eq!(next(&mut first).await.revision, *rev);
        assert_eq!(next(&mut second).await.revision, *rev);
    }
    assert_eq!(reads.waiting(), 0);
    assert_eq!(cache.stats().catch_up_reads.load(Ordering::Relaxed), 2);
}

/// A read that ended (its source broke) drops what it kept at once, though a reader whose
/// client stopped reading still holds its place in it: the bound on catch-up memory holds.
/// That reader, reading again, reads on from where it stood.
#[tokio::test]
async fn a_broken_read_drops_what_it_kept_though_a_stalled_reader_holds_it() {
    let reads = CatchUpReads::new(4).with_idle(Duration::from_secs(600));
    let mut c = config();
    c.catch_up = Some(reads.clone());
    let (s, cache) = started(c).await;
    let mut stalled = watch_from_now(&cache, Filter::everything()).await;
    let mut revs = Vec::new();
    for i in 0..20 {
        revs.push(create(&s, &format!("p{i:02}"), "web"));
    }
    cache.list(&ListOptions::default()).await.unwrap();
    assert_eq!(next(&mut stalled).await.revision, revs[0]);
    let held = || cache.stats().catch_up_bytes.load(Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(5), async {
        while held() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the read reads ahead of its reader");
    s.pause_watches(true);
    tokio::time::timeout(Duration::from_secs(5), async {
        while held() > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the broken read still holds {} bytes", held()));
    s.pause_watches(false);
    for rev in &revs[1..] {
        assert_eq!(next(&mut stalled).await.revision, *rev);
    }
}

/// A catch-up asks the source for progress only when its read may have reached the head of
/// the source's history: a change above it in the window is in that history, and its read
/// brings it. (On etcd versions whose progress notifications are not ordered, each request
/// is a write.)
#[tokio::test]
async fn a_catch_up_behind_a_change_the_window_holds_asks_for_no_progress() {
    let reads = CatchUpReads::new(4);
    let (cache, mut lapped, revs) =
        lapped_on_slow_history(&reads, Duration::ZERO, Duration::from_millis(30)).await;
    // Any request in flight from the lists above is counted by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = || cache.stats().progress_requests.load(Ordering::Relaxed);
    let before = asked();
    for rev in &revs {
        assert_eq!(next(&mut lapped).await.revision, *rev);
    }
    assert!(!lapped.is_catching_up(), "handed over");
    assert_eq!(asked(), before, "no progress asked for while the read was behind");
}

/// A catch-up in line when its cache is dropped leaves the line at once, though the place it
/// waits for is another cache's (the server's caches share the bound), and ends cleanly: it
/// stands between two revisions.
#[tokio::test]
async fn a_catch_up_in_line_when_its_cache_is_dropped_leaves_the_line_at_once() {
    let reads = CatchUpReads::new(1)
        .with_slice(Duration::from_secs(600))
        .with_idle(Duration::from_secs(600));
    // Another cache's read holds the one place, and keeps it.
    let (_other_store, _other, below, holder, _) = two_a_revision_apart(&reads).await;
    drop(below);
    let mut c = config();
    c.catch_up = Some(reads.clone());
    let (s, cache) = started(c).await;
    let mut in_line = watch_from_now(&cache, Filter::everything()).await;
    for i in 0..20 {
        create(&s, &format!("p{i:02}"), "web");
    }
    cache.list(&ListOptions::default()).await.unwrap();
    assert!(quiet(&mut in_line, Duration::from_millis(100)).await);
    assert_eq!(reads.waiting(), 1, "in line behind the other cache's read");
    drop(cache);
    // Not polled meanwhile: it leaves the line by itself.
    tokio::time::timeout(Duration::from_secs(5), async {
        while reads.waiting() > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("out of the line at once");
    let end = tokio::time::timeout(Duration::from_secs(5), in_line.next())
        .await
        .expect("the watch ends in time");
    assert!(end.is_none(), "expected a clean end, got {end:?}");
    assert_eq!(reads.in_use(), 1, "the other cache's read keeps its place");
    drop(holder);
}
