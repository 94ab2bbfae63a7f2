//! [`AuditLog`]: events go through a bounded queue to one writer thread, which writes them as
//! JSON lines, in batches, to a file rotated by size. A request only tries to enqueue (a full queue drops
//! the event and counts it), so a slow disk never holds a request. Rotation as lumberjack's,
//! which the apiserver uses: the full file is renamed with its rotation time
//! (`audit-2024-05-01T10-00-00.000000.log` for `audit.log`), a new one is started, and the
//! oldest backups past `max_backups` are removed.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, SystemTime};

use prometheus_client::metrics::counter::Counter;

use super::event::Event;
use super::policy::Policy;
use crate::config::AuditConfig;

/// What the writer thread is sent.
enum Message {
    Event(Box<Event>),
    /// Write everything before this, flush, and answer.
    Flush(SyncSender<()>),
}

/// The audit log of a server: its policy and the queue to its writer.
pub(crate) struct AuditLog {
    pub(crate) policy: Policy,
    queue: SyncSender<Message>,
    /// Events made (the apiserver's `apiserver_audit_event_total`).
    events: Counter,
    /// Events dropped because the queue was full, or not written (the apiserver's
    /// `apiserver_audit_error_total{plugin="log"}`).
    errors: Counter,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog").finish_non_exhaustive()
    }
}

/// Where the lines go: standard output (`-`) or a file that rotates.
enum Sink {
    Stdout(io::Stdout),
    File(Rotating),
}

impl Sink {
    fn write(&mut self, line: &[u8]) -> io::Result<()> {
        match self {
            Sink::Stdout(out) => out.write_all(line),
            Sink::File(f) => f.write(line),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Stdout(out) => out.flush(),
            Sink::File(f) => f.file.flush(),
        }
    }
}

impl AuditLog {
    /// Opens the log (an error when its file cannot be opened) and starts its writer thread,
    /// which ends when the log is dropped. `events` and `errors` count into the server's
    /// metrics.
    pub(crate) fn start(
        config: &AuditConfig,
        policy: Policy,
        events: Counter,
        errors: Counter,
    ) -> io::Result<AuditLog> {
        let sink = if config.path.as_os_str() == "-" {
            Sink::Stdout(io::stdout())
        } else {
            Sink::File(Rotating::open(
                &config.path,
                config.max_bytes,
                config.max_backups,
            )?)
        };
        let (queue, rx) = sync_channel(config.queue.max(1));
        let thread_errors = errors.clone();
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || write_all(rx, sink, thread_errors))?;
        Ok(AuditLog {
            policy,
            queue,
            events,
            errors,
        })
    }

    /// Enqueues `event` without waiting: when the writer is behind and the queue is full, the
    /// event is dropped and counted.
    pub(crate) fn record(&self, event: Event) {
        self.events.inc();
        match self.queue.try_send(Message::Event(Box::new(event))) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.errors.inc();
            }
        }
    }

    /// Waits (up to `timeout`) until every event enqueued before is written and flushed: at
    /// shutdown, and in tests. Blocks its thread.
    pub(crate) fn flush_blocking(&self, timeout: Duration) -> bool {
        let (done, wait) = sync_channel(1);
        let deadline = std::time::Instant::now() + timeout;
        let mut message = Message::Flush(done);
        loop {
            match self.queue.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Full(m)) if std::time::Instant::now() < deadline => {
                    message = m;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => return false,
            }
        }
        wait.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .is_ok()
    }
}

/// The writer thread: writes each event as a line, flushing whenever the queue is empty.
fn write_all(rx: Receiver<Message>, mut sink: Sink, errors: Counter) {
    let mut failing = false;
    let mut line = Vec::with_capacity(1024);
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Event(event) => {
                    line.clear();
                    // Serializing a Value into a Vec cannot fail.
                    let _ = serde_json::to_writer(&mut line, &event.to_json());
                    line.push(b'\n');
                    match sink.write(&line) {
                        Ok(()) => failing = false,
                        Err(e) => {
                            errors.inc();
                            if !failing {
                                tracing::warn!(error = %e, "cannot write the audit log: events are lost until it can");
                            }
                            failing = true;
                        }
                    }
                }
                Message::Flush(done) => {
                    let _ = sink.flush();
                    let _ = done.try_send(());
                }
            }
            next = rx.try_recv().ok();
        }
        if let Err(e) = sink.flush()
            && !failing
        {
            errors.inc();
            tracing::warn!(error = %e, "cannot write the audit log");
        }
        // Lets the next events gather: enqueued while this thread sleeps, they wake no one,
        // and are written with one write. Idle, the thread sleeps in `recv` and costs nothing.
        std::thread::sleep(BATCH_WAIT);
    }
}

/// How long the writer lets events gather after writing a batch: at most this late to the
/// file, and at 10,000 queued events, room for 2,000,000 events a second.
const BATCH_WAIT: Duration = Duration::from_millis(5);

/// A file that is rotated when a line would take it past `max_bytes`.
struct Rotating {
    path: PathBuf,
    file: BufWriter<File>,
    size: u64,
    max_bytes: u64,
    max_backups: usize,
    /// The newest backup's name, so that two rotations within a microsecond still get
    /// names in order.
    last_backup: String,
}

/// Opens the log for appending, readable by its owner only (0600), as the events name users,
/// paths and sources: nobody else on the host reads them. The mode given to `open` applies
/// only to a file it makes, so a log that exists already (an earlier version's, 0644) is set
/// to 0600 through the opened handle (fchmod), not by its path, which could be swapped.
fn open_append(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let file = options.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(file)
}

impl Rotating {
    fn open(path: &Path, max_bytes: u64, max_backups: usize) -> io::Result<Rotating> {
        let file =
            open_append(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let size = file.metadata()?.len();
        Ok(Rotating {
            path: path.to_owned(),
            file: BufWriter::with_capacity(64 << 10, file),
            size,
            max_bytes,
            max_backups,
            last_backup: String::new(),
        })
    }

    fn write(&mut self, line: &[u8]) -> io::Result<()> {
        if self.size > 0 && self.size + line.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    /// `audit` and `.log` of `audit.log`: a backup is `<stem>-<time><ext>`.
    fn stem_and_ext(&self) -> (String, String) {
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match name.rfind('.') {
            Some(dot) if dot > 0 => (name[..dot].to_owned(), name[dot..].to_owned()),
            _ => (name, String::new()),
        }
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        let (stem, ext) = self.stem_and_ext();
        let dir = self
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let mut at = jiff::Timestamp::try_from(SystemTime::now()).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        let mut backup = backup_name(&stem, &ext, at);
        while backup <= self.last_backup || dir.join(&backup).exists() {
            at = at.checked_add(jiff::SignedDuration::from_micros(1)).unwrap_or(at);
            backup = backup_name(&stem, &ext, at);
        }
        std::fs::rename(&self.path, dir.join(&backup))?;
        self.last_backup = backup;
        self.file = BufWriter::with_capacity(64 << 10, open_append(&self.path)?);
        self.size = 0;
        if self.max_backups > 0 {
            let mut backups: Vec<String> = std::fs::read_dir(dir)?
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| is_backup(n, &stem, &ext))
                .collect();
            // The times in the names sort as the times do.
            backups.sort();
            let excess = backups.len().saturating_sub(self.max_backups);
            for old in &backups[..excess] {
                let _ = std::fs::remove_file(dir.join(old));
            }
        }
        Ok(())
    }
}

fn backup_name(stem: &str, ext: &str, at: jiff::Timestamp) -> String {
    format!(
        "{stem}-{}.{:06}{ext}",
        at.strftime("%Y-%m-%dT%H-%M-%S"),
        at.subsec_microsecond().max(0)
    )
}

/// Whether `name` is a backup of `<stem><ext>`: `<stem>-YYYY-MM-DDTHH-MM-SS.ffffff<ext>`.
fn is_backup(name: &str, stem: &str, ext: &str) -> bool {
    let Some(time) = name
        .strip_prefix(stem)
        .and_then(|r| r.strip_prefix('-'))
        .and_then(|r| r.strip_suffix(ext))
    else {
        return false;
    };
    time.len() == "2006-01-02T15-04-05.000000".len()
        && time.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 | 13 | 16 => b == b'-',
            10 => b == b'T',
            19 => b == b'.',
            _ => b.is_ascii_digit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::UserInfo;
    use crate::auth::request_info::RequestInfo;
    use axum::http::Method;
    use std::sync::Arc;

    fn event(i: usize) -> Event {
        Event {
            stage: crate::audit::Stage::ResponseComplete,
            audit_id: uuid::Uuid::new_v4(),
            request_uri: format!("/api/v1/namespaces/a/configmaps/c{i}"),
            info: RequestInfo::new(
                &Method::GET,
                &format!("/api/v1/namespaces/a/configmaps/c{i}"),
                None,
            ),
            user: Arc::new(UserInfo::anonymous()),
            source_ip: None,
            user_agent: None,
            code: 200,
            received: SystemTime::now(),
            stage_time: SystemTime::now(),
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("watchcache-audit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_blocking() {
        // No writer: the queue's receiver is held, never read.
        let (queue, _rx) = sync_channel(4);
        let log = AuditLog {
            policy: Policy::everything(),
            queue,
            events: Counter::default(),
            errors: Counter::default(),
        };
        let start = std::time::Instant::now();
        for i in 0..100 {
            log.record(event(i));
        }
        assert!(start.elapsed() < Duration::from_secs(1), "recording waited");
        assert_eq!((log.events.get(), log.errors.get()), (100, 96));
    }

    #[test]
    fn rotation_keeps_at_most_max_backups_files() {
        let dir = temp_dir("rotation");
        let config = AuditConfig {
            path: dir.join("audit.log"),
            max_bytes: 2000,
            max_backups: 3,
            ..AuditConfig::default()
        };
        let log = AuditLog::start(
            &config,
            Policy::everything(),
            Counter::default(),
            Counter::default(),
        )
        .unwrap();
        for i in 0..200 {
            log.record(event(i));
            if i % 10 == 0 {
                // Lets the writer keep up with a queue this test does not size.
                assert!(log.flush_blocking(Duration::from_secs(10)));
            }
        }
        assert!(log.flush_blocking(Duration::from_secs(10)));
        assert_eq!(log.errors.get(), 0);
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names.len(), 4, "{names:?}");
        assert_eq!(names.last().map(String::as_str), Some("audit.log"), "{names:?}");
        for name in &names {
            let text = std::fs::read_to_string(dir.join(name)).unwrap();
            assert!(text.len() <= 2000, "{name}: {} bytes", text.len());
            for line in text.lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                assert_eq!(v["kind"], "Event");
            }
        }
        // The newest events are kept: the last one is in the current file.
        let current = std::fs::read_to_string(dir.join("audit.log")).unwrap();
        assert!(current.contains("/configmaps/c199\""), "{current}");
        assert!(is_backup(&names[0], "audit", ".log"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn the_log_and_its_rotated_successors_are_readable_by_their_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("mode");
        let config = AuditConfig {
            path: dir.join("audit.log"),
            max_bytes: 1000,
            ..AuditConfig::default()
        };
        let log = AuditLog::start(
            &config,
            Policy::everything(),
            Counter::default(),
            Counter::default(),
        )
        .unwrap();
        for i in 0..20 {
            log.record(event(i));
            assert!(log.flush_blocking(Duration::from_secs(10)));
        }
        let files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(files.len() > 1, "rotated: {files:?}");
        for file in files {
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", file.display());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An audit log that exists already (an earlier version's, 0644) is made owner-only
    /// too: the mode given to `open` applies only to a file it makes.
    #[cfg(unix)]
    #[test]
    fn an_existing_audit_log_is_made_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("existing-mode");
        let path = dir.join("audit.log");
        std::fs::write(&path, "").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let config = AuditConfig {
            path: path.clone(),
            ..AuditConfig::default()
        };
        let log = AuditLog::start(
            &config,
            Policy::everything(),
            Counter::default(),
            Counter::default(),
        )
        .unwrap();
        log.record(event(0));
        assert!(log.flush_blocking(Duration::from_secs(10)));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(mode, 0o600, "the existing audit log keeps mode {mode:o}");
    }
}
