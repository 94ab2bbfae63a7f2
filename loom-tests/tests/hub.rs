//! The hub: wake-ups are never lost, through the interest registry and along a bucket's
//! chain; watchers register and deregister while the writer publishes; a bookmark never
//! overtakes an event at or below its revision.
#![cfg(watchcache_loom)]

use std::sync::Arc;

use loom::thread;
use watchcache_core::{Event, EventKind, Filter, ObjectKey, ObjectVersion, Revision, WatchHub, WatchSpec};
use watchcache_loom_tests::model;

fn pod(rev: u64, node: &str) -> Arc<ObjectVersion> {
    Arc::new(
        ObjectVersion::builder(ObjectKey::new("ns", format!("p{rev}")), Revision::new(rev))
            .field("spec.nodeName", node)
            .build(),
    )
}

fn on_node(node: &str) -> Filter {
    Filter::parse(None, "", &format!("spec.nodeName={node}")).unwrap()
}

#[test]
fn a_watcher_parking_as_the_writer_publishes_is_always_woken_through_the_index() {
    model("wakeup", || {
        let (mut publisher, hub) = WatchHub::builder()
            .capacity(2)
            .trigger_field("spec.nodeName")
            .build()
            .unwrap();
        let mut kubelet = hub.watch(WatchSpec::new(on_node("n1"))).unwrap();
        let writer = thread::spawn(move || {
            publisher.publish(Event::Added { object: pod(1, "n1") }).unwrap();
            publisher
        });
        // block_on parks this thread until woken: a lost wake-up is a deadlock loom reports.
        let event = loom::future::block_on(kubelet.next()).unwrap().unwrap();
        assert_eq!((event.kind, event.revision), (EventKind::Added, Revision::new(1)));
        drop(writer.join().unwrap());
    });
}

#[test]
fn watchers_register_and_deregister_while_the_writer_publishes() {
    model("register_deregister", || {
        let (mut publisher, hub) = WatchHub::builder()
            .capacity(4)
            .trigger_field("spec.nodeName")
            .build()
            .unwrap();
        let mut leaving = hub.watch(WatchSpec::new(on_node("n1"))).unwrap();
        let mut staying = hub.watch(WatchSpec::new(on_node("n2"))).unwrap();
        let writer = thread::spawn(move || {
            publisher.publish(Event::Added { object: pod(1, "n1") }).unwrap();
            publisher.publish(Event::Added { object: pod(2, "n2") }).unwrap();
            publisher
        });
        // Park (or find the n1 event) and leave the index, racing the writer's drains.
        let waker = std::task::Waker::noop().clone();
        let mut cx = std::task::Context::from_waker(&waker);
        let _ = leaving.poll_next_with(&mut cx, |_| ());
        drop(leaving);
        let event = loom::future::block_on(staying.next()).unwrap().unwrap();
        assert_eq!(
            event.revision,
            Revision::new(2),
            "the n2 watcher sees only its event"
        );
        drop(writer.join().unwrap());
        drop(staying);
        assert_eq!(hub.parked(), 0, "nobody is left in the index");
    });
}

#[test]
fn a_bookmark_never_overtakes_an_event_at_or_below_its_revision() {
    model("bookmark", || {
        let (mut publisher, hub) = WatchHub::builder().capacity(2).build().unwrap();
        let mut watcher = hub
            .watch(WatchSpec::new(Filter::everything()).with_bookmarks())
            .unwrap();
        let writer = thread::spawn(move || {
            // The first group holds our watcher (id 0): flagged before the event is published.
            publisher.send_bookmarks();
            publisher.publish(Event::Added { object: pod(1, "n1") }).unwrap();
            publisher
        });
        let mut bookmarks = Vec::new();
        loop {
            let event = loom::future::block_on(watcher.next()).unwrap().unwrap();
            match event.kind {
                EventKind::Bookmark => bookmarks.push(event.revision),
                _ => {
                    assert_eq!(event.revision, Revision::new(1));
                    break;
                }
            }
        }
        // A bookmark before the event may only carry a revision below it.
        assert!(
            bookmarks.iter().all(|b| *b < Revision::new(1)),
            "bookmark {bookmarks:?} overtook event 1"
        );
        drop(writer.join().unwrap());
    });
}

#[test]
fn a_watcher_parking_at_the_end_of_its_chain_is_woken_by_its_next_event() {
    model("chain", || {
        let (mut publisher, hub) = WatchHub::builder()
            .capacity(4)
            .trigger_field("spec.nodeName")
            .build()
            .unwrap();
        let mut kubelet = hub.watch(WatchSpec::new(on_node("n1"))).unwrap();
        let writer = thread::spawn(move || {
            publisher.publish(Event::Added { object: pod(1, "n1") }).unwrap();
            publisher.publish(Event::Added { object: pod(2, "n2") }).unwrap();
            publisher.publish(Event::Added { object: pod(3, "n1") }).unwrap();
            publisher
        });
        // After the first, the watcher is on its bucket's chain: it waits on the first
        // event's link, which the writer stores before draining the bucket.
        let first = loom::future::block_on(kubelet.next()).unwrap().unwrap();
        let second = loom::future::block_on(kubelet.next()).unwrap().unwrap();
        assert_eq!(
            (first.revision, second.revision),
            (Revision::new(1), Revision::new(3))
        );
        drop(writer.join().unwrap());
    });
}

#[cfg(feature = "weaken-no-recheck")]
#[test]
fn weakened_parking_without_a_recheck_loses_a_wakeup() {
    a_watcher_parking_as_the_writer_publishes_is_always_woken_through_the_index();
}

#[cfg(feature = "weaken-no-link-recheck")]
#[test]
fn weakened_parking_on_a_chain_without_a_recheck_loses_a_wakeup() {
    a_watcher_parking_at_the_end_of_its_chain_is_woken_by_its_next_event();
}

#[cfg(feature = "weaken-bookmark-progress-late")]
#[test]
fn weakened_bookmark_reading_the_progress_late_overtakes_an_event() {
    a_bookmark_never_overtakes_an_event_at_or_below_its_revision();
}
