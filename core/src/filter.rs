//! Watch filters: namespace scope plus label and field selectors, and the apiserver's
//! transition rules that turn one published [`Event`] into what one watcher receives.
//!
//! The rules are those of the apiserver's `cacheWatcher.convertToWatchEvent`: for an update,
//! compare whether the old and the new version match; entering the selection is ADDED, leaving
//! it is DELETED (the previous version, at the new revision), staying is MODIFIED, and
//! staying out is nothing.

use crate::event::{Delivery, Event, EventKind};
use crate::object::ObjectVersion;
use crate::selector::{FieldSelector, LabelSelector, SelectorError, SelectorErrorKind};

/// What a watcher selects: a namespace (or all), a label selector and a field selector.
///
/// ```
/// use watchcache_core::Filter;
///
/// let f = Filter::parse(Some("default"), "app=web", "spec.nodeName=node-1")?;
/// assert_eq!(f.namespace(), Some("default"));
/// assert!(Filter::parse(None, "app in web", "").is_err());
/// # Ok::<(), watchcache_core::SelectorError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    namespace: Option<Box<str>>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    /// Selects every object.
    pub fn everything() -> Self {
        Filter::default()
    }

    /// Builds a filter from parsed parts.
    pub fn new(namespace: Option<&str>, labels: LabelSelector, fields: FieldSelector) -> Self {
        Filter {
            namespace: namespace.map(Into::into),
            labels,
            fields,
        }
    }

    /// Parses the selectors' string forms ("" selects everything).
    pub fn parse(namespace: Option<&str>, labels: &str, fields: &str) -> Result<Self, SelectorError> {
        Ok(Filter::new(
            namespace,
            LabelSelector::parse(labels)?,
            FieldSelector::parse(fields)?,
        ))
    }

    /// Restricts the filter to one namespace.
    pub fn in_namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// The namespace this filter is scoped to, if any.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The label selector.
    pub fn labels(&self) -> &LabelSelector {
        &self.labels
    }

    /// The field selector.
    pub fn fields(&self) -> &FieldSelector {
        &self.fields
    }

    /// Checks that every field the selector names is one the resource can be selected by:
    /// `metadata.name`, `metadata.namespace` and the ones `declared`.
    pub fn check_fields<S: AsRef<str>>(&self, declared: &[S]) -> Result<(), SelectorError> {
        for r in self.fields.requirements() {
            let f = r.field();
            let known =
                f == "metadata.name" || f == "metadata.namespace" || declared.iter().any(|d| d.as_ref() == f);
            if !known {
                return Err(SelectorError {
                    selector: f.to_owned(),
                    kind: SelectorErrorKind::UnsupportedField(f.to_owned()),
                });
            }
        }
        Ok(())
    }

    /// Whether `object` is selected. A corrupt object ([`ObjectVersion::corrupt`]) has no
    /// labels or fields that can be read: it is selected by a filter that selects by
    /// namespace and name only (a read of everything in its scope would include it), and by
    /// no filter that selects by a label or another field.
    pub fn matches(&self, object: &ObjectVersion) -> bool {
        let in_scope = self
            .namespace
            .as_deref()
            .is_none_or(|ns| object.key().namespace() == ns);
        if object.is_corrupt() {
            let by_key_only = self.labels.is_everything()
                && self
                    .fields
                    .requirements()
                    .iter()
                    .all(|r| matches!(r.field(), "metadata.name" | "metadata.namespace"));
            return in_scope && by_key_only && self.fields.matches(object);
        }
        in_scope && self.labels.matches(object) && self.fields.matches(object)
    }

    /// The namespace an object must be in to be selected: the scope, or a
    /// `metadata.namespace=` term.
    pub(crate) fn required_namespace(&self) -> Option<&str> {
        self.namespace
            .as_deref()
            .or_else(|| self.fields.equality("metadata.namespace"))
    }

    /// Whether every object in [`required_namespace`](Self::required_namespace) is selected:
    /// no label or field term beyond the namespace scope.
    pub(crate) fn selects_all_in_namespace(&self) -> bool {
        self.labels.is_everything() && self.fields.is_everything()
    }

    /// What this filter's watcher receives for `event`, or `None` when it receives nothing.
    /// Bookmarks pass through; whether a watcher wants them is its own setting.
    pub fn deliver<'a>(&self, event: &'a Event) -> Option<Delivery<'a>> {
        let revision = event.revision();
        let delivery = |kind, object| {
            Some(Delivery {
                kind,
                revision,
                object: Some(object),
                initial_events_end: false,
            })
        };
        match event {
            Event::Added { object } => self
                .matches(object)
                .then_some(())
                .and(delivery(EventKind::Added, object)),
            Event::Deleted { prev, .. } => self
                .matches(prev)
                .then_some(())
                .and(delivery(EventKind::Deleted, prev)),
            // A version that stops decoding is not a deletion: a watcher that selected the
            // one before gets the corrupt object (its encoding fails, and the watch ends with
            // an ERROR naming it), whatever its selectors.
            Event::Modified { object, prev } if object.is_corrupt() => self
                .matches(prev)
                .then_some(())
                .and(delivery(EventKind::Modified, object)),
            Event::Modified { object, prev } => match (self.matches(prev), self.matches(object)) {
                (true, true) => delivery(EventKind::Modified, object),
                (false, true) => delivery(EventKind::Added, object),
                (true, false) => delivery(EventKind::Deleted, prev),
                (false, false) => None,
            },
            Event::Bookmark { .. } => Some(Delivery {
                kind: EventKind::Bookmark,
                revision,
                object: None,
                initial_events_end: false,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::ObjectKey;
    use crate::rv::Revision;
    use std::sync::Arc;

    fn pod(ns: &str, rev: u64, app: &str) -> Arc<ObjectVersion> {
        Arc::new(
            ObjectVersion::builder(ObjectKey::new(ns, "p"), Revision::new(rev))
                .label("app", app)
                .build(),
        )
    }

    fn kind_of(f: &Filter, e: &Event) -> Option<(EventKind, u64, u64)> {
        f.deliver(e).map(|d| {
            (
                d.kind,
                d.revision.get(),
                d.object.map_or(0, |o| o.revision().get()),
            )
        })
    }

    #[test]
    fn updates_moving_into_the_selector_are_added_out_of_it_deleted() {
        let f = Filter::parse(None, "app=web", "").unwrap();
        let (web1, api2, web3, web4) = (
            pod("a", 1, "web"),
            pod("a", 2, "api"),
            pod("a", 3, "web"),
            pod("a", 4, "web"),
        );
        let out = Event::Modified {
            object: api2.clone(),
            prev: web1.clone(),
        };
        // Leaving: DELETED with the previous version, at the new revision.
        assert_eq!(kind_of(&f, &out), Some((EventKind::Deleted, 2, 1)));
        let back = Event::Modified {
            object: web3.clone(),
            prev: api2.clone(),
        };
        assert_eq!(kind_of(&f, &back), Some((EventKind::Added, 3, 3)));
        let stay = Event::Modified {
            object: web4.clone(),
            prev: web3.clone(),
        };
        assert_eq!(kind_of(&f, &stay), Some((EventKind::Modified, 4, 4)));
        let api5 = pod("a", 5, "api");
        let outside = Event::Modified {
            object: api5.clone(),
            prev: api2,
        };
        assert_eq!(kind_of(&f, &outside), None);
        assert_eq!(
            kind_of(&f, &Event::Added { object: web1.clone() }),
            Some((EventKind::Added, 1, 1))
        );
        assert_eq!(kind_of(&f, &Event::Added { object: api5.clone() }), None);
        let del = Event::Deleted {
            revision: Revision::new(9),
            prev: web4,
        };
        assert_eq!(kind_of(&f, &del), Some((EventKind::Deleted, 9, 4)));
        assert_eq!(
            kind_of(
                &f,
                &Event::Deleted {
                    revision: Revision::new(9),
                    prev: api5
                }
            ),
            None
        );
        let bm = Event::Bookmark {
            revision: Revision::new(10),
        };
        assert_eq!(kind_of(&f, &bm), Some((EventKind::Bookmark, 10, 0)));
    }

    #[test]
    fn namespace_scope_and_field_terms_both_restrict() {
        let f = Filter::everything().in_namespace("a");
        assert!(f.matches(&pod("a", 1, "x")));
        assert!(!f.matches(&pod("b", 1, "x")));
        let g = Filter::parse(None, "", "metadata.namespace=b").unwrap();
        assert_eq!(g.required_namespace(), Some("b"));
        assert!(g.matches(&pod("b", 1, "x")));
        assert!(!g.matches(&pod("a", 1, "x")));
    }

    #[test]
    fn selecting_on_an_undeclared_field_is_a_typed_error() {
        let f = Filter::parse(None, "", "spec.nodeName=n1").unwrap();
        assert!(f.check_fields(&["spec.nodeName"]).is_ok());
        let e = f.check_fields::<&str>(&[]).unwrap_err();
        assert_eq!(
            e.kind,
            SelectorErrorKind::UnsupportedField("spec.nodeName".into())
        );
        assert!(
            Filter::parse(None, "", "metadata.name=x")
                .unwrap()
                .check_fields::<&str>(&[])
                .is_ok()
        );
    }
}
