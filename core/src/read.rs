//! The read path: GET and LIST from the cache's snapshots, with the apiserver's
//! resourceVersion, `resourceVersionMatch`, `limit` and `continue` rules (the table in
//! [`cache`](crate::cache)). A LIST result holds its snapshot and a range of it, never a copy
//! of the items.

use std::sync::Arc;

use crate::cache::{Cache, CacheError, Corrupt};
use crate::filter::Filter;
use crate::object::{ObjectKey, ObjectVersion};
use crate::page::page;
use crate::rv::Revision;
use crate::snapshot::ListItems;
use crate::source::Source;

/// How a LIST's resourceVersion is matched.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ResourceVersionMatch {
    /// Any state at least as new as the requested revision (the default).
    NotOlderThan,
    /// The state at exactly the requested revision.
    Exact,
}

/// A LIST request.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// `resourceVersion`: `None` for a consistent read, `Some(ZERO)` for any state.
    pub resource_version: Option<Revision>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<ResourceVersionMatch>,
    /// `limit`: at most this many items; `None` or 0 for all.
    pub limit: Option<usize>,
    /// `continue`: a token from a previous page.
    pub continue_token: Option<String>,
    /// Namespace and selectors.
    pub filter: Filter,
}

/// A LIST answer: the revision, the page's items (shared, lent one at a time) and how to
/// continue.
#[derive(Debug)]
pub struct ListResult {
    /// The revision the list is a state at (`metadata.resourceVersion`).
    pub revision: Revision,
    /// The token for the next page, if more items follow (`metadata.continue`).
    pub continue_token: Option<String>,
    /// How many items follow this page, when known (`metadata.remainingItemCount`): set only
    /// with a continue token and no label or field selector, as the apiserver does.
    pub remaining_item_count: Option<u64>,
    /// The items, in key order.
    pub items: ListItems,
}

impl ResourceVersionMatch {
    /// The wire name: `NotOlderThan` or `Exact`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceVersionMatch::NotOlderThan => "NotOlderThan",
            ResourceVersionMatch::Exact => "Exact",
        }
    }
}

impl<S: Source> Cache<S> {
    /// GET: the object at `key` and the revision it was read at. `resource_version` as for
    /// LIST with NotOlderThan.
    pub async fn get(
        &self,
        key: &ObjectKey,
        resource_version: Option<Revision>,
    ) -> Result<(Option<Arc<ObjectVersion>>, Revision), CacheError> {
        let (object, revision) = self.get_any(key, resource_version).await?;
        // A corrupt object is not served as absent, nor as what it was: the read fails.
        if let Some(corrupt) = object.as_deref().and_then(Corrupt::of) {
            return Err(CacheError::CorruptObject(corrupt));
        }
        Ok((object, revision))
    }

    /// GET, corrupt objects included.
    async fn get_any(
        &self,
        key: &ObjectKey,
        resource_version: Option<Revision>,
    ) -> Result<(Option<Arc<ObjectVersion>>, Revision), CacheError> {
        let needed = match resource_version {
            Some(Revision::ZERO) => {
                let view = self.ready_view().await?;
                return Ok((view.current().get(key).cloned(), view.revision));
            }
            Some(n) => n,
            None => {
                self.ready_view().await?;
                self.current_revision().await?
            }
        };
        match self.fresh_view(needed).await {
            Ok(view) => Ok((view.current().get(key).cloned(), view.revision)),
            // The cache did not reach the revision in time: read the one key from the source
            // (see `Cache::basis_for`).
            Err(CacheError::TooLargeResourceVersion { requested, .. }) => {
                let (object, revision) = self.source_get(key).await?;
                if revision < requested {
                    return Err(CacheError::TooLargeResourceVersion {
                        requested,
                        current: revision,
                    });
                }
                Ok((object, revision))
            }
            Err(e) => Err(e),
        }
    }

    /// LIST; see the module docs for the resourceVersion rules.
    pub async fn list(&self, opts: &ListOptions) -> Result<ListResult, CacheError> {
        let invalid = |m: &str| Err(CacheError::InvalidRequest(m.to_owned()));
        let rv = opts.resource_version;
        if opts.continue_token.is_some() {
            if rv.is_some_and(|r| r != Revision::ZERO) {
                return invalid("specifying resource version is not allowed when using continue");
            }
            if opts.resource_version_match.is_some() {
                return invalid("resourceVersionMatch is forbidden when continue is provided");
            }
        }
        match (opts.resource_version_match, rv) {
            (Some(m), None) => {
                return invalid(&format!(
                    "resourceVersionMatch={} is forbidden unless resourceVersion is provided",
                    m.as_str()
                ));
            }
            (Some(ResourceVersionMatch::Exact), Some(Revision::ZERO)) => {
                return invalid("resourceVersionMatch=Exact is forbidden for resourceVersion \"0\"");
            }
            _ => {}
        }
        opts.filter.check_fields(&self.config().fields)?;

        let (basis, start_after) = match &opts.continue_token {
            Some(token) => {
                self.ready_view().await?;
                let c = self
                    .tokens()?
                    .decode(token)
                    .map_err(CacheError::InvalidContinue)?;
                // A genuine token (from this replica or another over the same store) whose
                // state is gone: 410, so that pagers list afresh.
                let basis = self.snapshot_at(c.revision).await.map_err(|e| match e {
                    CacheError::Expired(e) => CacheError::ContinueExpired(e),
                    e => e,
                })?;
                (basis, Some(c.after))
            }
            None => {
                // A revision with a limit and no match is Exact too (the API concepts table):
                // the pages of a paginated list are all read at that revision.
                let exact = match (opts.resource_version_match, rv) {
                    (Some(ResourceVersionMatch::Exact), Some(n)) => Some(n),
                    (None, Some(n)) if n != Revision::ZERO && opts.limit.is_some_and(|l| l > 0) => Some(n),
                    _ => None,
                };
                match exact {
                    Some(n) => (self.snapshot_at(n).await?, None),
                    None => (self.basis_for(rv).await?, None),
                }
            }
        };
        let (snapshot, revision) = (basis.snapshot, basis.revision);
        let filter = &opts.filter;
        Corrupt::in_scope(&snapshot, filter)?;
        let selects_all = filter.selects_all_in_namespace();
        let limit = opts.limit.filter(|&l| l > 0);
        let plan = snapshot.plan(filter);
        let page = page(&snapshot, plan, start_after.as_ref(), limit, filter, selects_all);
        let continue_token = match &page.more_after {
            Some(k) => {
                // The next pages read this snapshot: pinned while they are asked for. Not one
                // the source gave, which shares nothing with the cache's (a whole copy of the
                // resource each): its next pages read the source again.
                if !basis.from_source {
                    self.pin(revision, &snapshot);
                }
                Some(self.tokens()?.encode(revision, k))
            }
            None => None,
        };
        let remaining_item_count = (continue_token.is_some() && selects_all).then_some(page.rest as u64);
        Ok(ListResult {
            revision,
            continue_token,
            remaining_item_count,
            items: ListItems::from_span(snapshot, page.span, filter.clone(), page.count),
        })
    }
}
