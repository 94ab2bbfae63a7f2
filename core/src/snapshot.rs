//! Snapshots: the state of a resource at one revision, immutable, with structural sharing.
//!
//! A snapshot is a persistent sorted sequence of shared object versions (an RRB vector,
//! `imbl::Vector`): taking one is O(1), applying a change makes a new one in O(log n) that
//! shares everything else with the old, and an item's position is known in O(log n), so a
//! page's `remainingItemCount` is a subtraction rather than a count. The cache keeps one per
//! entry of its history window, as the apiserver's snapshottable watch cache keeps one per
//! revision, and serves LIST at an exact revision and continue tokens from them.
//!
//! [`ListItems`] reads a range of one snapshot through a filter, lending one item at a time:
//! what a LIST page or a watch's initial events hand to an encoder. Which range a page covers
//! is decided in [`page`](crate::page).

use std::cmp::Ordering;

use crate::event::Event;
use crate::filter::Filter;
use crate::object::{ObjectKey, ObjectVersion};
use crate::rv::Revision;
use std::sync::Arc;

/// The state of one resource at one revision: object versions in key order.
#[derive(Clone, Debug)]
pub struct Snapshot {
    revision: Revision,
    items: imbl::Vector<Arc<ObjectVersion>>,
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
        Snapshot {
            revision,
            items: items.into_iter().collect(),
        }
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

    /// The snapshot after `event`, at the event's revision. Bookmarks change only the revision.
    pub fn apply(&self, event: &Event) -> Snapshot {
        let mut items = self.items.clone();
        match event {
            Event::Added { object } | Event::Modified { object, .. } => match self.position(object.key()) {
                Ok(i) => {
                    items.set(i, Arc::clone(object));
                }
                Err(i) => items.insert(i, Arc::clone(object)),
            },
            Event::Deleted { prev, .. } => {
                if let Ok(i) = self.position(prev.key()) {
                    items.remove(i);
                }
            }
            Event::Bookmark { .. } => {}
        }
        Snapshot {
            revision: event.revision(),
            items,
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

/// The items of one LIST page: positions `next..end` of a snapshot that its filter selects.
/// Holds the snapshot (shared), never a copy of the items.
#[derive(Clone, Debug)]
pub struct ListItems {
    snapshot: Arc<Snapshot>,
    next: usize,
    end: usize,
    filter: Filter,
    remaining: usize,
    /// The position of the item `next_item` returned last.
    current: Option<usize>,
}

impl ListItems {
    pub(crate) fn new(
        snapshot: Arc<Snapshot>,
        range: std::ops::Range<usize>,
        filter: Filter,
        count: usize,
    ) -> Self {
        ListItems {
            snapshot,
            next: range.start,
            end: range.end,
            filter,
            remaining: count,
            current: None,
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

    /// The next item, lent: touches no shared reference count.
    pub fn next_item(&mut self) -> Option<&Arc<ObjectVersion>> {
        self.current = None;
        while self.next < self.end {
            let i = self.next;
            self.next += 1;
            if self.snapshot.at(i).is_some_and(|o| self.filter.matches(o)) {
                self.remaining -= 1;
                self.current = Some(i);
                break;
            }
        }
        self.current()
    }

    /// Lends the next items to `f` in order while it returns true; true when the items ran
    /// out, false when `f` stopped (the item it stopped at has been consumed and stays
    /// [`current`](Self::current)).
    ///
    /// The same as calling [`next_item`](Self::next_item) in a loop, but walking the
    /// snapshot leaf by leaf rather than looking each position up from the root: what an
    /// encoder that copies many items in a row wants.
    pub fn lend_while(&mut self, mut f: impl FnMut(&Arc<ObjectVersion>) -> bool) -> bool {
        self.current = None;
        let mut focus = self.snapshot.items.focus();
        while self.next < self.end {
            let (leaf_range, leaf) = focus.chunk_at(self.next);
            let upto = leaf_range.end.min(self.end);
            for object in &leaf[self.next - leaf_range.start..upto - leaf_range.start] {
                let i = self.next;
                self.next += 1;
                if !self.filter.matches(object) {
                    continue;
                }
                self.remaining -= 1;
                self.current = Some(i);
                if !f(object) {
                    return false;
                }
            }
        }
        self.current = None;
        true
    }

    /// The item [`next_item`](Self::next_item) (or [`lend_while`](Self::lend_while)) lent
    /// last, lent again (`None` before the first item and after the last). An encoder that stops inside an item picks it up here
    /// rather than holding a reference count on it.
    pub fn current(&self) -> Option<&Arc<ObjectVersion>> {
        self.current.and_then(|i| self.snapshot.at(i))
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
    use super::fixtures::{obj, three_namespaces};
    use super::*;

    fn keys(s: &Snapshot) -> Vec<String> {
        s.iter().map(|o| o.key().to_string()).collect()
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
