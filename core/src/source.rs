//! The source of truth a cache follows: an etcd-like store of keys and values under one
//! global revision, behind the [`Source`] trait. Core knows nothing of etcd itself: an etcd
//! source implements the trait outside it.
//!
//! This module holds the trait and what crosses it. How object keys map onto storage keys is
//! the private `keys` module ([`storage_key`], [`parse_storage_key`]); the embedded store is
//! [`memory`].

mod keys;
pub mod memory;

pub use keys::{parse_storage_key, storage_key};

use std::fmt;
use std::future::Future;

use bytes::Bytes;
use futures_core::Stream;

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

/// A key's value before a change, and the revision of the write that produced it: what a
/// watch with previous values (etcd's `prev_kv`) sends along with each change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrevValue {
    /// The value as stored.
    pub value: Bytes,
    /// The revision of the write that produced it.
    pub mod_revision: Revision,
}

/// One key's change within a revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceChange {
    /// The key was created or updated.
    Put {
        /// The full key.
        key: String,
        /// The new value.
        value: Bytes,
        /// The previous value, where the source knows it (`None` for a key just created).
        prev: Option<PrevValue>,
        /// Whether this put created the key (on etcd, the key's version is 1). A put that did
        /// not, with no `prev`, is one whose previous value the source could no longer read
        /// (etcd leaves it out when the revision before was compacted meanwhile): a catch-up
        /// cannot tell its watchers what changed, and ends with 410.
        created: bool,
    },
    /// The key was deleted.
    Delete {
        /// The full key.
        key: String,
        /// The last value, where the source knows it.
        prev: Option<PrevValue>,
    },
}

impl SourceChange {
    /// The full key.
    pub fn key(&self) -> &str {
        match self {
            SourceChange::Put { key, .. } | SourceChange::Delete { key, .. } => key,
        }
    }

    /// The bytes of the key and values it carries (the previous value's too): what holding it
    /// costs, for bounds counted in bytes.
    pub fn bytes(&self) -> usize {
        match self {
            SourceChange::Put { key, value, prev, .. } => {
                key.len() + value.len() + prev.as_ref().map_or(0, |p| p.value.len())
            }
            SourceChange::Delete { key, prev } => key.len() + prev.as_ref().map_or(0, |p| p.value.len()),
        }
    }
}

/// What a watch yields: every change of one revision, or a progress notification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceEvent {
    /// Every change one write made under the watched prefix, all at `revision`. etcd gives
    /// one mod revision to every key one request changes (a prefix delete, a transaction, a
    /// lease's expiry or revocation): a revision is the unit of change, and a watch yields all
    /// of it at once, never split, so that the cache publishes it whole.
    Changes {
        /// The revision of the write.
        revision: Revision,
        /// The keys it changed, in the order the source reports them (each key once).
        changes: Vec<SourceChange>,
    },
    /// Nothing under the prefix changed up to `revision` (etcd's progress notify).
    Progress {
        /// The store's revision.
        revision: Revision,
    },
}

impl SourceEvent {
    /// One change alone at `revision`.
    pub fn single(revision: Revision, change: SourceChange) -> SourceEvent {
        SourceEvent::Changes {
            revision,
            changes: vec![change],
        }
    }

    /// The revision the event reports.
    pub fn revision(&self) -> Revision {
        match self {
            SourceEvent::Changes { revision, .. } | SourceEvent::Progress { revision } => *revision,
        }
    }
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

    /// Watches `prefix` from revision `from` for a catch-up: a read of old history, taken at
    /// its consumer's pace, which may be slow or stop for a while. By default
    /// [`watch`](Source::watch). A source whose watches share a transport should keep these
    /// off the one the caches' own watches use (a stalled reader must not hold it), and bound
    /// in bytes what it keeps for a reader that does not keep up.
    fn watch_history(
        &self,
        prefix: &str,
        from: Revision,
    ) -> impl Future<Output = Result<Self::Watch, SourceError>> + Send {
        self.watch(prefix, from)
    }

    /// The store's current revision (for consistent reads).
    fn current_revision(&self) -> impl Future<Output = Result<Revision, SourceError>> + Send;

    /// Asks the watch of `prefix` for a progress notification at the current revision, so
    /// that a cache of a quiet prefix learns it is up to date without waiting for a write. The
    /// notification must come in order with the watch's events: a cache that waited for it
    /// has seen every change up to it. (etcd before 3.4.31 and 3.5.13 answers a request out
    /// of band, ahead of events; `EtcdSource` writes a fence key its watch covers instead.)
    fn request_progress(&self, prefix: &str) -> impl Future<Output = Result<(), SourceError>> + Send;

    /// Whether [`request_progress`](Source::request_progress) brings an ordered notification.
    /// A source that cannot promise it must not yield requested notifications at all, and
    /// says false here: the cache then serves a consistent read it has not reached at once
    /// from the source itself, with [`list`] or [`read`] at the revision it needs, rather
    /// than wait for a notification that never comes.
    ///
    /// [`list`]: Source::list
    /// [`read`]: Source::read
    fn progress_requests_are_ordered(&self) -> bool {
        true
    }

    /// The newest revision the source is known to have compacted: reads at revisions below it
    /// fail with [`SourceError::Compacted`]. A hint (0 when unknown); the cache refuses LISTs
    /// and continue tokens below it with 410, as the apiserver does.
    fn compacted_revision(&self) -> Revision {
        Revision::ZERO
    }

    /// One key at the current revision, and that revision (a consistent GET the cache has not
    /// reached). By default a list of the key as a prefix, keeping the exact key.
    fn read(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<(Option<SourceItem>, Revision), SourceError>> + Send {
        async move {
            let list = self.list(key, None).await?;
            let item = list.items.into_iter().find(|i| i.key == key);
            Ok((item, list.revision))
        }
    }

    /// The store's secret for signing continue tokens: created once and kept with the data,
    /// so that every cache over the store (a restarted server, another replica) verifies the
    /// tokens any of them minted.
    fn signing_key(&self) -> impl Future<Output = Result<[u8; 16], SourceError>> + Send;
}
