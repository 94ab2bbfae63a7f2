//! Files read again when they change on disk: a value made from a set of files, remade when
//! any file's modification time (or size) differs from what it was made from, checked at
//! most once per [`CHECK_EVERY`]. A remake that fails (a certificate replaced before its key,
//! a file half written) keeps the old value and is tried again at the next check.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How often the files are looked at, at most.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(1);

/// What one file was when the value was made.
type Stamp = Option<(SystemTime, u64)>;

/// A value made from files, remade when they change.
pub(crate) struct Reloading<T> {
    paths: Vec<PathBuf>,
    load: Box<dyn Fn() -> Result<T, String> + Send + Sync>,
    state: Mutex<State<T>>,
}

struct State<T> {
    value: Arc<T>,
    stamps: Vec<Stamp>,
    checked: Instant,
}

fn stamp(path: &PathBuf) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

impl<T> std::fmt::Debug for Reloading<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading").field("paths", &self.paths).finish()
    }
}

impl<T> Reloading<T> {
    /// Makes the value from `paths` with `load` now: an error if it cannot be made.
    pub(crate) fn new(
        paths: Vec<PathBuf>,
        load: impl Fn() -> Result<T, String> + Send + Sync + 'static,
    ) -> Result<Self, String> {
        let stamps = paths.iter().map(stamp).collect();
        let value = Arc::new(load()?);
        Ok(Reloading {
            paths,
            load: Box::new(load),
            state: Mutex::new(State {
                value,
                stamps,
                checked: Instant::now(),
            }),
        })
    }

    /// The value, remade first if a second has passed since the last look and the files
    /// changed.
    pub(crate) fn get(&self) -> Arc<T> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.checked.elapsed() < CHECK_EVERY {
            return Arc::clone(&state.value);
        }
        state.checked = Instant::now();
        let stamps: Vec<Stamp> = self.paths.iter().map(stamp).collect();
        if stamps != state.stamps {
            match (self.load)() {
                Ok(value) => {
                    tracing::info!(paths = ?self.paths, "reloaded");
                    state.value = Arc::new(value);
                    state.stamps = stamps;
                }
                Err(e) => {
                    tracing::warn!(paths = ?self.paths, error = %e, "cannot reload: keeping the files read before")
                }
            }
        }
        Arc::clone(&state.value)
    }
}
