//! The checks of the robustness suite, modelled on etcd's own robustness tests: every stream a
//! client received, and every read it made, checked after the run against the store's history.
//!
//! The store's history is what etcd itself recorded ([`History`]: each revision's changes, with
//! the value before each). A watch stream ([`Stream`]) is checked for:
//!
//! - **Ordered**: revisions never go back; a revision's events come together.
//! - **Unique**: no event twice.
//! - **Reliable**: no gap: between its start and its last revision, exactly the events the
//!   history makes for its selector (ADDED and DELETED where an object enters or leaves it).
//!   Only a stream cut by a fault (a broken connection, a 410) may end inside a revision, and
//!   not after a bookmark at it: a clean end comes between revisions, so that a client that
//!   resumes from the last revision it received loses nothing.
//! - **Bookmarkable**: a bookmark at `B` follows every event at or below `B` and precedes every
//!   event above it.
//! - **Resumable**: a watch resumed from any revision a stream delivered gets exactly what the
//!   stream got after it (checked as two streams over one history: each is Reliable from its
//!   own start, so their overlap agrees).
//! - **Initial events** (`sendInitialEvents`): the ADDED events before the bookmark that ends
//!   them are the state at its revision, each object once, none above it; a stream of them is
//!   never a 410.
//! - **DELETED carries the last state**: the object before the deletion, not a tombstone.
//! - **410 only when compacted**: a stream may end with 410 only if the history it needs was
//!   compacted.
//!
//! Consistent reads ([`Read`]) are checked for read-your-writes and monotonicity across
//! replicas: a read that began after a write was acknowledged is at or past its revision, and
//! a read that began after another ended is at or past that one's revision. A LIST's items are
//! the state at its revision; a GET's answer ([`Get`]) is the key's state at some revision at or
//! after every write acknowledged before it began.
//!
//! Each check returns the first [`Violation`] it finds with the events around it, for the run's
//! replayable report. `self_test` plants each kind of violation in a valid stream and shows it
//! is caught.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Instant;

/// An object as the checks compare it: its labels (what a selector reads) and a digest of its
/// content with the resourceVersion left out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Obj {
    /// The object's labels.
    pub labels: BTreeMap<String, String>,
    /// A digest of its content, resourceVersion excluded.
    pub digest: u64,
}

/// One key's change at a revision, with the value before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// `namespace/name`.
    pub key: String,
    /// The value after the change (`None`: deleted).
    pub value: Option<Obj>,
    /// The value before it (`None`: created).
    pub prev: Option<Obj>,
}

/// The store's history as the store recorded it: each revision's changes, and the revision it
/// has compacted (history below it is gone).
#[derive(Clone, Debug, Default)]
pub struct History {
    /// Changes by revision; revisions without a change of the resource are absent.
    pub revisions: BTreeMap<u64, Vec<Change>>,
    /// The newest compaction (0: none).
    pub compacted: u64,
}

/// What a watch selects: a namespace (or all) and label equalities.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    /// `None`: every namespace.
    pub namespace: Option<String>,
    /// `key=value` terms, all of which must hold.
    pub labels: BTreeMap<String, String>,
}

impl Selector {
    fn in_scope(&self, key: &str) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| key.split_once('/').is_some_and(|(k, _)| k == ns))
    }

    fn selects(&self, key: &str, object: Option<&Obj>) -> bool {
        self.in_scope(key)
            && object.is_some_and(|o| self.labels.iter().all(|(k, v)| o.labels.get(k) == Some(v)))
    }
}

/// An event's type as a client saw it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `ADDED`
    Added,
    /// `MODIFIED`
    Modified,
    /// `DELETED`
    Deleted,
    /// `BOOKMARK`; `initial_end` when it is annotated `k8s.io/initial-events-end`.
    Bookmark {
        /// Whether it ends the initial events.
        initial_end: bool,
    },
}

/// One event a client received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// Its type.
    pub kind: Kind,
    /// Its resourceVersion.
    pub rv: u64,
    /// `namespace/name` (empty for a bookmark).
    pub key: String,
    /// The object (`None` for a bookmark).
    pub object: Option<Obj>,
}

/// How a stream ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// Still open at the run's end, read to the end of what the store wrote: its last
    /// revision is whole.
    Open,
    /// Ended cleanly by the server (its timeout): between revisions, so that a client that
    /// resumes from the last revision it received loses nothing.
    Closed,
    /// Cut by the run's end before it had ended its initial events (it cannot have).
    Cut,
    /// An in-stream 410.
    Expired,
    /// Any other error (a fault the client saw: a broken connection).
    Broken(String),
}

/// A watch a client opened and what it received.
#[derive(Clone, Debug)]
pub struct Stream {
    /// Who (for the report): the client and its request.
    pub name: String,
    /// The resourceVersion it started from (for initial events: the revision they end at).
    /// 0 without initial events is `resourceVersion=0`: the state as ADDED events, at a
    /// revision the stream does not tell, then the changes after it.
    pub start: u64,
    /// Whether it asked for initial events (`sendInitialEvents=true`).
    pub initial: bool,
    /// Its selector.
    pub selector: Selector,
    /// What it received, in order.
    pub events: Vec<Seen>,
    /// How it ended.
    pub end: End,
    /// The store's compaction as the run knew it when the stream ended (`None`: the
    /// history's last): what a 410 is judged against.
    pub compacted: Option<u64>,
}

/// A consistent read (LIST or GET) and its answer's revision.
#[derive(Clone, Debug)]
pub struct Read {
    /// Who asked (the client and the replica).
    pub name: String,
    /// When it was sent and when its answer came.
    pub began: Instant,
    /// When its answer came.
    pub ended: Instant,
    /// The answer's resourceVersion.
    pub rv: u64,
    /// A LIST's selector and items, when they are to be checked against the state at `rv`.
    pub items: Option<(Selector, BTreeMap<String, Obj>)>,
}

/// A consistent GET of one key and its answer.
#[derive(Clone, Debug)]
pub struct Get {
    /// Who asked (the client and the replica).
    pub name: String,
    /// When it was sent.
    pub began: Instant,
    /// `namespace/name`.
    pub key: String,
    /// The object and its resourceVersion; `None`: not found.
    pub answer: Option<(u64, Obj)>,
}

/// A write the store acknowledged.
#[derive(Clone, Debug)]
pub struct Write {
    /// When it was acknowledged.
    pub acked: Instant,
    /// Its revision.
    pub rv: u64,
}

/// A broken guarantee, with the context a report needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which guarantee: `Ordered`, `Unique`, `Reliable`, `Bookmarkable`, `Initial`,
    /// `DeletedState`, `Expired`, `ReadYourWrites`, `Monotonic`.
    pub guarantee: &'static str,
    /// The stream or read.
    pub who: String,
    /// What went wrong, with the events around it.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} broken by {}: {}", self.guarantee, self.who, self.detail)
    }
}

/// The events around index `i` of `events`, for a report.
fn around(events: &[Seen], i: usize) -> String {
    let from = i.saturating_sub(3);
    let to = (i + 4).min(events.len());
    events[from..to]
        .iter()
        .enumerate()
        .map(|(j, e)| {
            let mark = if from + j == i { ">>" } else { "  " };
            format!("{mark} {:?} {} {}", e.kind, e.rv, e.key)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The state (key → object) just after `rv`.
fn state_at(history: &History, rv: u64) -> BTreeMap<String, Obj> {
    let mut state = BTreeMap::new();
    for changes in history.revisions.range(..=rv).map(|(_, c)| c) {
        for c in changes {
            match &c.value {
                Some(v) => state.insert(c.key.clone(), v.clone()),
                None => state.remove(&c.key),
            };
        }
    }
    state
}

/// The events a watch of `selector` receives for the revisions in `(after, through]`, in the
/// store's order, as `(kind, rv, key, object)`.
fn expected(
    history: &History,
    selector: &Selector,
    after: u64,
    through: u64,
) -> Vec<(Kind, u64, String, Obj)> {
    let mut out = Vec::new();
    if through <= after {
        return out;
    }
    for (&rv, changes) in history.revisions.range(after + 1..=through) {
        for c in changes {
            let was = selector.selects(&c.key, c.prev.as_ref());
            let is = selector.selects(&c.key, c.value.as_ref());
            let event = match (was, is) {
                (false, true) => (Kind::Added, c.value.clone()),
                (true, true) => (Kind::Modified, c.value.clone()),
                (true, false) => (Kind::Deleted, c.prev.clone()),
                (false, false) => continue,
            };
            if let (kind, Some(object)) = event {
                out.push((kind, rv, c.key.clone(), object));
            }
        }
    }
    out
}

/// Checks one stream against the history; the first violation found.
pub fn check_stream(stream: &Stream, history: &History) -> Result<(), Violation> {
    if stream.start == 0 && !stream.initial {
        return check_from_zero(stream, history);
    }
    let violation = |guarantee, detail: String| Violation {
        guarantee,
        who: stream.name.clone(),
        detail,
    };
    let events = &stream.events;
    // Where the live part starts: after the initial events' closing bookmark, if asked for.
    let (live_from, after) = if stream.initial {
        let Some(end) = events
            .iter()
            .position(|e| e.kind == Kind::Bookmark { initial_end: true })
        else {
            // Ended before its bookmark: what came must still be initial events, each object
            // once and as it was, and a watch of the current state is never too old.
            partial_state(stream, events, history)?;
            return match stream.end {
                End::Open | End::Closed => Err(violation(
                    "Initial",
                    "no bookmark ended the initial events".into(),
                )),
                End::Expired => Err(violation(
                    "Expired",
                    "a 410 for a watch of the current state".into(),
                )),
                End::Broken(_) | End::Cut => Ok(()),
            };
        };
        let at = events[end].rv;
        let mut got: BTreeMap<String, Obj> = BTreeMap::new();
        for (i, e) in events[..end].iter().enumerate() {
            if e.kind != Kind::Added || e.rv > at {
                return Err(violation(
                    "Initial",
                    format!("not an ADDED at or below {at}: {}", around(events, i)),
                ));
            }
            if let Some(o) = &e.object
                && got.insert(e.key.clone(), o.clone()).is_some()
            {
                return Err(violation(
                    "Initial",
                    format!("{} twice: {}", e.key, around(events, i)),
                ));
            }
        }
        let want: BTreeMap<String, Obj> = state_at(history, at)
            .into_iter()
            .filter(|(k, o)| stream.selector.selects(k, Some(o)))
            .collect();
        if got != want {
            let missing: Vec<&String> = want.keys().filter(|k| got.get(*k) != want.get(*k)).collect();
            let extra: Vec<&String> = got.keys().filter(|k| !want.contains_key(*k)).collect();
            return Err(violation(
                "Initial",
                format!(
                    "initial events differ from the state at {at}: missing or stale {missing:?}, extra {extra:?}"
                ),
            ));
        }
        (end + 1, at)
    } else {
        (0, stream.start)
    };
    let live = &events[live_from..];
    // Ordered and Unique.
    // `last` closes everything at or below it when it is the start or a bookmark's revision.
    let mut last = after;
    let mut closed = true;
    let mut bookmarked = false;
    let mut seen_at_last: Vec<&str> = Vec::new();
    for (i, e) in live.iter().enumerate() {
        if matches!(e.kind, Kind::Bookmark { .. }) {
            if e.rv < last {
                return Err(violation(
                    "Bookmarkable",
                    format!(
                        "a bookmark at {} after an event at {last}: {}",
                        e.rv,
                        around(live, i)
                    ),
                ));
            }
            (last, closed, bookmarked) = (e.rv, true, true);
            seen_at_last.clear();
            continue;
        }
        if e.rv < last || (e.rv == last && closed) {
            let guarantee = if bookmarked && closed && e.rv <= last {
                "Bookmarkable"
            } else {
                "Ordered"
            };
            return Err(violation(
                guarantee,
                format!("revision {} after {last}: {}", e.rv, around(live, i)),
            ));
        }
        closed = false;
        if e.rv == last && seen_at_last.contains(&e.key.as_str()) {
            return Err(violation(
                "Unique",
                format!("{} at {} twice: {}", e.key, e.rv, around(live, i)),
            ));
        }
        if e.rv > last {
            seen_at_last.clear();
        }
        last = e.rv;
        seen_at_last.push(&e.key);
    }
    let reached = live.iter().map(|e| e.rv).max().unwrap_or(after);
    // Reliable: exactly the expected events, revision by revision, up to the last one
    // delivered (a revision's events in any order: compared as sets per revision).
    let want = expected(history, &stream.selector, after, reached);
    let got: Vec<(Kind, u64, String, Obj)> = live
        .iter()
        .filter(|e| !matches!(e.kind, Kind::Bookmark { .. }))
        .map(|e| {
            (
                e.kind,
                e.rv,
                e.key.clone(),
                e.object.clone().unwrap_or_else(empty),
            )
        })
        .collect();
    // A stream cut by a fault (a broken connection, a 410) may have been cut inside its last
    // revision: every event of it that came must be right. A clean end comes between
    // revisions, and a bookmark closes every revision up to its own.
    let bookmarked_last = live
        .last()
        .is_some_and(|e| matches!(e.kind, Kind::Bookmark { .. }));
    let cut = matches!(stream.end, End::Broken(_) | End::Expired) && !bookmarked_last;
    // Cut inside its last revision: what came of it is where the revision began, in the
    // store's order (a revision's events are delivered in it), not any part of it.
    if cut && let Some(last_rev) = got.last().map(|e| e.1) {
        let of_last = |events: &[(Kind, u64, String, Obj)]| -> Vec<String> {
            events
                .iter()
                .filter(|e| e.1 == last_rev)
                .map(|e| e.2.clone())
                .collect()
        };
        let (want_last, got_last) = (of_last(&want), of_last(&got));
        if got_last.len() <= want_last.len() && got_last[..] != want_last[..got_last.len()] {
            return Err(violation(
                "Reliable",
                format!(
                    "cut inside revision {last_rev} with {got_last:?}, not the start of its events {want_last:?}"
                ),
            ));
        }
    }
    let (mut w, g) = (by_revision(want), by_revision(got));
    // 410 only when the history it needs is gone: everything above `reached` if the stream
    // has all of its last revision, that revision too if not. The server serves history only
    // strictly above the compaction (etcd gives no previous values at it).
    let whole = bookmarked_last
        || match (w.last(), g.last()) {
            (Some(wl), Some(gl)) if wl.0 == gl.0 => wl.1.len() == gl.1.len(),
            _ => true,
        };
    let compacted = stream.compacted.unwrap_or(history.compacted);
    let needs = if whole { reached + 1 } else { reached };
    if stream.end == End::Expired && compacted < needs {
        return Err(violation(
            "Expired",
            format!(
                "a 410 at {reached} ({}) though the store holds every revision from {compacted}",
                if whole { "whole" } else { "inside it" }
            ),
        ));
    }
    if cut
        && let (Some(wl), Some(gl)) = (w.last_mut(), g.last())
        && wl.0 == gl.0
    {
        wl.1.retain(|e| gl.1.iter().any(|x| x.2 == e.2));
    }
    if w != g {
        let first = w
            .iter()
            .zip(&g)
            .position(|(a, b)| a != b)
            .unwrap_or(w.len().min(g.len()));
        let (want_rev, got_rev) = (w.get(first).map(|r| r.0), g.get(first).map(|r| r.0));
        let kind = match (want_rev, got_rev) {
            (Some(a), Some(b)) if a < b => "a gap",
            (Some(_), Some(_)) => "a wrong event",
            (Some(_), None) => "a gap at the end",
            _ => "an event the history does not make",
        };
        let guarantee = match w.get(first).zip(g.get(first)) {
            Some((a, b)) if a.0 == b.0 && deleted_state_differs(a, b) => "DeletedState",
            _ => "Reliable",
        };
        return Err(violation(
            guarantee,
            format!(
                "{kind}: want revision {want_rev:?} {:?}, got {got_rev:?} {:?}",
                w.get(first).map(|r| &r.1),
                g.get(first).map(|r| &r.1)
            ),
        ));
    }
    // Bookmarkable: no event at or below a bookmark's revision comes after it (checked in
    // order above); every event at or below it came before it (Reliable up to it).
    Ok(())
}

/// A `resourceVersion=0` watch: its leading ADDED events must be the state at some revision
/// `R` at or above each of theirs, and what follows exactly the changes after `R`. No frame
/// says where the state ends, so each split of the leading ADDEDs is tried (a creation just
/// after `R` is an ADDED too), each checked as initial events closed by a bookmark at `R`: the
/// revision before the next frame's (a bookmark's own), or, with nothing after, any revision
/// whose state they are.
fn check_from_zero(stream: &Stream, history: &History) -> Result<(), Violation> {
    let events = &stream.events;
    let leading = events.iter().take_while(|e| e.kind == Kind::Added).count();
    let newest = history.revisions.keys().next_back().copied().unwrap_or(0);
    let mut first_error = None;
    for k in (0..=leading).rev() {
        let floor = events[..k].iter().map(|e| e.rv).max().unwrap_or(0);
        let candidates: Vec<u64> = match events.get(k) {
            Some(e) if matches!(e.kind, Kind::Bookmark { .. }) => vec![e.rv],
            Some(e) => vec![e.rv.saturating_sub(1)],
            // A stream cut inside its state may have any part of it. (A 410 is not such a cut:
            // it must come after the whole state, and be excused by a compaction.)
            None if matches!(stream.end, End::Broken(_) | End::Cut) => {
                return partial_state(stream, events, history);
            }
            None => (floor..=newest).collect(),
        };
        for at in candidates.into_iter().filter(|at| *at >= floor) {
            let mut as_initial = stream.clone();
            as_initial.initial = true;
            as_initial.start = at;
            as_initial.events.insert(
                k,
                Seen {
                    kind: Kind::Bookmark { initial_end: true },
                    rv: at,
                    key: String::new(),
                    object: None,
                },
            );
            match check_stream(&as_initial, history) {
                Ok(()) => return Ok(()),
                Err(v) => {
                    first_error.get_or_insert(v);
                }
            }
        }
    }
    Err(first_error.unwrap_or_else(|| Violation {
        guarantee: "Initial",
        who: stream.name.clone(),
        detail: "no revision at or above its ADDED events' has their state".into(),
    }))
}

/// A state cut before its end (initial events without their bookmark, or a
/// `resourceVersion=0` watch's ADDEDs): ADDEDs only, each key once, each object selected and
/// as the store wrote it at its resourceVersion.
fn partial_state(stream: &Stream, events: &[Seen], history: &History) -> Result<(), Violation> {
    let violation = |detail: String| Violation {
        guarantee: "Initial",
        who: stream.name.clone(),
        detail,
    };
    let mut keys = std::collections::BTreeSet::new();
    for (i, e) in events.iter().enumerate() {
        if e.kind != Kind::Added {
            return Err(violation(format!("not an ADDED: {}", around(events, i))));
        }
        if !keys.insert(e.key.as_str()) {
            return Err(violation(format!("{} twice: {}", e.key, around(events, i))));
        }
        let written = history.revisions.get(&e.rv).is_some_and(|changes| {
            changes
                .iter()
                .any(|c| c.key == e.key && c.value.is_some() && c.value == e.object)
        });
        if !written || !stream.selector.selects(&e.key, e.object.as_ref()) {
            return Err(violation(format!(
                "an object the store never had at its revision, or not selected: {}",
                around(events, i)
            )));
        }
    }
    Ok(())
}

fn empty() -> Obj {
    Obj {
        labels: BTreeMap::new(),
        digest: 0,
    }
}

type Run = (u64, Vec<(Kind, u64, String, Obj)>);

/// Events grouped by revision, each group sorted by key.
fn by_revision(events: Vec<(Kind, u64, String, Obj)>) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for e in events {
        match out.last_mut() {
            Some((rv, run)) if *rv == e.1 => run.push(e),
            _ => out.push((e.1, vec![e])),
        }
    }
    for (_, run) in &mut out {
        run.sort_by(|a, b| a.2.cmp(&b.2));
    }
    out
}

/// Whether two runs of one revision differ only in a DELETED's object.
fn deleted_state_differs(want: &Run, got: &Run) -> bool {
    want.1.len() == got.1.len()
        && want
            .1
            .iter()
            .zip(&got.1)
            .any(|(a, b)| a.0 == Kind::Deleted && b.0 == Kind::Deleted && a.2 == b.2 && a.3 != b.3)
}

/// Checks consistent reads against the writes the store acknowledged and against each other.
pub fn check_reads(reads: &[Read], writes: &[Write]) -> Result<(), Violation> {
    for r in reads {
        if let Some(w) = writes.iter().filter(|w| w.acked <= r.began).map(|w| w.rv).max()
            && r.rv < w
        {
            return Err(Violation {
                guarantee: "ReadYourWrites",
                who: r.name.clone(),
                detail: format!(
                    "read at {} though a write at {w} was acknowledged before it began",
                    r.rv
                ),
            });
        }
        if let Some(o) = reads
            .iter()
            .filter(|o| o.ended <= r.began && o.rv > r.rv)
            .max_by_key(|o| o.rv)
        {
            return Err(Violation {
                guarantee: "Monotonic",
                who: r.name.clone(),
                detail: format!(
                    "read at {} though {} had read at {} before it began",
                    r.rv, o.name, o.rv
                ),
            });
        }
    }
    Ok(())
}

/// Checks a LIST's items against the state at its revision.
pub fn check_list(read: &Read, history: &History) -> Result<(), Violation> {
    let Some((selector, got)) = &read.items else {
        return Ok(());
    };
    let want: BTreeMap<String, Obj> = state_at(history, read.rv)
        .into_iter()
        .filter(|(k, o)| selector.selects(k, Some(o)))
        .collect();
    if *got == want {
        return Ok(());
    }
    let missing: Vec<&String> = want.keys().filter(|k| got.get(*k) != want.get(*k)).collect();
    let extra: Vec<&String> = got.keys().filter(|k| !want.contains_key(*k)).collect();
    Err(Violation {
        guarantee: "ListState",
        who: read.name.clone(),
        detail: format!(
            "a LIST at {} differs from the state there: missing or stale {missing:?}, extra {extra:?}",
            read.rv
        ),
    })
}

/// Checks consistent GETs: each answer is its key's state at some revision at or after every
/// write acknowledged before the GET began (linearizable), and the object is the one the
/// history holds at the answer's resourceVersion.
pub fn check_gets(gets: &[Get], writes: &[Write], history: &History) -> Result<(), Violation> {
    for g in gets {
        let floor = writes
            .iter()
            .filter(|w| w.acked <= g.began)
            .map(|w| w.rv)
            .max()
            .unwrap_or(0);
        // The key's versions: (revision, value) in order.
        let versions: Vec<(u64, Option<&Obj>)> = history
            .revisions
            .iter()
            .flat_map(|(rv, cs)| {
                cs.iter()
                    .filter(|c| c.key == g.key)
                    .map(move |c| (*rv, c.value.as_ref()))
            })
            .collect();
        // Each version holds from its revision until the next one's.
        let holds_after_floor = |i: usize| versions.get(i + 1).is_none_or(|(next, _)| *next > floor);
        let ok = match &g.answer {
            Some((rv, obj)) => versions
                .iter()
                .position(|(r, v)| r == rv && *v == Some(obj))
                .is_some_and(holds_after_floor),
            // Absent before the first version (if that is after the floor), or after a deletion
            // that still holds after the floor.
            None => {
                versions.first().is_none_or(|(r, _)| *r > floor)
                    || versions
                        .iter()
                        .enumerate()
                        .any(|(i, (_, v))| v.is_none() && holds_after_floor(i))
            }
        };
        if !ok {
            return Err(Violation {
                guarantee: "GetLinearizable",
                who: g.name.clone(),
                detail: format!(
                    "GET {} answered {:?}, not the key's state at any revision from {floor} on; its versions {:?}",
                    g.key,
                    g.answer.as_ref().map(|(rv, _)| rv),
                    versions
                        .iter()
                        .map(|(r, v)| (*r, v.is_some()))
                        .collect::<Vec<_>>()
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod self_test {
    //! The checkers themselves: a valid run passes, and each kind of violation planted in it is
    //! caught, under its own name.

    use super::*;

    fn obj(app: &str, n: u64) -> Obj {
        Obj {
            labels: [("app".to_owned(), app.to_owned())].into(),
            digest: n,
        }
    }

    /// a created (2), b created (3), a updated and leaving app=web (4), a txn of c and d (5),
    /// b deleted (6), c updated (7).
    fn history() -> History {
        let change = |key: &str, value: Option<Obj>, prev: Option<Obj>| Change {
            key: key.into(),
            value,
            prev,
        };
        History {
            revisions: [
                (2, vec![change("ns/a", Some(obj("web", 1)), None)]),
                (3, vec![change("ns/b", Some(obj("web", 2)), None)]),
                (4, vec![change("ns/a", Some(obj("db", 3)), Some(obj("web", 1)))]),
                (
                    5,
                    vec![
                        change("ns/c", Some(obj("web", 4)), None),
                        change("ns/d", Some(obj("web", 5)), None),
                    ],
                ),
                (6, vec![change("ns/b", None, Some(obj("web", 2)))]),
                (7, vec![change("ns/c", Some(obj("web", 6)), Some(obj("web", 4)))]),
            ]
            .into(),
            compacted: 0,
        }
    }

    fn seen(kind: Kind, rv: u64, key: &str, object: Option<Obj>) -> Seen {
        Seen {
            kind,
            rv,
            key: key.into(),
            object,
        }
    }

    fn bookmark(rv: u64) -> Seen {
        seen(Kind::Bookmark { initial_end: false }, rv, "", None)
    }

    fn web() -> Selector {
        Selector {
            namespace: Some("ns".into()),
            labels: [("app".to_owned(), "web".to_owned())].into(),
        }
    }

    /// A watch of app=web from revision 1: every event, with a bookmark in the middle.
    fn valid() -> Stream {
        Stream {
            name: "watcher".into(),
            start: 1,
            initial: false,
            selector: web(),
            events: vec![
                seen(Kind::Added, 2, "ns/a", Some(obj("web", 1))),
                seen(Kind::Added, 3, "ns/b", Some(obj("web", 2))),
                seen(Kind::Deleted, 4, "ns/a", Some(obj("web", 1))),
                bookmark(4),
                seen(Kind::Added, 5, "ns/c", Some(obj("web", 4))),
                seen(Kind::Added, 5, "ns/d", Some(obj("web", 5))),
                seen(Kind::Deleted, 6, "ns/b", Some(obj("web", 2))),
                seen(Kind::Modified, 7, "ns/c", Some(obj("web", 6))),
            ],
            end: End::Open,
            compacted: None,
        }
    }

    /// A watch of app=web with initial events (`sendInitialEvents=true`), open, that received
    /// `events`.
    fn lister(events: Vec<Seen>) -> Stream {
        Stream {
            name: "lister".into(),
            start: 0,
            initial: true,
            selector: web(),
            events,
            end: End::Open,
            compacted: None,
        }
    }

    fn caught(stream: Stream, guarantee: &str) {
        match check_stream(&stream, &history()) {
            Err(v) => assert_eq!(v.guarantee, guarantee, "{v}"),
            Ok(()) => panic!("{guarantee}: not caught in {:?}", stream.events),
        }
    }

    #[test]
    fn a_valid_stream_and_its_resumption_pass() {
        check_stream(&valid(), &history()).unwrap();
        // Resumed from revision 4, which it delivered: exactly the rest.
        let mut resumed = valid();
        resumed.start = 4;
        resumed.events.drain(..4);
        check_stream(&resumed, &history()).unwrap();
        // Cut by a 410 inside revision 5, after compaction past it: allowed.
        let mut cut = valid();
        cut.events.truncate(5);
        cut.end = End::Expired;
        let mut compacted = history();
        compacted.compacted = 6;
        check_stream(&cut, &compacted).unwrap();
        // Inside revision 5 and compacted at 5: the rest of 5 is not served (no previous
        // values at the compaction), so a 410 is allowed; with all of 5, it is not.
        compacted.compacted = 5;
        check_stream(&cut, &compacted).unwrap();
        let mut whole = valid();
        whole.events.truncate(6);
        whole.end = End::Expired;
        match check_stream(&whole, &compacted) {
            Err(v) => assert_eq!(v.guarantee, "Expired", "{v}"),
            Ok(()) => panic!("a 410 after all of revision 5, compacted at 5, passed"),
        }
    }

    /// `resourceVersion=0`: the state as ADDEDs with no bookmark to say where it ends, then the
    /// changes after it.
    #[test]
    fn a_watch_from_zero_is_its_state_at_some_revision_then_the_rest() {
        // The state at 3 (a, b), then everything after 3.
        let mut zero = valid();
        zero.start = 0;
        check_stream(&zero, &history()).unwrap();
        // Only the state, at 3 or any later revision where it is the same: fine while open.
        let mut state = zero.clone();
        state.events.truncate(2);
        check_stream(&state, &history()).unwrap();
        // An object missing from the state.
        let mut s = zero.clone();
        s.events.remove(1);
        caught(s, "Initial");
        // A stale object in it.
        let mut s = zero.clone();
        s.events[0].object = Some(obj("web", 99));
        caught(s, "Initial");
        // A gap after the state.
        let mut s = zero.clone();
        s.events.remove(4);
        caught(s, "Reliable");
        // A state no revision has (a and c together never were, under app=web).
        let mut s = zero;
        s.events.truncate(1);
        s.events.push(seen(Kind::Added, 5, "ns/c", Some(obj("web", 4))));
        caught(s, "Initial");
    }

    #[test]
    fn a_stream_that_got_nothing_passes_and_a_cut_one_may_end_inside_a_revision() {
        let mut quiet = valid();
        quiet.start = 7;
        quiet.events.clear();
        check_stream(&quiet, &history()).unwrap();
        // Cut inside revision 5 by a broken connection: fine; ended there cleanly by its
        // timeout, or open at the run's end: the rest of the revision is missing.
        let mut cut = valid();
        cut.events.truncate(5);
        cut.end = End::Broken("reset".into());
        check_stream(&cut, &history()).unwrap();
        cut.end = End::Closed;
        caught(cut.clone(), "Reliable");
        cut.end = End::Open;
        caught(cut.clone(), "Reliable");
        // Broken, but after a bookmark at 5 that claimed all of it.
        cut.events.push(bookmark(5));
        cut.end = End::Broken("reset".into());
        caught(cut, "Reliable");
    }

    #[test]
    fn each_planted_violation_is_caught() {
        let mut s = valid();
        s.events.swap(0, 1);
        caught(s, "Ordered");

        let mut s = valid();
        let again = s.events[1].clone();
        s.events.insert(2, again);
        caught(s, "Unique");

        let mut s = valid();
        s.events.remove(2);
        caught(s, "Reliable");

        // Half of a revision, the stream going on.
        let mut s = valid();
        s.events.remove(5);
        caught(s, "Reliable");

        let mut s = valid();
        s.events.insert(1, bookmark(3));
        caught(s, "Bookmarkable");

        let mut s = valid();
        s.events[6].object = Some(obj("web", 99));
        caught(s, "DeletedState");

        let mut s = valid();
        s.events.truncate(3);
        s.end = End::Expired;
        caught(s, "Expired");

        // Initial events that miss an object of the state at their bookmark.
        let s = lister(vec![
            seen(Kind::Added, 5, "ns/c", Some(obj("web", 4))),
            seen(Kind::Bookmark { initial_end: true }, 5, "", None),
        ]);
        caught(s, "Initial");

        // Initial events with an object twice, or a 410 before their end.
        let twice = lister(vec![
            seen(Kind::Added, 3, "ns/b", Some(obj("web", 2))),
            seen(Kind::Added, 3, "ns/b", Some(obj("web", 2))),
            seen(Kind::Added, 5, "ns/c", Some(obj("web", 4))),
            seen(Kind::Added, 5, "ns/d", Some(obj("web", 5))),
            seen(Kind::Bookmark { initial_end: true }, 5, "", None),
        ]);
        caught(twice.clone(), "Initial");
        let mut expired = twice;
        expired.events.truncate(1);
        expired.end = End::Expired;
        caught(expired, "Expired");
    }

    /// A state cut before its end is checked for what came: ADDEDs, each key once, each
    /// object as the store wrote it.
    #[test]
    fn a_state_cut_before_its_end_is_checked_for_what_came() {
        let cut = |events: Vec<Seen>, initial: bool| Stream {
            start: 0,
            initial,
            end: End::Broken("reset".into()),
            ..lister(events)
        };
        let b = || seen(Kind::Added, 3, "ns/b", Some(obj("web", 2)));
        for initial in [true, false] {
            check_stream(&cut(vec![b()], initial), &history()).unwrap();
            caught(cut(vec![b(), b()], initial), "Initial");
            caught(
                cut(vec![seen(Kind::Added, 3, "ns/b", Some(obj("web", 99)))], initial),
                "Initial",
            );
            caught(
                cut(vec![seen(Kind::Added, 4, "ns/b", Some(obj("web", 2)))], initial),
                "Initial",
            );
        }
        // A cut stream's last revision: its start, not any part of it.
        let mut s = valid();
        s.events.truncate(6);
        s.events.remove(4);
        s.end = End::Broken("reset".into());
        caught(s, "Reliable");
    }

    #[test]
    fn initial_events_equal_to_the_state_pass() {
        let s = lister(vec![
            seen(Kind::Added, 3, "ns/b", Some(obj("web", 2))),
            seen(Kind::Added, 5, "ns/c", Some(obj("web", 4))),
            seen(Kind::Added, 5, "ns/d", Some(obj("web", 5))),
            seen(Kind::Bookmark { initial_end: true }, 5, "", None),
            seen(Kind::Deleted, 6, "ns/b", Some(obj("web", 2))),
        ]);
        check_stream(&s, &history()).unwrap();
    }

    #[test]
    fn stale_and_regressing_reads_are_caught() {
        let t0 = Instant::now();
        let at = |ms| t0 + std::time::Duration::from_millis(ms);
        let read = |name: &str, began, ended, rv| Read {
            name: name.into(),
            began: at(began),
            ended: at(ended),
            rv,
            items: None,
        };
        let writes = [Write { acked: at(10), rv: 7 }];
        let good = [read("r1", 0, 5, 5), read("r2", 11, 12, 7), read("r1", 13, 14, 8)];
        check_reads(&good, &writes).unwrap();
        let stale = [read("r2", 11, 12, 6)];
        assert_eq!(
            check_reads(&stale, &writes).unwrap_err().guarantee,
            "ReadYourWrites"
        );
        let back = [read("r1", 11, 12, 9), read("r2", 13, 14, 8)];
        assert_eq!(check_reads(&back, &writes).unwrap_err().guarantee, "Monotonic");
    }

    #[test]
    fn a_list_other_than_the_state_at_its_revision_is_caught() {
        let t0 = Instant::now();
        let list = |items: &[(&str, Obj)]| Read {
            name: "lister".into(),
            began: t0,
            ended: t0,
            rv: 5,
            items: Some((
                web(),
                items.iter().map(|(k, o)| ((*k).to_owned(), o.clone())).collect(),
            )),
        };
        let state = [
            ("ns/b", obj("web", 2)),
            ("ns/c", obj("web", 4)),
            ("ns/d", obj("web", 5)),
        ];
        check_list(&list(&state), &history()).unwrap();
        let stale = [
            ("ns/b", obj("web", 2)),
            ("ns/c", obj("web", 6)),
            ("ns/d", obj("web", 5)),
        ];
        assert_eq!(
            check_list(&list(&stale), &history()).unwrap_err().guarantee,
            "ListState"
        );
        assert_eq!(
            check_list(&list(&state[..2]), &history()).unwrap_err().guarantee,
            "ListState"
        );
    }

    #[test]
    fn a_get_behind_an_acknowledged_write_is_caught() {
        let t0 = Instant::now();
        let at = |ms| t0 + std::time::Duration::from_millis(ms);
        // c was updated at 7, acknowledged at 10 ms.
        let writes = [Write { acked: at(10), rv: 7 }];
        let get = |began, answer| Get {
            name: "getter".into(),
            began: at(began),
            key: "ns/c".into(),
            answer,
        };
        let old = Some((5, obj("web", 4)));
        let new = Some((7, obj("web", 6)));
        check_gets(&[get(0, old.clone()), get(11, new.clone())], &writes, &history()).unwrap();
        let stale = check_gets(&[get(11, old)], &writes, &history()).unwrap_err();
        assert_eq!(stale.guarantee, "GetLinearizable");
        // An object the history never held at that revision, and a 404 for a key that exists.
        let forged = check_gets(&[get(11, Some((7, obj("web", 99))))], &writes, &history());
        assert_eq!(forged.unwrap_err().guarantee, "GetLinearizable");
        assert_eq!(
            check_gets(&[get(11, None)], &writes, &history())
                .unwrap_err()
                .guarantee,
            "GetLinearizable"
        );
        // b was deleted at 6: a 404 after that is right.
        let gone = Get {
            key: "ns/b".into(),
            ..get(11, None)
        };
        check_gets(&[gone], &writes, &history()).unwrap();
    }
}
