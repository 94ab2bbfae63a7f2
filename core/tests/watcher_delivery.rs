//! What watchers receive: every event once and in order, Expired when lapped, the apiserver's
//! selector transitions, bookmarks for those that asked, and wake-ups only for those that may care.

mod common;

use std::sync::Arc;
use std::task::Poll;

use common::{CountingWaker, Probe, SIZES, pod, summary};
use watchcache_core::{
    BOOKMARK_PHASES, Event, EventKind, Expired, Filter, PublishError, Publisher, Revision, SelectorErrorKind,
    Seq, WatchError, WatchHub, WatchSpec,
};

fn hub(capacity: usize) -> (watchcache_core::Publisher, WatchHub) {
    WatchHub::builder()
        .capacity(capacity)
        .trigger_field("spec.nodeName")
        .build()
        .unwrap()
}

fn everything() -> WatchSpec {
    WatchSpec::new(Filter::everything())
}

#[test]
fn every_watcher_receives_every_event_exactly_once_and_in_order() {
    for cap in SIZES {
        let (mut p, hub) = hub(cap);
        let mut probes: Vec<Probe> = (0..5)
            .map(|_| Probe::new(hub.watch(everything()).unwrap()))
            .collect();
        let mut got: Vec<Vec<u64>> = vec![Vec::new(); probes.len()];
        // Publish in bursts no longer than the ring, reading between bursts.
        let burst = cap.min(7) as u64;
        let mut rev = 0;
        for _ in 0..if cfg!(miri) { 3 } else { 50 } {
            for _ in 0..burst {
                rev += 1;
                p.publish(Event::Added {
                    object: pod("ns", &format!("p{rev}"), rev, "a", "n"),
                })
                .unwrap();
            }
            for (probe, got) in probes.iter_mut().zip(&mut got) {
                for e in probe.drain() {
                    got.push(e.expect("never lapped when reading every burst").revision.get());
                }
            }
        }
        let want: Vec<u64> = (1..=rev).collect();
        for g in &got {
            assert_eq!(g, &want, "ring of {cap}");
        }
    }
}

#[test]
fn a_lapped_watcher_gets_expired_then_ends_and_never_a_wrong_event() {
    for cap in SIZES {
        let (mut p, hub) = hub(cap);
        let mut slow = Probe::new(hub.watch(everything()).unwrap());
        let mut fast = Probe::new(hub.watch(everything()).unwrap());
        p.publish(Event::Added {
            object: pod("ns", "first", 1, "a", "n"),
        })
        .unwrap();
        let first = slow.drain();
        assert_eq!(first.len(), 1);
        // capacity + 1 more events: the slow watcher's next entry is overwritten.
        let mut fast_got = vec![fast.drain().len()];
        for rev in 2..=(cap as u64 + 2) {
            p.publish(Event::Added {
                object: pod("ns", "x", rev, "a", "n"),
            })
            .unwrap();
            fast_got.push(fast.drain().len());
        }
        assert!(fast_got.iter().all(|&n| n == 1), "the fast one saw each event");
        let rest = slow.drain();
        assert_eq!(
            rest.len(),
            1,
            "ring of {cap}: one Expired and nothing else, got {rest:?}"
        );
        let err = rest.into_iter().next().unwrap().unwrap_err();
        assert_eq!(err.requested, Revision::new(1));
        assert!(err.oldest > Revision::new(1));
        assert!(
            matches!(slow.poll(), Poll::Ready(None)),
            "an expired watcher ends"
        );
        assert!(matches!(slow.poll(), Poll::Ready(None)));
    }
}

#[test]
fn a_watch_after_a_revision_replays_exactly_the_later_events() {
    let (mut p, hub) = hub(64);
    for rev in (10..=50).step_by(10) {
        p.publish(Event::Added {
            object: pod("ns", &format!("p{rev}"), rev, "a", "n"),
        })
        .unwrap();
    }
    for (after, want) in [
        (0, vec![10, 20, 30, 40, 50]),
        (25, vec![30, 40, 50]),
        (30, vec![40, 50]),
        (50, vec![]),
        (99, vec![]),
    ] {
        let mut w = Probe::new(hub.watch(everything().after(Revision::new(after))).unwrap());
        let got: Vec<u64> = w.drain().into_iter().map(|e| e.unwrap().revision.get()).collect();
        assert_eq!(got, want, "after {after}");
    }
    // A start ahead of the ring skips entries up to it when they come.
    let mut ahead = Probe::new(hub.watch(everything().after(Revision::new(60))).unwrap());
    p.publish(Event::Added {
        object: pod("ns", "q", 55, "a", "n"),
    })
    .unwrap();
    p.publish(Event::Added {
        object: pod("ns", "r", 61, "a", "n"),
    })
    .unwrap();
    let got: Vec<u64> = ahead
        .drain()
        .into_iter()
        .map(|e| e.unwrap().revision.get())
        .collect();
    assert_eq!(got, vec![61]);
}

#[test]
fn a_watch_older_than_the_window_is_expired_at_the_start() {
    let (mut p, hub) = hub(2);
    for rev in 1..=5 {
        p.publish(Event::Added {
            object: pod("ns", "p", rev, "a", "n"),
        })
        .unwrap();
    }
    // Entries 4 and 5 remain: the floor is 3.
    let err = hub.watch(everything().after(Revision::new(2))).unwrap_err();
    assert_eq!(
        err,
        WatchError::Expired(Expired {
            requested: Revision::new(2),
            oldest: Revision::new(3)
        })
    );
    assert!(hub.watch(everything().after(Revision::new(3))).is_ok());
}

#[test]
fn selector_transitions_reach_the_watcher_as_added_modified_deleted() {
    let (mut p, hub) = hub(64);
    let f = Filter::parse(Some("ns"), "app=web", "").unwrap();
    let mut w = Probe::new(hub.watch(WatchSpec::new(f)).unwrap());
    let v1 = pod("ns", "p", 1, "api", "n");
    let v2 = pod("ns", "p", 2, "web", "n");
    let v3 = pod("ns", "p", 3, "web", "n");
    let v4 = pod("ns", "p", 4, "api", "n");
    let v5 = pod("ns", "p", 5, "web", "n");
    p.publish(Event::Added { object: v1.clone() }).unwrap();
    p.publish(Event::Modified {
        object: v2.clone(),
        prev: v1,
    })
    .unwrap();
    p.publish(Event::Modified {
        object: v3.clone(),
        prev: v2,
    })
    .unwrap();
    p.publish(Event::Modified {
        object: v4.clone(),
        prev: v3,
    })
    .unwrap();
    p.publish(Event::Modified {
        object: v5.clone(),
        prev: v4,
    })
    .unwrap();
    p.publish(Event::Deleted {
        revision: Revision::new(6),
        prev: v5,
    })
    .unwrap();
    p.publish(Event::Added {
        object: pod("other", "p", 7, "web", "n"),
    })
    .unwrap();
    let got: Vec<_> = w.drain().into_iter().map(|e| summary(&e.unwrap())).collect();
    let p_ = |k, r, o| (k, r, o, "p".to_owned());
    assert_eq!(
        got,
        vec![
            p_("ADDED", 2, 2),
            p_("MODIFIED", 3, 3),
            p_("DELETED", 4, 3), // leaving: the previous version at the new revision
            p_("ADDED", 5, 5),
            p_("DELETED", 6, 5),
        ]
    );
}

/// Sends one bookmark round: every group of bookmark watchers once (one bookmark interval).
fn bookmark_round(p: &mut Publisher) -> usize {
    (0..BOOKMARK_PHASES).map(|_| p.send_bookmarks()).sum()
}

#[test]
fn bookmarks_reach_only_the_watchers_that_asked() {
    let (mut p, hub) = hub(64);
    let mut with = Probe::new(hub.watch(everything().with_bookmarks()).unwrap());
    let mut without = Probe::new(hub.watch(everything()).unwrap());
    let mut selective = Probe::new(
        hub.watch(WatchSpec::new(Filter::parse(None, "app=none", "").unwrap()).with_bookmarks())
            .unwrap(),
    );
    assert!(with.poll().is_pending() && without.poll().is_pending() && selective.poll().is_pending());
    p.publish(Event::Added {
        object: pod("ns", "a", 1, "a", "n"),
    })
    .unwrap();
    assert_eq!(bookmark_round(&mut p), 2, "only the two that asked are flagged");
    let kinds = |probe: &mut Probe| -> Vec<(EventKind, u64)> {
        probe
            .drain()
            .into_iter()
            .map(|e| e.unwrap())
            .map(|e| (e.kind, e.revision.get()))
            .collect()
    };
    assert_eq!(
        kinds(&mut with),
        vec![(EventKind::Added, 1), (EventKind::Bookmark, 1)]
    );
    assert_eq!(kinds(&mut without), vec![(EventKind::Added, 1)]);
    assert_eq!(kinds(&mut selective), vec![(EventKind::Bookmark, 1)]);
    assert_eq!(
        without.woken(),
        1,
        "a bookmark round wakes no watcher that did not ask"
    );

    // Progress moves the revision bookmarks carry; it takes no slot and wakes no one.
    let (tail, wakeups, woken) = (hub.tail(), hub.wakeups(), selective.woken());
    p.progress(Revision::new(9));
    assert_eq!(
        (hub.tail(), hub.wakeups(), hub.revision()),
        (tail, wakeups, Revision::new(9))
    );
    assert_eq!(selective.woken(), woken);
    bookmark_round(&mut p);
    assert_eq!(kinds(&mut with), vec![(EventKind::Bookmark, 9)]);
    assert_eq!(kinds(&mut selective), vec![(EventKind::Bookmark, 9)]);
    assert!(kinds(&mut without).is_empty());
    assert_eq!(with.watcher.position(), Revision::new(9));
}

#[test]
fn bookmark_ticks_are_spread_over_the_interval() {
    let (mut p, hub) = hub(64);
    let n = 20 * BOOKMARK_PHASES;
    let mut probes: Vec<Probe> = (0..n)
        .map(|_| Probe::new(hub.watch(everything().with_bookmarks()).unwrap()))
        .collect();
    for probe in &mut probes {
        assert!(probe.poll().is_pending());
    }
    for tick in 1..=BOOKMARK_PHASES {
        assert_eq!(p.send_bookmarks(), 20, "one group per tick");
        let woken = probes.iter().filter(|p| p.woken() > 0).count();
        assert_eq!(woken, 20 * tick, "tick {tick}");
    }
    for probe in &mut probes {
        let got: Vec<EventKind> = probe.drain().into_iter().map(|e| e.unwrap().kind).collect();
        assert_eq!(
            got,
            vec![EventKind::Bookmark],
            "one bookmark per watcher per interval"
        );
    }
}

#[test]
fn a_bookmark_never_overtakes_an_event_at_or_below_its_revision() {
    let (mut p, hub) = hub(64);
    let mut kubelet = Probe::new(
        hub.watch(WatchSpec::new(Filter::parse(None, "", "spec.nodeName=n1").unwrap()).with_bookmarks())
            .unwrap(),
    );
    assert!(kubelet.poll().is_pending());
    for rev in 1..=3 {
        p.publish(Event::Added {
            object: pod(
                "ns",
                &format!("p{rev}"),
                rev,
                "a",
                if rev == 2 { "n1" } else { "n2" },
            ),
        })
        .unwrap();
    }
    bookmark_round(&mut p);
    let got: Vec<_> = kubelet
        .drain()
        .into_iter()
        .map(|e| summary(&e.unwrap()))
        .collect();
    assert_eq!(
        got,
        vec![("ADDED", 2, 2, "p2".into()), ("BOOKMARK", 3, 0, String::new())]
    );
}

#[test]
fn the_publisher_refuses_revisions_that_do_not_increase() {
    let (mut p, hub) = hub(4);
    let mut w = Probe::new(hub.watch(everything()).unwrap());
    p.publish(Event::Added {
        object: pod("ns", "a", 5, "a", "n"),
    })
    .unwrap();
    let again = p.publish(Event::Added {
        object: pod("ns", "b", 5, "a", "n"),
    });
    assert_eq!(
        again,
        Err(PublishError::RevisionNotIncreasing {
            last: Revision::new(5),
            got: Revision::new(5)
        })
    );
    assert_eq!(
        p.publish(Event::Bookmark {
            revision: Revision::new(6)
        }),
        Err(PublishError::Bookmark),
        "bookmarks take no slot"
    );
    p.progress(Revision::new(4));
    assert_eq!(hub.revision(), Revision::new(5), "progress never goes back");
    assert_eq!(hub.tail(), Seq::new(1), "refused events are not in the ring");
    assert_eq!(w.drain().len(), 1, "and never reach a watcher");
}

#[test]
fn a_watch_on_an_undeclared_field_is_refused() {
    let (_p, hub) = WatchHub::builder().build().unwrap();
    let f = Filter::parse(None, "", "status.phase=Running").unwrap();
    match hub.watch(WatchSpec::new(f)) {
        Err(WatchError::Selector(e)) => {
            assert_eq!(e.kind, SelectorErrorKind::UnsupportedField("status.phase".into()))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_interest_index_wakes_only_the_watchers_that_may_care() {
    let (mut p, hub) = hub(64);
    let node = |n: usize| Filter::parse(None, "", &format!("spec.nodeName=node-{n}")).unwrap();
    let mut kubelets: Vec<Probe> = (0..10)
        .map(|n| Probe::new(hub.watch(WatchSpec::new(node(n))).unwrap()))
        .collect();
    let mut ns_a: Vec<Probe> = (0..5)
        .map(|_| {
            Probe::new(
                hub.watch(WatchSpec::new(Filter::everything().in_namespace("a")))
                    .unwrap(),
            )
        })
        .collect();
    let mut by_field_ns = Probe::new(
        hub.watch(WatchSpec::new(
            Filter::parse(None, "", "metadata.namespace=b").unwrap(),
        ))
        .unwrap(),
    );
    let mut all = Probe::new(hub.watch(everything()).unwrap());
    for probe in kubelets
        .iter_mut()
        .chain(&mut ns_a)
        .chain([&mut by_field_ns, &mut all])
    {
        assert!(probe.poll().is_pending());
    }
    assert_eq!(hub.parked(), 17);

    // A pod on node-3 in namespace b: wakes node-3's kubelet, the ns=b watcher and the unindexed one.
    p.publish(Event::Added {
        object: pod("b", "p", 1, "x", "node-3"),
    })
    .unwrap();
    let woken: Vec<usize> = kubelets.iter().map(Probe::woken).collect();
    assert_eq!(woken, vec![0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    assert!(ns_a.iter().all(|p| p.woken() == 0));
    assert_eq!((by_field_ns.woken(), all.woken()), (1, 1));
    assert_eq!(hub.parked(), 14, "woken watchers left the index");

    // Rescheduling from node-3 to node-7 in namespace a: the old and the new node's kubelets,
    // and namespace a. node-3's kubelet is not parked (not yet polled), so only node-7 of the kubelets.
    p.publish(Event::Modified {
        object: pod("a", "q", 3, "x", "node-7"),
        prev: pod("a", "q", 2, "x", "node-3"),
    })
    .unwrap();
    let woken: Vec<usize> = kubelets.iter().map(Probe::woken).collect();
    assert_eq!(woken, vec![0, 0, 0, 1, 0, 0, 0, 1, 0, 0]);
    assert!(ns_a.iter().all(|p| p.woken() == 1));

    // Each woken watcher gets what concerns it; node-3's kubelet sees the pod leave.
    let got: Vec<_> = kubelets[3]
        .drain()
        .into_iter()
        .map(|e| summary(&e.unwrap()))
        .collect();
    assert_eq!(
        got,
        vec![("ADDED", 1, 1, "p".into()), ("DELETED", 3, 2, "q".into())]
    );
    let got: Vec<_> = kubelets[7]
        .drain()
        .into_iter()
        .map(|e| summary(&e.unwrap()))
        .collect();
    assert_eq!(got, vec![("ADDED", 3, 3, "q".into())]);
    assert!(
        kubelets[0].drain().is_empty(),
        "a watcher never woken has nothing either"
    );
}

#[test]
fn an_idle_selective_watcher_is_not_lapped_by_traffic_it_would_filter_out() {
    for cap in SIZES {
        let (mut p, hub) = hub(cap);
        let mut kubelet = Probe::new(
            hub.watch(WatchSpec::new(
                Filter::parse(None, "", "spec.nodeName=quiet").unwrap(),
            ))
            .unwrap(),
        );
        assert!(kubelet.poll().is_pending());
        for rev in 1..=(cap as u64 * 5) {
            p.publish(Event::Added {
                object: pod("ns", "busy", rev, "a", "busy-node"),
            })
            .unwrap();
        }
        assert_eq!(kubelet.woken(), 0);
        let rev = cap as u64 * 5 + 1;
        p.publish(Event::Added {
            object: pod("ns", "mine", rev, "a", "quiet"),
        })
        .unwrap();
        let got: Vec<_> = kubelet
            .drain()
            .into_iter()
            .map(|e| summary(&e.unwrap()))
            .collect();
        assert_eq!(got, vec![("ADDED", rev, rev, "mine".into())], "ring of {cap}");
    }
}

#[test]
fn a_dropped_watcher_leaves_the_index() {
    let (mut p, hub) = hub(8);
    let mut probes: Vec<Probe> = (0..3)
        .map(|_| Probe::new(hub.watch(everything()).unwrap()))
        .collect();
    for probe in &mut probes {
        assert!(probe.poll().is_pending());
    }
    assert_eq!(hub.parked(), 3);
    let waker: Arc<CountingWaker> = Arc::clone(&probes[0].waker);
    drop(probes.remove(0));
    assert_eq!(hub.parked(), 2);
    p.publish(Event::Added {
        object: pod("ns", "a", 1, "a", "n"),
    })
    .unwrap();
    assert_eq!(waker.count(), 0, "a dropped watcher is never woken");
    assert!(probes.iter().all(|p| p.woken() == 1));
}

#[test]
fn a_spurious_poll_keeps_the_watcher_parked_with_the_newest_waker() {
    let (mut p, hub) = hub(8);
    let mut probe = Probe::new(hub.watch(everything()).unwrap());
    assert!(probe.poll().is_pending());
    let old = Arc::clone(&probe.waker);
    probe.waker = Arc::new(CountingWaker::default());
    assert!(probe.poll().is_pending(), "nothing published: still pending");
    assert_eq!(hub.parked(), 1);
    p.publish(Event::Added {
        object: pod("ns", "a", 1, "a", "n"),
    })
    .unwrap();
    assert_eq!(
        (old.count(), probe.woken()),
        (0, 1),
        "the newest waker is the one woken"
    );
    assert_eq!(probe.drain().len(), 1);
}

#[tokio::test]
async fn an_async_watcher_waits_for_events_published_from_another_task() {
    let (mut p, hub) = hub(64);
    let mut w = hub.watch(everything()).unwrap();
    let reader = tokio::spawn(async move {
        let mut revs = Vec::new();
        while revs.len() < 100 {
            revs.push(w.next().await.unwrap().unwrap().revision.get());
        }
        revs
    });
    for rev in 1..=100 {
        p.publish(Event::Added {
            object: pod("ns", "a", rev, "a", "n"),
        })
        .unwrap();
        if rev % 10 == 0 {
            tokio::task::yield_now().await;
        }
    }
    assert_eq!(reader.await.unwrap(), (1..=100).collect::<Vec<_>>());
}

#[test]
fn closing_the_hub_ends_every_watcher_with_expired_after_what_was_published() {
    let (mut p, hub) = hub(8);
    let mut parked = Probe::new(hub.watch(everything()).unwrap());
    let mut behind = Probe::new(hub.watch(everything()).unwrap());
    assert!(parked.poll().is_pending());
    p.publish(Event::Added {
        object: pod("ns", "a", 1, "a", "n"),
    })
    .unwrap();
    assert_eq!(parked.drain().len(), 1);
    assert!(parked.poll().is_pending());
    p.close(Revision::new(50));
    assert!(parked.woken() >= 2, "closing wakes parked watchers");
    let got = parked.drain();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].as_ref().unwrap_err(),
        &Expired {
            requested: Revision::new(1),
            oldest: Revision::new(50)
        }
    );
    // One that had not read yet still gets what was published first.
    let got = behind.drain();
    assert_eq!(got.len(), 2);
    assert!(got[0].is_ok() && got[1].is_err());
    assert!(matches!(
        hub.watch(everything().after(Revision::new(1))),
        Err(WatchError::Expired(_))
    ));
}

#[test]
fn dropping_the_publisher_ends_parked_watchers_instead_of_leaving_them_asleep() {
    let (mut p, hub) = hub(8);
    p.publish(Event::Added {
        object: pod("ns", "a", 3, "a", "n"),
    })
    .unwrap();
    let mut parked = Probe::new(hub.watch(everything().after(Revision::new(3))).unwrap());
    assert!(parked.poll().is_pending());
    // The writer is gone (its task ended or panicked) without closing the hub.
    drop(p);
    assert!(parked.woken() >= 1, "the parked watcher is woken");
    let got = parked.drain();
    assert_eq!(
        got.iter().map(|r| r.as_ref().err().copied()).collect::<Vec<_>>(),
        [Some(Expired {
            requested: Revision::new(3),
            oldest: Revision::new(3)
        })],
        "it ends with Expired at the last published revision"
    );
    assert!(parked.poll().is_ready(), "and then the stream is over");
    assert!(
        matches!(
            hub.watch(everything().after(Revision::new(3))),
            Err(WatchError::Expired(_))
        ),
        "new watches on the orphaned hub are refused the same way"
    );
}

#[test]
fn a_spurious_poll_keeps_an_idle_selective_watcher_from_being_lapped() {
    for cap in SIZES {
        let (mut p, hub) = hub(cap);
        let mut kubelet = Probe::new(
            hub.watch(WatchSpec::new(
                Filter::parse(None, "", "spec.nodeName=quiet").unwrap(),
            ))
            .unwrap(),
        );
        assert!(kubelet.poll().is_pending());
        let mut rev = 0;
        for _ in 0..5 {
            for _ in 0..cap {
                rev += 1;
                p.publish(Event::Added {
                    object: pod("ns", "busy", rev, "a", "busy-node"),
                })
                .unwrap();
            }
            // Polled without having been woken (its task woke for another reason), while the
            // ring holds none of the entries it had when it parked.
            assert!(
                kubelet.poll().is_pending(),
                "ring of {cap}: nothing for it, no Expired"
            );
        }
        assert_eq!(kubelet.woken(), 0);
        rev += 1;
        p.publish(Event::Added {
            object: pod("ns", "mine", rev, "a", "quiet"),
        })
        .unwrap();
        let got: Vec<_> = kubelet
            .drain()
            .into_iter()
            .map(|e| summary(&e.unwrap()))
            .collect();
        assert_eq!(got, vec![("ADDED", rev, rev, "mine".into())], "ring of {cap}");
    }
}

#[test]
fn a_watcher_of_one_object_by_name_wakes_only_for_that_object() {
    let (mut p, hub) = hub(64);
    let mut nodes: Vec<Probe> = (0..50)
        .map(|n| {
            let f = Filter::parse(None, "", &format!("metadata.name=node-{n}")).unwrap();
            Probe::new(hub.watch(WatchSpec::new(f)).unwrap())
        })
        .collect();
    for probe in &mut nodes {
        assert!(probe.poll().is_pending());
    }
    for rev in 1..=10 {
        p.publish(Event::Added {
            object: pod("", "node-7", rev, "a", ""),
        })
        .unwrap();
    }
    let woken: Vec<usize> = nodes.iter().map(Probe::woken).collect();
    assert_eq!(woken.iter().sum::<usize>(), 1, "{woken:?}");
    assert_eq!(woken[7], 1);
    assert_eq!(nodes[7].drain().len(), 10);
    assert_eq!(hub.wakeups(), 1, "one wake-up for ten updates of one node");
}

#[test]
fn an_awake_selective_watcher_goes_from_its_event_to_its_next_without_reading_others() {
    let (mut p, hub) = hub(4096);
    let mut kubelet = Probe::new(
        hub.watch(WatchSpec::new(
            Filter::parse(None, "", "spec.nodeName=mine").unwrap(),
        ))
        .unwrap(),
    );
    p.publish(Event::Added {
        object: pod("ns", "a", 1, "a", "mine"),
    })
    .unwrap();
    // Read, not parked: its next read follows the link from this event.
    assert!(matches!(kubelet.poll(), Poll::Ready(Some(Ok(_)))));
    // More than a poll's scan budget (512) of others' events.
    let others = if cfg!(miri) { 600 } else { 3000 };
    for rev in 2..=others + 1 {
        p.publish(Event::Added {
            object: pod("ns", "b", rev, "a", "other"),
        })
        .unwrap();
    }
    let mine = others + 2;
    p.publish(Event::Added {
        object: pod("ns", "a", mine, "a", "mine"),
    })
    .unwrap();
    // Scanning the others' events would take several polls (it yields every 512); following
    // the chain (or the stamp of its next event) takes one, and it never wakes itself to
    // yield: its one wake-up is the writer's, for its event.
    match kubelet.poll() {
        Poll::Ready(Some(Ok(e))) => assert_eq!(e.revision, Revision::new(mine)),
        other => panic!("{other:?}"),
    }
    assert!(kubelet.poll().is_pending());
    assert_eq!(kubelet.woken(), 1, "woken once, by the writer");
}

#[test]
fn a_watcher_that_read_its_last_event_is_not_lapped_by_others_before_its_next_poll() {
    for cap in SIZES {
        let (mut p, hub) = hub(cap);
        let mut kubelet = Probe::new(
            hub.watch(WatchSpec::new(
                Filter::parse(None, "", "spec.nodeName=mine").unwrap(),
            ))
            .unwrap(),
        );
        p.publish(Event::Added {
            object: pod("ns", "a", 1, "a", "mine"),
        })
        .unwrap();
        // Delivered, and not polled again while the ring wraps many times over it.
        assert!(matches!(kubelet.poll(), Poll::Ready(Some(Ok(_)))));
        let mut rev = 1;
        for _ in 0..cap * 5 {
            rev += 1;
            p.publish(Event::Added {
                object: pod("ns", "b", rev, "a", "other"),
            })
            .unwrap();
        }
        assert!(kubelet.poll().is_pending(), "ring of {cap}: not lapped");
        rev += 1;
        p.publish(Event::Added {
            object: pod("ns", "a", rev, "a", "mine"),
        })
        .unwrap();
        let got: Vec<_> = kubelet
            .drain()
            .into_iter()
            .map(|e| summary(&e.unwrap()))
            .collect();
        assert_eq!(got, vec![("ADDED", rev, rev, "a".into())], "ring of {cap}");
    }
}

#[test]
fn a_watcher_whose_next_event_is_linked_when_it_delivers_moves_on_at_once() {
    let (mut p, hub) = hub(8);
    let mut kubelet = Probe::new(
        hub.watch(WatchSpec::new(
            Filter::parse(None, "", "spec.nodeName=mine").unwrap(),
        ))
        .unwrap(),
    );
    // Its event, another's, its next: linked before it reads the first.
    for (rev, node) in [(1, "mine"), (2, "other"), (3, "mine")] {
        p.publish(Event::Added {
            object: pod("ns", &format!("p{rev}"), rev, "a", node),
        })
        .unwrap();
    }
    assert!(matches!(kubelet.poll(), Poll::Ready(Some(Ok(e))) if e.revision == Revision::new(1)));
    // Before its next poll the ring wraps past the first two entries (not the third).
    for rev in 4..=10 {
        p.publish(Event::Added {
            object: pod("ns", "b", rev, "a", "other"),
        })
        .unwrap();
    }
    let got: Vec<_> = kubelet
        .drain()
        .into_iter()
        .map(|e| summary(&e.unwrap()))
        .collect();
    assert_eq!(got, vec![("ADDED", 3, 3, "p3".into())]);
}

#[test]
fn a_revision_of_many_events_is_read_whole_and_a_bookmark_at_it_follows_all_of_them() {
    for cap in SIZES.into_iter().filter(|&c| c >= 4) {
        let (mut p, hub) = hub(cap);
        let mut all = Probe::new(hub.watch(everything().with_bookmarks()).unwrap());
        let mut on_n2 = Probe::new(
            hub.watch(WatchSpec::new(
                Filter::parse(None, "", "spec.nodeName=n2").unwrap(),
            ))
            .unwrap(),
        );
        // One write that changed three keys (a prefix delete, a transaction, a lease's expiry).
        let events: Vec<Event> = ["a", "b", "c"]
            .iter()
            .map(|name| Event::Added {
                object: pod("ns", name, 7, "a", if *name == "b" { "n2" } else { "n1" }),
            })
            .collect();
        let seqs = p.publish_revision(events).unwrap();
        assert_eq!((seqs.start, seqs.end), (Seq::ZERO, Seq::new(3)));
        let got: Vec<(u64, String)> = all
            .drain()
            .into_iter()
            .map(|e| e.unwrap())
            .map(|e| {
                (
                    e.revision.get(),
                    e.object.map(|o| o.key().name().to_owned()).unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![(7, "a".into()), (7, "b".into()), (7, "c".into())],
            "ring of {cap}"
        );
        assert_eq!(
            on_n2.drain().len(),
            1,
            "a selective watcher gets its part of the revision"
        );
        p.send_bookmarks();
        for _ in 1..BOOKMARK_PHASES {
            p.send_bookmarks();
        }
        let bookmark = all.drain().pop().unwrap().unwrap();
        assert_eq!((bookmark.kind, bookmark.revision.get()), (EventKind::Bookmark, 7));
        // A revision is published once, whole: another event at 7 is refused, and so is a
        // publication that mixes revisions; neither changes anything.
        let late = Event::Added {
            object: pod("ns", "d", 7, "a", "n1"),
        };
        assert!(matches!(
            p.publish(late),
            Err(PublishError::RevisionNotIncreasing { .. })
        ));
        let mixed = vec![
            Event::Added {
                object: pod("ns", "e", 8, "a", "n1"),
            },
            Event::Added {
                object: pod("ns", "f", 9, "a", "n1"),
            },
        ];
        assert!(matches!(
            p.publish_revision(mixed),
            Err(PublishError::RevisionMixed { .. })
        ));
        assert_eq!(hub.tail(), Seq::new(3));
        // A watch resuming after 7 misses none of it; one resuming after 6 gets all of it.
        let mut after6 = Probe::new(hub.watch(everything().after(Revision::new(6))).unwrap());
        assert_eq!(after6.drain().len(), 3);
        let mut after7 = Probe::new(hub.watch(everything().after(Revision::new(7))).unwrap());
        assert!(after7.drain().is_empty());
    }
}

#[test]
fn a_revision_larger_than_the_window_laps_its_watchers_and_never_loses_them_silently() {
    let (mut p, hub) = hub(4);
    // A watcher parked on its namespace's bucket, and one elsewhere.
    let mut mine = Probe::new(
        hub.watch(WatchSpec::new(Filter::parse(Some("ns"), "", "").unwrap()))
            .unwrap(),
    );
    let mut other = Probe::new(
        hub.watch(WatchSpec::new(Filter::parse(Some("elsewhere"), "", "").unwrap()))
            .unwrap(),
    );
    assert!(mine.drain().is_empty() && other.drain().is_empty());
    let events: Vec<Event> = (0..10)
        .map(|i| Event::Deleted {
            revision: Revision::new(5),
            prev: pod("ns", &format!("p{i}"), 1, "a", "n1"),
        })
        .collect();
    p.publish_revision(events).unwrap();
    // Its first six events were overwritten by its own last four before anyone could read
    // them: the watcher they concern is woken and finds itself lapped.
    let got = mine.drain();
    assert!(matches!(got.last(), Some(Err(Expired { .. }))), "{got:?}");
    assert!(
        other.drain().is_empty(),
        "a watcher the revision does not concern stays"
    );
}

#[test]
fn a_watcher_never_polled_yet_is_not_lapped_by_events_it_would_filter_out() {
    // A watch sends its initial events before its first poll of the hub: meanwhile the window
    // turns over many times with others' events.
    let (mut p, hub) = hub(4);
    let mut kubelet = Probe::new(
        hub.watch(WatchSpec::new(
            Filter::parse(None, "", "spec.nodeName=mine").unwrap(),
        ))
        .unwrap(),
    );
    let mut in_ns = Probe::new(
        hub.watch(WatchSpec::new(Filter::parse(Some("mine"), "", "").unwrap()))
            .unwrap(),
    );
    for rev in 1..=20 {
        p.publish(Event::Added {
            object: pod("other", &format!("p{rev}"), rev, "a", "other"),
        })
        .unwrap();
    }
    p.publish(Event::Added {
        object: pod("mine", "x", 21, "a", "mine"),
    })
    .unwrap();
    for probe in [&mut kubelet, &mut in_ns] {
        let got = probe.drain();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].as_ref().expect("not expired").revision, Revision::new(21));
    }
}

#[test]
fn a_watcher_woken_by_an_entry_it_skips_is_not_expired_when_that_entry_is_overwritten() {
    let (mut p, hub) = hub(4);
    // Starts after revision 10, ahead of the ring: entries up to 10 are skipped when they come.
    let mut ahead = Probe::new(
        hub.watch(
            WatchSpec::new(Filter::parse(None, "", "spec.nodeName=mine").unwrap()).after(Revision::new(10)),
        )
        .unwrap(),
    );
    assert!(ahead.poll().is_pending());
    // An entry in its bucket at revision 5 wakes it; before it polls, the window turns over.
    p.publish(Event::Added {
        object: pod("ns", "old", 5, "a", "mine"),
    })
    .unwrap();
    for rev in 6..=10 {
        p.publish(Event::Added {
            object: pod("ns", &format!("p{rev}"), rev, "a", "other"),
        })
        .unwrap();
    }
    p.publish(Event::Added {
        object: pod("ns", "new", 11, "a", "mine"),
    })
    .unwrap();
    let got = ahead.drain();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        got[0].as_ref().expect("nothing it needed was lost").revision,
        Revision::new(11)
    );
}

#[test]
fn name_watchers_are_bucketed_by_namespace_and_name() {
    let (mut p, hub) = hub(64);
    // Every namespace's kubelet watches its own kube-root-ca.crt; one client watches the name
    // in every namespace.
    let mut per_ns: Vec<Probe> = (0..20)
        .map(|n| {
            let f = Filter::parse(Some(&format!("ns-{n}")), "", "metadata.name=kube-root-ca.crt").unwrap();
            Probe::new(hub.watch(WatchSpec::new(f)).unwrap())
        })
        .collect();
    let mut any = Probe::new(
        hub.watch(WatchSpec::new(
            Filter::parse(None, "", "metadata.name=kube-root-ca.crt").unwrap(),
        ))
        .unwrap(),
    );
    for probe in per_ns.iter_mut().chain([&mut any]) {
        assert!(probe.poll().is_pending());
    }
    p.publish(Event::Added {
        object: pod("ns-3", "kube-root-ca.crt", 1, "a", ""),
    })
    .unwrap();
    let woken: Vec<usize> = per_ns.iter().map(Probe::woken).collect();
    assert_eq!(
        woken.iter().sum::<usize>(),
        1,
        "only ns-3's watcher is woken: {woken:?}"
    );
    assert_eq!(per_ns[3].drain().len(), 1);
    assert_eq!(
        any.drain().len(),
        1,
        "the watcher of the name in any namespace sees it too"
    );
    p.publish(Event::Added {
        object: pod("ns-4", "kube-root-ca.crt", 2, "a", ""),
    })
    .unwrap();
    assert_eq!(per_ns[4].drain().len(), 1);
    assert!(per_ns[3].drain().is_empty());
    assert_eq!(any.drain().len(), 1);
}

#[test]
fn a_watcher_that_starts_inside_a_revision_never_resumes_past_it_after_a_lap() {
    let (mut p, hub) = hub(4);
    // One write of two keys, the first in namespace a, the second in namespace b.
    p.publish_revision(vec![
        Event::Added {
            object: pod("a", "x", 1, "app", "n"),
        },
        Event::Added {
            object: pod("b", "y", 1, "app", "n"),
        },
    ])
    .unwrap();
    // A watch of namespace b after revision 0 passes over a/x and stops at b/y: it has not
    // read all of revision 1.
    let mut w = Probe::new(
        hub.watch(WatchSpec::new(Filter::parse(Some("b"), "", "").unwrap()).after(Revision::ZERO))
            .unwrap(),
    );
    // Before its first poll, traffic in another namespace turns the window over.
    for rev in 2..=4 {
        p.publish(Event::Added {
            object: pod("a", &format!("p{rev}"), rev, "app", "n"),
        })
        .unwrap();
    }
    p.publish(Event::Added {
        object: pod("b", "z", 5, "app", "n"),
    })
    .unwrap();
    let got = w.drain();
    // b/y was overwritten before it could be read: the watcher is told it lost it (410), and
    // never goes on to b/z as if nothing were missing.
    assert!(matches!(got.as_slice(), [Err(Expired { .. })]), "{got:?}");
}
