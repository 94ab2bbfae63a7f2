//! [`CacheStats`]: the counters and gauges a cache's reflector keeps and its users read (tests,
//! metrics).

use std::sync::atomic::AtomicU64;

/// Counters, for tests and metrics. Relaxed: each is a count on its own, ordered with nothing.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Completed lists of the source (the first one included).
    pub lists: AtomicU64,
    /// Source values that could not be decoded (held as corrupt objects), or whose keys are
    /// outside the resource's layout (skipped).
    pub decode_errors: AtomicU64,
    /// Events applied.
    pub events: AtomicU64,
    /// Reads served from the source rather than the cache: consistent reads the cache did not
    /// reach in time (at once, on a source that cannot order requested progress), and exact
    /// reads and continues of revisions the cache no longer holds.
    pub source_reads: AtomicU64,
    /// Progress notifications the cache asked its source for while reads waited for it to
    /// reach a revision: one at a time, however many reads waited (see `progress.rs`).
    pub progress_requests: AtomicU64,
    /// Reflectors replaced after a panic.
    pub reflector_restarts: AtomicU64,
    /// Bytes of superseded object versions history holds now (bounded by
    /// `CacheConfig::history_bytes`).
    pub history_bytes: AtomicU64,
    /// Snapshots paginated LISTs keep pinned now.
    pub pinned_snapshots: AtomicU64,
    /// LISTs at an older revision of the history window, served from a state made on demand
    /// by undoing the ring's events after it.
    pub undone_reads: AtomicU64,
    /// Watchers that read the source's history because the window could not serve them (a
    /// start below it, or a lap), instead of ending with 410.
    pub catch_ups: AtomicU64,
    /// Those of them that began mid-stream: watchers the writer lapped, or a new generation
    /// cut off, while their clients still read (the rest started below the window).
    pub catch_ups_lapped: AtomicU64,
    /// Reads of the source's history catch-ups made (catch-ups over overlapping ranges share
    /// one).
    pub catch_up_reads: AtomicU64,
    /// Events catch-ups delivered.
    pub catch_up_events: AtomicU64,
    /// Catch-ups handed over to the ring.
    pub catch_up_handovers: AtomicU64,
    /// Catch-ups that waited in line for a read of the source longer than
    /// [`CatchUpReads::with_queue_wait`](crate::CatchUpReads::with_queue_wait) allows, and ended
    /// with 410 (never, unless that bounds the wait).
    pub catch_ups_refused: AtomicU64,
    /// Bytes the reads of catch-ups hold now: for each read, at most its bound
    /// ([`CatchUpReads::with_read_bytes`](crate::CatchUpReads::with_read_bytes)) and one
    /// revision.
    pub catch_up_bytes: AtomicU64,
}
