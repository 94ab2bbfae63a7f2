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

fn named(rev: u64, name: &str) -> Arc<ObjectVersion> {
    Arc::new(ObjectVersion::builder(ObjectKey::new("ns", name), Revision::new(rev)).build())
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
fn a_watcher_parking_after_reading_to_the_tail_is_woken_by_the_next_event() {
    model("wakeup_scan", || {
        let (mut publisher, hub) = WatchHub::builder().capacity(4).build().unwrap();
        // The watcher starts with an event to read, so it is not parked at its start: it
        // parks at its second poll, after finding the tail, as the writer publishes.
        publisher
            .publish(Event::Added {
                object: named(1, "x"),
            })
            .unwrap();
        let mut watcher = hub
            .watch(WatchSpec::new(Filter::everything()).after(Revision::ZERO))
            .unwrap();
        let writer = thread::spawn(move || {
            publisher
                .publish(Event::Added {
                    object: named(2, "y"),
                })
                .unwrap();
            publisher
        });
        // block_on parks this thread until woken: a lost wake-up is a deadlock loom reports.
        let first = loom::future::block_on(watcher.next()).unwrap().unwrap();
        let second = loom::future::block_on(watcher.next()).unwrap().unwrap();
        assert_eq!(
            (first.revision, second.revision),
            (Revision::new(1), Revision::new(2))
        );
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

#[test]
fn a_watcher_sees_all_of_a_revision_or_none_of_it() {
    model("revision", || {
        let (mut publisher, hub) = WatchHub::builder().capacity(4).build().unwrap();
        // One event before the watcher starts, from the beginning: it has something to read at
        // once, so it is scanning the ring (not parked, waiting for a wake-up) as the writer
        // commits the next revision.
        publisher
            .publish(Event::Added {
                object: named(1, "x"),
            })
            .unwrap();
        let mut watcher = hub
            .watch(WatchSpec::new(Filter::everything()).after(Revision::ZERO))
            .unwrap();
        let writer = thread::spawn(move || {
            // One write that changed two keys (a transaction, a prefix delete).
            let both = vec![
                Event::Added {
                    object: named(2, "a"),
                },
                Event::Added {
                    object: named(2, "b"),
                },
            ];
            publisher.publish_revision(both).unwrap();
            publisher
        });
        // Whatever the watcher finds in its looks, without waiting, is the whole revision or
        // nothing of it.
        let waker = std::task::Waker::noop().clone();
        let mut cx = std::task::Context::from_waker(&waker);
        let mut seen = Vec::new();
        while let std::task::Poll::Ready(Some(Ok(name))) =
            watcher.poll_next_with(&mut cx, |d| d.object.map(|o| o.key().name().to_owned()))
        {
            seen.extend(name);
        }
        assert!(
            seen == ["x"] || seen == ["x", "a", "b"],
            "saw half of revision 2: {seen:?}"
        );
        drop(writer.join().unwrap());
    });
}

#[test]
fn a_watcher_that_starts_idle_is_never_lapped_by_events_it_filters_out() {
    model("park_at_start", || {
        let (mut publisher, hub) = WatchHub::builder()
            .capacity(2)
            .trigger_field("spec.nodeName")
            .build()
            .unwrap();
        let writer = thread::spawn(move || {
            // Enough of others' events for the third entry to overwrite the first.
            for rev in 1..=2 {
                publisher
                    .publish(Event::Added {
                        object: pod(rev, "n2"),
                    })
                    .unwrap();
            }
            publisher.publish(Event::Added { object: pod(3, "n1") }).unwrap();
            publisher
        });
        // Started from the beginning as the writer publishes (a start the window no longer
        // holds is refused at once, a 410 of another kind), and first polled only after it is
        // done, as a watch that sends its initial events first: the others' events went
        // through the ring meanwhile.
        let Ok(mut kubelet) = hub.watch(WatchSpec::new(on_node("n1")).after(Revision::ZERO)) else {
            drop(writer.join().unwrap());
            return;
        };
        let publisher = writer.join().unwrap();
        let event = loom::future::block_on(kubelet.next()).unwrap();
        assert!(event.is_ok(), "expired by events it filters out: {event:?}");
        assert_eq!(event.unwrap().revision, Revision::new(3));
        drop(publisher);
    });
}

#[test]
fn a_lap_that_loses_nothing_the_watcher_needs_is_not_a_410() {
    model("harmless_lap", || {
        let (mut publisher, hub) = WatchHub::builder()
            .capacity(2)
            .trigger_field("spec.nodeName")
            .build()
            .unwrap();
        // Starts after revision 2, ahead of the ring: entries up to 2 are skipped as they come.
        let mut kubelet = hub
            .watch(WatchSpec::new(on_node("n1")).after(Revision::new(2)))
            .unwrap();
        let writer = thread::spawn(move || {
            // Wakes the watcher (its bucket), then is overwritten (by the third) before the
            // watcher may read it.
            publisher.publish(Event::Added { object: pod(1, "n1") }).unwrap();
            publisher.publish(Event::Added { object: pod(2, "n2") }).unwrap();
            publisher.publish(Event::Added { object: pod(3, "n1") }).unwrap();
            publisher
        });
        let event = loom::future::block_on(kubelet.next()).unwrap();
        assert!(
            event.is_ok(),
            "expired though nothing it needs was lost: {event:?}"
        );
        assert_eq!(event.unwrap().revision, Revision::new(3));
        drop(writer.join().unwrap());
    });
}

#[test]
fn a_catch_up_hands_over_to_the_ring_without_a_gap_or_a_duplicate() {
    model("handover", || {
        let (mut publisher, hub) = WatchHub::builder().capacity(2).build().unwrap();
        // The store's history: revisions 1 to 3. The writer (the cache's reflector) publishes
        // them into a window of two as the catch-up reads them from the store.
        let object = |rev: u64| named(rev, &format!("o{rev}"));
        let writer = thread::spawn(move || {
            for rev in 1..=3 {
                publisher.publish(Event::Added { object: object(rev) }).unwrap();
            }
            publisher
        });
        let mut seen = Vec::new();
        // Every event up to `position` was delivered, from the store or from the ring.
        let mut position = Revision::ZERO;
        let mut catch_up_and_hand_over = |seen: &mut Vec<u64>, position: &mut Revision| loop {
            match hub.hand_over(Filter::everything(), false, *position) {
                Ok(watcher) => return watcher,
                // The window does not reach back: the next revision from the store.
                Err(_) => {
                    let next = position.get() + 1;
                    assert!(next <= 3, "no hand-over after the store's last revision");
                    seen.push(next);
                    *position = Revision::new(next);
                }
            }
        };
        let mut watcher = catch_up_and_hand_over(&mut seen, &mut position);
        let publisher = writer.join().unwrap();
        // Everything is published: read the ring, catching up again if the writer lapped it.
        let waker = std::task::Waker::noop().clone();
        let mut cx = std::task::Context::from_waker(&waker);
        loop {
            match watcher.poll_next_with(&mut cx, |d| d.revision) {
                std::task::Poll::Ready(Some(Ok(rev))) => {
                    seen.push(rev.get());
                    position = rev;
                }
                std::task::Poll::Ready(Some(Err(_))) => {
                    watcher = catch_up_and_hand_over(&mut seen, &mut position);
                }
                std::task::Poll::Ready(None) | std::task::Poll::Pending => break,
            }
        }
        assert_eq!(seen, [1, 2, 3], "a gap or a duplicate at the hand-over: {seen:?}");
        drop(publisher);
    });
}

#[cfg(feature = "weaken-handover-now")]
#[test]
fn weakened_handing_over_from_now_loses_what_was_published_meanwhile() {
    a_catch_up_hands_over_to_the_ring_without_a_gap_or_a_duplicate();
}

#[cfg(feature = "weaken-no-park-at-start")]
#[test]
fn weakened_parking_only_at_the_first_poll_lets_others_lap_the_watcher() {
    a_watcher_that_starts_idle_is_never_lapped_by_events_it_filters_out();
}

#[cfg(feature = "weaken-no-lap-resume")]
#[test]
fn weakened_every_lap_is_a_410() {
    a_lap_that_loses_nothing_the_watcher_needs_is_not_a_410();
}

#[cfg(feature = "weaken-commit-each")]
#[test]
fn weakened_committing_each_event_shows_half_a_revision() {
    a_watcher_sees_all_of_a_revision_or_none_of_it();
}

#[cfg(feature = "weaken-no-recheck")]
#[test]
fn weakened_parking_without_a_recheck_loses_a_wakeup() {
    a_watcher_parking_after_reading_to_the_tail_is_woken_by_the_next_event();
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
