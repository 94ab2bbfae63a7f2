//! `slow-watchers`: informer-like watch clients of pods on one `watchcache serve --etcd`, a
//! share of them reading at a tenth of the event rate, while a writer updates pods at a fixed
//! rate for minutes. Run with catch-up from etcd on (`--watch-catch-up-reads`, its default)
//! and off (0: the apiserver's behaviour, a lapped watcher gets 410 and relists).
//!
//! Each client lists once, then watches from the last revision it saw; on an in-stream 410 it
//! lists afresh (a relist, its bytes counted). Healthy clients read as fast as frames come
//! and time each event from the write time stamped in the pod; slow ones sleep after each
//! frame so that they read a tenth of the write rate, and so fall behind the window for good.
//!
//! Reported per design: in-stream 410s the clients received and those the server sent,
//! relists and the bytes they listed, the server's catch-ups and the events they served, what
//! etcd served (its gRPC counters: Range calls and Watch streams opened), the server's
//! resident memory sampled over the run, and the healthy clients' delivery latency (p50, p99,
//! p99.9 from a log-linear histogram).
//!
//! A 410 the server sends reaches a slow client only once the client has read what the
//! kernel buffered before it: about 4 MiB on loopback (the send buffer grows to
//! `net.ipv4.tcp_wmem`'s maximum), some 1,200 of these pods, ten minutes at a slow client's
//! pace. So a run ends with a *read-on*: the writer has stopped, the slow clients read at full
//! speed until each has the last write (or [`READ_ON`] has passed), and what that costs (410s,
//! relists, listed bytes, etcd reads, events, time) is reported apart from the run.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use memchr::memmem;
use watchcache_server::workload::{WRITTEN_AT_ANNOTATION, pod, pod_key};

use crate::alloc::{peak_rss_of, rss_bytes};
use crate::etcd::{connect, last_rv, list_rv, metric};
use crate::http::{clients_runtime, get, open, start_server, wait_ready};

/// What a run is asked to do.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Watch clients in all.
    pub watchers: usize,
    /// How many of them read slowly.
    pub slow: usize,
    /// Pod updates per second.
    pub rate: f64,
    /// How long the writer runs.
    pub seconds: f64,
    /// Pods in etcd (the writer updates them in turn).
    pub pods: usize,
    /// The server's history window (`--history`), in events.
    pub history: usize,
    /// `--watch-catch-up-reads`: 0 is off.
    pub catch_up_reads: usize,
    /// `--compaction-interval`, in seconds: how long etcd keeps history, and so how far back a
    /// catch-up can go (0: never compacted in the run).
    pub compaction_seconds: u64,
}

/// What a run measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Pod updates etcd acknowledged.
    pub written: u64,
    /// In-stream 410s the clients received.
    pub expired: u64,
    /// In-stream 410s the server sent (`watchcache_watch_expired_in_stream_total`, after a
    /// watch's first event, and `watchcache_watch_starts_expired_total`, before it), some still
    /// behind what the kernel buffered for their clients when the run ended.
    pub expired_sent: u64,
    /// LISTs the clients made after their first.
    pub relists: u64,
    /// Bytes of those LISTs.
    pub relisted_bytes: u64,
    /// Events the healthy clients and the slow ones received.
    pub healthy_events: u64,
    /// Events the slow clients received.
    pub slow_events: u64,
    /// The server's counters at the end.
    pub catch_ups: u64,
    /// Events served by catch-ups.
    pub catch_up_events: u64,
    /// Catch-ups that waited in line too long (a 410).
    pub catch_ups_refused: u64,
    /// etcd's Range calls and Watch streams over the run.
    pub etcd_ranges: u64,
    /// Watch streams etcd opened over the run.
    pub etcd_watches: u64,
    /// The server's resident memory: (seconds into the run, bytes), every 10 s.
    pub rss: Vec<(f64, u64)>,
    /// Its peak.
    pub peak_rss: u64,
    /// The most that catch-ups' reads held (`watchcache_watch_catch_up_bytes`) in the samples
    /// taken with the RSS.
    pub peak_catch_up_bytes: u64,
    /// The most etcd history reads held for them (`watchcache_etcd_history_waiting_bytes`) in
    /// those samples.
    pub peak_history_waiting_bytes: u64,
    /// Bytes etcd history reads received (`watchcache_etcd_history_received_bytes_total`).
    pub history_received_bytes: u64,
    /// Of those, bytes dropped past a full backlog, which etcd sent again.
    pub history_dropped_bytes: u64,
    /// The healthy clients' delivery latency, microseconds.
    pub p50_us: u64,
    /// p99.
    pub p99_us: u64,
    /// p99.9.
    pub p999_us: u64,
    /// The read-on after the run.
    pub read_on: ReadOn,
}

/// What the slow clients cost once they read on at full speed, the writer stopped.
#[derive(Debug, Default)]
pub struct ReadOn {
    /// Seconds until every slow client had the last write, or [`READ_ON`] if some had not.
    pub seconds: f64,
    /// Slow clients that reached the last write (one whose client gave up, an unreadable
    /// LIST, never does: the read-on then lasts its limit).
    pub current: u64,
    /// In-stream 410s the clients received meanwhile (the healthy ones, current since the
    /// writer stopped, receive none).
    pub expired: u64,
    /// The clients' relists meanwhile.
    pub relists: u64,
    /// Bytes of those relists.
    pub relisted_bytes: u64,
    /// Events the slow clients received.
    pub events: u64,
    /// Events catch-ups served meanwhile.
    pub catch_up_events: u64,
    /// etcd's Range calls meanwhile.
    pub etcd_ranges: u64,
    /// Watch streams etcd opened meanwhile.
    pub etcd_watches: u64,
    /// The server's peak resident memory, run and read-on together.
    pub peak_rss: u64,
}

/// The longest a read-on lasts.
pub const READ_ON: Duration = Duration::from_secs(180);

/// A log-linear histogram of microseconds: 16 buckets per power of two (about 4 % wide).
struct Histogram {
    buckets: Vec<AtomicU64>,
}

const SUB: u32 = 16;

impl Histogram {
    fn new() -> Self {
        Histogram {
            buckets: (0..64 * SUB).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn bucket(us: u64) -> usize {
        let us = us.max(1);
        let exp = 63 - us.leading_zeros();
        // The SUB steps between 2^exp and 2^(exp+1).
        let frac = if exp >= 4 {
            (us >> (exp - 4)) & u64::from(SUB - 1)
        } else {
            (us << (4 - exp)) & u64::from(SUB - 1)
        };
        (exp * SUB) as usize + frac as usize
    }

    fn lower_bound(bucket: usize) -> u64 {
        let (exp, frac) = (bucket as u32 / SUB, bucket as u64 % u64::from(SUB));
        if exp >= 4 {
            (1u64 << exp) + (frac << (exp - 4))
        } else {
            (1u64 << exp) + (frac >> (4 - exp))
        }
    }

    fn record(&self, us: u64) {
        self.buckets[Self::bucket(us)].fetch_add(1, Ordering::Relaxed);
    }

    fn quantile(&self, q: f64) -> u64 {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((total as f64) * q).ceil() as u64;
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::lower_bound(i);
            }
        }
        0
    }
}

/// Shared by the clients and the runner.
struct Shared {
    started_at_us: u64,
    stop: AtomicBool,
    /// Set for the read-on: slow clients stop pausing, and count themselves in `current`
    /// once they have `target`, the last revision written.
    reading_on: AtomicBool,
    target: AtomicU64,
    current: AtomicU64,
    expired: AtomicU64,
    relists: AtomicU64,
    relisted_bytes: AtomicU64,
    healthy_events: AtomicU64,
    slow_events: AtomicU64,
    connected: AtomicU64,
    latency: Histogram,
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// One client: lists, then watches from the last revision it saw; relists on a 410. A slow
/// one sleeps `pause` after each frame.
async fn client(addr: SocketAddr, shared: Arc<Shared>, pause: Option<Duration>) {
    let stamp = format!("\"{WRITTEN_AT_ANNOTATION}\":\"");
    let finder = memmem::Finder::new(stamp.as_bytes());
    let mut rv = 0u64;
    let mut listed = false;
    let mut first = true;
    let mut counted = false;
    let mut reached = false;
    // Whether a slow client has, now, the read-on's last write.
    let reached_now = |rv: u64, reached: &mut bool| {
        if pause.is_some()
            && !*reached
            && shared.reading_on.load(Ordering::Relaxed)
            && rv >= shared.target.load(Ordering::Relaxed)
        {
            *reached = true;
            shared.current.fetch_add(1, Ordering::Relaxed);
        }
    };
    while !shared.stop.load(Ordering::Relaxed) {
        if !listed {
            match get(addr, "/api/v1/pods").await {
                Ok((200, body)) => {
                    let Some(r) = list_rv(&body) else { return };
                    rv = r;
                    listed = true;
                    reached_now(rv, &mut reached);
                    if !first {
                        shared.relists.fetch_add(1, Ordering::Relaxed);
                        shared
                            .relisted_bytes
                            .fetch_add(body.len() as u64, Ordering::Relaxed);
                    }
                    first = false;
                }
                _ => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let path = format!("/api/v1/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true");
        let Ok((_sender, resp)) = open(addr, &path).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        if !counted {
            counted = true;
            shared.connected.fetch_add(1, Ordering::Relaxed);
        }
        let mut body = resp.into_body();
        let mut buf: Vec<u8> = Vec::new();
        'stream: while !shared.stop.load(Ordering::Relaxed) {
            let frame = match tokio::time::timeout(Duration::from_millis(500), body.frame()).await {
                Err(_) => {
                    reached_now(rv, &mut reached);
                    continue;
                }
                Ok(Some(Ok(frame))) => frame,
                Ok(_) => break,
            };
            let Ok(data) = frame.into_data() else { continue };
            buf.extend_from_slice(&data);
            while let Some(i) = memchr::memchr(b'\n', &buf) {
                let line: Vec<u8> = buf.drain(..=i).collect();
                if line.starts_with(br#"{"type":"ERROR""#) {
                    if memmem::find(&line, br#""code":410"#).is_some() {
                        shared.expired.fetch_add(1, Ordering::Relaxed);
                        listed = false;
                    }
                    break 'stream;
                }
                if let Some(r) = last_rv(&line) {
                    rv = rv.max(r);
                }
                reached_now(rv, &mut reached);
                if line.starts_with(br#"{"type":"BOOKMARK""#) {
                    continue;
                }
                match pause {
                    Some(pause) => {
                        shared.slow_events.fetch_add(1, Ordering::Relaxed);
                        if !shared.reading_on.load(Ordering::Relaxed) {
                            tokio::time::sleep(pause).await;
                        }
                    }
                    None => {
                        shared.healthy_events.fetch_add(1, Ordering::Relaxed);
                        if let Some(at) = finder.find(&line) {
                            let digits = &line[at + stamp.len()..];
                            let end = digits.iter().position(|b| !b.is_ascii_digit()).unwrap_or(0);
                            if let Some(written) = std::str::from_utf8(&digits[..end])
                                .ok()
                                .and_then(|d| d.parse::<u64>().ok())
                                .filter(|w| *w >= shared.started_at_us)
                            {
                                shared.latency.record(now_us().saturating_sub(written));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// etcd's counter `grpc_server_started_total` for `method`, read from its metrics endpoint.
async fn etcd_started(endpoint: &str, method: &str) -> u64 {
    let Ok(addr) = endpoint.trim_start_matches("http://").parse::<SocketAddr>() else {
        return 0;
    };
    let Ok((_, body)) = get(addr, "/metrics").await else {
        return 0;
    };
    let wanted = format!("grpc_method=\"{method}\"");
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| l.starts_with("grpc_server_started_total") && l.contains(&wanted))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// Runs `plan` against `binary serve --etcd` on `endpoints` (a fresh etcd with `plan.pods`
/// pods); `progress` is told the seconds elapsed.
pub fn run(
    binary: &Path,
    endpoints: &[String],
    plan: &Plan,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Outcome, String> {
    let rt = clients_runtime()?;
    let flag = endpoints.join(",");
    let max = (plan.watchers * 2 + 16).to_string();
    let history = plan.history.to_string();
    let reads = plan.catch_up_reads.to_string();
    let compaction = plan.compaction_seconds.to_string();
    let args = [
        "--compaction-interval",
        &compaction,
        "--etcd",
        &flag,
        "--max-watchers",
        &max,
        "--history",
        &history,
        "--watch-catch-up-reads",
        &reads,
    ];
    rt.block_on(async {
        let etcd = connect(endpoints).await?;
        let (server, addr) = start_server(binary, &args, &[])?;
        wait_ready(addr, binary).await?;
        let pid = server.0.id();
        let shared = Arc::new(Shared {
            started_at_us: now_us(),
            stop: AtomicBool::new(false),
            reading_on: AtomicBool::new(false),
            target: AtomicU64::new(0),
            current: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            relists: AtomicU64::new(0),
            relisted_bytes: AtomicU64::new(0),
            healthy_events: AtomicU64::new(0),
            slow_events: AtomicU64::new(0),
            connected: AtomicU64::new(0),
            latency: Histogram::new(),
        });
        let pause = Duration::from_secs_f64(10.0 / plan.rate);
        let tasks: Vec<_> = (0..plan.watchers)
            .map(|i| {
                let slow = (i < plan.slow).then_some(pause);
                tokio::spawn(client(addr, shared.clone(), slow))
            })
            .collect();
        let connected_by = Instant::now() + Duration::from_secs(120);
        while shared.connected.load(Ordering::Relaxed) < plan.watchers as u64 {
            if Instant::now() > connected_by {
                return Err("the clients did not all connect in 120 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let ranges_before = etcd_started(&endpoints[0], "Range").await;
        let watches_before = etcd_started(&endpoints[0], "Watch").await;
        let started = Instant::now();
        let mut rss = vec![(0.0, rss_bytes(pid).unwrap_or(0))];
        let mut next_sample = 10.0;
        let (mut peak_catch_up_bytes, mut peak_history_waiting_bytes) = (0, 0);
        let mut written = 0u64;
        let mut last = 0u64;
        let interval = Duration::from_secs_f64(1.0 / plan.rate);
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut g = 0u64;
        while started.elapsed().as_secs_f64() < plan.seconds {
            tick.tick().await;
            g += 1;
            let i = (g as usize) % plan.pods;
            if let Ok(r) = etcd
                .update(&pod_key(i), Bytes::from(pod(i, 100, g).to_string()), None)
                .await
            {
                written += 1;
                last = r.get();
            }
            let t = started.elapsed().as_secs_f64();
            if t >= next_sample {
                rss.push((t, rss_bytes(pid).unwrap_or(0)));
                if let Ok((_, metrics)) = get(addr, "/metrics").await {
                    let held = metric(&metrics, "watchcache_watch_catch_up_bytes{resource=\"pods\"}");
                    peak_catch_up_bytes = held.max(peak_catch_up_bytes);
                    let waiting = metric(&metrics, "watchcache_etcd_history_waiting_bytes");
                    peak_history_waiting_bytes = waiting.max(peak_history_waiting_bytes);
                }
                progress(t as u64);
                next_sample += 10.0;
            }
        }
        // The healthy clients read what is left.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (_, metrics) = get(addr, "/metrics").await?;
        let series = |name: &str| metric(&metrics, &format!("{name}{{resource=\"pods\"}}"));
        let etcd_ranges = etcd_started(&endpoints[0], "Range").await;
        let etcd_watches = etcd_started(&endpoints[0], "Watch").await;
        let mut out = Outcome {
            written,
            expired: shared.expired.load(Ordering::Relaxed),
            expired_sent: series("watchcache_watch_expired_in_stream_total")
                + series("watchcache_watch_starts_expired_total"),
            relists: shared.relists.load(Ordering::Relaxed),
            relisted_bytes: shared.relisted_bytes.load(Ordering::Relaxed),
            healthy_events: shared.healthy_events.load(Ordering::Relaxed),
            slow_events: shared.slow_events.load(Ordering::Relaxed),
            catch_ups: series("watchcache_watch_catch_ups_total"),
            catch_up_events: series("watchcache_watch_catch_up_events_total"),
            catch_ups_refused: series("watchcache_watch_catch_ups_refused_total"),
            etcd_ranges: etcd_ranges - ranges_before,
            etcd_watches: etcd_watches - watches_before,
            rss,
            peak_rss: peak_rss_of(pid).unwrap_or(0),
            peak_catch_up_bytes,
            peak_history_waiting_bytes,
            history_received_bytes: metric(&metrics, "watchcache_etcd_history_received_bytes_total"),
            history_dropped_bytes: metric(&metrics, "watchcache_etcd_history_dropped_bytes_total"),
            p50_us: shared.latency.quantile(0.5),
            p99_us: shared.latency.quantile(0.99),
            p999_us: shared.latency.quantile(0.999),
            read_on: ReadOn::default(),
        };

        // The read-on: the slow clients read at full speed until each has the last write.
        let (expired, relists, relisted_bytes, events) = (
            shared.expired.load(Ordering::Relaxed),
            shared.relists.load(Ordering::Relaxed),
            shared.relisted_bytes.load(Ordering::Relaxed),
            shared.slow_events.load(Ordering::Relaxed),
        );
        shared.target.store(last, Ordering::Relaxed);
        shared.reading_on.store(true, Ordering::Relaxed);
        let read_on = Instant::now();
        while shared.current.load(Ordering::Relaxed) < plan.slow as u64 && read_on.elapsed() < READ_ON {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let seconds = read_on.elapsed().as_secs_f64();
        let (_, after) = get(addr, "/metrics").await?;
        let after_series = |name: &str| metric(&after, &format!("{name}{{resource=\"pods\"}}"));
        out.read_on = ReadOn {
            seconds,
            current: shared.current.load(Ordering::Relaxed),
            expired: shared.expired.load(Ordering::Relaxed) - expired,
            relists: shared.relists.load(Ordering::Relaxed) - relists,
            relisted_bytes: shared.relisted_bytes.load(Ordering::Relaxed) - relisted_bytes,
            events: shared.slow_events.load(Ordering::Relaxed) - events,
            catch_up_events: after_series("watchcache_watch_catch_up_events_total") - out.catch_up_events,
            etcd_ranges: etcd_started(&endpoints[0], "Range").await - etcd_ranges,
            etcd_watches: etcd_started(&endpoints[0], "Watch").await - etcd_watches,
            peak_rss: peak_rss_of(pid).unwrap_or(0),
        };
        shared.stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.abort();
        }
        Ok(out)
    })
}

#[cfg(test)]
mod tests {
    use super::Histogram;

    #[test]
    fn the_histogram_quantiles_are_within_its_bucket_width() {
        let h = Histogram::new();
        for us in 1..=10_000u64 {
            h.record(us);
        }
        for (q, want) in [(0.5, 5_000.0), (0.99, 9_900.0), (0.999, 9_990.0)] {
            let got = h.quantile(q) as f64;
            assert!((got - want).abs() / want < 0.07, "q{q}: {got} for {want}");
        }
        // Every bucket's lower bound maps back to that bucket.
        for b in 0..(40 * super::SUB as usize) {
            let lb = Histogram::lower_bound(b);
            assert!(Histogram::bucket(lb) <= b, "bucket {b}: {lb}");
        }
    }
}
