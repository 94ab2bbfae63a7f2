//! Pagination: which part of a snapshot's read plan one LIST page covers, how many items it
//! has, and whether another page follows (the key a continue token resumes after).

use std::ops::Bound;

use crate::filter::Filter;
use crate::object::ObjectKey;
use crate::snapshot::{Plan, Snapshot, Span};

/// One page of a snapshot: what it covers, how many items it has, and whether more follow.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Page {
    pub(crate) span: Span,
    pub(crate) count: usize,
    /// The key of the last item when another selected item follows it.
    pub(crate) more_after: Option<ObjectKey>,
    /// Positions after the page in the scanned range (all of them count as remaining items
    /// only when the filter selects everything in the range).
    pub(crate) rest: usize,
}

/// Finds the page of at most `limit` selected items of `plan` after the key `after` (from
/// the start when `None`). Looks only at the plan's candidates, without collecting them; an
/// unlimited page is the rest of the plan.
pub(crate) fn page(
    snapshot: &Snapshot,
    plan: Plan,
    after: Option<&ObjectKey>,
    limit: Option<usize>,
    filter: &Filter,
    filter_selects_all: bool,
) -> Page {
    match plan {
        Plan::Range(range) => {
            let start = after.map_or(range.start, |k| match snapshot.position(k) {
                Ok(i) => i + 1,
                Err(i) => i,
            });
            range_page(snapshot, range, start, limit, filter, filter_selects_all)
        }
        Plan::Set(set) => {
            let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
            let mut candidates = set
                .range::<_, ObjectKey>((lower, Bound::Unbounded))
                .filter(|o| filter.matches(&o.0));
            let mut count = 0;
            let mut through = None;
            while limit.is_none_or(|l| count < l) {
                let Some(o) = candidates.next() else { break };
                count += 1;
                through = Some(o);
            }
            let more = limit.is_some() && candidates.next().is_some();
            let through = through.map(|o| o.0.key().clone());
            Page {
                span: Span::Set {
                    set: set.clone(),
                    after: after.cloned(),
                    through: through.clone().filter(|_| limit.is_some()),
                },
                count,
                more_after: through.filter(|_| more),
                rest: 0,
            }
        }
    }
}

/// [`page`] over positions `start..range.end`.
fn range_page(
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
            span: Span::Range(start..range.end),
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
        span: Span::Range(start..end),
        count,
        more_after,
        rest: range.end - end,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::rv::Revision;
    use crate::snapshot::fixtures::{on_node, three_namespaces};
    use crate::snapshot::{ListItems, Step};

    #[test]
    fn pages_stop_at_the_limit_and_say_whether_more_follow() {
        let s = three_namespaces();
        let all = Filter::everything();
        let p = range_page(&s, 1..4, 1, Some(2), &all, true);
        assert_eq!(
            p,
            Page {
                span: Span::Range(1..3),
                count: 2,
                more_after: Some(ObjectKey::new("b", "2")),
                rest: 1
            }
        );
        let p = range_page(&s, 1..4, 3, Some(2), &all, true);
        assert_eq!(
            p,
            Page {
                span: Span::Range(3..4),
                count: 1,
                more_after: None,
                rest: 0
            }
        );
        // A filter: only "1"s. From the start, one selected item, and another (c/1) after it.
        let ones = Filter::parse(None, "", "metadata.name=1").unwrap();
        let p = range_page(&s, 0..5, 0, Some(1), &ones, false);
        assert_eq!(
            (p.span, p.count, p.more_after),
            (Span::Range(0..1), 1, Some(ObjectKey::new("a", "1")))
        );
        let p = range_page(&s, 0..5, 1, Some(1), &ones, false);
        assert_eq!(
            (p.span, p.count, p.more_after),
            (Span::Range(1..2), 1, Some(ObjectKey::new("b", "1")))
        );
        let p = range_page(&s, 0..5, 2, Some(5), &ones, false);
        assert_eq!((p.span, p.count, p.more_after), (Span::Range(2..5), 1, None));
        let mut items = ListItems::new(Arc::new(s), 2..5, ones, 1);
        assert_eq!(
            items.next_item().map(|o| o.key().to_string()),
            Some("c/1".to_string())
        );
        assert!(items.next_item().is_none());
    }

    #[test]
    fn set_spans_page_resume_after_a_key_and_lend_their_items() {
        let pods: Vec<_> = (0..50u64)
            .map(|i| {
                on_node(
                    "ns",
                    &format!("p{i:02}"),
                    if i % 2 == 0 { "even" } else { "odd" },
                    i + 1,
                )
            })
            .collect();
        let s = Arc::new(Snapshot::new(Revision::new(50), pods).with_index("spec.nodeName"));
        let even = Filter::parse(None, "", "spec.nodeName=even").unwrap();
        let mut after = None;
        let mut seen = Vec::new();
        loop {
            let p = page(&s, s.plan(&even), after.as_ref(), Some(7), &even, false);
            let mut items = ListItems::from_span(s.clone(), p.span, even.clone(), p.count);
            let mut n = 0;
            while let Some(o) = items.next_item() {
                seen.push(o.key().name().to_owned());
                n += 1;
            }
            assert_eq!((n, items.remaining()), (p.count, 0));
            match p.more_after {
                Some(k) => after = Some(k),
                None => break,
            }
        }
        let want: Vec<String> = (0..50).step_by(2).map(|i| format!("p{i:02}")).collect();
        assert_eq!(seen, want);
        // A budget of one candidate per step: each step finds one (every candidate matches).
        let p = page(&s, s.plan(&even), None, None, &even, false);
        let mut items = ListItems::from_span(s.clone(), p.span, even.clone(), p.count);
        assert!(matches!(items.step(1), Step::Item(_)));
        assert!(matches!(items.step(0), Step::Exhausted));
    }
}
