//! Snapshots: the state of a resource at one revision, immutable, with structural sharing.
//!
//! A snapshot is a persistent sorted sequence of shared object versions (an RRB vector,
//! `imbl::Vector`): taking one is O(1), applying a change makes a new one in O(log n) that
//! shares everything else with the old, and an item's position is known in O(log n), so a
//! page's `remainingItemCount` is a subtraction rather than a count. The cache keeps the
//! current one, and those paginated LISTs are reading; a LIST at an older revision of the
//! history window gets one made on demand, by undoing the ring's events after it
//! ([`Snapshot::undo`]), so that snapshots cost what they are used for.
//!
//! A snapshot may also index its objects by one field (the resource's trigger field, e.g.
//! pods by `spec.nodeName`): a persistent map from value to the objects with it, in key
//! order, updated in O(log n) by each change like the sequence. [`Snapshot::plan`] picks what
//! a filtered read looks at: one key (a name in a namespace), the objects of one name across
//! namespaces, the objects with one trigger value, or a namespace's run of keys; so reading
//! one node's pods among 150,000 looks at that node's pods only.
//!
//! [`ListItems`] reads a plan's span of one snapshot through a filter, lending one item at a
//! time: what a LIST page or a watch's initial events hand to an encoder. Which span a page
//! covers is decided in [`page`](crate::page).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::OnceLock;

use crate::event::Event;
use crate::filter::Filter;
use crate::object::{Codec, CodecError, ObjectKey, ObjectVersion, WireFormat};
use crate::rv::Revision;
use std::sync::Arc;

/// The state of one resource at one revision: object versions in key order.
#[derive(Clone, Debug)]
pub struct Snapshot {
    revision: Revision,
    items: imbl::Vector<Arc<ObjectVersion>>,
    index: Option<FieldIndex>,
    /// The corrupt objects among the items (their stored values do not decode), by key:
    /// almost always empty, so a read checks its scope for them at no cost.
    corrupt: imbl::OrdMap<ObjectKey, Arc<ObjectVersion>>,
    /// Per wire format, every item's encoded length in key order, made on first use
    /// ([`encoded_lens`](Self::encoded_lens)): a LIST that must state its body's size first
    /// (protobuf) reads the sizes here rather than walking every object for them.
    encoded_lens: [OnceLock<Box<[u32]>>; WireFormat::COUNT],
}

/// An object version ordered by its key: an element of a [`FieldIndex`] set.
#[derive(Clone, Debug)]
pub(crate) struct ByKey(pub(crate) Arc<ObjectVersion>);

impl PartialEq for ByKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}

impl Eq for ByKey {}

impl PartialOrd for ByKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.key().cmp(other.0.key())
    }
}

impl Borrow<ObjectKey> for ByKey {
    fn borrow(&self) -> &ObjectKey {
        self.0.key()
    }
}

/// Objects in key order, shared between snapshots.
pub(crate) type KeySet = imbl::OrdSet<ByKey>;

/// The objects of a snapshot by the value of one field (a missing field counts as "").
#[derive(Clone, Debug)]
struct FieldIndex {
    field: Arc<str>,
    by_value: imbl::OrdMap<Box<str>, KeySet>,
}

impl FieldIndex {
    fn new(field: &str, items: &imbl::Vector<Arc<ObjectVersion>>) -> Self {
        let mut index = FieldIndex {
            field: field.into(),
            by_value: imbl::OrdMap::new(),
        };
        for o in items {
            index.insert(o);
        }
        index
    }

    fn value<'a>(&self, object: &'a ObjectVersion) -> &'a str {
        object.field(&self.field).unwrap_or("")
    }

    fn insert(&mut self, object: &Arc<ObjectVersion>) {
        let value = self.value(object);
        let mut set = self.by_value.get(value).cloned().unwrap_or_default();
        set.insert(ByKey(Arc::clone(object)));
        self.by_value.insert(value.into(), set);
    }

    fn remove(&mut self, object: &ObjectVersion) {
        let value = self.value(object);
        if let Some(mut set) = self.by_value.get(value).cloned() {
            set.remove(object.key());
            if set.is_empty() {
                self.by_value.remove(value);
            } else {
                self.by_value.insert(value.into(), set);
            }
        }
    }
}

/// What a filtered read of a snapshot looks at: positions of its key sequence, or a set of
/// objects in key order. Every object the filter can select is in it.
#[derive(Clone, Debug)]
pub(crate) enum Plan {
    /// Positions of the key sequence (a namespace's run, one key, or everything).
    Range(std::ops::Range<usize>),
    /// Objects from the field index, or one name's objects across namespaces.
    Set(KeySet),
}

/// Which part of a [`Plan`] one page covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Span {
    /// Positions of the key sequence.
    Range(std::ops::Range<usize>),
    /// The objects of a set after `after` (all when `None`) up to and including `through`
    /// (to the end when `None`).
    Set {
        set: KeySet,
        after: Option<ObjectKey>,
        through: Option<ObjectKey>,
    },
}

impl Snapshot {
    /// A snapshot of `items` at `revision`; items are sorted by key, and of duplicate keys the
    /// last one wins.
    pub fn new(revision: Revision, mut items: Vec<Arc<ObjectVersion>>) -> Self {
        items.sort_by(|a, b| a.key().cmp(b.key()));
        items.dedup_by(|later, earlier| {
            let same = later.key() == earlier.key();
            if same {
                std::mem::swap(later, earlier);
            }
            same
        });
        let corrupt = items
            .iter()
            .filter(|o| o.is_corrupt())
            .map(|o| (o.key().clone(), Arc::clone(o)))
            .collect();
        Snapshot {
            revision,
            items: items.into_iter().collect(),
            index: None,
            corrupt,
            encoded_lens: Default::default(),
        }
    }

    /// The corrupt objects `filter` may select (see [`Filter::matches`]), in key order: what
    /// a read through `filter` fails naming, rather than skip them or serve what they were.
    pub fn corrupt_matching<'a>(
        &'a self,
        filter: &'a Filter,
    ) -> impl Iterator<Item = &'a Arc<ObjectVersion>> + 'a {
        self.corrupt.values().filter(move |o| filter.matches(o))
    }

    /// This snapshot with its objects indexed by `field` (a missing field counts as ""), so
    /// that reads selecting one value of it look at those objects only. Kept up to date by
    /// [`apply`](Self::apply).
    pub fn with_index(mut self, field: &str) -> Self {
        self.index = Some(FieldIndex::new(field, &self.items));
        self
    }

    /// What a read through `filter` looks at: the narrowest of one key (a name in a
    /// namespace), one name across namespaces, the objects with the indexed field's required
    /// value, and the filter's namespace (or everything).
    pub(crate) fn plan(&self, filter: &Filter) -> Plan {
        let namespace = filter.required_namespace();
        if let Some(name) = filter.fields().equality("metadata.name") {
            return match namespace {
                Some(ns) => {
                    let key = ObjectKey::new(ns, name);
                    match self.position(&key) {
                        Ok(i) => Plan::Range(i..i + 1),
                        Err(i) => Plan::Range(i..i),
                    }
                }
                None => Plan::Set(self.named(name)),
            };
        }
        if let Some(index) = &self.index
            && let Some(value) = filter.fields().equality(&index.field)
        {
            return Plan::Set(index.by_value.get(value).cloned().unwrap_or_default());
        }
        Plan::Range(self.range_of(namespace))
    }

    /// The objects named `name`, one per namespace at most: a binary search per namespace,
    /// jumping from one namespace's run to the next.
    fn named(&self, name: &str) -> KeySet {
        let mut found = KeySet::new();
        let mut at = 0;
        while let Some(first) = self.items.get(at) {
            let ns = first.key().namespace();
            let run = self.range_of(Some(ns));
            if let Ok(i) = self.position(&ObjectKey::new(ns, name)) {
                found.insert(ByKey(Arc::clone(&self.items[i])));
            }
            // `run` holds `at` (keys sort by namespace first), so this always moves on.
            at = run.end.max(at + 1);
        }
        found
    }

    /// The revision this snapshot is the state at.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// The number of objects.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are no objects.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The object at `key`.
    pub fn get(&self, key: &ObjectKey) -> Option<&Arc<ObjectVersion>> {
        self.position(key).ok().and_then(|i| self.items.get(i))
    }

    /// The object at position `index` in key order.
    pub fn at(&self, index: usize) -> Option<&Arc<ObjectVersion>> {
        self.items.get(index)
    }

    /// `Ok(index)` of `key`, or `Err(index)` where it would be inserted.
    pub fn position(&self, key: &ObjectKey) -> Result<usize, usize> {
        self.items.binary_search_by(|o| o.key().cmp(key))
    }

    /// The positions of the objects in `namespace` (all positions for `None`): the keys that
    /// start with `<ns>/`, one contiguous run in key order.
    pub fn range_of(&self, namespace: Option<&str>) -> std::ops::Range<usize> {
        match namespace {
            None => 0..self.items.len(),
            Some(ns) => {
                let prefix = [ns.as_bytes(), b"/"].concat();
                let lo = partition_point(&self.items, |o| o.key().cmp_prefix(&prefix).0 == Ordering::Less);
                let hi = partition_point(&self.items, |o| {
                    let (order, starts) = o.key().cmp_prefix(&prefix);
                    order == Ordering::Less || starts
                });
                lo..hi
            }
        }
    }

    /// Every object, in key order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<ObjectVersion>> {
        self.items.iter()
    }

    /// The length of every item's encoding in `format`, in key order. Made on first use, with
    /// any encoding still missing, then kept for the life of the snapshot; a length over
    /// `u32::MAX` reads as `u32::MAX`.
    pub fn encoded_lens(&self, format: WireFormat, codec: &dyn Codec) -> Result<&[u32], CodecError> {
        let slot = &self.encoded_lens[format.index()];
        if let Some(lens) = slot.get() {
            return Ok(lens);
        }
        let lens = self
            .items
            .iter()
            .map(|o| {
                let len = o.encoding(format, codec)?.bytes().len();
                Ok(u32::try_from(len).unwrap_or(u32::MAX))
            })
            .collect::<Result<Box<[u32]>, CodecError>>()?;
        // Two first uses at once each count; either result is the same.
        Ok(slot.get_or_init(|| lens))
    }

    /// The snapshot after `event`, at the event's revision. Bookmarks change only the revision.
    pub fn apply(&self, event: &Event) -> Snapshot {
        self.apply_all(std::slice::from_ref(event))
    }

    /// The snapshot after every event of one revision (at most one per key), at that
    /// revision: the state a reader sees whole, never with part of the revision applied.
    /// Bookmarks change only the revision. No event is no change.
    pub fn apply_all(&self, events: &[Event]) -> Snapshot {
        let mut next = self.edited(events.last().map_or(self.revision, Event::revision));
        for event in events {
            let put = match event {
                Event::Added { object } | Event::Modified { object, .. } => Some(object),
                Event::Deleted { .. } | Event::Bookmark { .. } => None,
            };
            let Some(key) = event.object().map(|o| o.key()) else {
                continue;
            };
            next.replace(key, event.prev(), put);
        }
        next
    }

    /// The state before every event in `events` (in the order published, all above the
    /// target revision and at most this snapshot's), at `revision`: the events undone, newest
    /// first. What a LIST at a revision inside the history window reads, made on demand from
    /// the current state and the ring rather than kept for every revision.
    pub fn undo(&self, events: &[Event], revision: Revision) -> Snapshot {
        let mut before = self.edited(revision);
        for event in events.iter().rev() {
            let Some(key) = event.object().map(|o| o.key()) else {
                continue;
            };
            let put = match event {
                Event::Added { object } | Event::Modified { object, .. } => Some(object),
                Event::Deleted { .. } | Event::Bookmark { .. } => None,
            };
            before.replace(key, put, event.prev());
        }
        before
    }

    /// A copy (O(1): the structures are shared) to edit, at `revision`.
    fn edited(&self, revision: Revision) -> Snapshot {
        Snapshot {
            revision,
            items: self.items.clone(),
            index: self.index.clone(),
            corrupt: self.corrupt.clone(),
            encoded_lens: Default::default(),
        }
    }

    /// Replaces the version of `key`: `old` (if any) goes, `new` (if any) comes.
    fn replace(
        &mut self,
        key: &ObjectKey,
        old: Option<&Arc<ObjectVersion>>,
        new: Option<&Arc<ObjectVersion>>,
    ) {
        match (self.position(key), new) {
            (Ok(i), Some(object)) => {
                self.items.set(i, Arc::clone(object));
            }
            (Err(i), Some(object)) => self.items.insert(i, Arc::clone(object)),
            (Ok(i), None) => {
                self.items.remove(i);
            }
            (Err(_), None) => {}
        }
        if let Some(index) = &mut self.index {
            if let Some(old) = old {
                index.remove(old);
            }
            if let Some(new) = new {
                index.insert(new);
            }
        }
        if old.is_some_and(|o| o.is_corrupt()) {
            self.corrupt.remove(key);
        }
        if let Some(new) = new.filter(|n| n.is_corrupt()) {
            self.corrupt.insert(key.clone(), Arc::clone(new));
        }
    }
}

/// The first index at which `pred` is false; `pred` must be true, then false, along `items`
/// (`slice::partition_point`, which `imbl::Vector` lacks).
pub(crate) fn partition_point<T: Clone>(items: &imbl::Vector<T>, pred: impl Fn(&T) -> bool) -> usize {
    // imbl's binary search takes an ordering; map the predicate onto one that never says Equal.
    match items.binary_search_by(|o| {
        if pred(o) {
            Ordering::Less
        } else {
            Ordering::Greater
        }
    }) {
        Ok(i) | Err(i) => i,
    }
}

/// The items of one LIST page (or a watch's initial events): a span of a snapshot, through
/// a filter. Holds the snapshot (shared), never a copy of the items.
#[derive(Clone, Debug)]
pub struct ListItems {
    snapshot: Arc<Snapshot>,
    cursor: Cursor,
    filter: Filter,
    remaining: usize,
}

/// Where a [`ListItems`] is in its span, and the item it lent last.
#[derive(Clone, Debug)]
enum Cursor {
    Range {
        next: usize,
        end: usize,
        /// The position of the item lent last.
        current: Option<usize>,
    },
    Set {
        set: KeySet,
        /// The item lent last (the next comes after it), or the key the span starts after.
        after: SetPosition,
        through: Option<ObjectKey>,
        /// Whether `after` is the item lent last.
        lent: bool,
    },
}

/// A position in a set span.
#[derive(Clone, Debug)]
enum SetPosition {
    Start,
    AfterKey(ObjectKey),
    After(ByKey),
}

/// What one bounded step through a [`ListItems`] found.
pub(crate) enum Step<'a> {
    /// The next selected item.
    Item(&'a Arc<ObjectVersion>),
    /// The budget ran out before a selected item was found; call again.
    Exhausted,
    /// No more items.
    Done,
}

impl ListItems {
    pub(crate) fn new(
        snapshot: Arc<Snapshot>,
        range: std::ops::Range<usize>,
        filter: Filter,
        count: usize,
    ) -> Self {
        ListItems::from_span(snapshot, Span::Range(range), filter, count)
    }

    /// The `count` items of `span` that `filter` selects.
    pub(crate) fn from_span(snapshot: Arc<Snapshot>, span: Span, filter: Filter, count: usize) -> Self {
        let cursor = match span {
            Span::Range(range) => Cursor::Range {
                next: range.start,
                end: range.end,
                current: None,
            },
            Span::Set { set, after, through } => Cursor::Set {
                set,
                after: after.map_or(SetPosition::Start, SetPosition::AfterKey),
                through,
                lent: false,
            },
        };
        ListItems {
            snapshot,
            cursor,
            filter,
            remaining: count,
        }
    }

    /// Every item of `snapshot`, in key order.
    pub fn all(snapshot: Arc<Snapshot>) -> Self {
        let len = snapshot.len();
        ListItems::new(snapshot, 0..len, Filter::everything(), len)
    }

    /// The number of items still to come.
    pub fn remaining(&self) -> usize {
        self.remaining
    }

    /// The sum of `size(len)` over the encoded lengths of the items still to come, read from
    /// the snapshot's [`encoded_lens`](Snapshot::encoded_lens), when those items are a key
    /// range that the filter does not narrow (a whole LIST, a namespace, or a page of one) and
    /// either the snapshot's lengths were measured already or the range is at least half the
    /// snapshot, and no object of the snapshot is corrupt. `None` otherwise: the caller walks
    /// the items.
    pub fn sum_encoded(
        &self,
        format: WireFormat,
        codec: &dyn Codec,
        size: impl Fn(usize) -> usize,
    ) -> Result<Option<usize>, CodecError> {
        let Cursor::Range { next, end, .. } = self.cursor else {
            return Ok(None);
        };
        let in_scope = match self.filter.required_namespace() {
            None => true,
            Some(ns) => {
                let scope = self.snapshot.range_of(Some(ns));
                scope.start <= next && end <= scope.end
            }
        };
        // A corrupt object has no encoding to measure: with one anywhere in the snapshot, even
        // outside the span (a LIST never includes one), the span is walked instead.
        if !in_scope
            || !self.filter.selects_all_in_namespace()
            || self.remaining != end.saturating_sub(next)
            || !self.snapshot.corrupt.is_empty()
        {
            return Ok(None);
        }
        // Measuring the whole snapshot for a small span (a page of 500 among 150,000) would make
        // every object's encoding for it: only a span of half the snapshot or more does.
        let lens = match self.snapshot.encoded_lens[format.index()].get() {
            Some(lens) => lens,
            None if 2 * (end - next) >= self.snapshot.len() => self.snapshot.encoded_lens(format, codec)?,
            None => return Ok(None),
        };
        Ok(lens
            .get(next..end)
            .map(|lens| lens.iter().map(|&l| size(l as usize)).sum()))
    }

    /// The next item, lent. From a key range it touches no shared reference count; from an
    /// index set, one per selected item (the cursor holds the item it lent).
    pub fn next_item(&mut self) -> Option<&Arc<ObjectVersion>> {
        match self.step(usize::MAX) {
            Step::Item(_) => self.current(),
            Step::Exhausted | Step::Done => None,
        }
    }

    /// Looks at no more than `budget` candidates for the next selected item.
    pub(crate) fn step(&mut self, mut budget: usize) -> Step<'_> {
        let found = match &mut self.cursor {
            Cursor::Range { next, end, current } => {
                *current = None;
                loop {
                    if *next >= *end {
                        break Step::Done;
                    }
                    if budget == 0 {
                        break Step::Exhausted;
                    }
                    budget -= 1;
                    let i = *next;
                    *next += 1;
                    if self.snapshot.at(i).is_some_and(|o| self.filter.matches(o)) {
                        *current = Some(i);
                        break Step::Item(&self.snapshot.items[i]);
                    }
                }
            }
            Cursor::Set {
                set,
                after,
                through,
                lent,
            } => {
                *lent = false;
                loop {
                    let candidate = match &*after {
                        SetPosition::Start => set.iter().next(),
                        SetPosition::AfterKey(k) => set
                            .range::<_, ObjectKey>((Bound::Excluded(k), Bound::Unbounded))
                            .next(),
                        SetPosition::After(b) => set
                            .range::<_, ByKey>((Bound::Excluded(b), Bound::Unbounded))
                            .next(),
                    };
                    let Some(candidate) =
                        candidate.filter(|c| through.as_ref().is_none_or(|t| c.0.key() <= t))
                    else {
                        break Step::Done;
                    };
                    if budget == 0 {
                        break Step::Exhausted;
                    }
                    budget -= 1;
                    *after = SetPosition::After(candidate.clone());
                    if self.filter.matches(&candidate.0) {
                        *lent = true;
                        let SetPosition::After(b) = &*after else {
                            unreachable!("just set")
                        };
                        break Step::Item(&b.0);
                    }
                }
            }
        };
        if let Step::Item(_) = found {
            self.remaining -= 1;
        }
        found
    }

    /// Lends the next items to `f` in order while it returns true; true when the items ran
    /// out, false when `f` stopped (the item it stopped at has been consumed and stays
    /// [`current`](Self::current)).
    ///
    /// The same as calling [`next_item`](Self::next_item) in a loop, but walking a key range
    /// leaf by leaf rather than looking each position up from the root: what an encoder that
    /// copies many items in a row wants.
    pub fn lend_while(&mut self, mut f: impl FnMut(&Arc<ObjectVersion>) -> bool) -> bool {
        let Cursor::Range { next, end, current } = &mut self.cursor else {
            while let Some(o) = self.next_item() {
                if !f(o) {
                    return false;
                }
            }
            return true;
        };
        *current = None;
        let mut focus = self.snapshot.items.focus();
        while *next < *end {
            let (leaf_range, leaf) = focus.chunk_at(*next);
            let upto = leaf_range.end.min(*end);
            for object in &leaf[*next - leaf_range.start..upto - leaf_range.start] {
                let i = *next;
                *next += 1;
                if !self.filter.matches(object) {
                    continue;
                }
                self.remaining -= 1;
                *current = Some(i);
                if !f(object) {
                    return false;
                }
            }
        }
        *current = None;
        true
    }

    /// The item [`next_item`](Self::next_item) (or [`lend_while`](Self::lend_while)) lent
    /// last, lent again (`None` before the first item and after the last). An encoder that
    /// stops inside an item picks it up here rather than holding a reference count on it.
    pub fn current(&self) -> Option<&Arc<ObjectVersion>> {
        match &self.cursor {
            Cursor::Range { current, .. } => current.and_then(|i| self.snapshot.at(i)),
            Cursor::Set {
                after: SetPosition::After(b),
                lent: true,
                ..
            } => Some(&b.0),
            Cursor::Set { .. } => None,
        }
    }
}

impl Iterator for ListItems {
    type Item = Arc<ObjectVersion>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_item().cloned()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for ListItems {}

/// Objects and snapshots the tests of this module and of `page` share.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;

    pub(crate) fn obj(ns: &str, name: &str, rev: u64) -> Arc<ObjectVersion> {
        Arc::new(ObjectVersion::builder(ObjectKey::new(ns, name), Revision::new(rev)).build())
    }

    /// An object with `spec.nodeName` set to `node`.
    pub(crate) fn on_node(ns: &str, name: &str, node: &str, rev: u64) -> Arc<ObjectVersion> {
        Arc::new(
            ObjectVersion::builder(ObjectKey::new(ns, name), Revision::new(rev))
                .field("spec.nodeName", node)
                .build(),
        )
    }

    /// `a/1`, `b/1`, `b/2`, `b/3`, `c/1` at revision 1.
    pub(crate) fn three_namespaces() -> Snapshot {
        let names = [("a", "1"), ("b", "1"), ("b", "2"), ("b", "3"), ("c", "1")];
        Snapshot::new(
            Revision::new(1),
            names.iter().map(|(ns, n)| obj(ns, n, 1)).collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{obj, on_node, three_namespaces};
    use super::*;

    fn keys(s: &Snapshot) -> Vec<String> {
        s.iter().map(|o| o.key().to_string()).collect()
    }

    /// Encodes an object as its name repeated `revision` times, counting its calls.
    struct Repeat(std::sync::atomic::AtomicUsize);

    impl Codec for Repeat {
        fn decode(&self, _: &[u8], _: Revision) -> Result<ObjectVersion, CodecError> {
            Err(CodecError::Decode("encode only".into()))
        }

        fn encode(&self, o: &ObjectVersion, _: WireFormat) -> Result<crate::Encoding, CodecError> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let text = o.key().name().repeat(o.revision().get() as usize);
            Ok(crate::Encoding::new(bytes::Bytes::from(text)))
        }
    }

    #[test]
    fn encoded_sizes_come_from_the_snapshot_for_unnarrowed_ranges_only() {
        let s = Arc::new(Snapshot::new(
            Revision::new(5),
            vec![
                obj("a", "xx", 1),
                obj("b", "y", 2),
                obj("b", "zzz", 3),
                obj("c", "w", 4),
            ],
        ));
        let codec = Repeat(Default::default());
        let pb = WireFormat::Protobuf;
        // A quarter of a snapshot not measured yet: walked, and nothing is made.
        let quarter = ListItems::new(s.clone(), 2..3, Filter::everything().in_namespace("b"), 1);
        assert_eq!(quarter.sum_encoded(pb, &codec, |n| n).unwrap(), None);
        assert_eq!(codec.0.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert_eq!(s.encoded_lens(pb, &codec).unwrap(), [2, 2, 9, 4]);
        // Once measured, it is read from the snapshot.
        assert_eq!(quarter.sum_encoded(pb, &codec, |n| n).unwrap(), Some(9));
        assert_eq!(s.encoded_lens(pb, &codec).unwrap(), [2, 2, 9, 4]);
        assert_eq!(
            codec.0.load(std::sync::atomic::Ordering::Relaxed),
            4,
            "once per item"
        );
        let plus_one = |n: usize| n + 1;
        let all = ListItems::all(s.clone());
        assert_eq!(all.sum_encoded(pb, &codec, plus_one).unwrap(), Some(21));
        // A namespace's range.
        let b = Filter::everything().in_namespace("b");
        let span = s.range_of(Some("b"));
        let n = span.len();
        assert_eq!(
            ListItems::new(s.clone(), span, b.clone(), n)
                .sum_encoded(pb, &codec, plus_one)
                .unwrap(),
            Some(13)
        );
        // A namespace filter over a wider range narrows it: walk.
        assert_eq!(
            ListItems::new(s.clone(), 0..4, b, 4)
                .sum_encoded(pb, &codec, plus_one)
                .unwrap(),
            None
        );
        // A label selector narrows: walk.
        let labelled = Filter::parse(None, "app=web", "").unwrap();
        assert_eq!(
            ListItems::new(s.clone(), 0..4, labelled, 0)
                .sum_encoded(pb, &codec, plus_one)
                .unwrap(),
            None
        );
        // Part-way through, or from an index set: walk.
        let mut started = ListItems::all(s.clone());
        started.next_item();
        assert_eq!(started.sum_encoded(pb, &codec, plus_one).unwrap(), Some(18));
        // A new snapshot measures again.
        let s2 = s.apply(&Event::Added {
            object: obj("a", "v", 6),
        });
        assert_eq!(s2.encoded_lens(pb, &codec).unwrap(), [6, 2, 2, 9, 4]);
    }

    #[test]
    fn a_snapshot_is_sorted_and_applying_events_leaves_the_old_one_unchanged() {
        let s0 = Snapshot::new(
            Revision::new(3),
            vec![obj("b", "x", 1), obj("a", "y", 2), obj("a", "x", 3)],
        );
        assert_eq!(keys(&s0), vec!["a/x", "a/y", "b/x"]);
        let s1 = s0.apply(&Event::Added {
            object: obj("a", "z", 4),
        });
        let s2 = s1.apply(&Event::Modified {
            object: obj("a", "x", 5),
            prev: obj("a", "x", 3),
        });
        let s3 = s2.apply(&Event::Deleted {
            revision: Revision::new(6),
            prev: obj("a", "y", 2),
        });
        let s4 = s3.apply(&Event::Bookmark {
            revision: Revision::new(9),
        });
        assert_eq!(keys(&s0), vec!["a/x", "a/y", "b/x"]);
        assert_eq!(keys(&s3), vec!["a/x", "a/z", "b/x"]);
        assert_eq!(
            s2.get(&ObjectKey::new("a", "x")).unwrap().revision(),
            Revision::new(5)
        );
        assert_eq!(
            s1.get(&ObjectKey::new("a", "x")).unwrap().revision(),
            Revision::new(3)
        );
        assert_eq!(
            (s3.revision(), s4.revision(), s4.len()),
            (Revision::new(6), Revision::new(9), 3)
        );
    }

    #[test]
    fn duplicate_keys_keep_the_last_given() {
        let s = Snapshot::new(Revision::new(1), vec![obj("a", "x", 1), obj("a", "x", 2)]);
        assert_eq!(s.len(), 1);
        assert_eq!(s.iter().next().unwrap().revision(), Revision::new(2));
    }

    #[test]
    fn namespace_ranges() {
        let s = three_namespaces();
        assert_eq!(s.range_of(Some("b")), 1..4);
        assert_eq!(s.range_of(Some("bb")), 4..4);
        assert_eq!(s.range_of(None), 0..5);
        // Namespaces that are prefixes of each other: "a-b/…" sorts between nothing and "a/…".
        let s = Snapshot::new(
            Revision::new(1),
            vec![
                obj("a", "1", 1),
                obj("a-b", "1", 1),
                obj("a", "2", 1),
                obj("a0", "1", 1),
            ],
        );
        let keys: Vec<String> = s.iter().map(|o| o.key().to_string()).collect();
        assert_eq!(keys, ["a-b/1", "a/1", "a/2", "a0/1"]);
        assert_eq!(s.range_of(Some("a")), 1..3);
        assert_eq!(s.range_of(Some("a-b")), 0..1);
        assert_eq!(s.range_of(Some("a0")), 3..4);
        assert_eq!(s.range_of(Some("a-")), 0..0);
    }

    #[test]
    fn current_lends_the_last_item_again_and_nothing_outside_the_items() {
        let s = Arc::new(Snapshot::new(
            Revision::new(3),
            vec![obj("a", "1", 1), obj("b", "2", 2), obj("a", "3", 3)],
        ));
        let key = |o: Option<&Arc<ObjectVersion>>| o.map(|o| o.key().to_string());
        let mut items = ListItems::new(s.clone(), 0..3, Filter::everything().in_namespace("a"), 2);
        assert_eq!(key(items.current()), None);
        assert_eq!(key(items.next_item()), Some("a/1".into()));
        assert_eq!(key(items.current()), Some("a/1".into()));
        // The filtered-out item in between is never current.
        assert_eq!(key(items.next_item()), Some("a/3".into()));
        assert_eq!(key(items.current()), Some("a/3".into()));
        assert_eq!(key(items.next_item()), None);
        assert_eq!(key(items.current()), None);
    }

    fn planned(s: &Snapshot, filter: &Filter) -> Vec<String> {
        match s.plan(filter) {
            Plan::Range(r) => r.map(|i| s.at(i).unwrap().key().to_string()).collect(),
            Plan::Set(set) => set.iter().map(|o| o.0.key().to_string()).collect(),
        }
    }

    #[test]
    fn a_plan_looks_only_at_the_objects_the_index_or_the_name_selects() {
        // 3 namespaces × 100 pods over 10 nodes.
        let pods: Vec<_> = (0..300u64)
            .map(|i| {
                on_node(
                    &format!("ns{}", i % 3),
                    &format!("p{:03}", i / 3),
                    &format!("n{}", i % 10),
                    i + 1,
                )
            })
            .collect();
        let s0 = Snapshot::new(Revision::new(300), pods).with_index("spec.nodeName");
        let node = |n: &str| Filter::parse(None, "", &format!("spec.nodeName={n}")).unwrap();
        assert_eq!(
            planned(&s0, &node("n3")).len(),
            30,
            "one node's pods, not all 300"
        );
        assert!(planned(&s0, &node("nope")).is_empty());
        let name = Filter::parse(None, "", "metadata.name=p007").unwrap();
        assert_eq!(planned(&s0, &name), ["ns0/p007", "ns1/p007", "ns2/p007"]);
        let one = Filter::parse(Some("ns1"), "", "metadata.name=p007").unwrap();
        assert_eq!(planned(&s0, &one), ["ns1/p007"]);
        let absent = Filter::parse(Some("ns1"), "", "metadata.name=zzz").unwrap();
        assert!(planned(&s0, &absent).is_empty());
        assert_eq!(planned(&s0, &Filter::everything().in_namespace("ns2")).len(), 100);

        // The index follows every change; the old snapshot's is unchanged.
        let moved = s0.apply(&Event::Modified {
            object: on_node("ns0", "p000", "n9", 301),
            prev: s0.get(&ObjectKey::new("ns0", "p000")).unwrap().clone(),
        });
        let gone = moved.apply(&Event::Deleted {
            revision: Revision::new(302),
            prev: moved.get(&ObjectKey::new("ns1", "p000")).unwrap().clone(),
        });
        let added = gone.apply(&Event::Added {
            object: on_node("ns9", "new", "n0", 303),
        });
        let n0 = |s: &Snapshot| planned(s, &node("n0"));
        assert_eq!(n0(&s0).len(), 30);
        assert!(n0(&moved).iter().all(|k| k != "ns0/p000") && n0(&moved).len() == 29);
        assert_eq!(planned(&moved, &node("n9")).len(), 31);
        assert!(planned(&gone, &node("n1")).iter().all(|k| k != "ns1/p000"));
        assert_eq!(n0(&added).last().map(String::as_str), Some("ns9/new"));
        // Every object the plan returns is one the snapshot holds at that revision.
        for s in [&s0, &moved, &gone, &added] {
            for n in ["n0", "n1", "n9"] {
                let want: Vec<String> = s
                    .iter()
                    .filter(|o| o.field("spec.nodeName") == Some(n))
                    .map(|o| o.key().to_string())
                    .collect();
                assert_eq!(planned(s, &node(n)), want, "{n} at {}", s.revision());
            }
        }
    }

    #[test]
    fn lend_while_lends_what_next_item_would_across_leaves() {
        // Enough items for several imbl leaves (64 each), a filter, and a sub-range.
        let objects: Vec<_> = (0..500u64)
            .map(|i| obj(if i % 3 == 0 { "a" } else { "b" }, &format!("{i:04}"), i + 1))
            .collect();
        let s = Arc::new(Snapshot::new(Revision::new(500), objects));
        let range = s.range_of(Some("b"));
        let filter = Filter::everything().in_namespace("b");
        let count = range.len();
        let mut one_by_one = ListItems::new(s.clone(), range.start + 5..range.end - 7, filter.clone(), count);
        let mut expected = Vec::new();
        while let Some(o) = one_by_one.next_item() {
            expected.push(o.key().to_string());
        }
        for stop_every in [1usize, 2, 63, 64, 1000] {
            let mut items = ListItems::new(s.clone(), range.start + 5..range.end - 7, filter.clone(), count);
            let mut lent = Vec::new();
            loop {
                let mut n = 0;
                let done = items.lend_while(|o| {
                    lent.push(o.key().to_string());
                    n += 1;
                    n < stop_every
                });
                if done {
                    assert!(items.current().is_none());
                    break;
                }
                assert_eq!(items.current().map(|o| o.key().to_string()).as_ref(), lent.last());
            }
            assert_eq!(lent, expected, "stopping every {stop_every}");
            assert!(items.next_item().is_none());
        }
    }
}
