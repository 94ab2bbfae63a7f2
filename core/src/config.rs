//! A cache's configuration, [`CacheConfig`], and [`BuildError`], what makes one unbuildable.
//! Validated once, when the cache is built, never on a request.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::ring::CapacityError;
use crate::watcher::DEFAULT_CAPACITY;

/// How many catch-up reads of the source a cache runs at once by default.
pub const DEFAULT_CATCH_UP_READS: usize = 16;

/// Tuning of a cache; every field has a default.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// The resource name (`pods`), used in errors and continue tokens.
    pub resource: String,
    /// The source key prefix listed and watched (`pods/`).
    pub prefix: String,
    /// The history window's upper bound in events: a power of two. Default 4096.
    pub capacity: usize,
    /// The window's lower bound: this many newest events are kept whatever their age.
    /// Default 100, the apiserver's lower bound.
    pub retain_min_events: usize,
    /// Events older than this, beyond the lower bound, are released so their memory returns
    /// (the apiserver's `eventFreshDuration`). Default 75 s.
    pub fresh_window: Duration,
    /// How long the snapshot a paginated LIST reads is kept after its last page was served,
    /// so that its next page reads the same state however many writes went by (0: only while
    /// the history window can make it again). Default 75 s.
    pub snapshot_retention: Duration,
    /// The bytes of superseded object versions history may hold (the ring's entries); the
    /// oldest are released beyond it whatever their age. Default 256 MiB.
    pub history_bytes: usize,
    /// How long reads wait for the cache to reach a revision. Default 3 s.
    pub fresh_timeout: Duration,
    /// How long requests wait for the first list before `NotReady`. Default 3 s.
    pub ready_timeout: Duration,
    /// How often opted-in watchers get a bookmark. Default 60 s.
    pub bookmark_interval: Duration,
    /// The field parked watchers are indexed by (`spec.nodeName` for pods); selectable too.
    pub trigger_field: Option<String>,
    /// Selectable fields beyond `metadata.name` and `metadata.namespace`.
    pub fields: Vec<String>,
    /// The first relist or rewatch delay; doubles up to `backoff_max`, with jitter.
    pub backoff_initial: Duration,
    /// The longest relist or rewatch delay.
    pub backoff_max: Duration,
    /// Whether the first list fills the history window from the source's retained history:
    /// it is read at an older revision (the newer of the source's compacted revision and
    /// `16 × capacity` revisions back), and the changes since are replayed into the window
    /// before the cache is published. A client that resumes a watch from a revision it saw
    /// before this cache started then goes on without a 410 and a relist. Default off (the
    /// apiserver's behaviour: the window starts at the first list).
    pub history_fill: bool,
    /// Whether a watch the history window cannot serve (a start below it, or a watcher the
    /// writer laps) reads the source's retained history instead and then goes on from the
    /// window, rather than end with 410; and how many such reads may run at once (shared by
    /// every cache given a clone). Default on, 16 reads for this cache alone. `None`: the
    /// apiserver's behaviour, 410 and a relist.
    pub catch_up: Option<CatchUpReads>,
}

impl CacheConfig {
    /// Defaults for `resource`, whose keys live under `prefix`.
    pub fn new(resource: &str, prefix: &str) -> Self {
        CacheConfig {
            resource: resource.to_owned(),
            prefix: prefix.to_owned(),
            capacity: DEFAULT_CAPACITY,
            retain_min_events: 100,
            fresh_window: Duration::from_secs(75),
            snapshot_retention: Duration::from_secs(75),
            history_bytes: 256 << 20,
            fresh_timeout: Duration::from_secs(3),
            ready_timeout: Duration::from_secs(3),
            bookmark_interval: Duration::from_secs(60),
            trigger_field: None,
            fields: Vec::new(),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            history_fill: false,
            catch_up: Some(CatchUpReads::new(DEFAULT_CATCH_UP_READS)),
        }
    }

    /// Checks the configuration and completes it: the trigger field is selectable too.
    pub(crate) fn validated(mut self) -> Result<Self, BuildError> {
        if let Some(t) = &self.trigger_field
            && !self.fields.contains(t)
        {
            self.fields.push(t.clone());
        }
        if self.capacity < 2 || !self.capacity.is_power_of_two() {
            return Err(BuildError::CapacityNotPowerOfTwo(self.capacity));
        }
        Ok(self)
    }
}

/// A cache that cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// Ring capacities are powers of two, at least 2.
    CapacityNotPowerOfTwo(usize),
    /// A cache was built outside a tokio runtime (its reflector needs one).
    NoRuntime,
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::CapacityNotPowerOfTwo(n) => CapacityError(*n).fmt(f),
            BuildError::NoRuntime => f.write_str("a cache must be built inside a tokio runtime"),
        }
    }
}

impl std::error::Error for BuildError {}

impl From<CapacityError> for BuildError {
    fn from(e: CapacityError) -> Self {
        BuildError::CapacityNotPowerOfTwo(e.0)
    }
}

/// The default [`CatchUpReads::with_read_bytes`]: 4 MiB.
pub const DEFAULT_READ_BYTES: usize = 4 << 20;

/// How many watchers may read the source's history at once: one bound shared by every cache
/// given a clone, so that a server bounds the reads against its store whatever the number of
/// resources. Watchers beyond it wait in line, in the order they came.
///
/// A watcher waits in line as long as its watch lasts: no 410 while the source still holds
/// its revision (a watch past its deadline inside a revision is the one exception: its
/// server ends it with 410 if the revision's rest does not come in time). The places go round, so that readers slower than the events (whose reads
/// never end) do not keep the rest waiting:
///
/// - a read that has held its place for a [`slice`](Self::with_slice) gives it to the next in
///   line, if any waits, and its readers go back in line at the end, from where they stand;
/// - a read whose readers all leave what it read untaken for [`idle`](Self::with_idle) (their
///   clients stopped reading) gives its place up at once, whether or not one waits.
///
/// Either way the read drops what it holds, and its readers lose nothing: each reads on from
/// the revision it stands at with the next read it gets. [`with_queue_wait`](Self::with_queue_wait)
/// bounds the wait in line instead, with 410 past it (the apiserver's answer).
#[derive(Clone)]
pub struct CatchUpReads {
    pub(crate) permits: Arc<Semaphore>,
    /// Catch-ups waiting in line now (a read past its slice gives its place up only if one
    /// does).
    pub(crate) in_line: Arc<AtomicUsize>,
    limit: usize,
    pub(crate) queue_wait: Option<Duration>,
    pub(crate) slice: Duration,
    pub(crate) idle: Duration,
    pub(crate) read_bytes: usize,
}

impl CatchUpReads {
    /// At most `limit` reads at once (at least one), each for a slice of 10 s while others
    /// wait; a watcher waits in line as long as its watch lasts.
    pub fn new(limit: usize) -> Self {
        let limit = limit.max(1);
        CatchUpReads {
            permits: Arc::new(Semaphore::new(limit)),
            in_line: Arc::new(AtomicUsize::new(0)),
            limit,
            queue_wait: None,
            slice: Duration::from_secs(10),
            idle: Duration::from_secs(5),
            read_bytes: DEFAULT_READ_BYTES,
        }
    }

    /// The bytes (of the store's values) one read keeps for the catch-ups that share it: what
    /// its fastest reader has passed stays this long for the slower ones (one that falls
    /// further behind reads on alone); what every reader has passed stays an eighth of this,
    /// for catch-ups that join later; and it reads at most an eighth of this ahead of the
    /// fastest. At least 1 KiB.
    pub fn with_read_bytes(mut self, bytes: usize) -> Self {
        self.read_bytes = bytes.max(1024);
        self
    }

    /// How long a watcher waits in line for a read before it ends with 410, as the apiserver
    /// would answer it at once. By default it waits as long as its watch lasts.
    pub fn with_queue_wait(mut self, wait: Duration) -> Self {
        self.queue_wait = Some(wait);
        self
    }

    /// How long a read keeps its place while others wait in line: 10 s by default. Past it, the
    /// read gives its place to the next in line and its readers go back in line at the end. A
    /// slice costs the source a new read from where each reader stands (etcd 3.4 scans from
    /// that revision to its head), so it is long against the time a read takes to open.
    pub fn with_slice(mut self, slice: Duration) -> Self {
        self.slice = slice;
        self
    }

    /// How long a read's readers may leave what it read untaken before it gives its place up,
    /// whether or not another waits: 5 s by default. A client whose socket stays full for
    /// longer (it reads far slower than events come) loses its place while it cannot take, and
    /// reads on with a read of its own, from where it stands, when it can.
    pub fn with_idle(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self
    }

    /// The bound.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// How many reads are under way now.
    pub fn in_use(&self) -> usize {
        self.limit - self.permits.available_permits()
    }

    /// How many catch-ups wait in line for a read now.
    pub fn waiting(&self) -> usize {
        self.in_line.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for CatchUpReads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CatchUpReads")
            .field("limit", &self.limit)
            .field("in_use", &self.in_use())
            .field("read_bytes", &self.read_bytes)
            .field("waiting", &self.waiting())
            .field("queue_wait", &self.queue_wait)
            .field("slice", &self.slice)
            .field("idle", &self.idle)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// By default nobody is told 410 for waiting in line: the places go round instead.
    #[test]
    fn a_catch_up_waits_in_line_as_long_as_its_watch_lasts_unless_told_otherwise() {
        let reads = CatchUpReads::new(0);
        assert_eq!(reads.limit(), 1);
        assert_eq!(reads.queue_wait, None);
        assert!(reads.slice > Duration::ZERO && reads.slice < Duration::MAX);
        let bounded = reads.with_queue_wait(Duration::from_secs(10));
        assert_eq!(bounded.queue_wait, Some(Duration::from_secs(10)));
    }
}
