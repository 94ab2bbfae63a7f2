//! Writes run on tokio's blocking pool, at most [`MAX_WRITES`] at once, so that their CPU is
//! never spent on the runtime's workers, which go on serving reads and watches meanwhile.
//!
//! A write's CPU is parsing its body (JSON, YAML or protobuf), patching, bringing
//! `managedFields` up to date, checking the object against its schema and encoding it: linear
//! in the object after the work of `fields` and `strategic`, but an object may be 1.5 MiB,
//! and tens of milliseconds on a runtime worker would stall every connection that worker
//! serves. Each write runs to its end on its blocking thread, the store's futures included
//! (the runtime's drivers still wake them), so the bound is on writes in flight, as the
//! apiserver bounds mutating requests in flight (200 by default); a write past it waits for a
//! place.

use std::future::Future;
use std::sync::Arc;

use axum::response::Response;
use tokio::sync::Semaphore;
use watchcache_encoders::Status;

/// The most writes in flight at once, as the apiserver's default
/// `--max-mutating-requests-inflight`.
pub(crate) const MAX_WRITES: usize = 200;

/// The places for writes in flight.
pub(crate) struct Offload {
    places: Arc<Semaphore>,
}

impl Offload {
    /// At most `max` writes at once.
    pub(crate) fn new(max: usize) -> Offload {
        Offload {
            places: Arc::new(Semaphore::new(max.max(1))),
        }
    }

    /// Runs the write `work` makes on a blocking thread once a place is free, and answers as it
    /// answers; a write that panics is a 500.
    pub(crate) async fn run<F, Fut>(&self, work: F) -> Result<Response, Status>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Response, Status>>,
    {
        let place = Arc::clone(&self.places)
            .acquire_owned()
            .await
            .map_err(|_| Status::internal("the server is shutting down"))?;
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let _place = place;
            runtime.block_on(work())
        })
        .await
        .unwrap_or_else(|e| Err(Status::internal(format!("the write failed: {e}"))))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use axum::http::StatusCode;
    use axum::response::IntoResponse;

    use super::*;

    /// A write that holds its thread (as heavy CPU would) until a task on the runtime's only
    /// worker has run: done on that worker, it would wait for itself, and give up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_write_leaves_the_runtimes_worker_free_while_it_computes() {
        let offload = Offload::new(2);
        let (tell, told) = mpsc::channel::<()>();
        // The write is driven by a task on the worker, as a request's handler is.
        let write = tokio::spawn(async move {
            offload
                .run(move || async move {
                    match told.recv_timeout(Duration::from_secs(30)) {
                        Ok(()) => Ok(StatusCode::OK.into_response()),
                        Err(_) => Err(Status::internal(
                            "the runtime's worker never ran while the write held",
                        )),
                    }
                })
                .await
                .map(|r| r.status())
        });
        tokio::spawn(async move {
            let _ = tell.send(());
        });
        assert_eq!(write.await.unwrap(), Ok(StatusCode::OK));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_that_panics_is_a_500() {
        let offload = Offload::new(1);
        let answer = offload
            .run(|| async {
                panic!("a bug");
                #[allow(unreachable_code)]
                Ok(StatusCode::OK.into_response())
            })
            .await;
        assert_eq!(answer.unwrap_err().code, 500);
        // Its place was given back.
        let again = offload.run(|| async { Ok(StatusCode::OK.into_response()) }).await;
        assert!(again.is_ok());
    }
}
