//! [`Backend`]: the store the server's caches follow and its writes go to: the embedded
//! [`MemorySource`], etcd (`--etcd`, with the `etcd` feature), or a store of your own
//! ([`Backend::custom`]: a [`Source`] that also takes [`Writes`]).
//!
//! Keys are laid out as kube-apiserver lays them out in etcd, `/registry/<resource>/…`, on
//! both, so the same data reads the same whichever store holds it. Both have etcd's leases:
//! a key written with a [`Lease`] is deleted with every other key of that lease, at one
//! revision, when it expires (how objects with a TTL, Events, go; `leases.rs` decides which
//! lease a write takes).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
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
    /// A store of your own ([`Backend::custom`]).
    Custom(CustomStore),
}

/// The writes a store of your own takes, beside the [`Source`] the caches follow: what
/// [`Backend::custom`] needs to serve it. Keys are laid out as the apiserver lays out etcd
/// (`/registry/<resource>/<namespace>/<name>`); values are the objects' JSON. A write
/// conditional on `expected` fails with [`SourceError::Conflict`] when the key's mod revision
/// is another, as etcd's transactions do; every write's change reaches the store's watches.
pub trait Writes: Source + Clone {
    /// The value and mod revision of `key`, read at the store's current revision.
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<(Bytes, Revision)>, SourceError>> + Send;

    /// Creates `key`: [`SourceError::AlreadyExists`] if it is there. The write's revision.
    fn create(&self, key: &str, value: Bytes) -> impl Future<Output = Result<Revision, SourceError>> + Send;

    /// Replaces `key`'s value (at mod revision `expected`, when given): [`SourceError::NotFound`]
    /// if it is not there. The write's revision.
    fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> impl Future<Output = Result<Revision, SourceError>> + Send;

    /// Deletes `key` (at mod revision `expected`, when given): the write's revision and the
    /// last value.
    fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> impl Future<Output = Result<(Revision, Bytes), SourceError>> + Send;
}

/// A store of your own, behind [`Backend::Custom`].
#[derive(Clone)]
pub struct CustomStore(Arc<dyn DynStore>);

impl fmt::Debug for CustomStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CustomStore")
    }
}

type Watch = BoxStream<'static, Result<SourceEvent, SourceError>>;

/// [`Source`] and [`Writes`] with their futures boxed, so that any store fits one variant.
trait DynStore: Send + Sync {
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        at: Option<Revision>,
    ) -> BoxFuture<'a, Result<SourceList, SourceError>>;
    fn watch<'a>(&'a self, prefix: &'a str, from: Revision) -> BoxFuture<'a, Result<Watch, SourceError>>;
    fn watch_history<'a>(
        &'a self,
        prefix: &'a str,
        from: Revision,
    ) -> BoxFuture<'a, Result<Watch, SourceError>>;
    fn current_revision(&self) -> BoxFuture<'_, Result<Revision, SourceError>>;
    fn request_progress<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<(), SourceError>>;
    fn progress_requests_are_ordered(&self) -> bool;
    fn compacted_revision(&self) -> Revision;
    fn read<'a>(&'a self, key: &'a str)
    -> BoxFuture<'a, Result<(Option<SourceItem>, Revision), SourceError>>;
    fn signing_key(&self) -> BoxFuture<'_, Result<[u8; 16], SourceError>>;
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<(Bytes, Revision)>, SourceError>>;
    fn create<'a>(&'a self, key: &'a str, value: Bytes) -> BoxFuture<'a, Result<Revision, SourceError>>;
    fn update<'a>(
        &'a self,
        key: &'a str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> BoxFuture<'a, Result<Revision, SourceError>>;
    fn delete<'a>(
        &'a self,
        key: &'a str,
        expected: Option<Revision>,
    ) -> BoxFuture<'a, Result<(Revision, Bytes), SourceError>>;
}

impl<S: Writes> DynStore for S {
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        at: Option<Revision>,
    ) -> BoxFuture<'a, Result<SourceList, SourceError>> {
        Box::pin(Source::list(self, prefix, at))
    }
    fn watch<'a>(&'a self, prefix: &'a str, from: Revision) -> BoxFuture<'a, Result<Watch, SourceError>> {
        Box::pin(async move {
            let watch = Source::watch(self, prefix, from).await?;
            Ok(Box::pin(watch) as Watch)
        })
    }
    fn watch_history<'a>(
        &'a self,
        prefix: &'a str,
        from: Revision,
    ) -> BoxFuture<'a, Result<Watch, SourceError>> {
        Box::pin(async move {
            let watch = Source::watch_history(self, prefix, from).await?;
            Ok(Box::pin(watch) as Watch)
        })
    }
    fn current_revision(&self) -> BoxFuture<'_, Result<Revision, SourceError>> {
        Box::pin(Source::current_revision(self))
    }
    fn request_progress<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<(), SourceError>> {
        Box::pin(Source::request_progress(self, prefix))
    }
    fn progress_requests_are_ordered(&self) -> bool {
        Source::progress_requests_are_ordered(self)
    }
    fn compacted_revision(&self) -> Revision {
        Source::compacted_revision(self)
    }
    fn read<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(Option<SourceItem>, Revision), SourceError>> {
        Box::pin(Source::read(self, key))
    }
    fn signing_key(&self) -> BoxFuture<'_, Result<[u8; 16], SourceError>> {
        Box::pin(Source::signing_key(self))
    }
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<(Bytes, Revision)>, SourceError>> {
        Box::pin(Writes::get(self, key))
    }
    fn create<'a>(&'a self, key: &'a str, value: Bytes) -> BoxFuture<'a, Result<Revision, SourceError>> {
        Box::pin(Writes::create(self, key, value))
    }
    fn update<'a>(
        &'a self,
        key: &'a str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> BoxFuture<'a, Result<Revision, SourceError>> {
        Box::pin(Writes::update(self, key, value, expected))
    }
    fn delete<'a>(
        &'a self,
        key: &'a str,
        expected: Option<Revision>,
    ) -> BoxFuture<'a, Result<(Revision, Bytes), SourceError>> {
        Box::pin(Writes::delete(self, key, expected))
    }
}

/// A lease of one store, granted by [`Backend::grant_lease`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Lease {
    /// On the embedded store.
    Memory(LeaseId),
    /// On etcd: etcd's lease id.
    #[cfg(feature = "etcd")]
    Etcd(i64),
    /// On a store of your own, which has no leases: its keys are kept until deleted.
    None,
}

/// `lease <id>`: how either store names a lease that is gone in [`SourceError::NotFound`].
impl fmt::Display for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lease::Memory(id) => write!(f, "lease {}", id.0),
            #[cfg(feature = "etcd")]
            Lease::Etcd(id) => f.write_str(&watchcache_etcd::lease_name(*id)),
            Lease::None => f.write_str("no lease"),
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
            Backend::Custom(CustomStore($s)) => $e,
        }
    };
}

impl Backend {
    /// A store of your own under the server: the caches follow it as a [`Source`], and
    /// writes go to it through [`Writes`]. It has no leases: objects with a TTL (Events) are
    /// kept until deleted.
    pub fn custom<S: Writes>(store: S) -> Backend {
        Backend::Custom(CustomStore(Arc::new(store)))
    }

    /// The embedded store, if this is it.
    pub fn memory(&self) -> Option<&MemorySource> {
        match self {
            Backend::Memory(m) => Some(m),
            _ => None,
        }
    }

    /// The value and mod revision of `key`.
    pub async fn get(&self, key: &str) -> Result<Option<(Bytes, Revision)>, SourceError> {
        match self {
            Backend::Memory(m) => Ok(m.get(key)),
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => e.get(key).await,
            Backend::Custom(CustomStore(c)) => c.get(key).await,
        }
    }

    /// Creates `key`.
    pub async fn create(&self, key: &str, value: Bytes) -> Result<Revision, SourceError> {
        match self {
            Backend::Memory(m) => m.create(key, value),
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => e.create(key, value).await,
            Backend::Custom(CustomStore(c)) => c.create(key, value).await,
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
            Backend::Custom(CustomStore(c)) => c.update(key, value, expected).await,
        }
    }

    /// Grants a lease that expires `ttl` from now (on etcd, in whole seconds rounded up, and
    /// no shorter than etcd's minimum).
    pub async fn grant_lease(&self, ttl: Duration) -> Result<Lease, SourceError> {
        match self {
            Backend::Memory(m) => m.grant_lease(ttl).map(Lease::Memory),
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => e.grant_lease(ttl).await.map(Lease::Etcd),
            Backend::Custom(_) => Ok(Lease::None),
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
            (Backend::Custom(CustomStore(c)), None | Some(Lease::None)) => c.create(key, value).await,
            (Backend::Memory(m), None) => m.create(key, value),
            (Backend::Memory(m), Some(Lease::Memory(l))) => m.create_with_lease(key, value, Some(l)),
            #[cfg(feature = "etcd")]
            (Backend::Etcd(e), None) => e.create(key, value).await,
            #[cfg(feature = "etcd")]
            (Backend::Etcd(e), Some(Lease::Etcd(l))) => e.create_with_lease(key, value, Some(l)).await,
            // A lease of another store: gone, as far as this one knows.
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
            (Backend::Custom(CustomStore(c)), None | Some(Lease::None)) => {
                c.update(key, value, expected).await
            }
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
            // A lease of another store: gone, as far as this one knows.
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
            Backend::Custom(CustomStore(c)) => c.delete(key, expected).await,
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
            Backend::Custom(CustomStore(c)) => {
                matches!(
                    tokio::time::timeout(timeout, c.current_revision()).await,
                    Ok(Ok(_))
                )
            }
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
    /// On a store of your own.
    Custom(Watch),
}

impl Stream for BackendWatch {
    type Item = Result<SourceEvent, SourceError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.get_mut() {
            BackendWatch::Memory(w) => w.as_mut().poll_next(cx),
            #[cfg(feature = "etcd")]
            BackendWatch::Etcd(w) => Pin::new(&mut **w).poll_next(cx),
            BackendWatch::Custom(w) => w.as_mut().poll_next(cx),
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
            Backend::Custom(CustomStore(c)) => BackendWatch::Custom(c.watch(prefix, from).await?),
        })
    }

    /// Each store's own history read (on etcd: over the members' history connections, bounded
    /// for a slow reader).
    async fn watch_history(&self, prefix: &str, from: Revision) -> Result<Self::Watch, SourceError> {
        Ok(match self {
            Backend::Memory(m) => BackendWatch::Memory(m.watch_history(prefix, from).await?),
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => BackendWatch::Etcd(Box::new(e.watch_history(prefix, from).await?)),
            Backend::Custom(CustomStore(c)) => BackendWatch::Custom(c.watch_history(prefix, from).await?),
        })
    }

    async fn current_revision(&self) -> Result<Revision, SourceError> {
        each!(self, s => s.current_revision().await)
    }

    async fn request_progress(&self, prefix: &str) -> Result<(), SourceError> {
        match self {
            Backend::Memory(m) => Source::request_progress(m, prefix).await,
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => Source::request_progress(e, prefix).await,
            Backend::Custom(CustomStore(c)) => c.request_progress(prefix).await,
        }
    }

    async fn signing_key(&self) -> Result<[u8; 16], SourceError> {
        each!(self, s => s.signing_key().await)
    }

    fn progress_requests_are_ordered(&self) -> bool {
        each!(self, s => s.progress_requests_are_ordered())
    }

    fn compacted_revision(&self) -> Revision {
        match self {
            Backend::Memory(m) => Source::compacted_revision(m),
            #[cfg(feature = "etcd")]
            Backend::Etcd(e) => Source::compacted_revision(e),
            Backend::Custom(CustomStore(c)) => c.compacted_revision(),
        }
    }

    async fn read(&self, key: &str) -> Result<(Option<SourceItem>, Revision), SourceError> {
        each!(self, s => s.read(key).await)
    }
}
