//! Snapshot and revision publication in the cache: the writer stores the new state (the
//! snapshot and the revision it is the state at, in one immutable value) before it announces
//! the revision, so a reader that has seen revision N loads a state at N or later, never a
//! half-applied one.
//!
//! The cache publishes its state with arc-swap and announces revisions on a tokio watch
//! channel; neither runs under loom (they use their own atomics and locks, not loom's), so
//! this models the protocol with loom stand-ins of the same strength: a `Mutex<Arc<State>>`
//! for the linearizable ArcSwap store and load, an atomic with Release/Acquire for the
//! announcement.
#![cfg(watchcache_loom)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use watchcache_loom_tests::model;

struct State {
    revision: u64,
    /// Stands for the snapshot: the state at revision N holds N items.
    items: Vec<u64>,
}

const ANNOUNCE_EARLY: bool = cfg!(feature = "weaken-announce-early");

#[test]
fn a_reader_that_saw_a_revision_loads_a_state_at_least_that_new() {
    model("snapshot_publication", || {
        let state = Arc::new(Mutex::new(Arc::new(State {
            revision: 0,
            items: Vec::new(),
        })));
        let announced = Arc::new(AtomicU64::new(0));
        let writer = {
            let (state, announced) = (state.clone(), announced.clone());
            thread::spawn(move || {
                for revision in 1..=2u64 {
                    let next = {
                        let current = state.lock().unwrap();
                        let mut items = current.items.clone();
                        items.push(revision);
                        Arc::new(State { revision, items })
                    };
                    if ANNOUNCE_EARLY {
                        announced.store(revision, Ordering::Release);
                    }
                    *state.lock().unwrap() = next;
                    if !ANNOUNCE_EARLY {
                        // Release pairs with the reader's Acquire: the store above is visible.
                        announced.store(revision, Ordering::Release);
                    }
                }
            })
        };
        let seen = announced.load(Ordering::Acquire);
        let loaded = state.lock().unwrap().clone();
        assert!(
            loaded.revision >= seen,
            "announced {seen} but loaded a state at {}",
            loaded.revision
        );
        assert_eq!(loaded.items.len() as u64, loaded.revision, "never half-applied");
        writer.join().unwrap();
    });
}

#[cfg(feature = "weaken-announce-early")]
#[test]
fn weakened_announcing_before_storing_lets_a_reader_see_an_older_state() {
    a_reader_that_saw_a_revision_loads_a_state_at_least_that_new();
}
