//! [`CacheStats`]: the counters and gauges a cache's reflector keeps and its users read (tests,
//! metrics).

use std::sync::atomic::AtomicU64;

/// Counters, for tests and metrics. Relaxed: each is a count on its own, ordered with nothing.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Completed lists of the source (the first one included).
    pub lists: AtomicU64,
    /// Source values that could not be decoded and were skipped.
    pub decode_errors: AtomicU64,
    /// Events applied.
    pub events: AtomicU64,
    /// Reads served from the source rather than the cache: consistent reads the cache could not
    /// prove it had reached (on a source whose progress cannot be trusted), and exact reads
    /// and continues of revisions the cache no longer holds.
    pub source_reads: AtomicU64,
    /// Reads the cache served from its own state, behind their revision, because the source
    /// proved its prefix unchanged since (`Source::unchanged_since`): what a quiet prefix on
    /// a source whose progress cannot be trusted costs instead of a source read.
    pub proven_reads: AtomicU64,
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
}
