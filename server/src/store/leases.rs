//! [`Leases`]: writes of objects with a time to live (Events, `--event-ttl`), attached to a
//! store lease that is shared, as kube-apiserver's lease manager shares it.
//!
//! A lease per write would cost the store a grant per Event and a revocation per expiry. So
//! one lease serves every such write of a reuse window: it is granted for the TTL plus the
//! window, and taken again while it still has at least the TTL to run. An object therefore
//! lives from its TTL to its TTL plus the window after its last write, and the objects of one
//! window go together, at one revision, when their lease expires. The window is the shorter
//! of `--lease-reuse-duration-seconds` and a share of the TTL (the apiserver's 5%), so that a
//! short TTL is stretched by little; whole seconds, as etcd counts a lease's time to live. A
//! lease takes at most [`MAX_OBJECTS`] writes, so that its expiry stays one modest revision.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use watchcache_core::{Revision, SourceError};

use crate::store::backend::{Backend, Lease};

/// The most writes one lease takes (the apiserver's default).
pub(crate) const MAX_OBJECTS: u32 = 1000;

/// The lease manager of one server; see the module docs.
pub(crate) struct Leases {
    store: Backend,
    /// `--lease-reuse-duration-seconds`: the longest reuse window.
    reuse: Duration,
    /// The share of the TTL the window may be at most.
    reuse_share: f64,
    /// The lease writes take now. Held across a grant, so that writes racing for a new lease
    /// wait for the one grant rather than each making its own.
    current: tokio::sync::Mutex<Option<Held>>,
}

struct Held {
    lease: Lease,
    /// When it expires, as it was asked for (etcd may grant a little more).
    expires: Instant,
    /// The writes it was handed to, failed ones included.
    attached: u32,
}

impl Leases {
    pub(crate) fn new(store: Backend, reuse: Duration, reuse_share: f64) -> Leases {
        Leases {
            store,
            reuse,
            reuse_share,
            current: tokio::sync::Mutex::new(None),
        }
    }

    /// The reuse window for `ttl`: the shorter of the configured window and the share of the
    /// TTL, in whole seconds.
    fn window(&self, ttl: Duration) -> Duration {
        let share = ttl.as_secs_f64() * self.reuse_share;
        let share = if share.is_finite() && share > 0.0 {
            Duration::try_from_secs_f64(share).unwrap_or(Duration::MAX)
        } else {
            Duration::ZERO
        };
        Duration::from_secs(share.min(self.reuse).as_secs())
    }

    /// The lease a write of an object with `ttl` takes: the current one while it has at least
    /// `ttl` to run, no more than `ttl` plus the window, and room for one more write; else a
    /// new one, granted for `ttl` plus the window.
    async fn lease(&self, ttl: Duration) -> Result<Lease, SourceError> {
        let mut current = self.current.lock().await;
        let now = Instant::now();
        let window = self.window(ttl);
        if let Some(held) = current.as_mut() {
            held.attached += 1;
            let valid = now + ttl < held.expires;
            let sufficient = now + ttl + window >= held.expires;
            if valid && sufficient && held.attached <= MAX_OBJECTS {
                return Ok(held.lease);
            }
        }
        let lease = self.store.grant_lease(ttl + window).await?;
        *current = Some(Held {
            lease,
            expires: now + ttl + window,
            attached: 1,
        });
        Ok(lease)
    }

    /// Forgets `lease` if it is the current one: it is gone, and the next write needs another.
    async fn forget(&self, lease: Lease) {
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|h| h.lease == lease) {
            *current = None;
        }
    }

    /// Creates `key`; with `ttl`, attached to a lease, so that it goes `ttl` (to `ttl` plus
    /// the reuse window) after this write.
    pub(crate) async fn create(
        &self,
        key: &str,
        value: Bytes,
        ttl: Option<Duration>,
    ) -> Result<Revision, SourceError> {
        let Some(ttl) = ttl else {
            return self.store.create(key, value).await;
        };
        self.leased(ttl, |lease| {
            self.store.create_with_lease(key, value.clone(), Some(lease))
        })
        .await
    }

    /// Replaces `key`'s value (at mod revision `expected`, when given); with `ttl`, attached to
    /// a lease as [`create`](Self::create) does, so the object's time to live counts from its
    /// last write, as the apiserver counts it.
    pub(crate) async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
        ttl: Option<Duration>,
    ) -> Result<Revision, SourceError> {
        let Some(ttl) = ttl else {
            return self.store.update(key, value, expected).await;
        };
        self.leased(ttl, |lease| {
            self.store
                .update_with_lease(key, value.clone(), expected, Some(lease))
        })
        .await
    }

    /// Runs `write` with a lease for `ttl`. A lease that went before its time (revoked by
    /// someone else) refuses the write with nothing written: it is forgotten and the write
    /// made once more, on a new lease.
    async fn leased<F, Fut>(&self, ttl: Duration, write: F) -> Result<Revision, SourceError>
    where
        F: Fn(Lease) -> Fut,
        Fut: std::future::Future<Output = Result<Revision, SourceError>>,
    {
        let lease = self.lease(ttl).await?;
        match write(lease).await {
            Err(e) if lease.is_gone(&e) => {
                self.forget(lease).await;
                write(self.lease(ttl).await?).await
            }
            done => done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use watchcache_core::MemorySource;

    const TTL: Duration = Duration::from_secs(3600);

    fn leases(store: &MemorySource) -> Leases {
        Leases::new(Backend::Memory(store.clone()), Duration::from_secs(60), 0.05)
    }

    fn b(s: &'static str) -> Bytes {
        Bytes::from_static(s.as_bytes())
    }

    #[test]
    fn the_window_is_the_shorter_of_the_flag_and_a_share_of_the_ttl_in_whole_seconds() {
        let l = leases(&MemorySource::new());
        assert_eq!(l.window(TTL), Duration::from_secs(60), "5% of an hour is more");
        assert_eq!(l.window(Duration::from_secs(600)), Duration::from_secs(30));
        assert_eq!(
            l.window(Duration::from_secs(2)),
            Duration::ZERO,
            "0.1 s rounds down"
        );
        let l = Leases::new(
            Backend::Memory(MemorySource::new()),
            Duration::from_secs(60),
            f64::NAN,
        );
        assert_eq!(l.window(TTL), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn writes_of_one_window_share_a_lease_and_go_together_after_the_ttl_and_the_window() {
        let store = MemorySource::new();
        let l = leases(&store);
        l.create("ev/a", b("a"), Some(TTL)).await.unwrap();
        tokio::time::advance(Duration::from_secs(59)).await;
        l.create("ev/b", b("b"), Some(TTL)).await.unwrap();
        l.update("ev/a", b("a2"), None, Some(TTL)).await.unwrap();
        tokio::time::advance(Duration::from_secs(2)).await;
        // Past the window: a new lease, which expires later.
        l.create("ev/c", b("c"), Some(TTL)).await.unwrap();
        l.create("kept", b("no ttl"), None).await.unwrap();
        tokio::time::advance(TTL - Duration::from_secs(2)).await;
        assert_eq!(
            store.expire_leases(),
            0,
            "nothing goes before the TTL plus the window"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        let before = store.revision();
        assert_eq!(store.expire_leases(), 1, "the first window's lease");
        assert_eq!(
            store.revision().get(),
            before.get() + 1,
            "a and b at one revision"
        );
        assert!(store.get("ev/a").is_none() && store.get("ev/b").is_none());
        assert!(store.get("ev/c").is_some() && store.get("kept").is_some());
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(store.expire_leases(), 1);
        assert!(store.get("ev/c").is_none() && store.get("kept").is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_takes_a_thousand_writes_and_one_revoked_under_it_is_replaced() {
        let store = MemorySource::new();
        let l = leases(&store);
        for i in 0..=MAX_OBJECTS {
            l.create(&format!("ev/{i:04}"), b("x"), Some(TTL)).await.unwrap();
        }
        tokio::time::advance(TTL + Duration::from_secs(60)).await;
        assert_eq!(
            store.expire_leases(),
            2,
            "the 1001st write took a lease of its own"
        );
        // Someone else revokes the current lease: the write goes on a new one.
        l.create("ev/x", b("x"), Some(TTL)).await.unwrap();
        let Some(Held {
            lease: Lease::Memory(id),
            ..
        }) = *l.current.lock().await
        else {
            panic!("a lease is held");
        };
        store.revoke_lease(id).unwrap();
        l.create("ev/y", b("y"), Some(TTL)).await.unwrap();
        l.update("ev/y", b("y2"), None, Some(TTL)).await.unwrap();
        assert!(store.get("ev/y").is_some());
        tokio::time::advance(TTL + Duration::from_secs(60)).await;
        assert_eq!(store.expire_leases(), 1);
        assert!(store.get("ev/y").is_none());
    }
}
