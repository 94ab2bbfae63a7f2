//! The ring: publish against read (exactly once, in order, or lapped; never torn, never a
//! reclaimed entry), reclamation (each overwritten entry dropped exactly once, only when no
//! reader can reach it), the start search against overwrites and trims.
#![cfg(watchcache_loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use watchcache_core::{EventRing, Read, Revision, Seq};
use watchcache_loom_tests::model;

/// A payload whose drop is counted: loom's Arc also reports a leak if it is never dropped.
struct Payload {
    seq: u64,
    drops: Arc<AtomicUsize>,
}

impl Drop for Payload {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

fn read_all(ring: &EventRing<Payload>, upto: u64) -> Vec<Result<u64, &'static str>> {
    let guard = crossbeam_epoch::pin();
    let mut out = Vec::new();
    for seq in 0..upto {
        match ring.read(Seq::new(seq), &guard) {
            Read::Ready(e) => {
                // Never torn: the stamp, the revision and the payload agree.
                assert_eq!(e.seq(), Seq::new(seq));
                assert_eq!(e.value().seq, seq);
                assert_eq!(e.revision(), Revision::new(10 * (seq + 1)));
                out.push(Ok(seq));
            }
            Read::Empty => {
                out.push(Err("empty"));
                break;
            }
            Read::Lapped => {
                out.push(Err("lapped"));
                break;
            }
        }
    }
    out
}

/// A writer publishes `pushes` entries into a ring of 2 while this thread reads them all.
fn publish_while_reading(pushes: u64) -> Vec<Result<u64, &'static str>> {
    let drops = Arc::new(AtomicUsize::new(0));
    let (ring, mut writer) = EventRing::new(2, Revision::ZERO).unwrap();
    let w = thread::spawn(move || {
        for seq in 0..pushes {
            writer
                .push(
                    Revision::new(10 * (seq + 1)),
                    Payload {
                        seq,
                        drops: drops.clone(),
                    },
                )
                .unwrap();
        }
    });
    let got = read_all(&ring, pushes);
    w.join().unwrap();
    got
}

#[test]
fn publish_against_read_sees_each_entry_once_in_order() {
    model("publish_against_read", || {
        // Nothing is overwritten here, so a reader is never lapped: it sees a prefix, in order.
        let got = publish_while_reading(2);
        for (i, r) in got.iter().enumerate() {
            match r {
                Ok(seq) => assert_eq!(*seq, i as u64),
                Err(e) => assert_eq!(*e, "empty", "at {i}: {got:?}"),
            }
        }
    });
}

#[test]
fn a_reader_at_the_lap_boundary_is_lapped_never_misled() {
    model("lap_boundary", || {
        let got = publish_while_reading(3);
        for (i, r) in got.iter().enumerate() {
            match r {
                Ok(seq) => assert_eq!(*seq, i as u64),
                Err("lapped") => assert_eq!(i, 0, "only entry 0 is ever overwritten here: {got:?}"),
                Err(_) => {}
            }
        }
    });
}

#[test]
fn an_overwritten_entry_stays_valid_for_a_pinned_reader_and_is_dropped_once() {
    model("reclamation", || {
        let drops = Arc::new(AtomicUsize::new(0));
        let (ring, mut writer) = EventRing::new(2, Revision::ZERO).unwrap();
        writer
            .push(
                Revision::new(10),
                Payload {
                    seq: 0,
                    drops: drops.clone(),
                },
            )
            .unwrap();
        let reader = {
            let ring = ring.clone();
            thread::spawn(move || {
                let guard = crossbeam_epoch::pin();
                if let Read::Ready(e) = ring.read(Seq::ZERO, &guard) {
                    // Whatever the writer does meanwhile, the entry is intact while pinned.
                    thread::yield_now();
                    assert_eq!(e.value().seq, 0);
                }
            })
        };
        let d = drops.clone();
        writer
            .push(
                Revision::new(20),
                Payload {
                    seq: 1,
                    drops: d.clone(),
                },
            )
            .unwrap();
        writer
            .push(Revision::new(30), Payload { seq: 2, drops: d })
            .unwrap(); // overwrites entry 0
        reader.join().unwrap();
        assert!(
            drops.load(Ordering::SeqCst) <= 1,
            "only entry 0 can have been dropped"
        );
        drop(writer);
        drop(ring);
        // Everything is dropped exactly once once the ring is gone and the epoch advances.
        for _ in 0..4 {
            crossbeam_epoch::pin().flush();
        }
    });
}

#[test]
fn the_start_search_never_skips_a_retained_later_entry() {
    model("start_search", || {
        let drops = Arc::new(AtomicUsize::new(0));
        let (ring, mut writer) = EventRing::new(2, Revision::ZERO).unwrap();
        writer
            .push(
                Revision::new(10),
                Payload {
                    seq: 0,
                    drops: drops.clone(),
                },
            )
            .unwrap();
        writer
            .push(
                Revision::new(20),
                Payload {
                    seq: 1,
                    drops: drops.clone(),
                },
            )
            .unwrap();
        let d = drops.clone();
        let w = thread::spawn(move || {
            writer
                .push(
                    Revision::new(30),
                    Payload {
                        seq: 2,
                        drops: d.clone(),
                    },
                )
                .unwrap(); // evicts 10
            writer
                .push(Revision::new(40), Payload { seq: 3, drops: d })
                .unwrap(); // evicts 20
        });
        let guard = crossbeam_epoch::pin();
        // Every event after 15 starts at sequence 1 (revision 20) while it is retained;
        // once it is gone the answer is the floor, 20.
        match ring.seq_after(Revision::new(15), &guard) {
            Ok(seq) => assert_eq!(seq, Seq::new(1)),
            Err(floor) => assert_eq!(floor, Revision::new(20)),
        }
        drop(guard);
        w.join().unwrap();
    });
}

/// Trimming releases entries early: the bound and the floor must move together for readers.
#[test]
fn trimming_moves_the_floor_before_readers_can_see_the_bound() {
    model("trim", || {
        let drops = Arc::new(AtomicUsize::new(0));
        let (ring, mut writer) = EventRing::new(4, Revision::ZERO).unwrap();
        for seq in 0..3u64 {
            writer
                .push(
                    Revision::new(10 * (seq + 1)),
                    Payload {
                        seq,
                        drops: drops.clone(),
                    },
                )
                .unwrap();
        }
        let w = thread::spawn(move || {
            writer.trim(Seq::new(2)); // releases revisions 10 and 20: the floor becomes 20
            writer
        });
        let guard = crossbeam_epoch::pin();
        match ring.seq_after(Revision::new(15), &guard) {
            Ok(seq) => assert_eq!(seq, Seq::new(1), "entry 1 (revision 20) is the first after 15"),
            Err(floor) => assert_eq!(floor, Revision::new(20)),
        }
        drop(guard);
        drop(w.join().unwrap());
    });
}

/// The ring's length (the cache's history metric) is never more than its capacity while the
/// writer publishes and trims: it reads the tail once.
#[test]
fn the_length_never_exceeds_the_capacity_while_the_writer_trims() {
    model("len", || {
        let (ring, mut writer) = EventRing::new(2, Revision::ZERO).unwrap();
        writer.push(Revision::new(10), 0u64).unwrap();
        let w = thread::spawn(move || {
            writer.push(Revision::new(20), 1).unwrap();
            writer.push(Revision::new(30), 2).unwrap();
            writer.trim(Seq::new(3));
            writer
        });
        let n = ring.len();
        assert!(n <= ring.capacity(), "length {n} over capacity 2");
        drop(w.join().unwrap());
    });
}

#[cfg(feature = "weaken-len-two-loads")]
#[test]
fn weakened_a_length_from_two_tail_loads_underflows() {
    the_length_never_exceeds_the_capacity_while_the_writer_trims();
}

#[cfg(feature = "weaken-tail-relaxed")]
#[test]
fn weakened_a_relaxed_tail_store_lets_a_reader_see_a_tail_before_its_entry() {
    publish_against_read_sees_each_entry_once_in_order();
}

#[cfg(feature = "weaken-trim-relaxed")]
#[test]
fn weakened_a_relaxed_trim_bound_lets_a_reader_skip_a_retained_entry() {
    trimming_moves_the_floor_before_readers_can_see_the_bound();
}
