//! What an idle watcher costs, two ways.
//!
//! - [`Design::Ring`] (ours): a `Watcher` parked on the hub: a cursor, a filter and a wake
//!   cell in its bucket of the interest registry.
//! - [`Design::TaskChannel`]: the per-watcher machinery of a queue-per-watcher cache: a
//!   bounded channel and a task waiting on it (kube-apiserver's cacheWatcher has a channel and
//!   a goroutine each).
//!
//! Both sides also need whatever serves the connection (in `watchcache serve`, hyper's
//! connection task); that is the same for both and not counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Waker};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use watchcache_core::{Filter, WatchHub, WatchSpec, Watcher};

use crate::alloc::{Counting, rss_bytes};

/// An idle-watcher design.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Design {
    /// Ours: a parked cursor.
    Ring,
    /// A bounded channel and a task per watcher.
    TaskChannel,
}

impl Design {
    /// Both designs, ours first.
    pub const ALL: [Design; 2] = [Design::Ring, Design::TaskChannel];

    /// The design's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Design::Ring => "ring",
            Design::TaskChannel => "task_channel",
        }
    }

    /// The design called `name`.
    pub fn from_name(name: &str) -> Option<Design> {
        Design::ALL.into_iter().find(|d| d.name() == name)
    }
}

/// Queue depth of each channel in [`Design::TaskChannel`] (the apiserver sizes its watcher
/// channels between 10 and 1,000).
pub const QUEUE: usize = 16;

/// What a run measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Heap bytes per idle watcher (when counting is on).
    pub heap_per_watcher: f64,
    /// Resident bytes per idle watcher.
    pub rss_per_watcher: f64,
}

/// Creates `count` idle watchers of `design`, calling `progress(created)`, and measures them.
pub fn run(design: Design, count: usize, progress: &(dyn Fn(u64) + Sync)) -> Outcome {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    // Idle watchers: nothing is ever published.
    let (_publisher, hub) = WatchHub::builder().capacity(1024).build().expect("a hub");
    let tick = (count / 100).max(1);
    let pid = std::process::id();
    let rss_before = rss_bytes(pid).unwrap_or(0);
    let heap_before = Counting::live();
    let outcome = |rss_after: u64| Outcome {
        heap_per_watcher: (Counting::live() - heap_before) as f64 / count as f64,
        rss_per_watcher: rss_after.saturating_sub(rss_before) as f64 / count as f64,
    };
    match design {
        Design::Ring => {
            let mut cx = Context::from_waker(Waker::noop());
            let mut watchers: Vec<Watcher> = Vec::with_capacity(count);
            for i in 0..count {
                let mut w = hub
                    .watch(WatchSpec::new(Filter::everything()))
                    .expect("a watcher");
                assert!(w.poll_next_with(&mut cx, |_| ()).is_pending(), "parked");
                watchers.push(w);
                if i % tick == 0 {
                    progress(i as u64);
                }
            }
            assert_eq!(hub.parked(), count);
            let out = outcome(rss_bytes(pid).unwrap_or(0));
            progress(count as u64);
            drop(watchers);
            out
        }
        Design::TaskChannel => {
            let parked = Arc::new(AtomicUsize::new(0));
            let mut senders = Vec::with_capacity(count);
            for i in 0..count {
                let (tx, mut rx) = mpsc::channel::<(u64, Bytes)>(QUEUE);
                let parked = parked.clone();
                rt.spawn(async move {
                    parked.fetch_add(1, Ordering::Relaxed);
                    while let Some(event) = rx.recv().await {
                        std::hint::black_box(event);
                    }
                });
                senders.push(tx);
                if i % tick == 0 {
                    progress(i as u64);
                }
            }
            // Every task has run up to its first (pending) receive.
            while parked.load(Ordering::Relaxed) < count {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(20));
            let out = outcome(rss_bytes(pid).unwrap_or(0));
            progress(count as u64);
            drop(senders);
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_designs_park_every_watcher() {
        for design in Design::ALL {
            let out = run(design, 500, &|_| ());
            assert!(out.rss_per_watcher >= 0.0);
            assert_eq!(Design::from_name(design.name()), Some(design));
        }
    }
}
