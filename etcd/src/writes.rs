//! Writes: transactions guarded on a key's `mod_revision` (a create on its absence), with or
//! without a lease, each failure said as 409, 404 or unavailable, and whether it may have been
//! applied.

use super::*;

impl EtcdSource {
    /// Runs the transaction `make` makes on the leader, made again for each attempt (a retry
    /// only when the attempt before was never sent, or refused unapplied).
    pub(crate) async fn txn(&self, make: impl Fn() -> Txn) -> Result<etcd_client::TxnResponse, SourceError> {
        self.leased_txn(None, make).await
    }

    /// As [`txn`](Self::txn), for a transaction that attaches a key to `lease`.
    pub(crate) async fn leased_txn(
        &self,
        lease: Option<i64>,
        make: impl Fn() -> Txn,
    ) -> Result<etcd_client::TxnResponse, SourceError> {
        self.inner
            .members
            .call(Kind::Write, |_, c| {
                let txn = make();
                async move { kv(c).txn(txn).await }
            })
            .await
            .map_err(|e| leased_write_failed(e, lease))
    }

    /// The value and mod revision of `key`, read linearizably.
    pub async fn get(&self, key: &str) -> Result<Option<(Bytes, Revision)>, SourceError> {
        let resp = self
            .reading(|mut kv| async move { kv.get(key, None).await })
            .await
            .map_err(unavailable)?;
        Ok(resp
            .kvs()
            .first()
            .map(|kv| (Bytes::copy_from_slice(kv.value()), rev(kv.mod_revision()))))
    }

    /// Creates `key`; `AlreadyExists` if it is there.
    pub async fn create(&self, key: &str, value: Bytes) -> Result<Revision, SourceError> {
        self.create_with_lease(key, value, None).await
    }

    /// Creates `key`, attached to `lease` when given (etcd deletes it when the lease expires);
    /// `AlreadyExists` if it is there, `NotFound` naming the lease ([`lease_name`]) if the lease
    /// is gone.
    pub async fn create_with_lease(
        &self,
        key: &str,
        value: Bytes,
        lease: Option<i64>,
    ) -> Result<Revision, SourceError> {
        let resp = self
            .leased_txn(lease, || {
                Txn::new()
                    .when([Compare::mod_revision(key, CompareOp::Equal, 0)])
                    .and_then([put(key, &value, lease)])
            })
            .await?;
        if resp.succeeded() {
            revision_of(resp.header())
        } else {
            Err(SourceError::AlreadyExists(key.to_owned()))
        }
    }

    /// Replaces `key`'s value if it exists (at mod revision `expected`, when given).
    pub async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> Result<Revision, SourceError> {
        self.update_with_lease(key, value, expected, None).await
    }

    /// As [`update`](Self::update), attaching the key to `lease` when given; without one, the
    /// key leaves any lease it was attached to (etcd's put). `NotFound` naming the lease
    /// ([`lease_name`]) if the lease is gone.
    pub async fn update_with_lease(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
        lease: Option<i64>,
    ) -> Result<Revision, SourceError> {
        let resp = self
            .leased_txn(lease, || {
                guarded(key, expected)
                    .and_then([put(key, &value, lease)])
                    .or_else([TxnOp::get(key, None)])
            })
            .await?;
        if resp.succeeded() {
            revision_of(resp.header())
        } else {
            Err(failed_guard(key, &resp))
        }
    }

    /// Grants a lease of `ttl` (whole seconds, rounded up; etcd may raise it to its minimum,
    /// one and a half election timeouts): keys attached to it are deleted together, at one
    /// revision, when it expires. Its id. A grant is a write: it is retried only when it was
    /// never sent or refused unapplied; one lost after it was sent leaves a lease no key uses,
    /// which expires.
    pub async fn grant_lease(&self, ttl: Duration) -> Result<i64, SourceError> {
        let seconds = i64::try_from(ttl.as_secs().saturating_add(u64::from(ttl.subsec_nanos() > 0)))
            .unwrap_or(i64::MAX)
            .max(1);
        let resp = self
            .inner
            .members
            .call(Kind::Write, |_, c| async move {
                c.lease_client().grant(seconds, None).await
            })
            .await
            .map_err(write_failed)?;
        Ok(resp.id())
    }

    /// Deletes `key` if it exists (at mod revision `expected`, when given); returns the
    /// deletion's revision and the last value.
    pub async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<(Revision, Bytes), SourceError> {
        let resp = self
            .txn(|| {
                guarded(key, expected)
                    .and_then([TxnOp::delete(
                        key,
                        Some(etcd_client::DeleteOptions::new().with_prev_key()),
                    )])
                    .or_else([TxnOp::get(key, None)])
            })
            .await?;
        if !resp.succeeded() {
            return Err(failed_guard(key, &resp));
        }
        let prev = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Delete(d) => d.prev_kvs().first().map(|kv| Bytes::copy_from_slice(kv.value())),
            _ => None,
        });
        match prev {
            Some(prev) => Ok((revision_of(resp.header())?, prev)),
            None => Err(SourceError::NotFound(key.to_owned())),
        }
    }
}

/// A write's failure, saying when it may have been applied all the same: it was sent, and the
/// answer was lost or was a timeout. The server must not try it again; its client may read.
pub(crate) fn write_failed(e: etcd_client::Error) -> SourceError {
    if members::never_sent(&e) || members::refused_unapplied(&e) {
        unavailable(e)
    } else {
        SourceError::Unavailable(format!("{e} (the write may have been applied)"))
    }
}

/// A write's failure when it carried `lease`: etcd refuses a put whose lease is gone (expired
/// or revoked) before applying anything, which the caller may answer by granting another.
pub(crate) fn leased_write_failed(e: etcd_client::Error, lease: Option<i64>) -> SourceError {
    match (lease, &e) {
        (Some(id), etcd_client::Error::GRpcStatus(s))
            if s.code() == tonic::Code::NotFound && s.message().contains("requested lease not found") =>
        {
            SourceError::NotFound(lease_name(id))
        }
        _ => write_failed(e),
    }
}

/// How a missing lease is named in [`SourceError::NotFound`], as the embedded store names its
/// own: `lease <id>`.
pub fn lease_name(id: i64) -> String {
    format!("lease {id}")
}

/// A put of `value` at `key`, attached to `lease` when given (a put without one detaches the
/// key from any lease it had, in etcd as here).
pub(crate) fn put(key: &str, value: &Bytes, lease: Option<i64>) -> TxnOp {
    TxnOp::put(
        key,
        value.to_vec(),
        lease.map(|id| PutOptions::new().with_lease(id)),
    )
}

/// A transaction whose guard holds when `key` exists at `expected` (or at all).
pub(crate) fn guarded(key: &str, expected: Option<Revision>) -> Txn {
    let compare = match expected {
        Some(r) => Compare::mod_revision(key, CompareOp::Equal, r.get() as i64),
        None => Compare::version(key, CompareOp::Greater, 0),
    };
    Txn::new().when([compare])
}

/// Why a [`guarded`] transaction failed, from the read in its else branch.
pub(crate) fn failed_guard(key: &str, resp: &etcd_client::TxnResponse) -> SourceError {
    let current = resp.op_responses().into_iter().find_map(|r| match r {
        TxnOpResponse::Get(g) => g.kvs().first().map(|kv| rev(kv.mod_revision())),
        _ => None,
    });
    match current {
        Some(current) => SourceError::Conflict {
            key: key.to_owned(),
            current,
        },
        None => SourceError::NotFound(key.to_owned()),
    }
}
