//! The consistency check: a digest of (key, mod revision) over the cache's current state
//! against the same digest over the source's state at the same revision, as the apiserver's
//! watch-cache consistency checker compares them.

use std::hash::{DefaultHasher, Hash, Hasher};

use crate::cache::{Cache, CacheError};
use crate::object::ObjectKey;
use crate::rv::Revision;
use crate::source::{Source, parse_storage_key};

/// The result of [`Cache::check_consistency`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Consistency {
    /// The revision both states were read at.
    pub revision: Revision,
    /// The cache's digest.
    pub cache: u64,
    /// The source's digest.
    pub source: u64,
}

impl Consistency {
    /// Whether the digests agree.
    pub fn is_consistent(&self) -> bool {
        self.cache == self.source
    }
}

impl<S: Source> Cache<S> {
    /// Compares the cache's current state with the source's state at the same revision; see
    /// the module docs.
    pub async fn check_consistency(&self) -> Result<Consistency, CacheError> {
        let view = self.ready_view().await?;
        let revision = view.revision;
        let mut cache = DefaultHasher::new();
        for o in view.current().iter() {
            (o.key(), o.revision()).hash(&mut cache);
        }
        let prefix = &self.config().prefix;
        let listed = self
            .source()
            .list(prefix, Some(revision))
            .await
            .map_err(CacheError::Source)?;
        let mut source_items: Vec<(ObjectKey, Revision)> = listed
            .items
            .iter()
            .filter_map(|i| parse_storage_key(prefix, &i.key).map(|k| (k, i.mod_revision)))
            .collect();
        source_items.sort();
        let mut source = DefaultHasher::new();
        for (k, r) in &source_items {
            (k, r).hash(&mut source);
        }
        Ok(Consistency {
            revision,
            cache: cache.finish(),
            source: source.finish(),
        })
    }
}
