//! Reads the cache hands to its source, and history filled from the source at start:
//!
//! - on a source whose requested progress notifications cannot be trusted, a consistent read
//!   the cache has not reached is answered by the source, never from a cache that may be
//!   behind;
//! - however many reads wait for the cache, it asks its source for progress one request at
//!   a time;
//! - a continue token minted by another cache over the same store is honoured;
//! - `history_fill` lets a watch resume from a revision older than the cache.

mod common;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{TextCodec, text_pod};
use futures_core::Stream;
use watchcache_core::source::memory::MemoryWatch;
use watchcache_core::{
    Cache, CacheConfig, CacheError, EventKind, ListOptions, MemorySource, ObjectKey, Revision, Source,
    SourceError, SourceEvent, SourceItem, SourceList, WatchOptions,
};

/// The embedded store, made to bring no progress notification: its watches drop every one (as
/// a member slow to answer, or an etcd whose requested ones cannot be trusted). It says
/// whether its requested progress is ordered, and counts the requests it is sent.
#[derive(Clone, Debug)]
struct NoProgressSource {
    store: MemorySource,
    ordered: bool,
    requests: Arc<std::sync::atomic::AtomicUsize>,
}

/// Like etcd before 3.4.31 towards a cache that could not order its requests.
fn unordered(store: &MemorySource) -> NoProgressSource {
    NoProgressSource {
        store: store.clone(),
        ordered: false,
        requests: Arc::default(),
    }
}

struct NoProgress(MemoryWatch);

impl Stream for NoProgress {
    type Item = Result<SourceEvent, SourceError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            match self.0.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(SourceEvent::Progress { .. }))) => continue,
                other => return other,
            }
        }
    }
}

impl Source for NoProgressSource {
    type Watch = NoProgress;

    async fn list(&self, prefix: &str, at: Option<Revision>) -> Result<SourceList, SourceError> {
        self.store.list(prefix, at).await
    }
    async fn watch(&self, prefix: &str, from: Revision) -> Result<NoProgress, SourceError> {
        Ok(NoProgress(self.store.watch(prefix, from).await?))
    }
    async fn current_revision(&self) -> Result<Revision, SourceError> {
        self.store.current_revision().await
    }
    async fn request_progress(&self, _prefix: &str) -> Result<(), SourceError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    async fn signing_key(&self) -> Result<[u8; 16], SourceError> {
        self.store.signing_key().await
    }
    fn progress_requests_are_ordered(&self) -> bool {
        self.ordered
    }
    fn compacted_revision(&self) -> Revision {
        self.store.compacted_revision()
    }
    async fn read(&self, key: &str) -> Result<(Option<SourceItem>, Revision), SourceError> {
        self.store.read(key).await
    }
}

fn config() -> CacheConfig {
    let mut c = CacheConfig::new("pods", "pods/");
    c.capacity = 64;
    c.fresh_timeout = Duration::from_secs(2);
    c.ready_timeout = Duration::from_secs(2);
    c.backoff_initial = Duration::from_millis(5);
    c.backoff_max = Duration::from_millis(20);
    c
}

fn pod(s: &MemorySource, name: &str) -> Revision {
    s.create(&format!("pods/ns/{name}"), text_pod("ns", name, "web", "n1"))
        .unwrap()
}

fn reads<S: Source>(cache: &Cache<S>) -> u64 {
    cache.stats().source_reads.load(Ordering::Relaxed)
}

fn names(list: watchcache_core::ListResult) -> Vec<String> {
    list.items.map(|o| o.key().name().to_owned()).collect()
}

async fn ready<S: Source>(cache: &Cache<S>) {
    let zero = ListOptions {
        resource_version: Some(Revision::ZERO),
        ..Default::default()
    };
    cache.list(&zero).await.unwrap();
}

#[tokio::test]
async fn a_cache_behind_an_unordered_source_answers_consistent_reads_from_the_source() {
    let store = MemorySource::new();
    pod(&store, "a");
    let cache = Cache::new(unordered(&store), Arc::new(TextCodec), config()).unwrap();
    ready(&cache).await;

    // The cache's watch stops delivering (events in flight, as when etcd's notification
    // overtakes them): only the store knows of "b".
    store.pause_watches(true);
    let rb = pod(&store, "b");
    let before = reads(&cache);
    let list = cache.list(&ListOptions::default()).await.unwrap();
    assert!(
        list.revision >= rb,
        "a consistent LIST is at least the latest write"
    );
    assert_eq!(names(list), ["a", "b"]);
    let (got, revision) = cache.get(&ObjectKey::new("ns", "b"), None).await.unwrap();
    assert!(got.is_some() && revision >= rb, "a consistent GET sees the write");
    // A watch without a revision starts from a consistent state, and its live part follows
    // the cache once the watch is back.
    let mut watch = cache.watch(WatchOptions::default()).await.unwrap();
    assert_eq!(reads(&cache), before + 3, "each was read from the store");
    // rv=0 may be stale, and is: the cache's own state, without asking the store.
    let any = ListOptions {
        resource_version: Some(Revision::ZERO),
        ..Default::default()
    };
    assert_eq!(names(cache.list(&any).await.unwrap()), ["a"]);
    assert_eq!(reads(&cache), before + 3);

    let mut initial = Vec::new();
    for _ in 0..2 {
        let e = watch.next().await.unwrap().unwrap();
        assert_eq!(e.kind, EventKind::Added);
        initial.push(e.object.unwrap().key().name().to_owned());
    }
    assert_eq!(initial, ["a", "b"]);
    store.pause_watches(false);
    let rc = pod(&store, "c");
    let e = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("the live part delivers")
        .unwrap()
        .unwrap();
    // "b" came with the initial state: the live part starts after it, with "c".
    assert_eq!((e.kind, e.revision), (EventKind::Added, rc));
}

#[tokio::test]
async fn a_quiet_prefix_on_an_unordered_source_answers_at_once_from_the_source() {
    let store = MemorySource::new();
    pod(&store, "a");
    let cache = Cache::new(unordered(&store), Arc::new(TextCodec), config()).unwrap();
    ready(&cache).await;
    // Writes elsewhere move the store's revision; nothing ever tells this cache it is current.
    for i in 0..5 {
        store
            .create(&format!("configmaps/ns/c{i}"), Bytes::from_static(b"x"))
            .unwrap();
    }
    let started = Instant::now();
    for _ in 0..3 {
        let list = cache.list(&ListOptions::default()).await.unwrap();
        assert_eq!(list.revision, store.revision());
        assert_eq!(names(list), ["a"]);
    }
    assert!(
        started.elapsed() < config().fresh_timeout,
        "no read waited for a notification that never comes"
    );
    assert_eq!(
        cache.revision(),
        Revision::new(2),
        "the cache itself did not move"
    );
    assert_eq!(reads(&cache), 3, "each was read from the store");
}

#[tokio::test]
async fn a_continue_token_from_another_cache_over_the_same_store_is_honoured() {
    let store = MemorySource::new();
    for name in ["a", "b", "c"] {
        pod(&store, name);
    }
    let one = Cache::new(store.clone(), Arc::new(TextCodec), config()).unwrap();
    let two = Cache::new(store.clone(), Arc::new(TextCodec), config()).unwrap();
    let first = one
        .list(&ListOptions {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap();
    let rest = two
        .list(&ListOptions {
            continue_token: first.continue_token.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        (rest.revision, names(rest)),
        (first.revision, vec!["b".to_owned(), "c".to_owned()])
    );
}

#[tokio::test]
async fn history_fill_lets_a_watch_resume_from_before_the_cache_started() {
    let store = MemorySource::new();
    let mut revs = Vec::new();
    for i in 0..10 {
        revs.push(pod(&store, &format!("p{i}")));
    }
    let resume = WatchOptions {
        resource_version: Some(revs[2]),
        ..Default::default()
    };

    // As the apiserver starts: the window begins at the first list, so the client relists
    // (without catch-up from the store, the apiserver's behaviour).
    let mut apiserver = config();
    apiserver.catch_up = None;
    let plain = Cache::new(store.clone(), Arc::new(TextCodec), apiserver).unwrap();
    ready(&plain).await;
    assert!(matches!(
        plain.watch(resume.clone()).await,
        Err(CacheError::Expired(_))
    ));

    // Filled: the window reaches back, and the watch goes on from where the client was.
    let mut filled = config();
    filled.history_fill = true;
    let cache = Cache::new(store.clone(), Arc::new(TextCodec), filled).unwrap();
    ready(&cache).await;
    assert_eq!(cache.revision(), store.revision(), "published once caught up");
    assert!(cache.oldest_watch_revision() <= revs[2]);
    let mut watch = cache.watch(resume).await.unwrap();
    for want in &revs[3..] {
        let e = watch.next().await.unwrap().unwrap();
        assert_eq!((e.kind, e.revision), (EventKind::Added, *want));
    }
    let lists = cache.stats().lists.load(Ordering::Relaxed);
    assert_eq!(lists, 1, "one initialization");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiting_reads_share_one_progress_request_at_a_time() {
    let store = MemorySource::new();
    pod(&store, "a");
    let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut c = config();
    c.fresh_timeout = Duration::from_millis(600);
    let source = NoProgressSource {
        store: store.clone(),
        ordered: true,
        requests: Arc::clone(&requests),
    };
    let cache = Cache::new(source, Arc::new(TextCodec), c).unwrap();
    ready(&cache).await;
    // Writes elsewhere move the store's revision; no notification ever tells the cache.
    store.create("configmaps/ns/x", Bytes::from_static(b"x")).unwrap();
    let started = Instant::now();
    let readers: Vec<_> = (0..64)
        .map(|_| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.list(&ListOptions::default()).await.map(names) })
        })
        .collect();
    for r in readers {
        // None reached the cache: each was answered by the store after its wait.
        assert_eq!(r.await.unwrap().unwrap(), ["a"]);
    }
    let elapsed = started.elapsed();
    let sent = requests.load(Ordering::Relaxed);
    eprintln!("64 reads waited {elapsed:?}: {sent} progress requests");
    // One request per 100 ms of waiting for all of them, not one per read per 100 ms (about
    // 64 × 6 = 384 before).
    let bound = (elapsed.as_millis() / 100) as usize + 2;
    assert!(
        sent >= 1 && sent <= bound,
        "{sent} requests for 64 reads over {elapsed:?}"
    );
    // With no read waiting, none is sent. One may have begun as the last read left (the
    // requester saw it waiting just before its answer came from the store; Miri's slow clock
    // widened that window to a failure): it has returned 300 ms on, and none follows it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let settled = requests.load(Ordering::Relaxed);
    assert!(
        settled <= sent + 1,
        "{settled} requests after the reads, {sent} during them"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        requests.load(Ordering::Relaxed),
        settled,
        "a request with no read waiting"
    );
    // The cache counts a request when it returns: read after the last one has come back.
    let counted = cache.stats().progress_requests.load(Ordering::Relaxed) as usize;
    assert_eq!(settled, counted);
}
