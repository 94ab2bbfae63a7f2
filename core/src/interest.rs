//! The interest registry: which watchers an event can concern, found by key, and the chains
//! that let an awake selective watcher go from one of its events to the next without reading
//! anyone else's.
//!
//! This is the apiserver's watcher indexing (`cacher.go` keeps `valueWatchers` per index
//! value, e.g. pods by `spec.nodeName`) adapted to cursors into one shared ring. Every watcher
//! is registered, for its whole life, under exactly one [`Interest`]: the object name its
//! field selector requires (in the namespace it is restricted to, or in any), else the value
//! it requires for the hub's trigger field, else the namespace it is restricted to, else
//! "all". Every object the watcher's filter can select (in its new or its previous version)
//! is in that interest's [`Bucket`].
//!
//! **Chains.** Each ring entry carries one link per role it can play for a bucket: its
//! namespace, its trigger value, its previous version's trigger value (when that differs),
//! its name in its namespace, and its name in any namespace ([`Role`]). The writer keeps, per registered bucket, the last entry it published
//! into that bucket, and when it publishes the next one it stores the new sequence number in
//! the old entry's link (Release). A watcher that has read an entry of its bucket follows the
//! link (Acquire) to its next event; until the writer stores it, the link reads "pending".
//! Only entries published while the bucket was registered are chained: the bucket records
//! the first sequence number it chains ([`Bucket::chained_from`]), and a watcher trusts links
//! from there on, scanning the ring below it.
//!
//! **Parking.** A watcher with nothing to read stores its waker in its own [`WakeCell`] and files
//! the cell in its bucket (one of a few shards, so that no lock is shared by every watcher of
//! a busy bucket). Draining a bucket stamps each filed cell with the sequence number of the
//! event that drained it; a watcher that had verified, after filing, that nothing was pending
//! knows that every event between its position and that stamp passed without touching its
//! bucket, so it resumes at the stamp: an idle watcher is never lapped by traffic it would
//! have filtered out anyway.

use std::task::Waker;

use crate::event::Event;
use crate::loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::loom::sync::{Arc, Mutex};
use crate::loom::{WakerSlot, lock};
use crate::ring::{EventRing, Read, Seq};

/// The registry's maps: foldhash, seeded per map, rather than SipHash, whose cost showed in the
/// writer's profile (three lookups per event). The keys are watched names, trigger values and
/// namespaces; the writer only looks them up.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The wake cell value of a watcher that has not been woken since it parked. A wake cell
/// otherwise holds a [`Seq`], raw.
pub(crate) const NOT_WOKEN: u64 = u64::MAX;

/// A link the writer has not stored yet: the bucket has no later event (so far).
const PENDING: u64 = u64::MAX;

/// Shards of the "all" bucket and of namespace buckets, which many watchers may share.
const WIDE_SHARDS: usize = if cfg!(watchcache_loom) { 2 } else { 8 };

/// How many groups the watchers that asked for bookmarks are spread over: each
/// [`Publisher::send_bookmarks`](crate::Publisher::send_bookmarks) call (one per interval /
/// `BOOKMARK_PHASES`) reaches one group.
pub const BOOKMARK_PHASES: usize = if cfg!(watchcache_loom) { 2 } else { 16 };

/// Where a watcher is registered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Interest {
    /// Only objects with this name (`metadata.name=`), in this namespace ("" for a watcher
    /// that does not restrict the namespace: then in any, and cluster-scoped objects, whose
    /// namespace is "", are in the same bucket).
    Name {
        /// The namespace, or "" for any.
        namespace: Box<str>,
        /// The name.
        name: Box<str>,
    },
    /// Only objects whose trigger field has this value (in the new or previous version).
    Trigger(Box<str>),
    /// Only objects in this namespace.
    Namespace(Box<str>),
    /// Anything.
    All,
}

/// The part an entry plays for a bucket; each has its own link in the entry.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The bucket of the object's namespace.
    Namespace = 0,
    /// The bucket of the object's (new version's) trigger value.
    Trigger = 1,
    /// The bucket of the previous version's trigger value, when it differs from the new one.
    TriggerPrev = 2,
    /// The bucket of the object's name in its namespace.
    Name = 3,
    /// The bucket of the object's name in any namespace, for an object in a namespace (one
    /// that is not has only the `Name` role: its namespace is "", the "any" bucket's).
    NameAnyNamespace = 4,
}

const ROLES: usize = 5;

impl Interest {
    /// The role `event` plays for this interest's bucket, `None` when it is not in it (or the
    /// interest is "all", which has no chain). Computed the same way as the writer's
    /// [`Registry::publish`] does.
    pub(crate) fn role_of(&self, event: &Event, trigger: Option<&str>) -> Option<Role> {
        let object = event.object()?;
        match self {
            Interest::Name { namespace, name } => {
                let key = object.key();
                if key.name() != &**name {
                    None
                } else if key.namespace() == &**namespace {
                    Some(Role::Name)
                } else if namespace.is_empty() {
                    Some(Role::NameAnyNamespace)
                } else {
                    None
                }
            }
            Interest::Namespace(ns) => (object.key().namespace() == &**ns).then_some(Role::Namespace),
            Interest::Trigger(v) => {
                let t = trigger?;
                if object.field(t).unwrap_or("") == &**v {
                    Some(Role::Trigger)
                } else if event.prev().is_some_and(|p| p.field(t).unwrap_or("") == &**v) {
                    Some(Role::TriggerPrev)
                } else {
                    None
                }
            }
            Interest::All => None,
        }
    }
}

/// What the hub's ring holds: an event and its links to the next event of each bucket it is in.
#[derive(Debug)]
pub(crate) struct HubEntry {
    pub(crate) event: Event,
    links: [AtomicU64; ROLES],
}

impl HubEntry {
    pub(crate) fn new(event: Event) -> Self {
        HubEntry {
            event,
            links: std::array::from_fn(|_| AtomicU64::new(PENDING)),
        }
    }

    /// The sequence number of the next event of the bucket this entry is in as `role`, once
    /// the writer has published it.
    pub(crate) fn next_in(&self, role: Role) -> Option<Seq> {
        // Acquire pairs with the Release store in `link`: the entry at the returned sequence
        // number was published (the ring's slot and tail stores) before the link was stored.
        match self.links[role as usize].load(Ordering::Acquire) {
            PENDING => None,
            seq => Some(Seq::new(seq)),
        }
    }

    fn link(&self, role: Role, next: Seq) {
        // Release pairs with the Acquire load in `next_in`.
        self.links[role as usize].store(next.get(), Ordering::Release);
    }
}

/// What a watcher shares with the writer: its wake cell, its bookmark flag and its waker.
#[derive(Debug)]
pub(crate) struct WakeCell {
    /// `NOT_WOKEN`, or the sequence number of the event whose drain woke the watcher.
    wake_at: AtomicU64,
    /// Set by a bookmark tick; cleared by the watcher when it sends the bookmark.
    bookmark: AtomicBool,
    /// The watcher was dropped: the bookmark schedule forgets it at its next tick.
    gone: AtomicBool,
    /// The waker of the watcher's last `Pending` poll, taken by whoever wakes it (the writer
    /// for an event or the close, a bookmark tick). Shared by its watcher and the writer only.
    waker: WakerSlot,
}

impl WakeCell {
    pub(crate) fn new() -> Self {
        WakeCell {
            wake_at: AtomicU64::new(NOT_WOKEN),
            bookmark: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            waker: WakerSlot::new(),
        }
    }

    /// Stores `waker` for the writer to wake (no clone when it would wake the same task). A
    /// wake takes it: every `Pending` poll stores it again, and any wake is followed by a poll
    /// that looks at everything (stamp, bookmark flag, close), so no wake-up is lost.
    pub(crate) fn set_waker(&self, waker: &Waker) {
        self.waker.register(waker);
    }

    fn wake(&self) {
        self.waker.wake();
    }

    /// The stamp of the drain that woke the watcher, if one did since it parked; clears it.
    pub(crate) fn take_wake(&self) -> Option<Seq> {
        // Acquire pairs with the Release store in `Bucket::drain`.
        let at = self.wake_at.load(Ordering::Acquire);
        if at == NOT_WOKEN {
            return None;
        }
        // The writer unfiled us when it stamped the cell, so nobody else writes it now; the
        // next stamp can only follow a new `file`, ordered by the shard's lock.
        self.wake_at.store(NOT_WOKEN, Ordering::Relaxed);
        Some(Seq::new(at))
    }

    /// Whether a drain stamped the cell since the watcher parked (without clearing it).
    pub(crate) fn is_woken(&self) -> bool {
        // Acquire pairs with the Release store in `Bucket::drain`, as in `take_wake`.
        self.wake_at.load(Ordering::Acquire) != NOT_WOKEN
    }

    /// Whether a bookmark tick is waiting for this watcher.
    pub(crate) fn bookmark_due(&self) -> bool {
        // Acquire pairs with the Release store in `Registry::bookmark_phase`.
        self.bookmark.load(Ordering::Acquire)
    }

    pub(crate) fn bookmark_sent(&self) {
        self.bookmark.store(false, Ordering::Relaxed);
    }

    pub(crate) fn set_gone(&self) {
        self.gone.store(true, Ordering::Relaxed);
    }
}

/// The parked watchers of one shard. A narrow bucket (one name, one trigger value) usually
/// has one watcher: a short list, drained and searched in place, costs the writer one cache
/// line where a map costs two. A wide one ("all", a namespace) may hold thousands: a map,
/// so that a watcher leaving by itself does not search them.
#[derive(Debug)]
enum Parked {
    Few(Vec<(u64, Arc<WakeCell>)>),
    Many(HashMap<u64, Arc<WakeCell>>),
}

impl Parked {
    fn len(&self) -> usize {
        match self {
            Parked::Few(v) => v.len(),
            Parked::Many(m) => m.len(),
        }
    }
}

type Shard = Mutex<Parked>;

/// The watchers registered under one interest: the parked ones, filed by shard.
#[derive(Debug)]
pub(crate) struct Bucket {
    /// Entries from this sequence number on are chained for this bucket.
    chained_from: Seq,
    /// The first shard, in the bucket itself (one allocation, one less miss for the writer).
    first: Shard,
    /// Any further shards (wide buckets only).
    rest: Box<[Shard]>,
}

impl Bucket {
    fn new(shards: usize, chained_from: Seq) -> Self {
        let shard = || {
            Mutex::new(if shards == 1 {
                Parked::Few(Vec::new())
            } else {
                Parked::Many(HashMap::default())
            })
        };
        Bucket {
            chained_from,
            first: shard(),
            rest: (1..shards).map(|_| shard()).collect(),
        }
    }

    /// The first sequence number whose links are kept for this bucket.
    pub(crate) fn chained_from(&self) -> Seq {
        self.chained_from
    }

    fn shards(&self) -> impl Iterator<Item = &Shard> {
        std::iter::once(&self.first).chain(self.rest.iter())
    }

    fn shard(&self, id: u64) -> &Shard {
        match self.shard_of(id) {
            0 => &self.first,
            i => &self.rest[i - 1],
        }
    }

    /// Files watcher `id` (its waker is already in `cell`). No allocation once the shard has
    /// held as many parked watchers before: a drain keeps the list's or map's capacity.
    pub(crate) fn file(&self, id: u64, cell: &Arc<WakeCell>) {
        match &mut *lock(self.shard(id)) {
            Parked::Few(v) => v.push((id, Arc::clone(cell))),
            Parked::Many(m) => drop(m.insert(id, Arc::clone(cell))),
        }
    }

    /// Unfiles watcher `id` if it is still filed and clears any stamp the writer set meanwhile
    /// (the watcher reads on from its own position, which is never ahead of what it must read).
    pub(crate) fn unfile(&self, id: u64, cell: &WakeCell) {
        let mut shard = lock(self.shard(id));
        match &mut *shard {
            Parked::Few(v) => {
                if let Some(i) = v.iter().position(|(w, _)| *w == id) {
                    v.swap_remove(i);
                }
            }
            Parked::Many(m) => drop(m.remove(&id)),
        }
        // Under the shard's lock the writer can no longer stamp us; the Relaxed store is
        // ordered before any later stamp by the lock taken in the next `file`.
        cell.wake_at.store(NOT_WOKEN, Ordering::Relaxed);
    }

    fn parked(&self) -> usize {
        self.shards().map(|s| lock(s).len()).sum()
    }

    /// The shard watcher `id` parks in.
    fn shard_of(&self, id: u64) -> usize {
        (id % (self.rest.len() as u64 + 1)) as usize
    }

    /// Unfiles every parked watcher, stamping each with `seq`; their cells go to `woken`.
    /// Shards no registered watcher parks in (`registered[i] == 0`) are not locked: a wide
    /// bucket with a few watchers costs the writer a lock per watcher, not per shard.
    fn drain(&self, seq: Seq, registered: &[u32], woken: &mut Vec<Arc<WakeCell>>) {
        let mut stamp = |cell: Arc<WakeCell>| {
            // Release pairs with the Acquire load in `WakeCell::take_wake`: the watcher that
            // sees the stamp sees the event (stored before this, under the shard's lock).
            cell.wake_at.store(seq.get(), Ordering::Release);
            woken.push(cell);
        };
        for (shard, _) in self.shards().zip(registered).filter(|(_, n)| **n > 0) {
            match &mut *lock(shard) {
                Parked::Few(v) => v.drain(..).for_each(|(_, cell)| stamp(cell)),
                Parked::Many(m) => m.drain().for_each(|(_, cell)| stamp(cell)),
            }
        }
    }
}

/// A registered bucket, its watcher count and the writer's end of its chain.
#[derive(Debug)]
struct Registered {
    bucket: Arc<Bucket>,
    watchers: usize,
    /// Watchers registered per shard (changed under the registry's lock, which the writer
    /// holds while it drains).
    per_shard: Box<[u32]>,
    /// The last entry published into this bucket and the role it plays there.
    last: Option<(Seq, Role)>,
}

/// Every registered bucket and the bookmark schedule. Behind the hub's mutex, which only
/// watch starts and ends and the writer take: never a delivery or a park.
#[derive(Debug)]
pub(crate) struct Registry {
    /// By name, then namespace ("" for watchers of a name in any namespace): found without
    /// building a key, and two lookups find both buckets an object is in.
    by_name: HashMap<Box<str>, HashMap<Box<str>, Registered>>,
    by_trigger: HashMap<Box<str>, Registered>,
    by_namespace: HashMap<Box<str>, Registered>,
    all: Option<Registered>,
    /// The cells of watchers that asked for bookmarks, in groups reached one per tick.
    bookmarks: Vec<Vec<Arc<WakeCell>>>,
    next_phase: usize,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            by_name: HashMap::default(),
            by_trigger: HashMap::default(),
            by_namespace: HashMap::default(),
            all: None,
            bookmarks: (0..BOOKMARK_PHASES).map(|_| Vec::new()).collect(),
            next_phase: 0,
        }
    }
}

impl Registry {
    fn slot(&mut self, interest: &Interest) -> Option<&mut Registered> {
        match interest {
            Interest::Name { namespace, name } => self.by_name.get_mut(name)?.get_mut(namespace),
            Interest::Trigger(v) => self.by_trigger.get_mut(v),
            Interest::Namespace(ns) => self.by_namespace.get_mut(ns),
            Interest::All => self.all.as_mut(),
        }
    }

    /// Registers a watcher under `interest` (creating its bucket, chained from `tail`, the
    /// next sequence number the writer will publish) and, if it asked for bookmarks, in the
    /// bookmark group `id` falls in.
    pub(crate) fn register(
        &mut self,
        interest: &Interest,
        tail: Seq,
        id: u64,
        bookmarks: Option<&Arc<WakeCell>>,
    ) -> Arc<Bucket> {
        if let Some(cell) = bookmarks {
            self.bookmarks[(id % BOOKMARK_PHASES as u64) as usize].push(Arc::clone(cell));
        }
        let new = |shards| Registered {
            bucket: Arc::new(Bucket::new(shards, tail)),
            watchers: 0,
            per_shard: vec![0; shards].into_boxed_slice(),
            last: None,
        };
        let slot = match interest {
            Interest::Name { namespace, name } => self
                .by_name
                .entry(name.clone())
                .or_default()
                .entry(namespace.clone())
                .or_insert_with(|| new(1)),
            Interest::Trigger(v) => self.by_trigger.entry(v.clone()).or_insert_with(|| new(1)),
            Interest::Namespace(ns) => self
                .by_namespace
                .entry(ns.clone())
                .or_insert_with(|| new(WIDE_SHARDS)),
            Interest::All => self.all.get_or_insert_with(|| new(WIDE_SHARDS)),
        };
        slot.watchers += 1;
        slot.per_shard[slot.bucket.shard_of(id)] += 1;
        Arc::clone(&slot.bucket)
    }

    /// Deregisters watcher `id`; the bucket goes with its last watcher.
    pub(crate) fn deregister(&mut self, interest: &Interest, id: u64) {
        let Some(slot) = self.slot(interest) else { return };
        slot.watchers -= 1;
        slot.per_shard[slot.bucket.shard_of(id)] -= 1;
        if slot.watchers > 0 {
            return;
        }
        match interest {
            Interest::Name { namespace, name } => {
                if let Some(namespaces) = self.by_name.get_mut(name) {
                    namespaces.remove(namespace);
                    if namespaces.is_empty() {
                        self.by_name.remove(name);
                    }
                }
            }
            Interest::Trigger(v) => drop(self.by_trigger.remove(v)),
            Interest::Namespace(ns) => drop(self.by_namespace.remove(ns)),
            Interest::All => self.all = None,
        }
    }

    /// The number of parked watchers.
    pub(crate) fn parked(&self) -> usize {
        self.buckets().map(|r| r.bucket.parked()).sum()
    }

    fn buckets(&self) -> impl Iterator<Item = &Registered> {
        self.by_name
            .values()
            .flat_map(|namespaces| namespaces.values())
            .chain(self.by_trigger.values())
            .chain(self.by_namespace.values())
            .chain(self.all.as_ref())
    }

    /// After the writer published `event` at `seq`: links it into the chain of every bucket it
    /// is in and drains those buckets and "all". Called with the ring's tail already past
    /// `seq`, so a watcher that filed itself before this drain is found, and one that files
    /// itself after sees the event (or the link) when it re-checks.
    pub(crate) fn publish(
        &mut self,
        seq: Seq,
        event: &Event,
        trigger: Option<&str>,
        ring: &EventRing<HubEntry>,
        woken: &mut Vec<Arc<WakeCell>>,
    ) {
        let Some(object) = event.object() else { return };
        let key = object.key();
        let new_value = trigger.map(|t| object.field(t).unwrap_or(""));
        let prev_value = trigger
            .zip(event.prev())
            .map(|(t, p)| p.field(t).unwrap_or(""))
            .filter(|&p| Some(p) != new_value);
        let mut chain = |slot: Option<&mut Registered>, role: Role| {
            let Some(slot) = slot else { return };
            if let Some((last, last_role)) = slot.last {
                let guard = crossbeam_epoch::pin();
                // SAFETY: `guard` is `crossbeam_epoch::pin()`'s, a guard of the default collector.
                // (An entry the ring no longer holds has no reader left to follow its link.)
                if let Read::Ready(e) = unsafe { ring.read_unchecked(last, &guard) } {
                    e.value().link(last_role, seq);
                }
            }
            slot.last = Some((seq, role));
            slot.bucket.drain(seq, &slot.per_shard, woken);
        };
        chain(self.by_namespace.get_mut(key.namespace()), Role::Namespace);
        chain(new_value.and_then(|v| self.by_trigger.get_mut(v)), Role::Trigger);
        chain(
            prev_value.and_then(|v| self.by_trigger.get_mut(v)),
            Role::TriggerPrev,
        );
        if let Some(namespaces) = self.by_name.get_mut(key.name()) {
            chain(namespaces.get_mut(key.namespace()), Role::Name);
            if !key.namespace().is_empty() {
                chain(namespaces.get_mut(""), Role::NameAnyNamespace);
            }
        }
        if let Some(all) = &self.all {
            all.bucket.drain(seq, &all.per_shard, woken);
        }
    }

    /// Drains every bucket (the hub closed), stamping `seq`.
    pub(crate) fn drain_all(&mut self, seq: Seq, woken: &mut Vec<Arc<WakeCell>>) {
        for r in self.buckets() {
            r.bucket.drain(seq, &r.per_shard, woken);
        }
    }

    /// Flags the next group of bookmark watchers; their cells go to `flagged` to be woken.
    /// Forgets the cells of dropped watchers on the way.
    pub(crate) fn bookmark_phase(&mut self, flagged: &mut Vec<Arc<WakeCell>>) {
        let phase = self.next_phase;
        self.next_phase = (phase + 1) % BOOKMARK_PHASES;
        let group = &mut self.bookmarks[phase];
        group.retain(|c| !c.gone.load(Ordering::Relaxed));
        for cell in group.iter() {
            // Release pairs with the Acquire load in `WakeCell::bookmark_due`; stored before the
            // cell's waker is woken, so a watcher that registers its waker after that wake sees
            // the flag when it re-checks (`WakerSlot`'s register-then-check contract).
            cell.bookmark.store(true, Ordering::Release);
            flagged.push(Arc::clone(cell));
        }
    }
}

/// Wakes the watchers of `cells` (after the registry's lock was released), emptying it.
pub(crate) fn wake_all(cells: &mut Vec<Arc<WakeCell>>) -> usize {
    let n = cells.len();
    for cell in cells.drain(..) {
        cell.wake();
    }
    n
}
