//! Writes run on tokio's blocking pool, at most [`MAX_WRITES`](crate::config::MAX_WRITES) at once, so that their CPU is
//! never spent on the runtime's workers, which go on serving reads and watches meanwhile.
//!
//! A write's CPU is parsing its body (JSON, YAML or protobuf), patching, bringing
//! `managedFields` up to date, checking the object against its schema and encoding it: linear
//! in the object after the work of `fields` and `strategic`, but an object may be 1.5 MiB,
//! and tens of milliseconds on a runtime worker would stall every connection that worker
//! serves. Each write runs to its end on its blocking thread, the store's futures included
//! (the runtime's drivers still wake them), so the bound is on writes in flight, as the
//! apiserver bounds mutating requests in flight (200 by default).
//!
//! A write past that bound waits for a place, holding its body (up to 3 MiB), but only as many
//! wait as run: past those, a write is answered at once with the apiserver's 429
//! `TooManyRequests` and a `Retry-After`, as its max-in-flight filter answers, and holds
//! nothing while its client waits to retry. So the bodies writes hold are bounded by
//! construction: at most twice the bound, however many clients send.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::response::Response;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};
use watchcache_encoders::Status;

/// The places for writes in flight, and the count of writes waiting for one.
pub(crate) struct Offload {
    places: Arc<Semaphore>,
    waiting: AtomicUsize,
    /// The most writes that may wait: as many as may run.
    max_waiting: usize,
}

/// A write's place in the line of those waiting, given up when it gets a place to run or its
/// client goes.
struct InLine<'a>(&'a AtomicUsize);

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Offload {
    /// At most `max` writes at once, and as many waiting.
    pub(crate) fn new(max: usize) -> Offload {
        let max = max.max(1);
        Offload {
            places: Arc::new(Semaphore::new(max)),
            waiting: AtomicUsize::new(0),
            max_waiting: max,
        }
    }

    /// Runs the write `work` makes on a blocking thread once a place is free, and answers as it
    /// answers; a write that panics is a 500. A write that finds every place taken and as many
    /// writes waiting is refused with 429 without waiting.
    pub(crate) async fn run<F, Fut>(&self, work: F) -> Result<Response, Status>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Response, Status>>,
    {
        let shutting_down = || Status::internal("the server is shutting down");
        // A free place is free only while no write waits (the semaphore hands a place back to
        // the first in line), so taking it here passes nobody.
        let place = match Arc::clone(&self.places).try_acquire_owned() {
            Ok(place) => place,
            Err(TryAcquireError::Closed) => return Err(shutting_down()),
            Err(TryAcquireError::NoPermits) => {
                let _in_line = self.wait_in_line()?;
                Arc::clone(&self.places)
                    .acquire_owned()
                    .await
                    .map_err(|_| shutting_down())?
            }
        };
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let _place = place;
            runtime.block_on(work())
        })
        .await
        .unwrap_or_else(|e| Err(Status::internal(format!("the write failed: {e}"))))
    }

    /// A place in the line of writes waiting, or, when the line is full, the apiserver's 429.
    fn wait_in_line(&self) -> Result<InLine<'_>, Status> {
        self.waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_waiting).then_some(n + 1)
            })
            .map(|_| InLine(&self.waiting))
            .map_err(|_| too_many_requests())
    }
}

/// The apiserver's answer to a request past one of its bounds on requests in flight: 429
/// `TooManyRequests`, `Retry-After: 1`, in its max-in-flight filter's words.
pub(crate) fn too_many_requests() -> Status {
    Status::too_many_requests(
        "Too many requests, please try again later.",
        Duration::from_secs(1),
    )
}

/// The bound on mutating requests in flight (`--max-mutating-requests-inflight`): a POST,
/// PUT, PATCH or DELETE takes a place before its body is read and holds it until its answer
/// is made, so the bodies being read and the writes queued for [`Offload`] are bounded across
/// all connections; past the bound it is answered 429 at once, holding nothing.
pub(crate) struct InFlight {
    /// None: no bound (`0`, as the apiserver's flag).
    places: Option<Arc<Semaphore>>,
}

impl InFlight {
    /// At most `max` at once; no bound if 0.
    pub(crate) fn new(max: usize) -> InFlight {
        InFlight {
            places: (max > 0).then(|| Arc::new(Semaphore::new(max))),
        }
    }

    /// A place, held until dropped (none is needed without a bound), or the apiserver's 429.
    pub(crate) fn enter(&self) -> Result<Option<OwnedSemaphorePermit>, Status> {
        match &self.places {
            None => Ok(None),
            Some(places) => Arc::clone(places)
                .try_acquire_owned()
                .map(Some)
                .map_err(|_| too_many_requests()),
        }
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

    /// Waits (bounded) until `what` holds.
    async fn until(what: &str, f: impl Fn() -> bool) {
        for _ in 0..2000 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("never: {what}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn as_many_writes_wait_as_run_and_one_more_is_429_at_once() {
        use futures_util::FutureExt;
        use std::sync::atomic::{AtomicUsize, Ordering};

        let offload = Arc::new(Offload::new(2));
        // Writes hold their places until the gate lets them through.
        let gate = Arc::new(Semaphore::new(0));
        let started = Arc::new(AtomicUsize::new(0));
        let write = |offload: &Arc<Offload>| {
            let (offload, gate, started) = (offload.clone(), gate.clone(), started.clone());
            tokio::spawn(async move {
                offload
                    .run(move || async move {
                        started.fetch_add(1, Ordering::SeqCst);
                        gate.acquire().await.expect("the gate").forget();
                        Ok(StatusCode::CREATED.into_response())
                    })
                    .await
                    .map(|r| r.status())
            })
        };
        let running: Vec<_> = (0..2).map(|_| write(&offload)).collect();
        until("two writes run", || started.load(Ordering::SeqCst) == 2).await;
        let mut waiting: Vec<_> = (0..2).map(|_| write(&offload)).collect();
        until("two writes wait", || offload.waiting.load(Ordering::SeqCst) == 2).await;

        // One more is answered as it comes, without waiting.
        let refused = offload
            .run(|| async { Ok(StatusCode::CREATED.into_response()) })
            .now_or_never()
            .expect("answered without waiting")
            .unwrap_err();
        assert_eq!((refused.code, refused.reason), (429, "TooManyRequests"));
        assert_eq!(refused.message, "Too many requests, please try again later.");
        assert_eq!(refused.retry_after, Some(1));

        // A write whose client went gives its place in line back.
        waiting.pop().expect("a waiting write").abort();
        until("one write waits", || offload.waiting.load(Ordering::SeqCst) == 1).await;
        waiting.push(write(&offload));
        until("two writes wait again", || {
            offload.waiting.load(Ordering::SeqCst) == 2
        })
        .await;

        gate.add_permits(4);
        for w in running.into_iter().chain(waiting) {
            assert_eq!(w.await.unwrap(), Ok(StatusCode::CREATED));
        }
        assert_eq!(started.load(Ordering::SeqCst), 4, "the aborted write never ran");
        assert_eq!(offload.waiting.load(Ordering::SeqCst), 0);
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
