//! Pagination: which positions of a snapshot one LIST page covers, how many items it has,
//! and whether another page follows (the key a continue token resumes after).

use crate::filter::Filter;
use crate::object::ObjectKey;
use crate::snapshot::Snapshot;

/// One page of a snapshot: where it ends, how many items it has, and whether more follow.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Page {
    pub(crate) range: std::ops::Range<usize>,
    pub(crate) count: usize,
    /// The key of the last item when another selected item follows it.
    pub(crate) more_after: Option<ObjectKey>,
    /// Positions after the page in the scanned range (all of them count as remaining items
    /// only when the filter selects everything in the range).
    pub(crate) rest: usize,
}

/// Finds the page of at most `limit` selected items starting at position `start` within
/// `range`. Scans without collecting; an unlimited page is the whole range.
pub(crate) fn page(
    snapshot: &Snapshot,
    range: std::ops::Range<usize>,
    start: usize,
    limit: Option<usize>,
    filter: &Filter,
    filter_selects_all: bool,
) -> Page {
    let start = start.clamp(range.start, range.end);
    let Some(limit) = limit else {
        let count = if filter_selects_all {
            range.end - start
        } else {
            (start..range.end)
                .filter(|&i| snapshot.at(i).is_some_and(|o| filter.matches(o)))
                .count()
        };
        return Page {
            range: start..range.end,
            count,
            more_after: None,
            rest: 0,
        };
    };
    let mut count = 0;
    let mut i = start;
    while i < range.end && count < limit {
        if filter_selects_all || snapshot.at(i).is_some_and(|o| filter.matches(o)) {
            count += 1;
        }
        i += 1;
    }
    let end = i;
    let more = if filter_selects_all {
        end < range.end
    } else {
        (end..range.end).any(|j| snapshot.at(j).is_some_and(|o| filter.matches(o)))
    };
    let more_after = if more && end > start {
        snapshot.at(end - 1).map(|o| o.key().clone())
    } else {
        None
    };
    Page {
        range: start..end,
        count,
        more_after,
        rest: range.end - end,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::snapshot::ListItems;
    use crate::snapshot::fixtures::three_namespaces;

    #[test]
    fn pages_stop_at_the_limit_and_say_whether_more_follow() {
        let s = three_namespaces();
        let all = Filter::everything();
        let p = page(&s, 1..4, 1, Some(2), &all, true);
        assert_eq!(
            p,
            Page {
                range: 1..3,
                count: 2,
                more_after: Some(ObjectKey::new("b", "2")),
                rest: 1
            }
        );
        let p = page(&s, 1..4, 3, Some(2), &all, true);
        assert_eq!(
            p,
            Page {
                range: 3..4,
                count: 1,
                more_after: None,
                rest: 0
            }
        );
        // A filter: only "1"s. From the start, one selected item, and another (c/1) after it.
        let ones = Filter::parse(None, "", "metadata.name=1").unwrap();
        let p = page(&s, 0..5, 0, Some(1), &ones, false);
        assert_eq!(
            (p.range, p.count, p.more_after),
            (0..1, 1, Some(ObjectKey::new("a", "1")))
        );
        let p = page(&s, 0..5, 1, Some(1), &ones, false);
        assert_eq!(
            (p.range, p.count, p.more_after),
            (1..2, 1, Some(ObjectKey::new("b", "1")))
        );
        let p = page(&s, 0..5, 2, Some(5), &ones, false);
        assert_eq!((p.range, p.count, p.more_after), (2..5, 1, None));
        let mut items = ListItems::new(Arc::new(s), 2..5, ones, 1);
        assert_eq!(
            items.next_item().map(|o| o.key().to_string()),
            Some("c/1".to_string())
        );
        assert!(items.next_item().is_none());
    }
}
