//! [`Backend`]: the store the server's caches follow and its writes go to: the embedded
//! [`MemorySource`], or etcd (`--etcd`, with the `etcd` feature).
//!
//! Keys are laid out as kube-apiserver lays them out in etcd, `/registry/<resource>/…`, on
//! both, so the same data reads the same whichever store holds it. Both have etcd's leases:
//! a key written with a [`Lease`] is deleted with every other key of that lease, at one
//! revision, when it expires (how objects with a TTL, Events, go; `leases.rs` decides which
//! lease a write takes).

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;
use watchcache_core::source::memory::{LeaseId, MemoryWatch};
use watchcache_core::{MemorySource, Revision, Source, SourceError, SourceEvent, SourceItem, SourceList};

/// The store under the caches.
#[derive(Clone, Debug)]
pub enum Backend {
    /// The embedded store (the default).
    Memory(MemorySource),
    /// An etcd cluster.
    #[cfg(feature = "etcd")]
    Etcd(watchcache_etcd::EtcdSource),
}

/// A lease of one store, granted by [`Backend::grant_lease`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Lease {
    /// On the embedded store.
    Memory(LeaseId),
    /// On etcd: etcd's lease id.
    #[cfg(feature = "etcd")]
    Etcd(i64),
}

/// `lease <id>`: how either store names a lease that is gone in [`SourceError::NotFound`].
impl fmt::Display for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lease::Memory(id) => write!(f, "lease {}", id.0),
            #[cfg(feature = "etcd")]
            Lease::Etcd(id) => f.write_str(&watchcache_etcd::lease_name(*id)),
        }
    }
}

impl Lease {
    /// Whether `e` says this lease is gone (expired or revoked): nothing was written.
    pub fn is_gone(&self, e: &SourceError) -> bool {
        matches!(e, SourceError::NotFound(what) if *what == self.to_string())
    }
}

/// Calls the same method on whichever store this is.
macro_rules! each {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            Backend::Memory($s) => $e,
            #[cfg(feature = "etcd")]
            Backend::Etcd($s) => $e,
        }
    };
}

impl Backend {
    /// The embedded store, if this is it.
    pub fn memory(&self) -> Option<&MemorySource> {
        match self {
            Backend::Memory(m) => Some(m),
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => None,
        }
    }

    /// The value and mod revision of `key`.
    pub async fn get(&self, key: &str) -> Result<Option<(Bytes, Revision)>, SourceError> {
        match self {
            Backend::Memory(m) => Ok(m.get(key)),
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => e.get(key).await,
        }
    }

    /// Creates `key`.
    pub async fn create(&self, key: &str, value: Bytes) -> Result<Revision, SourceError> {
        match self {
            Backend::Memory(m) => m.create(key, value),
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => e.create(key, value).await,
        }
    }

    /// Replaces `key`'s value (at mod revision `expected`, when given).
    pub async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> Result<Revision, SourceError> {
        match self {
            Backend::Memory(m) => m.update(key, value, expected),
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => e.update(key, value, expected).await,
        }
    }

    /// Grants a lease that expires `ttl` from now (on etcd, in whole seconds rounded up, and
    /// no shorter than etcd's minimum).
    pub async fn grant_lease(&self, ttl: Duration) -> Result<Lease, SourceError> {
        match self {
            Backend::Memory(m) => m.grant_lease(ttl).map(Lease::Memory),
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => e.grant_lease(ttl).await.map(Lease::Etcd),
        }
    }

    /// Creates `key` as [`create`](Self::create) does, attached to `lease` when given: it is
    /// deleted when the lease expires. `NotFound` naming the lease ([`Lease::is_gone`]) when
    /// the lease is gone.
    pub async fn create_with_lease(
        &self,
        key: &str,
        value: Bytes,
        lease: Option<Lease>,
    ) -> Result<Revision, SourceError> {
        match (self, lease) {
            (Backend::Memory(m), None) => m.create(key, value),
            (Backend::Memory(m), Some(Lease::Memory(l))) => m.create_with_lease(key, value, Some(l)),
            #[cfg(feature = "etcd")]
            (Backend::Etcd(e), None) => e.create(key, value).await,
            #[cfg(feature = "etcd")]
            (Backend::Etcd(e), Some(Lease::Etcd(l))) => e.create_with_lease(key, value, Some(l)).await,
            #[cfg(feature = "etcd")]
            (_, Some(other)) => Err(SourceError::NotFound(other.to_string())),
        }
    }

    /// Replaces `key`'s value as [`update`](Self::update) does, attached to `lease` when given;
    /// without one, the key leaves any lease it had (etcd's put). `NotFound` naming the lease
    /// ([`Lease::is_gone`]) when the lease is gone.
    pub async fn update_with_lease(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
        lease: Option<Lease>,
    ) -> Result<Revision, SourceError> {
        match (self, lease) {
            (Backend::Memory(m), None) => m.update(key, value, expected),
            (Backend::Memory(m), Some(Lease::Memory(l))) => {
                m.update_with_lease(key, value, expected, Some(l))
            }
            #[cfg(feature = "etcd")]
            (Backend::Etcd(e), None) => e.update(key, value, expected).await,
            #[cfg(feature = "etcd")]
            (Backend::Etcd(e), Some(Lease::Etcd(l))) => {
                e.update_with_lease(key, value, expected, Some(l)).await
            }
            #[cfg(feature = "etcd")]
            (_, Some(other)) => Err(SourceError::NotFound(other.to_string())),
        }
    }

    /// Deletes `key` (at mod revision `expected`, when given): the revision and the last value.
    pub async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<(Revision, Bytes), SourceError> {
        match self {
            Backend::Memory(m) => m.delete(key, expected),
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => e.delete(key, expected).await,
        }
    }

    /// Whether the store can serve consistent reads now (etcd: a member answers with a
    /// leader). Bounded by `timeout`.
    pub async fn healthy(&self, timeout: std::time::Duration) -> bool {
        match self {
            Backend::Memory(m) => {
                let _ = timeout;
                m.current_revision().await.is_ok()
            }
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => e.has_leader(timeout).await,
        }
    }
}

/// The watch of whichever store this is.
pub enum BackendWatch {
    /// On the embedded store.
    Memory(MemoryWatch),
    /// On etcd (boxed: one per resource, and far larger than the embedded store's).
    #[cfg(feature = "etcd")]
    Etcd(Box<watchcache_etcd::EtcdWatch>),
}

impl Stream for BackendWatch {
    type Item = Result<SourceEvent, SourceError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.get_mut() {
            BackendWatch::Memory(w) => w.as_mut().poll_next(cx),
            #[cfg(feature = "etcd")]
            BackendWatch::Etcd(w) => Pin::new(&mut **w).poll_next(cx),
        }
    }
}

impl Source for Backend {
    type Watch = BackendWatch;

    async fn list(&self, prefix: &str, at: Option<Revision>) -> Result<SourceList, SourceError> {
        each!(self, s => s.list(prefix, at).await)
    }

    async fn watch(&self, prefix: &str, from: Revision) -> Result<Self::Watch, SourceError> {
        Ok(match self {
            Backend::Memory(m) => BackendWatch::Memory(m.watch(prefix, from).await?),
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => BackendWatch::Etcd(Box::new(e.watch(prefix, from).await?)),
        })
    }

    async fn current_revision(&self) -> Result<Revision, SourceError> {
        each!(self, s => s.current_revision().await)
    }

    async fn request_progress(&self, prefix: &str) -> Result<(), SourceError> {
        each!(self, s => Source::request_progress(s, prefix).await)
    }

    async fn signing_key(&self) -> Result<[u8; 16], SourceError> {
        each!(self, s => s.signing_key().await)
    }

    fn progress_requests_are_ordered(&self) -> bool {
        each!(self, s => s.progress_requests_are_ordered())
    }

    fn compacted_revision(&self) -> Revision {
        each!(self, s => Source::compacted_revision(s))
    }

    async fn read(&self, key: &str) -> Result<(Option<SourceItem>, Revision), SourceError> {
        each!(self, s => s.read(key).await)
    }
}
