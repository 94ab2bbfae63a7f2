//! watchcache on real etcd (Debian's 3.4.23, the one `apt-get install etcd-server` gives):
//! the source's semantics, consistent reads across replicas with no stale read, a leader
//! killed under a watch, compaction under watches and continue tokens, a replica
//! restarted under 100 kube-rs watchers with and without history fill, and a CRD made on one
//! replica served by every replica.
//!
//! Each test starts its own members on free loopback ports with temporary data directories.
//! A missing etcd is a loud skip, and a failure under `WATCHCACHE_REQUIRE_EXTERNAL=1`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{Value, json};
use watchcache_core::{Revision, Source, SourceChange, SourceError, SourceEvent};
use watchcache_etcd::{EtcdOptions, EtcdSource};
use watchcache_server::Backend;
use watchcache_tests::etcd::EtcdCluster;
use watchcache_tests::{Frames, ServeConfig, Server, config, http, request};

async fn source(cluster: &EtcdCluster) -> EtcdSource {
    EtcdSource::connect(&cluster.endpoints(), EtcdOptions::default())
        .await
        .expect("connects to etcd")
}

fn on_etcd(cluster: &EtcdCluster) -> ServeConfig {
    ServeConfig {
        etcd: cluster.endpoints(),
        compaction_interval: Duration::ZERO,
        ..config(0)
    }
}

/// Starts a server, waits until it is ready, and makes the namespace the tests write in.
async fn serve(cfg: ServeConfig) -> Server {
    let server = watchcache_tests::start(cfg).await;
    watchcache_tests::create_namespaces(&server, &["ha"]).await;
    server
}

fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a resourceVersion in {v}"))
}

async fn json_request(server: &Server, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let (code, body) = request(&http(), server, method, path, body).await;
    let v = serde_json::from_slice(&body).unwrap_or(Value::Null);
    (code, v)
}

/// The tests' HTTP client.
type Http = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Full<Bytes>,
>;

fn cm(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_source_keeps_the_apiserver_layout_and_semantics() {
    let Some(cluster) = EtcdCluster::start_with(1, Duration::from_secs(600)).await else {
        return;
    };
    let small_pages = EtcdOptions {
        list_page: 3,
        ..EtcdOptions::default()
    };
    let s = EtcdSource::connect(&cluster.endpoints(), small_pages)
        .await
        .unwrap();
    assert_eq!(s.version(), "3.4.23", "Debian's etcd, the one the issue names");
    assert!(
        !watchcache_etcd::orders_requested_progress(s.version()),
        "3.4.23 answers progress requests out of band"
    );
    assert!(
        s.progress_requests_are_ordered(),
        "yet the source's requested progress is ordered: a fence write"
    );

    // Create, update and delete are transactions on the mod revision.
    let key = "/registry/configmaps/ns/a";
    let r1 = s.create(key, Bytes::from_static(b"1")).await.unwrap();
    assert!(matches!(
        s.create(key, Bytes::from_static(b"x")).await,
        Err(SourceError::AlreadyExists(_))
    ));
    let r2 = s.update(key, Bytes::from_static(b"2"), Some(r1)).await.unwrap();
    assert!(matches!(
        s.update(key, Bytes::from_static(b"3"), Some(r1)).await,
        Err(SourceError::Conflict { current, .. }) if current == r2
    ));
    assert!(matches!(
        s.update("/registry/configmaps/ns/none", Bytes::new(), None).await,
        Err(SourceError::NotFound(_))
    ));
    assert_eq!(s.get(key).await.unwrap(), Some((Bytes::from_static(b"2"), r2)));

    // Lists are paged (3 keys a page here) at one revision: the 10 keys and nothing after.
    for i in 0..10 {
        s.create(
            &format!("/registry/configmaps/ns/p{i}"),
            Bytes::from(format!("{i}")),
        )
        .await
        .unwrap();
    }
    let at = s.current_revision().await.unwrap();
    s.create("/registry/configmaps/ns/later", Bytes::new())
        .await
        .unwrap();
    let list = s.list("/registry/configmaps/", Some(at)).await.unwrap();
    assert_eq!(list.revision, at);
    assert_eq!(list.items.len(), 11, "a and p0..p9");
    assert!(list.items.windows(2).all(|w| w[0].key < w[1].key), "in key order");
    // Pages far above gRPC's default 4 MB message limit: 6 values of 1 MiB in one page.
    let big = Bytes::from(vec![b'x'; 1 << 20]);
    for i in 0..6 {
        s.create(&format!("/registry/secrets/ns/big{i}"), big.clone())
            .await
            .unwrap();
    }
    let wide = EtcdSource::connect(&cluster.endpoints(), EtcdOptions::default())
        .await
        .unwrap();
    let secrets = wide.list("/registry/secrets/", None).await.unwrap();
    assert_eq!(secrets.items.len(), 6, "one page of 6 MiB");
    // Another resource's prefix is not listed.
    s.create("/registry/configmapsx/ns/z", Bytes::new())
        .await
        .unwrap();
    assert_eq!(
        s.list("/registry/configmaps/", None).await.unwrap().items.len(),
        12
    );

    // A watch from a revision replays with previous values, then a delete.
    let mut w = s.watch("/registry/configmaps/", r2).await.unwrap();
    let (rd, prev) = s.delete(key, None).await.unwrap();
    assert_eq!(prev, Bytes::from_static(b"2"));
    let first = w.next().await.unwrap().unwrap();
    assert!(matches!(&first, SourceEvent::Changes { revision, changes }
        if *revision == r2 && matches!(&changes[..], [SourceChange::Put { prev: Some(_), .. }])));
    let mut last = None;
    while let Some(e) = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap()
    {
        let e = e.unwrap();
        if let SourceEvent::Changes { revision, changes } = &e
            && matches!(&changes[..], [SourceChange::Delete { key: k, .. }] if k == key)
        {
            last = Some(*revision);
            break;
        }
    }
    assert_eq!(last, Some(rd));
    // Keys the watch's range takes in beside the prefix are not the prefix's changes.
    let beside = s
        .create("/registry/configmaps-x/ns/a", Bytes::new())
        .await
        .unwrap();
    let e = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap();
    assert_eq!(e.unwrap().unwrap(), SourceEvent::Progress { revision: beside });
    // Progress is asked for with a fence write: its notification follows every change before
    // it, on the watch's own channel (a requested notification on 3.4.23 could overtake them).
    let prefix = "/registry/configmaps/";
    let changed = s
        .update("/registry/configmaps/ns/p0", Bytes::from_static(b"changed"), None)
        .await
        .unwrap();
    Source::request_progress(&s, prefix).await.unwrap();
    let mut seen = Vec::new();
    let fenced = loop {
        match tokio::time::timeout(Duration::from_secs(5), w.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            SourceEvent::Progress { revision } => break revision,
            SourceEvent::Changes { revision, .. } => seen.push(revision),
        }
    };
    assert_eq!(seen, [changed], "the change came first");
    assert!(fenced > changed);
    assert_eq!(
        s.list(prefix, None).await.unwrap().items.len(),
        11,
        "no list of the prefix has the fence"
    );

    // The signing key is made once and shared by every replica.
    let other = source(&cluster).await;
    assert_eq!(s.signing_key().await.unwrap(), other.signing_key().await.unwrap());

    // Compaction: the first round only records the revision; the next compacts at it, and
    // the replica that lost the round learns the compacted revision from the key.
    let (round, seen) = s.compact_round(0, Revision::ZERO).await.unwrap();
    assert_eq!(round, 1);
    assert!(
        other.compact_round(0, Revision::ZERO).await.unwrap().0 == 1,
        "lost, told the round"
    );
    s.compact_round(round, seen).await.unwrap();
    assert_eq!(s.compacted(), seen);
    other.compact_round(round, seen).await.unwrap();
    assert_eq!(other.compacted(), seen, "the loser learns what was compacted");
    assert!(matches!(
        s.list("/registry/configmaps/", Some(Revision::new(seen.get() - 1)))
            .await,
        Err(SourceError::Compacted { .. })
    ));
    let mut old = s.watch("/registry/configmaps/", Revision::new(2)).await.unwrap();
    assert!(matches!(
        old.next().await,
        Some(Err(SourceError::Compacted { compact_revision })) if compact_revision == seen
    ));
}

/// The next item of `watch` that is not a progress notification.
async fn next_change(watch: &mut watchcache_etcd::EtcdWatch) -> Option<Result<SourceEvent, SourceError>> {
    loop {
        match watch.next().await {
            Some(Ok(SourceEvent::Progress { .. })) => {}
            other => return other,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_member_leaves_rotation_its_watch_moves_at_once_and_it_comes_back_when_it_answers() {
    let Some(mut cluster) = EtcdCluster::start(3).await else {
        return;
    };
    let s = source(&cluster).await;
    assert_eq!(s.in_rotation(), cluster.endpoints(), "every member answered");
    let leader = cluster.leader().await.expect("a leader");
    let prefix = "/registry/configmaps/";
    let from = Revision::new(s.current_revision().await.unwrap().get() + 1);
    // Watches go round-robin over the members in rotation: open them until one is on a
    // follower.
    let mut opened = 0;
    let (mut watch, dead) = loop {
        let w = s.watch(prefix, from).await.unwrap();
        if let Some(i) = (0..3).find(|&i| i != leader && cluster.endpoint(i) == w.endpoint()) {
            break (w, i);
        }
        opened += 1;
        assert!(opened < 6, "no watch on a follower: {w:?}");
    };
    let first = s
        .create("/registry/configmaps/ns/before", Bytes::new())
        .await
        .unwrap();
    assert!(
        matches!(next_change(&mut watch).await, Some(Ok(SourceEvent::Changes { revision, .. })) if revision == first)
    );

    let killed = Instant::now();
    cluster.kill(dead);
    // The watch fails at once (its connection broke), rather than after a keep-alive timeout,
    // and its member leaves rotation.
    let ended = tokio::time::timeout(Duration::from_secs(30), next_change(&mut watch))
        .await
        .expect("the watch of a dead member ends");
    let broke = killed.elapsed();
    assert!(
        matches!(ended, Some(Err(SourceError::Unavailable(_)))),
        "{ended:?}"
    );
    let dead_endpoint = cluster.endpoint(dead);
    assert!(!s.in_rotation().contains(&dead_endpoint), "{:?}", s.in_rotation());
    // The next watch opens on a live member, from where the last one stopped.
    let mut moved = s.watch(prefix, Revision::new(first.get() + 1)).await.unwrap();
    let reopened = killed.elapsed();
    assert_ne!(moved.endpoint(), dead_endpoint);
    // Reads, writes and watches go on without a failure, wherever rotation would have sent them.
    let mut written = Vec::new();
    for i in 0..30 {
        written.push(
            s.create(&format!("/registry/configmaps/ns/during-{i}"), Bytes::new())
                .await
                .unwrap(),
        );
        s.current_revision().await.unwrap();
        let w = s.watch(prefix, from).await.unwrap();
        assert_ne!(w.endpoint(), dead_endpoint);
    }
    for want in &written {
        let got = tokio::time::timeout(Duration::from_secs(30), next_change(&mut moved))
            .await
            .unwrap();
        assert!(
            matches!(got, Some(Ok(SourceEvent::Changes { revision, .. })) if revision == *want),
            "{got:?}"
        );
    }

    // Back, it answers the probe and returns to rotation: watches land on it again.
    cluster.restart(dead);
    let restarted = Instant::now();
    let deadline = restarted + Duration::from_secs(30);
    while !s.in_rotation().contains(&dead_endpoint) {
        assert!(
            Instant::now() < deadline,
            "the member never came back: {:?}",
            s.in_rotation()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let back = restarted.elapsed();
    let mut landed = false;
    for _ in 0..6 {
        landed |= s.watch(prefix, from).await.unwrap().endpoint() == dead_endpoint;
    }
    assert!(landed, "no watch on the member that came back");
    eprintln!(
        "a follower killed: its watch failed after {broke:?} and was open on another member after {reopened:?}; \
         restarted, it was back in rotation after {back:?}"
    );
}

/// Every change of `watch` until `last`, as (revision, key, value, previous value's revision),
/// failing after `within`.
async fn changes_through(
    watch: &mut watchcache_etcd::EtcdWatch,
    last: Revision,
    within: Duration,
) -> Vec<(Revision, String, Bytes, Option<Revision>)> {
    let mut seen: Vec<(Revision, String, Bytes, Option<Revision>)> = Vec::new();
    let read = async {
        while seen.last().is_none_or(|(r, ..)| *r < last) {
            match next_change(watch).await {
                Some(Ok(SourceEvent::Changes { revision, changes })) => {
                    for c in changes {
                        let SourceChange::Put { key, value, prev, .. } = c else {
                            panic!("only puts were written: {c:?}");
                        };
                        seen.push((revision, key, value, prev.map(|p| p.mod_revision)));
                    }
                }
                other => panic!("the watch ended: {other:?}"),
            }
        }
    };
    if tokio::time::timeout(within, read).await.is_err() {
        panic!(
            "{} changes in {within:?}, the last at {:?}; wanted every one through {last}",
            seen.len(),
            seen.last().map(|(r, ..)| *r)
        );
    }
    seen
}

/// History reads (catch-ups' watches from old revisions) hold up neither the watches the
/// caches follow nor each other, whatever their pace. Four whose consumers never read sit
/// beside a live watch and a fifth history read that starts reading only after 20 MiB has
/// been written. Without a connection of their own, the unread ones fill HTTP/2's shared
/// window and the live watch stalls; without their task reading etcd at once, they stall the
/// fifth. With a 256 KiB backlog, each has its etcd watch canceled while unread, and the
/// fifth, opened again as it reads, still gets every revision once, in order, with its
/// previous value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_reads_at_any_pace_hold_up_no_other_watch_and_lose_nothing() {
    let Some(cluster) = EtcdCluster::start(1).await else {
        return;
    };
    let options = EtcdOptions {
        history_backlog: 256 << 10,
        ..EtcdOptions::default()
    };
    let s = EtcdSource::connect(&cluster.endpoints(), options).await.unwrap();
    let prefix = "/registry/configmaps/";
    let from = Revision::new(s.current_revision().await.unwrap().get() + 1);
    let mut live = s.watch(prefix, from).await.unwrap();
    let mut stalled = Vec::new();
    for _ in 0..4 {
        stalled.push(s.watch_history(prefix, from).await.unwrap());
    }
    let mut history = s.watch_history(prefix, from).await.unwrap();
    // 40 keys of 64 KiB written 4 times: 160 revisions, 20 MiB with the previous values.
    let mut written = Vec::new();
    for round in 0..4 {
        for k in 0..40 {
            let key = format!("{prefix}ns/k{k}");
            let value = Bytes::from(format!("{round}-{k}-").repeat(64 << 10 >> 4));
            let revision = if round == 0 {
                s.create(&key, value.clone()).await.unwrap()
            } else {
                s.update(&key, value.clone(), None).await.unwrap()
            };
            written.push((revision, key, value));
        }
    }
    let last = written.last().unwrap().0;
    let check = |what: &str, got: Vec<(Revision, String, Bytes, Option<Revision>)>| {
        assert_eq!(got.len(), written.len(), "{what}: one change per write");
        let mut previous = BTreeMap::new();
        for ((r, key, value, prev), (wr, wkey, wvalue)) in got.iter().zip(&written) {
            assert_eq!((r, key), (wr, wkey), "{what}: in order, none lost or repeated");
            assert!(value == wvalue, "{what}: the value written at {wr}");
            assert_eq!(
                *prev,
                previous.insert(key.clone(), *r),
                "{what}: the previous value at {wr}"
            );
        }
    };
    check(
        "the live watch",
        changes_through(&mut live, last, Duration::from_secs(60)).await,
    );
    check(
        "the history read",
        changes_through(&mut history, last, Duration::from_secs(60)).await,
    );
    // The unread ones are intact too: read now, from where they were left.
    check(
        "a history read left unread",
        changes_through(&mut stalled[0], last, Duration::from_secs(60)).await,
    );
    // Every history read fell behind by more than its backlog while unread, and had its etcd
    // watch canceled; the two read through were opened again.
    let stats = s.history_stats();
    assert!(stats.paused >= 5, "{stats:?}");
    assert!(stats.opened >= 5 + 2, "{stats:?}");
}

/// A history read from far behind gets etcd's revisions in one batch of up to 1,000: its task
/// holds the backlog's worth of them for its reader, not the batch. 80 revisions of 32 to 80
/// KiB (a value, and from the second round its previous one; 4.4 MiB in all) are written
/// before the read opens. Unread, it holds at most its 256 KiB backlog and one revision, the
/// rest of the batch dropped; dropped unread, a read holds nothing. Read, it still gets every
/// revision once, in order, across the reopen that dropping the batch's rest takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_read_from_far_behind_holds_its_backlog_not_etcds_batch() {
    let Some(cluster) = EtcdCluster::start(1).await else {
        return;
    };
    let backlog = 256 << 10;
    let options = EtcdOptions {
        history_backlog: backlog,
        ..EtcdOptions::default()
    };
    let s = EtcdSource::connect(&cluster.endpoints(), options).await.unwrap();
    let prefix = "/registry/configmaps/";
    let from = Revision::new(s.current_revision().await.unwrap().get() + 1);
    let mut written = Vec::new();
    let mut largest = 0;
    for round in 0..2 {
        for k in 0..40 {
            let key = format!("{prefix}ns/k{k}");
            let value = Bytes::from(format!("{round}-{k}-").repeat(64 << 10 >> 3));
            largest = largest.max(2 * (key.len() + value.len()));
            let revision = if round == 0 {
                s.create(&key, value.clone()).await.unwrap()
            } else {
                s.update(&key, value.clone(), None).await.unwrap()
            };
            written.push((revision, key, value));
        }
    }
    let stats = || s.history_stats();
    let mut unread = s.watch_history(prefix, from).await.unwrap();
    history_until(&s, "never paused", |h| h.paused >= 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = stats().waiting;
    assert!(
        held <= backlog + largest,
        "{held} bytes held for an unread history read: more than its {backlog} B backlog and one \
         {largest} B revision"
    );
    assert!(
        held >= backlog / 2,
        "{held} bytes held: the read never filled its backlog"
    );
    assert!(stats().dropped > 0, "no batch was cut: {:?}", stats());
    // Another, dropped unread once it paused: what it held goes with it.
    let other = s.watch_history(prefix, from).await.unwrap();
    history_until(&s, "the second read never paused", |h| h.paused >= 2).await;
    drop(other);
    history_until(&s, "held after an unread read was dropped", |h| h.waiting == held).await;
    // The first, read now: every revision once, in order, from its backlog and the reopen
    // after the batch's rest was dropped.
    let got = changes_through(&mut unread, written.last().unwrap().0, Duration::from_secs(60)).await;
    assert_eq!(got.len(), written.len(), "one change per write");
    for ((r, key, value, _), (wr, wkey, wvalue)) in got.iter().zip(&written) {
        assert_eq!((r, key), (wr, wkey), "in order, none lost or repeated");
        assert!(value == wvalue, "the value written at {wr}");
    }
    assert!(
        stats().opened >= 3,
        "the first read was never opened again: {:?}",
        stats()
    );
    drop(unread);
    history_until(&s, "held after the read ended", |h| h.waiting == 0).await;
}

/// Waits until `done` holds of `s`'s history stats, failing with `what` after 20 s.
async fn history_until(s: &EtcdSource, what: &str, done: impl Fn(watchcache_etcd::HistoryStats) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(s.history_stats()) {
        assert!(Instant::now() < deadline, "{what}: {:?}", s.history_stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `apiserver_watch_cache_initializations_total` of `resource`: the lists its cache made.
async fn initializations(server: &Server, resource: &str) -> u64 {
    counter(
        server,
        &format!("apiserver_watch_cache_initializations_total{{resource=\"{resource}\"}}"),
    )
    .await
}

/// The value of the metric series `series` on `server`.
async fn counter(server: &Server, series: &str) -> u64 {
    let (_, body) = request(&http(), server, "GET", "/metrics", None).await;
    String::from_utf8_lossy(&body)
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {series}"))
}

/// One consistent read's view of the configmaps: the list's revision, and name → rv.
async fn consistent_list(server: &Server) -> (u64, BTreeMap<String, u64>) {
    let (code, v) = json_request(server, "GET", "/api/v1/namespaces/ha/configmaps", None).await;
    assert_eq!(code, 200, "{v}");
    let items = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["metadata"]["name"].as_str().unwrap().to_owned(), rv_of(i)))
        .collect();
    (rv_of(&v), items)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_never_serve_a_stale_consistent_read_on_etcd_3_4_23() {
    // etcd's periodic progress notifications at its default (10 minutes): nothing tells a
    // replica it is current but its own events and the fences it asks for, as in a real cluster.
    let Some(cluster) = EtcdCluster::start_with(1, Duration::from_secs(600)).await else {
        return;
    };
    // Each replica's watch lags etcd, as a busy replica's does: a read that trusted the cache
    // as it stands would miss the write just acknowledged through another one. The first two
    // reach every read's revision through fences, within their wait; the third lags longer
    // than it waits, so its reads go to etcd.
    let mut replicas = Vec::new();
    for (lag, wait) in [(30, 3000), (150, 3000), (400, 150)] {
        let lagging = EtcdOptions {
            watch_delay: Duration::from_millis(lag),
            ..EtcdOptions::default()
        };
        let etcd = EtcdSource::connect(&cluster.endpoints(), lagging).await.unwrap();
        let cfg = ServeConfig {
            fresh_timeout: Duration::from_millis(wait),
            ..on_etcd(&cluster)
        };
        let server = Server::start_with(cfg, Backend::Etcd(etcd)).await.unwrap();
        replicas.push(watchcache_tests::start_ready(server).await);
    }
    watchcache_tests::create_namespaces(&replicas[0], &["ha"]).await;
    // Values no codec reads, under the same prefix (encrypted at rest, another apiserver's
    // protobuf, a tool's): etcd counts them as keys of the prefix, the cache has no object
    // for them. A proof by counting keys was fooled by them.
    let direct = source(&cluster).await;
    let mut rng = fastrand::Rng::with_seed(14);
    // name → whether it exists, and the rv of its last acknowledged write (or deletion).
    let mut acked: BTreeMap<String, (bool, u64)> = BTreeMap::new();
    // The highest revision any completed operation returned.
    let mut high = 0u64;
    let (mut stale, mut reads, mut writes) = (0, 0, 0);
    let cms = "/api/v1/namespaces/ha/configmaps";
    let started = (Instant::now(), current(&direct).await);
    for op in 0..1_200 {
        let server = &replicas[rng.usize(0..replicas.len())];
        let name = format!("cm-{}", rng.usize(0..24));
        let exists = acked.get(&name).is_some_and(|(e, _)| *e);
        match rng.u8(0..14) {
            0..4 => {
                let (code, v) = if exists {
                    json_request(
                        server,
                        "PUT",
                        &format!("{cms}/{name}"),
                        Some(cm(&name, &op.to_string())),
                    )
                    .await
                } else {
                    json_request(server, "POST", cms, Some(cm(&name, &op.to_string()))).await
                };
                assert!(code == 200 || code == 201, "write {code}: {v}");
                let rv = rv_of(&v);
                assert!(rv > high, "a write's revision is new");
                high = rv;
                acked.insert(name, (true, rv));
                writes += 1;
            }
            4 if exists => {
                let (code, v) = json_request(server, "DELETE", &format!("{cms}/{name}"), None).await;
                assert_eq!(code, 200, "delete: {v}");
                high = current(&direct).await;
                acked.insert(name, (false, high));
                writes += 1;
            }
            4 => {
                // Created and deleted again: the count of keys is as it was.
                let brief = format!("brief-{op}");
                let (code, v) = json_request(server, "POST", cms, Some(cm(&brief, "x"))).await;
                assert_eq!(code, 201, "{v}");
                let other = &replicas[rng.usize(0..replicas.len())];
                let (code, v) = json_request(other, "DELETE", &format!("{cms}/{brief}"), None).await;
                assert_eq!(code, 200, "{v}");
                high = current(&direct).await;
                acked.insert(brief, (false, high));
                writes += 2;
            }
            5 => {
                let key = format!("/registry/configmaps/junk/undecodable-{op}");
                high = direct
                    .create(&key, Bytes::from_static(b"k8s:enc:aescbc:v1:key1:..."))
                    .await
                    .unwrap()
                    .get();
                writes += 1;
            }
            6..9 => {
                let (code, v) = json_request(server, "GET", &format!("{cms}/{name}"), None).await;
                reads += 1;
                match acked.get(&name) {
                    Some(&(true, w)) if code != 200 || rv_of(&v) < w => stale += 1,
                    Some(&(false, _)) if code != 404 => stale += 1,
                    None if code != 404 => panic!("never written, yet {code}: {v}"),
                    _ => {}
                }
            }
            9..12 => {
                let (rv, items) = consistent_list(server).await;
                reads += 1;
                let behind = rv < high
                    || acked.iter().any(|(n, &(e, w))| match items.get(n) {
                        Some(&got) => !e || got < w,
                        None => e,
                    });
                if behind {
                    stale += 1;
                }
                high = high.max(rv);
            }
            _ => {
                // A resource nobody writes: its cache never moves, yet a consistent read of it
                // must be at the store's revision.
                let (code, v) = json_request(server, "GET", "/api/v1/secrets", None).await;
                assert_eq!(code, 200, "{v}");
                reads += 1;
                if rv_of(&v) < high {
                    stale += 1;
                }
                high = high.max(rv_of(&v));
            }
        }
    }
    let (mut from_store, mut fences) = (0, 0);
    for r in &replicas {
        for resource in ["configmaps", "secrets"] {
            let series = |name: &str| format!("watchcache_{name}_total{{resource=\"{resource}\"}}");
            from_store += counter(r, &series("store_reads")).await;
            fences += counter(r, &series("progress_requests")).await;
        }
    }
    let moved = current(&direct).await - started.1;
    eprintln!(
        "{writes} writes and {reads} consistent reads over three replicas in {:?}: {stale} stale; \
         {from_store} read from etcd, {fences} progress requests; etcd's revision moved {moved} \
         ({} by fences)",
        started.0.elapsed(),
        moved.saturating_sub(writes)
    );
    assert_eq!(stale, 0, "stale consistent reads");
    assert!(reads >= 500 && writes >= 300);
    assert!(
        fences > 0,
        "the quiet resource and the lagging caches asked for progress"
    );
    assert!(
        from_store > 0,
        "the replica that waits less than it lags read from etcd: that path ran too"
    );
    for r in replicas {
        r.shutdown().await.unwrap();
    }
}

/// The first event of `watch` within 5 s.
async fn next_event(watch: &mut watchcache_etcd::EtcdWatch) -> SourceEvent {
    tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("an event in time")
        .expect("the watch goes on")
        .expect("no error")
}

/// On etcd 3.4.23 a fence moves etcd's revision, which every other cache of the source must
/// then reach too: one fence transaction writes the fence key of every watched prefix at one
/// revision, every watch yields it as progress (none as a change, none in a list), and
/// requests made together share their transactions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_fence_transaction_serves_every_watched_prefix_and_concurrent_requests_share_it() {
    let Some(cluster) = EtcdCluster::start_with(1, Duration::from_secs(600)).await else {
        return;
    };
    let s = source(&cluster).await;
    // `/registry/configmaps-x`, the second one's fence key, lies in the first one's watch
    // range (`[/registry/configmaps, /registry/configmaps0)`), outside its prefix.
    let prefixes = [
        "/registry/configmaps/",
        "/registry/configmaps-x/",
        "/registry/pods/",
        "/registry/secrets/",
    ];
    let from = Revision::new(current(&s).await + 1);
    let mut watches = Vec::new();
    for p in prefixes {
        watches.push(s.watch(p, from).await.unwrap());
    }

    // Asked for one prefix, a fence is written for all of them, in one revision.
    let before = current(&s).await;
    Source::request_progress(&s, "/registry/secrets/").await.unwrap();
    let fenced = current(&s).await;
    assert_eq!(fenced, before + 1, "one transaction");
    for (p, w) in prefixes.iter().zip(&mut watches) {
        assert_eq!(
            next_event(w).await,
            SourceEvent::Progress {
                revision: Revision::new(fenced)
            },
            "{p}: the fence's revision, as progress"
        );
    }
    for p in prefixes {
        assert_eq!(
            s.list(p, None).await.unwrap().items,
            [],
            "no list of {p} has a fence"
        );
    }
    // etcd has not moved since: another prefix's watch already has its fence at etcd's
    // revision, so its request writes nothing.
    Source::request_progress(&s, "/registry/pods/").await.unwrap();
    assert_eq!(current(&s).await, fenced, "nothing written");

    // A write moves etcd, then 40 requests at once over the four prefixes: one transaction
    // (and at most one more, for the requests made while it was in flight), not one each.
    let written = s.create("/registry/configmaps/ns/a", Bytes::new()).await.unwrap();
    let requests = (0..40).map(|i| Source::request_progress(&s, prefixes[i % prefixes.len()]));
    for r in futures_util::future::join_all(requests).await {
        r.unwrap();
    }
    let after = current(&s).await;
    eprintln!(
        "40 concurrent progress requests over {} prefixes: {} fence transactions",
        prefixes.len(),
        after - written.get()
    );
    assert!(
        (1..=2).contains(&(after - written.get())),
        "{} fence transactions for 40 requests",
        after - written.get()
    );
    // Every watch: the write (the configmaps' alone), then its fence in each round, the last
    // at etcd's revision.
    for (i, (p, w)) in prefixes.iter().zip(&mut watches).enumerate() {
        let mut got = Vec::new();
        while got.last()
            != Some(&SourceEvent::Progress {
                revision: Revision::new(after),
            })
        {
            got.push(next_event(w).await);
        }
        let (changes, fences) = got.split_at(usize::from(i == 0));
        if i == 0 {
            assert!(
                matches!(changes, [SourceEvent::Changes { revision, changes }] if *revision == written && changes.len() == 1),
                "{p}: the write first: {got:?}"
            );
        }
        assert!(
            fences
                .iter()
                .all(|e| matches!(e, SourceEvent::Progress { revision } if *revision > written)),
            "{p}: fences after the write: {got:?}"
        );
    }

    // More prefixes than etcd takes operations in one transaction (its default
    // --max-txn-ops, 128): a transaction per 128 keys, and every watch has its fence.
    let many: Vec<String> = (0..150).map(|i| format!("/registry/many-{i:03}/")).collect();
    let from = Revision::new(after + 1);
    let mut more = Vec::new();
    for p in &many {
        more.push(s.watch(p, from).await.unwrap());
    }
    let before = current(&s).await;
    Source::request_progress(&s, &many[0]).await.unwrap();
    let after = current(&s).await;
    assert_eq!(after - before, 2, "154 fence keys in two transactions");
    for (p, w) in prefixes
        .iter()
        .copied()
        .chain(many.iter().map(String::as_str))
        .zip(watches.iter_mut().chain(&mut more))
    {
        let got = next_event(w).await;
        assert!(
            matches!(got, SourceEvent::Progress { revision } if revision.get() > before && revision.get() <= after),
            "{p}: its fence: {got:?}"
        );
    }
}

/// Cluster-wide LISTs of every resource a replica caches.
const LISTS: [&str; 11] = [
    "/api/v1/secrets",
    "/api/v1/configmaps",
    "/api/v1/pods",
    "/api/v1/events",
    "/api/v1/namespaces",
    "/api/v1/nodes",
    "/apis/coordination.k8s.io/v1/leases",
    "/apis/rbac.authorization.k8s.io/v1/roles",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "/apis/rbac.authorization.k8s.io/v1/rolebindings",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
];

/// The review's case: consistent reads spread over resources nobody writes, on one replica of
/// etcd 3.4.23. A fence for one resource moved etcd's revision past every other cache, so
/// each read wrote a fence of its own (one raft write per read); one fence transaction for
/// every cache leaves all of them at etcd's revision, and the reads that follow write nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_reads_over_quiet_resources_share_their_fences_on_etcd_3_4_23() {
    // etcd's periodic progress notifications at its default (10 minutes): only fences bring
    // a quiet cache to etcd's revision.
    let Some(cluster) = EtcdCluster::start_with(1, Duration::from_secs(600)).await else {
        return;
    };
    let server = serve(on_etcd(&cluster)).await;
    let etcd = source(&cluster).await;
    // The server's own controllers write at start (each namespace's default ServiceAccount,
    // the kubernetes Service): measured once they are done.
    let mut quiet = current(&etcd).await;
    loop {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let now = current(&etcd).await;
        if now == quiet {
            break;
        }
        quiet = now;
    }
    let client = http();
    let list = |path: &'static str| {
        let (client, server) = (&client, &server);
        async move {
            let (code, body) = request(client, server, "GET", path, None).await;
            assert_eq!(code, 200, "{path}: {}", String::from_utf8_lossy(&body));
        }
    };

    // Consistent LISTs of three resources in turn, with no write at all.
    const TURNS: usize = 50;
    let before = current(&etcd).await;
    let started = Instant::now();
    for _ in 0..TURNS {
        for path in &LISTS[..3] {
            list(path).await;
        }
    }
    let took = started.elapsed();
    let in_turn = current(&etcd).await - before;
    let reads = TURNS * 3;
    eprintln!(
        "{reads} consistent LISTs of 3 quiet resources in turn: etcd's revision moved {in_turn} \
         ({:.2} per read), {:.1} ms per read",
        in_turn as f64 / reads as f64,
        took.as_secs_f64() * 1000.0 / reads as f64
    );

    // A write leaves every cache but one behind; then a reader per resource, all at once, for
    // 2 s (the figure is revisions per read, however many reads that makes).
    let (code, v) = json_request(
        &server,
        "POST",
        "/api/v1/namespaces/ha/configmaps",
        Some(cm("x", "1")),
    )
    .await;
    assert_eq!(code, 201, "{v}");
    let before = current(&etcd).await;
    let started = Instant::now();
    let until = started + Duration::from_secs(2);
    let each = futures_util::future::join_all(LISTS.map(|path| async move {
        let mut reads = 0;
        while Instant::now() < until {
            list(path).await;
            reads += 1;
        }
        reads
    }))
    .await;
    let took = started.elapsed();
    let together = current(&etcd).await - before;
    let reads: usize = each.iter().sum();
    let (mut requests, mut from_store) = (0, 0);
    for path in LISTS {
        // The metrics name a resource outside the core group with its group, as the
        // apiserver's do (`leases.coordination.k8s.io`).
        let plural = path.rsplit('/').next().unwrap();
        let resource = match path.strip_prefix("/apis/") {
            Some(rest) => format!("{plural}.{}", rest.split('/').next().unwrap()),
            None => plural.to_owned(),
        };
        let series = |name: &str| format!("watchcache_{name}_total{{resource=\"{resource}\"}}");
        requests += counter(&server, &series("progress_requests")).await;
        from_store += counter(&server, &series("store_reads")).await;
    }
    eprintln!(
        "{reads} consistent LISTs by {} readers at once (one per resource) in {took:?}: etcd's \
         revision moved {together} ({:.2} per read), {:.1} ms per read and reader; {requests} \
         progress requests in all, {from_store} reads from etcd",
        LISTS.len(),
        together as f64 / reads as f64,
        took.as_secs_f64() * 1000.0 * LISTS.len() as f64 / reads as f64
    );

    // One fence transaction when a read first finds its cache behind (the namespace the
    // tests write in moved etcd past the others), and at most one more for the requests made
    // while it was in flight; none once every cache is at etcd's revision.
    assert!(
        in_turn <= 2,
        "{in_turn} revisions for {} reads in turn",
        TURNS * 3
    );
    assert!(reads >= LISTS.len(), "every reader read");
    assert!(together <= 2, "{together} revisions for {reads} reads at once");
    server.shutdown().await.unwrap();
}

/// etcd's current revision.
async fn current(s: &EtcdSource) -> u64 {
    s.current_revision().await.unwrap().get()
}

/// Creates configmap `name` through `server`, retrying while the cluster elects a leader; its
/// revision. A retry that finds it created (the first attempt's answer was lost) reads it.
async fn create_surely(server: &Server, name: &str) -> u64 {
    create_counting(server, name).await.0
}

/// As [`create_surely`], and when each attempt that failed began and ended, with its answer:
/// a test of failover counts them rather than hide them behind the retries.
async fn create_counting(server: &Server, name: &str) -> (u64, Vec<(Instant, Instant, String)>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut failed = Vec::new();
    loop {
        let started = Instant::now();
        let (code, v) = json_request(
            server,
            "POST",
            "/api/v1/namespaces/ha/configmaps",
            Some(cm(name, "x")),
        )
        .await;
        match code {
            201 => return (rv_of(&v), failed),
            409 => {
                // Only after a failed attempt: that one was applied after all.
                assert!(!failed.is_empty(), "{name} created twice: {v}");
                let path = format!("/api/v1/namespaces/ha/configmaps/{name}");
                let (code, v) = json_request(server, "GET", &path, None).await;
                if code == 200 {
                    return (rv_of(&v), failed);
                }
            }
            _ => failed.push((started, Instant::now(), format!("{code} {}", v["message"]))),
        }
        assert!(Instant::now() < deadline, "writes did not resume: {code} {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_mid_stream_loses_no_write_and_ends_no_watch() {
    let Some(mut cluster) = EtcdCluster::start(3).await else {
        return;
    };
    let server = serve(on_etcd(&cluster)).await;
    let (_, list) = json_request(&server, "GET", "/api/v1/namespaces/ha/configmaps", None).await;
    let path = format!(
        "/api/v1/namespaces/ha/configmaps?watch=1&resourceVersion={}",
        rv_of(&list)
    );
    let mut watch = Frames::open(&server, &path).await;
    let mut written = Vec::new();
    let mut failed = Vec::new();
    for i in 0..20 {
        let (rv, failures) = create_counting(&server, &format!("cm-{i:02}")).await;
        written.push(rv);
        failed.extend(failures);
    }
    assert_eq!(failed, [], "writes failed before the leader died");
    let leader = cluster.leader().await.expect("a leader");
    let killed = Instant::now();
    cluster.kill(leader);
    eprintln!("killed member {leader}, the leader");
    // The writes go on at once, one at a time, while a watcher of the cluster notes when a new
    // leader is elected.
    let cluster = Arc::new(cluster);
    let elected = tokio::spawn({
        let cluster = cluster.clone();
        async move { until_elected(&cluster).await }
    });
    for i in 20..60 {
        let (rv, failures) = create_counting(&server, &format!("cm-{i:02}")).await;
        written.push(rv);
        failed.extend(failures);
    }
    let elected = elected.await.unwrap();
    // Only an attempt under way during the election may fail (and be retried above), and one
    // at most: the first write after the kill, if the server wrote it on its connection to the
    // dead leader before seeing that connection close (sent, as far as anyone can tell, so not
    // retried). Every later one finds the connection refused and waits for the new leader; the
    // server retries what never left and what etcd refused before proposing it. The member
    // that died stays dead: every other attempt succeeds.
    let show = |f: &[&(Instant, Instant, String)]| {
        f.iter()
            .map(|(started, ended, answer)| {
                format!(
                    "\n  at {:+?} ms for {:?}: {answer}",
                    started.duration_since(killed).as_millis() as i128
                        - killed.duration_since(*started).as_millis() as i128,
                    *ended - *started
                )
            })
            .collect::<String>()
    };
    let all: Vec<_> = failed.iter().collect();
    eprintln!(
        "a new leader {:?} after the kill; {} failed attempts:{}",
        elected - killed,
        failed.len(),
        show(&all)
    );
    let outside: Vec<_> = failed
        .iter()
        .filter(|(started, ended, _)| *started > elected || *ended < killed)
        .collect();
    assert!(
        outside.is_empty(),
        "failed while the cluster had a leader:{}",
        show(&outside[..outside.len().min(10)])
    );
    assert!(
        failed.len() <= 1,
        "{} failed in the election:{}",
        failed.len(),
        show(&all)
    );
    let mut seen = Vec::new();
    while seen.len() < written.len() {
        let frame = watch
            .next_within(Duration::from_secs(30))
            .await
            .expect("the watch keeps delivering")
            .expect("the watch stays open");
        assert_eq!(frame["type"], "ADDED", "no ERROR, no 410: {frame}");
        seen.push(rv_of(&frame["object"]));
    }
    assert_eq!(seen, written, "every write, once, in order");
    assert_eq!(
        initializations(&server, "configmaps").await,
        1,
        "the cache watched again from its last revision on another member: no relist"
    );
    server.shutdown().await.unwrap();
}

/// One request of the failover load: what it was, when it ran, what it got.
#[derive(Debug)]
struct Outcome {
    /// `POST`, `PUT` or `LIST`.
    what: &'static str,
    /// The value a write stored (unique to the write), empty for a LIST.
    tag: String,
    started: Instant,
    ended: Instant,
    code: u16,
    /// The resourceVersion a successful write answered.
    rv: u64,
    /// The answer of a failure.
    error: String,
}

impl Outcome {
    fn failed(&self) -> bool {
        !(200..300).contains(&self.code)
    }
}

/// The first failures of `failed`, one a line, timed from `started`.
fn summary(failed: &[&Outcome], started: Instant) -> String {
    let mut lines: Vec<String> = failed
        .iter()
        .take(10)
        .map(|o| {
            format!(
                "  {} {} at +{:?} for {:?}: {} {}",
                o.what,
                o.tag,
                o.started - started,
                o.ended - o.started,
                o.code,
                o.error
            )
        })
        .collect();
    if failed.len() > 10 {
        lines.push(format!("  and {} more", failed.len() - 10));
    }
    lines.join("\n")
}

/// Sends one request of the load: no retry, whatever it answers is what is counted.
async fn timed(
    client: &Http,
    server: &Server,
    what: &'static str,
    path: &str,
    tag: &str,
    body: Option<Value>,
) -> Outcome {
    let method = if what == "LIST" { "GET" } else { what };
    let started = Instant::now();
    let (code, body) = request(client, server, method, path, body).await;
    let ended = Instant::now();
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let ok = (200..300).contains(&code);
    Outcome {
        what,
        tag: tag.to_owned(),
        started,
        ended,
        code,
        rv: if ok && what != "LIST" { rv_of(&v) } else { 0 },
        error: if ok {
            String::new()
        } else {
            v["message"].as_str().unwrap_or("").to_owned()
        },
    }
}

/// Writer `w` until `stop`: creates a configmap, then replaces its value, each value unique
/// (`w<w>-<n>-c`, `w<w>-<n>-u`), so that the watches can tell every write apart.
async fn failover_writer(server: Arc<Server>, w: usize, stop: Arc<AtomicBool>) -> Vec<Outcome> {
    let client = http();
    let mut out = Vec::new();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let name = format!("w{w}-{n}");
        let tag = format!("{name}-c");
        let created = timed(
            &client,
            &server,
            "POST",
            "/api/v1/namespaces/ha/configmaps",
            &tag,
            Some(cm(&name, &tag)),
        )
        .await;
        let ok = !created.failed();
        out.push(created);
        if ok {
            let tag = format!("{name}-u");
            let path = format!("/api/v1/namespaces/ha/configmaps/{name}");
            out.push(timed(&client, &server, "PUT", &path, &tag, Some(cm(&name, &tag))).await);
        }
        n += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    out
}

/// A consistent reader until `stop`: LISTs without a resourceVersion, which the cache answers
/// only once it has reached etcd's revision (or etcd answers).
async fn failover_reader(server: Arc<Server>, stop: Arc<AtomicBool>) -> Vec<Outcome> {
    let client = http();
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        out.push(
            timed(
                &client,
                &server,
                "LIST",
                "/api/v1/namespaces/ha/configmaps",
                "",
                None,
            )
            .await,
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    out
}

/// What a watcher of the failover test saw: each event's value and revision with the time it
/// arrived, and why it ended, if it did.
#[derive(Default)]
struct Watched {
    events: Vec<(String, u64, Instant)>,
    ended: Option<String>,
}

/// Reads a watch until `quit`, recording every event.
async fn failover_watcher(mut frames: Frames, seen: Arc<std::sync::Mutex<Watched>>, quit: Arc<AtomicBool>) {
    while !quit.load(Ordering::Relaxed) {
        let frame = match frames.next_within(Duration::from_millis(200)).await {
            Err(()) => continue,
            Ok(None) => {
                seen.lock().unwrap().ended = Some("the stream ended".into());
                return;
            }
            Ok(Some(frame)) => frame,
        };
        let mut seen = seen.lock().unwrap();
        match frame["type"].as_str() {
            Some("ADDED" | "MODIFIED") => {
                let tag = frame["object"]["data"]["v"].as_str().unwrap_or("").to_owned();
                seen.events.push((tag, rv_of(&frame["object"]), Instant::now()));
            }
            _ => {
                seen.ended = Some(format!("{frame}"));
                return;
            }
        }
    }
}

/// Polls until a running member reports itself the leader; when it did.
async fn until_elected(cluster: &EtcdCluster) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if cluster.leader().await.is_some() {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "no new leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_follower_then_a_dead_leader_fail_no_request_outside_the_election() {
    const WRITERS: usize = 3;
    const READERS: usize = 2;
    const WATCHERS: usize = 2;
    let Some(mut cluster) = EtcdCluster::start(3).await else {
        return;
    };
    let server = Arc::new(serve(on_etcd(&cluster)).await);
    let (code, list) = json_request(&server, "GET", "/api/v1/namespaces/ha/configmaps", None).await;
    assert_eq!(code, 200, "{list}");
    let from = rv_of(&list);
    let (stop, quit) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let mut watched = Vec::new();
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let path = format!("/api/v1/namespaces/ha/configmaps?watch=1&resourceVersion={from}");
        let frames = Frames::open(&server, &path).await;
        let seen = Arc::new(std::sync::Mutex::new(Watched::default()));
        watched.push(seen.clone());
        watchers.push(tokio::spawn(failover_watcher(frames, seen, quit.clone())));
    }
    let mut load = Vec::new();
    for w in 0..WRITERS {
        load.push(tokio::spawn(failover_writer(server.clone(), w, stop.clone())));
    }
    for _ in 0..READERS {
        load.push(tokio::spawn(failover_reader(server.clone(), stop.clone())));
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;

    // A follower dies: the cluster keeps its quorum, so nothing may fail.
    let leader = cluster.leader().await.expect("a leader");
    let follower = (leader + 1) % 3;
    // Each death's instant is taken before the signal: a request may fail before kill()
    // returns, once the process is reaped.
    let follower_killed = Instant::now();
    cluster.kill(follower);
    eprintln!("killed member {follower}, a follower");
    tokio::time::sleep(Duration::from_secs(6)).await;
    // It comes back (without it, the leader's death would leave no quorum) and rejoins.
    cluster.restart(follower);
    cluster.wait_healthy().await;
    let follower_back = Instant::now();
    tokio::time::sleep(Duration::from_secs(4)).await;

    // The leader dies: requests in flight during the election may fail, no other.
    let leader_killed = Instant::now();
    cluster.kill(leader);
    let elected = until_elected(&cluster).await;
    eprintln!(
        "killed member {leader}, the leader; a new one after {:?}",
        elected - leader_killed
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.store(true, Ordering::Relaxed);
    let mut outcomes = Vec::new();
    for task in load {
        outcomes.extend(task.await.unwrap());
    }

    // Every write that was acknowledged reaches every watch, once.
    let acked: BTreeMap<&str, (u64, Instant)> = outcomes
        .iter()
        .filter(|o| o.what != "LIST" && !o.failed())
        .map(|o| (o.tag.as_str(), (o.rv, o.ended)))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while watched.iter().any(|w| {
        let w = w.lock().unwrap();
        w.ended.is_none() && w.events.len() < acked.len()
    }) && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    quit.store(true, Ordering::Relaxed);
    for task in watchers {
        task.await.unwrap();
    }

    // The figures.
    let in_election = |o: &Outcome| o.started <= elected && o.ended >= leader_killed;
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.failed()).collect();
    let (outside, inside): (Vec<&Outcome>, Vec<&Outcome>) = failed.iter().partition(|o| !in_election(o));
    let count = |what: &str| outcomes.iter().filter(|o| o.what == what).count();
    eprintln!(
        "{} requests in {:?} ({} POST, {} PUT, {} consistent LIST) by {WRITERS} writers and {READERS} readers; \
         {} failed outside the election, {} in flight during it (a new leader {:?} after the kill)",
        outcomes.len(),
        started.elapsed(),
        count("POST"),
        count("PUT"),
        count("LIST"),
        outside.len(),
        inside.len(),
        elected - leader_killed,
    );
    for (phase, from, to) in [
        ("before any death", started, follower_killed),
        ("a follower dead", follower_killed, follower_back),
        ("the follower back", follower_back, leader_killed),
        ("the election", leader_killed, elected),
        ("after the election", elected, Instant::now()),
    ] {
        let during: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| o.started >= from && o.started < to)
            .collect();
        let failed = during.iter().filter(|o| o.failed()).count();
        eprintln!(
            "  {phase} ({:?}): {} requests begun, {failed} failed",
            to - from,
            during.len()
        );
    }
    eprintln!("{}", summary(&failed, started));
    // How long a write took to reach the watches after each death: when the cache's watch
    // was on the member that died, the time to move it to another.
    for (what, at) in [
        ("the follower's death", follower_killed),
        ("the leader's death", leader_killed),
        ("the follower's return", follower_back),
    ] {
        let lag = watched
            .iter()
            .flat_map(|w| {
                let w = w.lock().unwrap();
                w.events
                    .iter()
                    .filter_map(|(tag, _, arrived)| {
                        let (_, ack) = acked.get(tag.as_str())?;
                        (*ack >= at && *ack < at + Duration::from_secs(3))
                            .then(|| arrived.saturating_duration_since(*ack))
                    })
                    .collect::<Vec<_>>()
            })
            .max();
        eprintln!("  longest write-to-watch delay in the 3 s after {what}: {lag:?}");
    }

    assert!(
        outside.is_empty(),
        "requests failed while the cluster had a leader:\n{}",
        summary(&outside, started)
    );
    // During the election, only a write the leader held when it died (or that was written on
    // its connection before the server saw it close) may fail, one per writer at most: each
    // has one request in flight, and once that one failed the connection is known to be gone,
    // so the next is refused before it leaves and waits for the new leader. Reads, and writes
    // etcd refused before proposing them, are retried by the server.
    assert!(
        inside.len() <= WRITERS,
        "{} requests failed in the election:\n{}",
        inside.len(),
        summary(&inside, started)
    );
    let failed_writes: std::collections::BTreeSet<&str> = failed
        .iter()
        .filter(|o| o.what != "LIST")
        .map(|o| o.tag.as_str())
        .collect();
    for (i, w) in watched.iter().enumerate() {
        let w = w.lock().unwrap();
        assert_eq!(w.ended, None, "watch {i} ended");
        let mut times: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for (tag, rv, _) in &w.events {
            times.entry(tag.as_str()).or_default().push(*rv);
        }
        for (tag, rvs) in &times {
            match acked.get(tag) {
                Some((rv, _)) => assert_eq!(rvs, &vec![*rv], "watch {i}: acknowledged write {tag}, once"),
                None => {
                    assert!(failed_writes.contains(tag), "watch {i}: {tag} was never written");
                    assert_eq!(rvs.len(), 1, "watch {i}: failed write {tag} applied twice");
                }
            }
        }
        let lost: Vec<&&str> = acked.keys().filter(|t| !times.contains_key(**t)).collect();
        assert!(lost.is_empty(), "watch {i} lost acknowledged writes: {lost:?}");
    }
    assert!(count("POST") > 100 && count("LIST") > 100, "a steady load ran");
    Arc::into_inner(server)
        .expect("the load is over")
        .shutdown()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_leader_readyz_says_so_rv0_reads_go_on_and_consistent_reads_are_504() {
    let Some(mut cluster) = EtcdCluster::start(3).await else {
        return;
    };
    let server = serve(on_etcd(&cluster)).await;
    create_surely(&server, "before").await;
    let leader = cluster.leader().await.expect("a leader");
    for i in (0..3).filter(|&i| i != leader).take(2) {
        cluster.kill(i);
    }
    // Two of three gone: whichever member is left has no quorum, so no leader.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (code, body) = loop {
        let (code, body) = request(&http(), &server, "GET", "/readyz", None).await;
        if code != 200 || Instant::now() > deadline {
            break (code, String::from_utf8_lossy(&body).into_owned());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("no leader"), "{body}");
    // rv=0: served from the cache as it stands.
    let (code, v) = json_request(
        &server,
        "GET",
        "/api/v1/namespaces/ha/configmaps?resourceVersion=0",
        None,
    )
    .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["items"][0]["metadata"]["name"], "before");
    // Consistent: 504 with a retry.
    for path in [
        "/api/v1/namespaces/ha/configmaps",
        "/api/v1/namespaces/ha/configmaps/before",
    ] {
        let (code, v) = json_request(&server, "GET", path, None).await;
        assert_eq!(code, 504, "{path}: {v}");
        assert_eq!(v["details"]["retryAfterSeconds"], 1, "{v}");
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_spares_caught_up_watches_and_expires_old_continue_tokens() {
    let Some(cluster) = EtcdCluster::start(1).await else {
        return;
    };
    // The other replica is up and watching before compaction starts: a cache whose first
    // watch opens after etcd compacted past its list must relist, and that is not this test.
    // Etcd compacts to what it held an interval before, so a watch that lags less than
    // a second (a loaded machine) is never compacted past either.
    let other = serve(on_etcd(&cluster)).await;
    let mut cfg = on_etcd(&cluster);
    cfg.compaction_interval = Duration::from_secs(1);
    let compacting = serve(cfg).await;
    for i in 0..12 {
        create_surely(&compacting, &format!("cm-{i:02}")).await;
    }
    let (code, page) = json_request(&other, "GET", "/api/v1/namespaces/ha/configmaps?limit=5", None).await;
    assert_eq!(code, 200);
    let token = page["metadata"]["continue"].as_str().unwrap().to_owned();
    let listed = rv_of(&page);
    // The other replica honours the token too (its key is kept in etcd).
    let next = format!("/api/v1/namespaces/ha/configmaps?limit=5&continue={token}");
    let (code, _) = json_request(&compacting, "GET", &next, None).await;
    assert_eq!(code, 200);

    let path = format!("/api/v1/namespaces/ha/configmaps?watch=1&resourceVersion={listed}");
    let mut watch = Frames::open(&other, &path).await;
    // Writes go on until etcd has compacted past the list's revision.
    let etcd = source(&cluster).await;
    let mut written = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while etcd.refresh_compacted().await.unwrap().get() <= listed {
        assert!(Instant::now() < deadline, "no compaction");
        written.push(create_surely(&other, &format!("later-{}", written.len())).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    written.push(create_surely(&other, "last").await);
    // The watch was caught up: it goes on, with every write.
    for want in &written {
        let frame = watch.next_within(Duration::from_secs(10)).await.unwrap().unwrap();
        assert_eq!(
            (frame["type"].as_str(), rv_of(&frame["object"])),
            (Some("ADDED"), *want),
            "{frame}"
        );
    }
    // Both replicas learn of the compaction (the other one from etcd, at its next round or
    // its next refusal); a continue token or an Exact LIST below it is 410.
    eprintln!(
        "listed at {listed}; etcd compacted at {}",
        etcd.refresh_compacted().await.unwrap()
    );
    for (i, server) in [&compacting, &other].into_iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (code, v) = json_request(server, "GET", &next, None).await;
            if code == 410 {
                assert_eq!(v["reason"], "Expired", "{v}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "replica {i}: the token still works: {code} {v}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let exact =
            format!("/api/v1/namespaces/ha/configmaps?resourceVersion={listed}&resourceVersionMatch=Exact");
        let (code, v) = json_request(server, "GET", &exact, None).await;
        assert_eq!(code, 410, "{v}");
        // Caught up, the caches' own watches were never cancelled: no new generation.
        assert_eq!(initializations(server, "configmaps").await, 1, "replica {i}");
    }
    compacting.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

/// Starts `watchers` kube-rs watchers of pods against `addr`; each counts the (re)lists it
/// makes, and records the newest revision it has seen.
fn kube_watchers(addr: std::net::SocketAddr, watchers: usize) -> (Arc<AtomicUsize>, Vec<Arc<AtomicUsize>>) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::watcher::{self, Event};
    use kube::{Api, Client, Config, ResourceExt};
    let inits = Arc::new(AtomicUsize::new(0));
    let mut newest = Vec::new();
    for _ in 0..watchers {
        let url = format!("http://{addr}").parse().unwrap();
        let client = Client::try_from(Config::new(url)).unwrap();
        let api: Api<Pod> = Api::all(client);
        let inits = inits.clone();
        let seen = Arc::new(AtomicUsize::new(0));
        newest.push(seen.clone());
        tokio::spawn(async move {
            let mut stream = watcher::watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(e) = stream.next().await {
                match e {
                    Ok(Event::Init) => {
                        inits.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Event::Apply(p) | Event::InitApply(p) | Event::Delete(p)) => {
                        let rv = p.resource_version().and_then(|r| r.parse().ok()).unwrap_or(0);
                        seen.fetch_max(rv, Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
        });
    }
    (inits, newest)
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Restarts a replica under 100 kube-rs watchers, with writes while it is down; returns how
/// many relists the watchers made after the restart.
async fn relists_after_a_restart(history_fill: bool, catch_up: bool) -> Option<usize> {
    let cluster = EtcdCluster::start(1).await?;
    let etcd = source(&cluster).await;
    let mut cfg = on_etcd(&cluster);
    cfg.history_fill = history_fill;
    if !catch_up {
        cfg.catch_up = None;
    }
    let first = serve(cfg.clone()).await;
    let addr = first.addr();
    let pod = |i: usize, g: u64| Bytes::from(watchcache_server::workload::pod(i, 1, g).to_string());
    let mut last_pod = Revision::ZERO;
    for i in 0..10 {
        last_pod = etcd
            .create(&watchcache_server::workload::pod_key(i), pod(i, 0))
            .await
            .unwrap();
    }
    let (inits, newest) = kube_watchers(addr, 100);
    // The last pod's revision (the server's own controllers write other kinds meanwhile).
    let current = last_pod.get() as usize;
    until("every watcher has listed", || {
        newest.iter().all(|n| n.load(Ordering::Relaxed) >= current)
    })
    .await;
    assert_eq!(inits.load(Ordering::Relaxed), 100, "one list each");

    first.shutdown().await.unwrap();
    // Writes while the replica is down: the watchers' revisions fall behind the store's.
    for g in 1..=5 {
        etcd.update(&watchcache_server::workload::pod_key(0), pod(0, g), None)
            .await
            .unwrap();
    }
    let restarted = serve(ServeConfig { addr, ..cfg }).await;
    let last = etcd
        .update(&watchcache_server::workload::pod_key(1), pod(1, 9), None)
        .await
        .unwrap()
        .get() as usize;
    until("every watcher has the last write", || {
        newest.iter().all(|n| n.load(Ordering::Relaxed) >= last)
    })
    .await;
    let relists = inits.load(Ordering::Relaxed) - 100;
    let (_, metrics) = request(&http(), &restarted, "GET", "/metrics", None).await;
    let metrics = String::from_utf8_lossy(&metrics).into_owned();
    eprintln!(
        "history fill {history_fill}, catch-up {catch_up}: {relists} relists; {}",
        metrics
            .lines()
            .filter(|l| l.contains("resource=\"pods\"")
                && (l.contains("initializations") || l.contains("expired")))
            .collect::<Vec<_>>()
            .join("; ")
    );
    restarted.shutdown().await.unwrap();
    Some(relists)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_replica_with_history_fill_or_catch_up_causes_no_relist_storm() {
    let Some(filled) = relists_after_a_restart(true, false).await else {
        return;
    };
    assert_eq!(filled, 0, "history fill: the watchers resumed where they were");
    let Some(caught_up) = relists_after_a_restart(false, true).await else {
        return;
    };
    assert_eq!(caught_up, 0, "catch-up: the watchers resumed from etcd's history");
    let Some(plain) = relists_after_a_restart(false, false).await else {
        return;
    };
    assert_eq!(plain, 100, "the upstream behaviour: every watcher relists");
}

/// Runs etcdctl against `cluster` with `args` (and `stdin`, for a transaction); its stdout.
fn etcdctl(cluster: &EtcdCluster, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", cluster.flag()))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("etcdctl runs (apt-get install etcd-client)");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The names a consistent LIST of `path` answers, and its resourceVersion.
async fn listed(server: &Server, path: &str) -> (u64, Vec<String>) {
    let (code, v) = json_request(server, "GET", path, None).await;
    assert_eq!(code, 200, "{v}");
    let names = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    (rv_of(&v), names)
}

/// `(type, name, resourceVersion)` of the next `n` events of a watch.
async fn watched(frames: &mut Frames, n: usize) -> Vec<(String, String, u64)> {
    let mut got = Vec::new();
    while got.len() < n {
        let e = tokio::time::timeout(Duration::from_secs(10), frames.next())
            .await
            .expect("an event in time")
            .expect("the watch goes on");
        if e["type"] == "BOOKMARK" {
            continue;
        }
        let o = &e["object"];
        got.push((
            e["type"].as_str().unwrap().to_owned(),
            o["metadata"]["name"].as_str().unwrap().to_owned(),
            rv_of(o),
        ));
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_etcd_request_that_changes_many_keys_is_applied_whole() {
    let Some(cluster) = EtcdCluster::start(1).await else {
        return;
    };
    let server = serve(on_etcd(&cluster)).await;
    let cms = "/api/v1/namespaces/ha/configmaps";
    for name in ["a", "b", "c"] {
        let (code, v) = json_request(&server, "POST", cms, Some(cm(name, "1"))).await;
        assert_eq!(code, 201, "{v}");
    }
    let (rv, names) = listed(&server, cms).await;
    assert_eq!(names, ["a", "b", "c"]);
    let mut frames = Frames::open(&server, &format!("{cms}?watch=true&resourceVersion={rv}")).await;

    // A prefix delete: one revision for the three keys.
    etcdctl(&cluster, &["del", "--prefix", "/registry/configmaps/ha/"], None);
    let (after, names) = listed(&server, cms).await;
    assert!(
        names.is_empty(),
        "a consistent LIST after the prefix delete: {names:?}"
    );
    let events = watched(&mut frames, 3).await;
    let deleted: Vec<_> = events.iter().map(|(t, n, _)| (t.as_str(), n.as_str())).collect();
    assert_eq!(deleted, [("DELETED", "a"), ("DELETED", "b"), ("DELETED", "c")]);
    assert!(
        events.iter().all(|e| e.2 == after),
        "all at the delete's revision: {events:?}"
    );

    // A transaction that creates two keys: both are served.
    let value = |name: &str| {
        let mut v = cm(name, "txn");
        v["metadata"]["namespace"] = json!("ha");
        // etcdctl's transaction syntax: a Go-quoted string (`"` and `\` escaped).
        format!("{:?}", v.to_string())
    };
    let txn = format!(
        "\nput /registry/configmaps/ha/x {}\nput /registry/configmaps/ha/y {}\n\n\n",
        value("x"),
        value("y")
    );
    etcdctl(&cluster, &["txn"], Some(&txn));
    for name in ["x", "y"] {
        let (code, v) = json_request(&server, "GET", &format!("{cms}/{name}"), None).await;
        assert_eq!(code, 200, "{name} after the transaction: {v}");
    }
    let events = watched(&mut frames, 2).await;
    assert_eq!(
        (events[0].2, &events[0].0[..], &events[1].0[..]),
        (events[1].2, "ADDED", "ADDED")
    );

    // A revoked lease holding three Events (as kube-apiserver stores them, with --event-ttl).
    let lease = etcdctl(&cluster, &["lease", "grant", "3600"], None);
    let lease = lease
        .split_whitespace()
        .nth(1)
        .expect("lease <id> granted")
        .to_owned();
    for name in ["e1", "e2", "e3"] {
        let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": "ha"},
            "involvedObject": {"kind": "ConfigMap", "name": "x", "namespace": "ha"}, "reason": "Test", "message": "m"});
        let key = format!("/registry/events/ha/{name}");
        etcdctl(
            &cluster,
            &["put", &format!("--lease={lease}"), &key, &event.to_string()],
            None,
        );
    }
    let events_path = "/api/v1/namespaces/ha/events";
    assert_eq!(listed(&server, events_path).await.1, ["e1", "e2", "e3"]);
    etcdctl(&cluster, &["lease", "revoke", &lease], None);
    let (_, names) = listed(&server, events_path).await;
    assert!(
        names.is_empty(),
        "every Event of the revoked lease is gone: {names:?}"
    );
    server.shutdown().await.unwrap();
}

/// The source's lease-aware writes, as the server stores Events: keys written on a lease go
/// with it at one revision; a put without the lease detaches the key; a write on a lease that
/// is gone is refused as `NotFound` naming the lease, with nothing written, so the server can
/// take another lease and write again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_written_on_an_etcd_lease_go_with_it_and_a_gone_lease_is_named() {
    let Some(cluster) = EtcdCluster::start(1).await else {
        return;
    };
    let s = source(&cluster).await;
    let lease = s.grant_lease(Duration::from_secs(3600)).await.unwrap();
    let key = |n: &str| format!("/registry/events/ha/{n}");
    let mut written = Vec::new();
    for n in ["a", "b", "c"] {
        let k = key(n);
        let r = s.create_with_lease(&k, Bytes::from_static(b"1"), Some(lease));
        written.push(r.await.unwrap());
    }
    s.update(&key("c"), Bytes::from_static(b"2"), None).await.unwrap();
    let r = s
        .update_with_lease(&key("b"), Bytes::from_static(b"2"), Some(written[1]), Some(lease))
        .await
        .unwrap();
    let mut watch = s
        .watch("/registry/events/", Revision::new(r.get() + 1))
        .await
        .unwrap();
    s.client().lease_revoke(lease).await.unwrap();
    let Some(Ok(SourceEvent::Changes { changes, .. })) = watch.next().await else {
        panic!("the revocation's changes");
    };
    let gone: Vec<_> = changes.iter().map(SourceChange::key).collect();
    assert_eq!(
        gone,
        [key("a"), key("b")],
        "a and b at one revision; c left the lease"
    );
    assert!(s.get(&key("c")).await.unwrap().is_some());

    let named = Err(SourceError::NotFound(watchcache_etcd::lease_name(lease)));
    assert_eq!(
        s.create_with_lease(&key("d"), Bytes::new(), Some(lease)).await,
        named
    );
    assert_eq!(
        s.update_with_lease(&key("c"), Bytes::new(), None, Some(lease))
            .await,
        named
    );
    assert_eq!(s.get(&key("d")).await.unwrap(), None, "nothing written");
}

/// Replicas starting at once on one etcd write the bootstrap RBAC policy between them without
/// failing: each create that finds another's object reconciles against it, and every replica
/// serves the same objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_starting_at_once_agree_on_the_bootstrap_policy() {
    let Some(cluster) = EtcdCluster::start(1).await else {
        return;
    };
    let (a, b, c) = tokio::join!(
        watchcache_tests::start(on_etcd(&cluster)),
        watchcache_tests::start(on_etcd(&cluster)),
        watchcache_tests::start(on_etcd(&cluster)),
    );
    for path in [
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-admin",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:discovery",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/cluster-admin",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/system:public-info-viewer",
    ] {
        let mut seen = Vec::new();
        for server in [&a, &b, &c] {
            let (code, v) = json_request(server, "GET", path, None).await;
            assert_eq!(code, 200, "{path}: {v}");
            seen.push((
                v["metadata"]["uid"].clone(),
                v["metadata"]["resourceVersion"].clone(),
            ));
        }
        assert!(seen.windows(2).all(|w| w[0] == w[1]), "{path}: {seen:?}");
    }
    let (code, v) = json_request(
        &a,
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(v["items"].as_array().unwrap().len(), 4, "{v}");
    for server in [a, b, c] {
        server.shutdown().await.unwrap();
    }
}

/// Waits (bounded) until `GET path` on `server` answers `want`; returns the last answer.
async fn until_code(server: &Server, path: &str, want: u16, what: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, v) = json_request(server, "GET", path, None).await;
        if code == want {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: {path} is still {code}: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A CustomResourceDefinition made on one replica is served by every replica, its objects in
/// the apiserver's layout in etcd (`/registry/<group>/<plural>/<namespace>/<name>`), in JSON only
/// as the apiserver serves custom resources; deleting it on another replica takes its objects
/// out of etcd and its endpoints off every replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_made_on_one_replica_is_served_by_every_replica_in_the_apiservers_layout() {
    let Some(cluster) = EtcdCluster::start(1).await else {
        return;
    };
    let a = serve(on_etcd(&cluster)).await;
    let b = serve(on_etcd(&cluster)).await;
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"color": {"type": "string"}}},
    }}});
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": schema}]},
    });
    let (code, out) = json_request(&a, "POST", crds, Some(crd)).await;
    assert_eq!(code, 201, "{out}");

    // The other replica serves it, and sees it established.
    let widgets = "/apis/example.com/v1/namespaces/ha/widgets";
    until_code(&b, widgets, 200, "replica b serves the CRD replica a made").await;
    // Its status may be written a moment after its endpoints are served.
    let deadline = Instant::now() + Duration::from_secs(10);
    let made = loop {
        let (_, crd) = json_request(&b, "GET", &format!("{crds}/widgets.example.com"), None).await;
        let established = crd["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        if established {
            break crd;
        }
        assert!(Instant::now() < deadline, "never established on b: {crd}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(made["status"]["acceptedNames"]["kind"], "Widget", "{made}");

    // A write on one replica reaches a watch on the other, and is in etcd under the
    // apiserver's key.
    until_code(&a, widgets, 200, "replica a serves its CRD").await;
    let (code, list) = json_request(&a, "GET", widgets, None).await;
    assert_eq!(code, 200, "{list}");
    let mut watch = Frames::open(&a, &format!("{widgets}?watch=1&resourceVersion={}", rv_of(&list))).await;
    let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"},
                   "spec": {"color": "blue", "unknown": 1}});
    let (code, made) = json_request(&b, "POST", widgets, Some(w)).await;
    assert_eq!(code, 201, "{made}");
    assert!(made["spec"].get("unknown").is_none(), "pruned: {made}");
    let frame = watch.next_within(Duration::from_secs(10)).await.unwrap().unwrap();
    assert_eq!(
        (
            frame["type"].as_str(),
            frame["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("w1")),
        "{frame}"
    );
    assert_eq!(rv_of(&frame["object"]), rv_of(&made));
    let etcd = source(&cluster).await;
    let stored = etcd.list("/registry/example.com/widgets/", None).await.unwrap();
    let keys: Vec<&str> = stored.items.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys, ["/registry/example.com/widgets/ha/w1"]);
    let value: Value = serde_json::from_slice(&stored.items[0].value).expect("stored as JSON");
    assert_eq!(value["spec"], json!({"color": "blue"}), "{value}");

    // JSON only: a client that takes only protobuf gets 406, one that takes either gets JSON,
    // and a protobuf body is 415.
    let one = format!("{widgets}/w1");
    let (code, _, body) = watchcache_tests::get_raw(&a, &one, "application/vnd.kubernetes.protobuf").await;
    let status: Value = serde_json::from_slice(&body).expect("a Status");
    assert_eq!(
        (code, status["reason"].as_str()),
        (406, Some("NotAcceptable")),
        "{status}"
    );
    let (code, ct, _) =
        watchcache_tests::get_raw(&a, &one, "application/vnd.kubernetes.protobuf, application/json").await;
    assert_eq!((code, ct.as_deref()), (200, Some("application/json")));
    let (code, status) = watchcache_tests::request_typed(
        &http(),
        &b,
        "POST",
        widgets,
        "application/vnd.kubernetes.protobuf",
        &b"k8s\0"[..],
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (415, Some("UnsupportedMediaType")),
        "{status}"
    );

    // Deleted on a replica that did not make it: its objects leave etcd, then it leaves
    // every replica.
    let (code, out) = json_request(&b, "DELETE", &format!("{crds}/widgets.example.com"), None).await;
    assert_eq!(code, 200, "{out}");
    until_code(&a, widgets, 404, "replica a still serves a deleted CRD").await;
    until_code(&b, widgets, 404, "replica b still serves a deleted CRD").await;
    until_code(&a, &format!("{crds}/widgets.example.com"), 404, "the CRD is kept").await;
    assert!(
        etcd.list("/registry/example.com/widgets/", None)
            .await
            .unwrap()
            .items
            .is_empty(),
        "its objects were deleted from etcd"
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A compaction the key claims but etcd has not made (a compactor killed between the key and
/// the compaction, or the moment between them in every round) costs no watcher a 410: a
/// replica believes the key only once etcd refuses a read below it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_the_key_claims_but_etcd_has_not_made_expires_no_watch() {
    let Some(cluster) = EtcdCluster::start(1).await else {
        return;
    };
    let server = serve(ServeConfig {
        history: 4,
        ..on_etcd(&cluster)
    })
    .await;
    let first = create_surely(&server, "first").await;
    for i in 0..20 {
        create_surely(&server, &format!("cm-{i:02}")).await;
    }
    let etcd = source(&cluster).await;
    let head = current(&etcd).await;
    // A compactor's claim, as `compact_round` or a kube-apiserver writes it, then nothing.
    let mut client = etcd_client::Client::connect(cluster.endpoints(), None)
        .await
        .expect("connects to etcd");
    client
        .put("compact_rev_key", head.to_string(), None)
        .await
        .expect("the key is written");
    assert_eq!(
        etcd.refresh_compacted().await.unwrap().get(),
        0,
        "an unmade claim is not believed"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let path = format!("/api/v1/namespaces/ha/configmaps?watch=1&resourceVersion={first}");
    let mut watch = Frames::open(&server, &path).await;
    let frame = watch.next_within(Duration::from_secs(10)).await.unwrap().unwrap();
    assert_eq!(
        (
            frame["type"].as_str(),
            frame["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("cm-00")),
        "etcd holds {first}: {frame}"
    );
    // A compaction made with no key (another compactor's), past the first revision the watch
    // asks for: the replica learns it only when a catch-up's read from below it is refused.
    // To the client, and in the metrics, that is a 410 at the watch's start, not one in its
    // stream.
    client
        .compact((first + 2) as i64, None)
        .await
        .expect("etcd compacts");
    let mut late = Frames::open(&server, &path).await;
    let frame = late.next_within(Duration::from_secs(10)).await.unwrap().unwrap();
    assert_eq!(
        (frame["type"].as_str(), frame["object"]["code"].as_u64()),
        (Some("ERROR"), Some(410)),
        "etcd compacted {}: {frame}",
        first + 2
    );
    let starts = "watchcache_watch_starts_expired_total{resource=\"configmaps\"}";
    let in_stream = "watchcache_watch_expired_in_stream_total{resource=\"configmaps\"}";
    assert_eq!(
        (counter(&server, starts).await, counter(&server, in_stream).await),
        (1, 0),
        "a 410 before any event is one at the start"
    );
    // Once etcd makes it, it is learned.
    client.compact(head as i64, None).await.expect("etcd compacts");
    let deadline = Instant::now() + Duration::from_secs(10);
    while etcd.refresh_compacted().await.unwrap().get() < head {
        assert!(Instant::now() < deadline, "the compaction made is learned");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.shutdown().await.unwrap();
}

/// A replica that starts while the newest claim of the compaction key is not made (a compactor
/// between its key and its compaction, or one that died there) still learns the compaction
/// made before it, from the key's previous value, rather than believing nothing was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_starting_under_an_unmade_claim_learns_the_compaction_made_before_it() {
    let Some(cluster) = EtcdCluster::start(1).await else {
        return;
    };
    let mut client = etcd_client::Client::connect(cluster.endpoints(), None)
        .await
        .expect("connects to etcd");
    for i in 0..5 {
        client.put(format!("/registry/x/{i}"), "v", None).await.unwrap();
    }
    let etcd = source(&cluster).await;
    // A round made whole: the key, then the compaction.
    let made = current(&etcd).await;
    client
        .put("compact_rev_key", made.to_string(), None)
        .await
        .unwrap();
    client.compact(made as i64, None).await.expect("etcd compacts");
    for i in 0..5 {
        client.put(format!("/registry/x/{i}"), "w", None).await.unwrap();
    }
    // The next round's key, with no compaction (yet).
    let claimed = current(&etcd).await;
    client
        .put("compact_rev_key", claimed.to_string(), None)
        .await
        .unwrap();

    let fresh = source(&cluster).await;
    assert_eq!(
        fresh.refresh_compacted().await.unwrap().get(),
        made,
        "the compaction made is known; the one only claimed ({claimed}) is not"
    );

    // A key no compactor of this cluster wrote (by hand, or restored from another cluster):
    // a claim above etcd's revision, and one past any i64, neither believed nor holding the
    // place of the claims after it.
    let mut saw_bogus = Vec::new();
    // (The claim before is not made: the compaction made before that is not known yet.)
    for bogus in [
        format!("{}", claimed + 1_000_000),
        (1u64 << 63).to_string(),
        u64::MAX.to_string(),
    ] {
        client.put("compact_rev_key", bogus.as_str(), None).await.unwrap();
        let replica = source(&cluster).await;
        let known = replica.refresh_compacted().await.unwrap().get();
        assert!(known <= made, "{bogus} believed: {known}");
        saw_bogus.push(replica);
    }
    let next = current(&etcd).await;
    client
        .put("compact_rev_key", next.to_string(), None)
        .await
        .unwrap();
    client.compact(next as i64, None).await.expect("etcd compacts");
    for replica in std::iter::once(&fresh).chain(&saw_bogus) {
        assert_eq!(
            replica.refresh_compacted().await.unwrap().get(),
            next,
            "the next claim made is learned"
        );
    }
    // Over a made claim, a bogus one leaves a replica starting under it that claim.
    client
        .put("compact_rev_key", (1u64 << 63).to_string(), None)
        .await
        .unwrap();
    let replica = source(&cluster).await;
    assert_eq!(replica.refresh_compacted().await.unwrap().get(), next);
}
