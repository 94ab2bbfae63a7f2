//! `/metrics` in the Prometheus text format (prometheus-client).

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;

use watchcache_core::CacheStats;

/// The labels of a metric: `resource` (and `verb`, `plugin`).
pub type Labels = Vec<(&'static str, String)>;

/// The server's metrics.
pub struct Metrics {
    registry: Registry,
    /// Open watches, per resource.
    pub watchers: Family<Labels, Gauge>,
    /// Watch events written to clients, per resource.
    pub events_dispatched: Family<Labels, Counter>,
    /// Bookmarks written to clients, per resource.
    pub bookmarks_sent: Family<Labels, Counter>,
    /// Watches ended with a 410 once they had delivered an event or reached the window (lapped
    /// or cut off by a relist where no catch-up from the store could serve them: compacted, or
    /// catch-up off; or a catch-up that could not go on), per resource.
    pub watch_expired_in_stream: Family<Labels, Counter>,
    /// Watches the server ended, not their client: the in-stream 410s, and watches whose
    /// client stopped reading, dropped a grace period after their deadline (the apiserver's
    /// `apiserver_terminated_watchers_total`), per resource. Not the clean ends of a dropped
    /// cache's watches (`watches_closed`).
    pub terminated_watchers: Family<Labels, Counter>,
    /// Watches that read the store's retained history because the window could not serve
    /// them (see `CacheStats::catch_ups`), per resource.
    pub watch_catch_ups: Family<Labels, Counter>,
    /// Reads of the store's history catch-ups made (those over overlapping ranges share one),
    /// per resource.
    pub watch_catch_up_reads: Family<Labels, Counter>,
    /// Events catch-ups delivered, per resource.
    pub watch_catch_up_events: Family<Labels, Counter>,
    /// Catch-ups handed over to the window, per resource.
    pub watch_catch_up_handovers: Family<Labels, Counter>,
    /// Catch-ups of watchers lapped (or cut off by a relist) mid-stream, per resource.
    pub watch_catch_ups_lapped: Family<Labels, Counter>,
    /// Catch-ups that waited too long in line for a read of the store and ended with 410 (only
    /// where the library's embedder bounds the wait), per
    /// resource.
    pub watch_catch_ups_refused: Family<Labels, Counter>,
    /// Bytes catch-ups' reads of the store hold now, per resource (see
    /// `CacheStats::catch_up_bytes`).
    pub watch_catch_up_bytes: Family<Labels, Gauge>,
    /// LIST requests, per resource.
    pub list_requests: Family<Labels, Counter>,
    /// LIST body bytes written, per resource.
    pub list_bytes: Family<Labels, Counter>,
    /// History window capacity, per resource.
    pub ring_capacity: Family<Labels, Gauge>,
    /// Events in the history window, per resource.
    pub ring_occupancy: Family<Labels, Gauge>,
    /// Bytes of superseded object versions history holds, per resource.
    pub history_bytes: Family<Labels, Gauge>,
    /// Reflectors replaced after a panic, per resource.
    pub reflector_restarts: Family<Labels, Counter>,
    /// Request latency to the response head, per verb.
    pub request_duration: Family<Labels, Histogram>,
    /// Watches told 410 (in stream: the client relists) before they delivered an event or
    /// reached the window: their revision older than the window with catch-up off, or
    /// compacted in the store, known at once or found by the read of the store they began with
    /// (or that read could not go on), per resource.
    pub watch_starts_expired: Family<Labels, Counter>,
    /// Reads the store answered because the cache could not, per resource (see
    /// `CacheStats::source_reads`).
    pub store_reads: Family<Labels, Counter>,
    /// Progress notifications asked of the store while reads waited for the cache, per
    /// resource (see `CacheStats::progress_requests`).
    pub progress_requests: Family<Labels, Counter>,
    /// Lists of the store that started a generation of a cache (the first one included), per
    /// resource: the apiserver's `apiserver_watch_cache_initializations_total`.
    pub initializations: Family<Labels, Counter>,
    /// Snapshots paginated LISTs keep pinned now, per resource (see
    /// `CacheStats::pinned_snapshots`).
    pub pinned_snapshots: Family<Labels, Gauge>,
    /// LISTs at an older revision of the history window served from a state made by undoing
    /// the window's events, per resource (see `CacheStats::undone_reads`).
    pub undone_reads: Family<Labels, Counter>,
    /// Audit events made (the apiserver's `apiserver_audit_event_total`).
    pub audit_events: Counter,
    /// Audit events lost, per plugin (`log`): dropped because the writer was behind, or not
    /// written (the apiserver's `apiserver_audit_error_total`).
    pub audit_errors: Family<Labels, Counter>,
    /// Open HTTP/2 connections (counted from their handshake to their close).
    pub http2_connections: Gauge,
    /// Open HTTP/2 streams, over all connections: a watch on HTTP/2 is one for as long as it
    /// lasts.
    pub http2_streams: Gauge,
    /// Connections closed as they were accepted, past `--max-connections`.
    pub connections_refused: Counter,
    /// On etcd: history reads (catch-ups' watches from old revisions) opened, on the members'
    /// history connections.
    pub etcd_history_watches: Counter,
    /// On etcd: history reads canceled because their reader fell behind by more than their
    /// backlog (each is opened again once all but an eighth of it has been read).
    pub etcd_history_pauses: Counter,
    /// On etcd: bytes history reads hold for their readers now (each at most its backlog and
    /// one revision; the etcd response being split is not counted).
    pub etcd_history_waiting_bytes: Gauge,
    /// On etcd: bytes of keys and values history reads received.
    pub etcd_history_received_bytes: Counter,
    /// On etcd: of those, the bytes dropped past a full backlog, which etcd sends again after
    /// the reopen.
    pub etcd_history_dropped_bytes: Counter,
    /// Watches ended cleanly, between two revisions, because the cache serving them was dropped
    /// (their CustomResourceDefinition served anew or deleted), per resource: their clients
    /// resume from their last resourceVersion.
    pub watches_closed: Family<Labels, Counter>,
    /// Held while a scrape sums the caches' gauges and renders.
    scrape: std::sync::Mutex<()>,
    /// The counts of dropped caches whose watches or catch-ups may still count.
    retired: std::sync::Mutex<Vec<CacheCounts>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let request_duration = Family::<Labels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 18))
        });
        let m = Metrics {
            watchers: Family::default(),
            events_dispatched: Family::default(),
            bookmarks_sent: Family::default(),
            watch_expired_in_stream: Family::default(),
            terminated_watchers: Family::default(),
            watch_catch_ups: Family::default(),
            watch_catch_up_reads: Family::default(),
            watch_catch_up_events: Family::default(),
            watch_catch_up_handovers: Family::default(),
            watch_catch_ups_lapped: Family::default(),
            watch_catch_ups_refused: Family::default(),
            watch_catch_up_bytes: Family::default(),
            list_requests: Family::default(),
            list_bytes: Family::default(),
            ring_capacity: Family::default(),
            ring_occupancy: Family::default(),
            history_bytes: Family::default(),
            reflector_restarts: Family::default(),
            request_duration,
            watch_starts_expired: Family::default(),
            store_reads: Family::default(),
            progress_requests: Family::default(),
            initializations: Family::default(),
            pinned_snapshots: Family::default(),
            undone_reads: Family::default(),
            audit_events: Counter::default(),
            audit_errors: Family::default(),
            http2_connections: Gauge::default(),
            http2_streams: Gauge::default(),
            connections_refused: Counter::default(),
            etcd_history_watches: Counter::default(),
            etcd_history_pauses: Counter::default(),
            etcd_history_waiting_bytes: Gauge::default(),
            etcd_history_received_bytes: Counter::default(),
            etcd_history_dropped_bytes: Counter::default(),
            watches_closed: Family::default(),
            scrape: std::sync::Mutex::new(()),
            retired: std::sync::Mutex::new(Vec::new()),
            registry: Registry::default(),
        };
        let mut root = Registry::default();
        // Under the apiserver's own name, so dashboards built for it read ours.
        root.register(
            "apiserver_watch_cache_initializations",
            "Lists of the store that started a generation of a watch cache",
            m.initializations.clone(),
        );
        root.register(
            "apiserver_terminated_watchers",
            "Watches the server ended rather than their client: in-stream 410s, and clients that stopped reading (not the clean ends of a dropped cache's watches)",
            m.terminated_watchers.clone(),
        );
        root.register(
            "apiserver_audit_event",
            "Audit events made and sent to the audit log",
            m.audit_events.clone(),
        );
        root.register(
            "apiserver_audit_error",
            "Audit events lost: dropped because the writer was behind, or not written",
            m.audit_errors.clone(),
        );
        let registry = root.sub_registry_with_prefix("watchcache");
        registry.register("watchers", "Open watches", m.watchers.clone());
        registry.register(
            "events_dispatched",
            "Watch events written to clients",
            m.events_dispatched.clone(),
        );
        registry.register(
            "bookmarks_sent",
            "Bookmarks written to clients",
            m.bookmarks_sent.clone(),
        );
        registry.register(
            "watch_expired_in_stream",
            "Watches ended with a 410 once they had delivered an event or reached the history window: lapped or cut off by a relist where the store no longer held their revision (or catch-up is off), or whose catch-up could not go on (the store compacted its revision, a previous value the store lost, a codec's panic, the cache dropped while it stood inside a revision, a revision still unfinished 20 s past the deadline), or in the window and still inside a revision 1 s past the deadline (a bug's guard)",
            m.watch_expired_in_stream.clone(),
        );
        registry.register(
            "watches_closed",
            "Watches ended cleanly between two revisions because the cache serving them was dropped (a CRD served anew or deleted); their clients resume from their last resourceVersion",
            m.watches_closed.clone(),
        );
        registry.register(
            "watch_catch_ups",
            "Watches that read the store's retained history because the history window could not serve them",
            m.watch_catch_ups.clone(),
        );
        registry.register(
            "watch_catch_up_reads",
            "Reads of the store's history made by catch-ups, each shared by the catch-ups over overlapping ranges",
            m.watch_catch_up_reads.clone(),
        );
        registry.register(
            "watch_catch_up_events",
            "Events delivered from the store's history by catch-ups",
            m.watch_catch_up_events.clone(),
        );
        registry.register(
            "watch_catch_up_handovers",
            "Catch-ups handed over to the history window",
            m.watch_catch_up_handovers.clone(),
        );
        registry.register(
            "watch_catch_ups_lapped",
            "Catch-ups of watchers the writer lapped, or a relist cut off, while their clients still read (the rest started below the window)",
            m.watch_catch_ups_lapped.clone(),
        );
        registry.register(
            "watch_catch_ups_refused",
            "Catch-ups that waited too long in line for a read of the store and ended with a 410",
            m.watch_catch_ups_refused.clone(),
        );
        registry.register(
            "watch_catch_up_bytes",
            "Bytes catch-ups' reads of the store hold now (each is bounded)",
            m.watch_catch_up_bytes.clone(),
        );
        registry.register("list_requests", "LIST requests", m.list_requests.clone());
        registry.register("list_bytes", "LIST body bytes written", m.list_bytes.clone());
        registry.register(
            "ring_capacity",
            "History window capacity in events",
            m.ring_capacity.clone(),
        );
        registry.register(
            "ring_occupancy",
            "Events in the history window",
            m.ring_occupancy.clone(),
        );
        registry.register(
            "history_bytes",
            "Bytes of superseded object versions the history window holds",
            m.history_bytes.clone(),
        );
        registry.register(
            "reflector_restarts",
            "Reflectors replaced after a panic",
            m.reflector_restarts.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Request latency to the response head",
            m.request_duration.clone(),
        );
        registry.register(
            "watch_starts_expired",
            "Watches told with an in-stream 410, before they delivered an event or reached the history window, that their revision is gone: older than the window with catch-up off, or compacted in the store (known at once, or found by the read of the store they began with, or that read could not go on)",
            m.watch_starts_expired.clone(),
        );
        registry.register(
            "store_reads",
            "Reads the store answered because the cache did not reach their revision in time or no longer held it",
            m.store_reads.clone(),
        );
        registry.register(
            "progress_requests",
            "Progress notifications asked of the store while reads waited for the cache (one at a time per cache; on etcd before 3.4.31, a fence write each)",
            m.progress_requests.clone(),
        );
        registry.register(
            "pinned_snapshots",
            "Snapshots paginated LISTs keep pinned while their pages are asked for",
            m.pinned_snapshots.clone(),
        );
        registry.register(
            "undone_reads",
            "LISTs at an older revision of the history window, served from a state made by undoing the window's events after it",
            m.undone_reads.clone(),
        );
        registry.register(
            "http2_connections",
            "Open HTTP/2 connections",
            m.http2_connections.clone(),
        );
        registry.register(
            "http2_streams",
            "Open HTTP/2 streams, over all connections",
            m.http2_streams.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed as they were accepted, past --max-connections",
            m.connections_refused.clone(),
        );
        registry.register(
            "etcd_history_watches",
            "etcd watches opened for catch-ups' history reads, on the members' history connections",
            m.etcd_history_watches.clone(),
        );
        registry.register(
            "etcd_history_pauses",
            "etcd history watches canceled because their reader fell behind by more than its backlog",
            m.etcd_history_pauses.clone(),
        );
        registry.register(
            "etcd_history_waiting_bytes",
            "Bytes etcd history reads hold for their readers now, each at most its backlog and one revision",
            m.etcd_history_waiting_bytes.clone(),
        );
        registry.register(
            "etcd_history_received_bytes",
            "Bytes of keys and values etcd history reads received",
            m.etcd_history_received_bytes.clone(),
        );
        registry.register(
            "etcd_history_dropped_bytes",
            "Bytes of keys and values etcd history reads dropped past a full backlog, which etcd sends again after the reopen",
            m.etcd_history_dropped_bytes.clone(),
        );
        Metrics { registry: root, ..m }
    }
}

/// Moves `counter` up to `total` (a count kept elsewhere, read at scrape time).
#[cfg(feature = "etcd")]
pub(crate) fn advance_to(counter: &Counter, total: u64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

/// How many of a cache's counts there are (see [`CacheCounts`]).
const CACHE_COUNTS: usize = 11;

/// One cache's counts, added to its resource's counters: at each scrape, and, once the cache is
/// dropped, until nothing can count in them any more.
///
/// Several caches may share a `resource` label (the versions of one CustomResourceDefinition,
/// each its own cache; a CRD served anew replaces its caches), so a label's counter is the sum
/// of what each of its caches, past and present, has counted: each adds what it counted since
/// it last did.
pub(crate) struct CacheCounts {
    stats: Arc<CacheStats>,
    counters: [Counter; CACHE_COUNTS],
    /// What has been added to `counters` so far.
    published: std::sync::Mutex<[u64; CACHE_COUNTS]>,
}

impl CacheCounts {
    /// The counts `stats` keeps, of a cache of the resource labelled `label`.
    pub(crate) fn new(m: &Metrics, label: &str, stats: Arc<CacheStats>) -> CacheCounts {
        let labels = resource(label);
        let counters = [
            &m.store_reads,
            &m.progress_requests,
            &m.initializations,
            &m.undone_reads,
            &m.watch_catch_ups,
            &m.watch_catch_up_reads,
            &m.watch_catch_up_events,
            &m.watch_catch_up_handovers,
            &m.watch_catch_ups_lapped,
            &m.watch_catch_ups_refused,
            &m.reflector_restarts,
        ]
        .map(|family| family.get_or_create(&labels).clone());
        CacheCounts {
            stats,
            counters,
            published: std::sync::Mutex::new([0; CACHE_COUNTS]),
        }
    }

    /// Adds what was counted since the last call.
    pub(crate) fn publish(&self) {
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        let stats = &self.stats;
        let now = [
            &stats.source_reads,
            &stats.progress_requests,
            &stats.lists,
            &stats.undone_reads,
            &stats.catch_ups,
            &stats.catch_up_reads,
            &stats.catch_up_events,
            &stats.catch_up_handovers,
            &stats.catch_ups_lapped,
            &stats.catch_ups_refused,
            &stats.reflector_restarts,
        ]
        .map(|count| count.load(relaxed));
        let mut published = self
            .published
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for ((counter, done), now) in self.counters.iter().zip(published.iter_mut()).zip(now) {
            if now > *done {
                counter.inc_by(now - *done);
                *done = now;
            }
        }
    }

    /// Whether nothing else holds the counts: they count no more (no `Weak` is made of them).
    fn is_final(&self) -> bool {
        let last = Arc::strong_count(&self.stats) == 1;
        if last {
            // Pairs with the Release decrement of each other holder's `Arc` as it dropped: what
            // they counted before is seen by `publish`.
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        }
        last
    }
}

/// How many of a cache's gauges there are (see [`Metrics::set_cache_gauges`]).
pub(crate) const CACHE_GAUGES: usize = 5;

/// Adds what each of `retired` counted since the last call; drops those that count no more.
fn publish_each(retired: &mut Vec<CacheCounts>) {
    retired.retain(|counts| {
        // Final first: what it counted before it was found final is all there is.
        let done = counts.is_final();
        counts.publish();
        !done
    });
}

/// Labels for one resource.
pub fn resource(name: &str) -> Labels {
    vec![("resource", name.to_owned())]
}

impl Metrics {
    /// Holds other scrapes off while the caller sets the caches' gauges and renders.
    pub(crate) fn scrape(&self) -> std::sync::MutexGuard<'_, ()> {
        self.scrape
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keeps the counts of a dropped cache until nothing counts in them any more, adding what
    /// they count at each scrape (and here). What the retired counts are: those still held by
    /// a watch or a catch-up of their cache.
    pub(crate) fn retire(&self, counts: CacheCounts) {
        let mut retired = self
            .retired
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        retired.push(counts);
        publish_each(&mut retired);
    }

    /// Adds what dropped caches counted since the last scrape. (A retired cache's counts are
    /// kept while anything holds its stats: its watches and catch-ups, which end, or an
    /// embedder that keeps `Cache::shared_stats`.)
    pub(crate) fn publish_retired(&self) {
        publish_each(
            &mut self
                .retired
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
    }

    /// Sets the caches' gauges to `sums`, per label: each the sum over the label's caches
    /// served now, in the order capacity, occupancy, history bytes, pinned snapshots,
    /// catch-up bytes. A label no longer served has none.
    pub(crate) fn set_cache_gauges(&self, sums: &std::collections::BTreeMap<&str, [u64; CACHE_GAUGES]>) {
        let families = [
            &self.ring_capacity,
            &self.ring_occupancy,
            &self.history_bytes,
            &self.pinned_snapshots,
            &self.watch_catch_up_bytes,
        ];
        for family in families {
            family.clear();
        }
        for (label, values) in sums {
            let labels = resource(label);
            for (family, value) in families.iter().zip(values) {
                family
                    .get_or_create(&labels)
                    .set(i64::try_from(*value).unwrap_or(i64::MAX));
            }
        }
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    /// A dropped cache's counts go on being added while its last watches count in them, and
    /// are let go once nothing else holds them.
    #[test]
    fn a_retired_caches_counts_are_added_until_they_are_final() {
        let m = Metrics::default();
        let counter = m
            .watch_catch_up_events
            .get_or_create(&resource("widgets.example.com"))
            .clone();
        let stats = Arc::new(CacheStats::default());
        let counts = CacheCounts::new(&m, "widgets.example.com", Arc::clone(&stats));
        stats.catch_up_events.fetch_add(3, Relaxed);
        counts.publish();
        // A second cache of the label (another version) adds to the same counter.
        let other = Arc::new(CacheStats::default());
        let second = CacheCounts::new(&m, "widgets.example.com", Arc::clone(&other));
        other.catch_up_events.fetch_add(4, Relaxed);
        second.publish();
        assert_eq!(counter.get(), 7);

        // Dropped while a watch (`stats`) still counts in it.
        m.retire(counts);
        stats.catch_up_events.fetch_add(5, Relaxed);
        m.publish_retired();
        assert_eq!(counter.get(), 12);
        assert_eq!(m.retired.lock().unwrap().len(), 1, "still counted in");
        stats.catch_up_events.fetch_add(1, Relaxed);
        drop(stats);
        m.publish_retired();
        assert_eq!(counter.get(), 13, "what it counted last is added");
        assert!(m.retired.lock().unwrap().is_empty(), "then let go");
    }
}
