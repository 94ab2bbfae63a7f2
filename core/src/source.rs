//! The source of truth a cache follows: an etcd-like store of keys and values under one
//! global revision. [`MemorySource`](memory::MemorySource) is the embedded implementation;
//! the etcd one lives in its own crate.
//!
//! Keys are strings `PREFIX + namespace + "/" + name` for namespaced objects and
//! `PREFIX + name` for cluster-scoped ones, the layout of the apiserver's
//! `/registry/<resource>/…` keys; [`ObjectKey::to_source_key`] and
//! [`ObjectKey::from_source_key`] convert.

pub mod memory;

use std::fmt;
use std::future::Future;

use bytes::Bytes;
use futures_core::Stream;

use crate::object::ObjectKey;
use crate::rv::Revision;

/// One key and value as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceItem {
    /// The full key.
    pub key: String,
    /// The value as stored.
    pub value: Bytes,
    /// The revision of the write that produced this value.
    pub mod_revision: Revision,
}

/// A list of a prefix and the revision it was read at.
#[derive(Clone, Debug, Default)]
pub struct SourceList {
    /// The items in key order.
    pub items: Vec<SourceItem>,
    /// The revision the list was read at.
    pub revision: Revision,
}

/// A change seen on a watch, or a progress notification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceEvent {
    /// A key was created or updated.
    Put {
        /// The full key.
        key: String,
        /// The new value.
        value: Bytes,
        /// The revision of the write.
        mod_revision: Revision,
        /// The previous value, where the source knows it.
        prev: Option<Bytes>,
    },
    /// A key was deleted.
    Delete {
        /// The full key.
        key: String,
        /// The revision of the deletion.
        mod_revision: Revision,
        /// The last value, where the source knows it.
        prev: Option<Bytes>,
    },
    /// Nothing under the prefix changed up to `revision` (etcd's progress notify).
    Progress {
        /// The store's revision.
        revision: Revision,
    },
}

/// What a source can fail with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceError {
    /// The requested revision has been compacted away.
    Compacted {
        /// The oldest revision still available.
        compact_revision: Revision,
    },
    /// The source cannot be reached or refused to answer; try again later.
    Unavailable(String),
    /// A create found the key already present.
    AlreadyExists(String),
    /// An update or delete found no such key.
    NotFound(String),
    /// An update or delete expected another mod revision.
    Conflict {
        /// The key.
        key: String,
        /// Its current mod revision.
        current: Revision,
    },
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceError::Compacted { compact_revision } => {
                write!(
                    f,
                    "required revision has been compacted (oldest available {compact_revision})"
                )
            }
            SourceError::Unavailable(m) => write!(f, "source unavailable: {m}"),
            SourceError::AlreadyExists(k) => write!(f, "key {k:?} already exists"),
            SourceError::NotFound(k) => write!(f, "key {k:?} not found"),
            SourceError::Conflict { key, current } => {
                write!(f, "key {key:?} was modified: its current revision is {current}")
            }
        }
    }
}

impl std::error::Error for SourceError {}

/// The store a cache follows. One cache lists and watches one prefix.
pub trait Source: Send + Sync + 'static {
    /// The stream a watch returns. It ends, or yields an error, when the watch breaks.
    type Watch: Stream<Item = Result<SourceEvent, SourceError>> + Send + Unpin + 'static;

    /// Lists every key under `prefix`, at `at` or at the current revision.
    fn list(
        &self,
        prefix: &str,
        at: Option<Revision>,
    ) -> impl Future<Output = Result<SourceList, SourceError>> + Send;

    /// Watches `prefix` from revision `from` inclusive (etcd's start revision), with
    /// progress notifications.
    fn watch(
        &self,
        prefix: &str,
        from: Revision,
    ) -> impl Future<Output = Result<Self::Watch, SourceError>> + Send;

    /// The store's current revision (for consistent reads).
    fn current_revision(&self) -> impl Future<Output = Result<Revision, SourceError>> + Send;

    /// Asks every open watch for a progress notification at the current revision, so that a
    /// cache of a quiet prefix learns it is up to date without waiting for a write.
    fn request_progress(&self) -> impl Future<Output = Result<(), SourceError>> + Send;
}

impl ObjectKey {
    /// The source key of this object under `prefix`.
    pub fn to_source_key(&self, prefix: &str) -> String {
        if self.namespace().is_empty() {
            format!("{prefix}{}", self.name())
        } else {
            format!("{prefix}{}/{}", self.namespace(), self.name())
        }
    }

    /// The object key of a source key under `prefix`, if it has the expected shape.
    pub fn from_source_key(prefix: &str, key: &str) -> Option<ObjectKey> {
        let rest = key.strip_prefix(prefix)?;
        let key = match rest.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                ObjectKey::new(ns, name)
            }
            None if !rest.is_empty() => ObjectKey::cluster(rest),
            _ => return None,
        };
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_keys_round_trip_and_malformed_ones_are_refused() {
        for key in [ObjectKey::new("ns", "a"), ObjectKey::cluster("node-1")] {
            let s = key.to_source_key("pods/");
            assert_eq!(ObjectKey::from_source_key("pods/", &s), Some(key));
        }
        assert_eq!(
            ObjectKey::new("ns", "a").to_source_key("/registry/pods/"),
            "/registry/pods/ns/a"
        );
        for bad in ["pods/", "pods//a", "pods/ns/", "pods/a/b/c", "other/ns/a"] {
            assert_eq!(ObjectKey::from_source_key("pods/", bad), None, "{bad:?}");
        }
    }
}
