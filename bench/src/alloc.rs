//! A global allocator that can count: mimalloc underneath (as `watchcache serve` uses), with
//! live and peak heap bytes counted only while [`Counting::enable`] is on.
//!
//! Timing runs leave counting off, so a design that allocates much is not slowed by a
//! contended counter; memory runs, in their own process, turn it on. Off, the cost is one
//! uncontended load per allocation.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

use mimalloc::MiMalloc;

static ENABLED: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

/// The allocator; a binary installs it with `#[global_allocator]`.
#[derive(Debug)]
pub struct Counting;

// SAFETY: every call is forwarded to mimalloc unchanged; the counters never touch memory
// handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: our caller upholds `GlobalAlloc::alloc`'s contract, which we forward.
        unsafe { MiMalloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: as for `alloc`.
        unsafe { MiMalloc.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: `ptr` came from this allocator, that is from mimalloc, with `layout`.
        unsafe { MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        // SAFETY: as for `dealloc`, and the caller upholds `realloc`'s contract.
        unsafe { MiMalloc.realloc(ptr, layout, new_size) }
    }
}

// Relaxed throughout: the counters are statistics read after the measured work has been
// joined (thread join and task completion order the reads after every update).
#[inline]
fn count(delta: isize) {
    if ENABLED.load(Ordering::Relaxed) {
        let now = LIVE.fetch_add(delta, Ordering::Relaxed) + delta;
        if delta > 0 && now > PEAK.load(Ordering::Relaxed) {
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
    }
}

impl Counting {
    /// Starts counting. Memory freed afterwards that was allocated before is counted as a
    /// negative delta, so figures are differences between two reads, never absolutes.
    pub fn enable() {
        ENABLED.store(true, Ordering::Relaxed);
    }

    /// Heap bytes allocated and not freed since counting started.
    pub fn live() -> isize {
        LIVE.load(Ordering::Relaxed)
    }

    /// Resets the peak to the current live bytes; [`Counting::peak`] then reads
    /// the highest the heap went above it.
    pub fn reset_peak() -> isize {
        let now = LIVE.load(Ordering::Relaxed);
        PEAK.store(now, Ordering::Relaxed);
        now
    }

    /// The highest live figure since the last [`Counting::reset_peak`].
    pub fn peak() -> isize {
        PEAK.load(Ordering::Relaxed)
    }
}

/// This process's peak resident set (VmHWM) in bytes, if the kernel says.
pub fn peak_rss_bytes() -> Option<u64> {
    proc_status_kib(std::process::id(), "VmHWM:").map(|k| k * 1024)
}

/// Resident set (VmRSS) of process `pid` in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    proc_status_kib(pid, "VmRSS:").map(|k| k * 1024)
}

/// Peak resident set (VmHWM) of process `pid` in bytes.
pub fn peak_rss_of(pid: u32) -> Option<u64> {
    proc_status_kib(pid, "VmHWM:").map(|k| k * 1024)
}

fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Memory the kernel says is available now (MemAvailable), in bytes.
pub fn available_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|k| k * 1024)
}

/// CPU time (user + system) process `pid` has used, from `/proc/PID/stat`, assuming the
/// kernel's usual 100 clock ticks per second.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may contain spaces; the fields after its closing parenthesis don't.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the command.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// CPU time process `pid` has used, in nanoseconds: the sum of its threads' scheduler run
/// times (`/proc/PID/task/*/schedstat`), which the kernel keeps in nanoseconds where
/// `/proc/PID/stat` counts 10 ms ticks. Threads that exited are no longer counted, so this is
/// for processes whose threads live as long as the measurement (a Go server's do).
pub fn cpu_ns_of_threads(pid: u32) -> Option<u64> {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        total += stat.split(' ').next()?.trim().parse::<u64>().ok()?;
    }
    Some(total)
}
