//! One log line per request, and its audit event: made when the response's body ends (or is
//! dropped, when the client goes away), so that a watch is logged once, at its end, with the
//! bytes it sent, and never per event. The line goes to the tracing target
//! `watchcache::request` with the method, the path and query, the user (`-` when no
//! authenticator named one), the status, the latency to the body's end and the body's bytes:
//! at `warn` for a 5xx, at `info` otherwise (`RUST_LOG=info,watchcache::request=warn` keeps
//! only the failures).
//!
//! Costs, per request: nothing more when the target is off and no audit log is kept; else
//! the method and URI kept (the URI's storage is shared), one allocation for the body's
//! wrapper, and the line or the event.

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderValue, Method, Uri, header};
use axum::response::Response;
use hyper::body::{Frame, SizeHint};

use crate::audit::{AuditLog, Event, Stage, Stages};
use crate::auth::UserInfo;
use crate::auth::request_info::RequestInfo;
use crate::transport::connection::Connection;

/// The tracing target of request lines.
pub(crate) const TARGET: &str = "watchcache::request";

/// The header that carries a request's audit id, as the apiserver's.
const AUDIT_ID: &str = "audit-id";

/// The user of a request no authenticator named, in audit events: the apiserver's anonymous
/// user.
fn anonymous() -> Arc<UserInfo> {
    static ANONYMOUS: OnceLock<Arc<UserInfo>> = OnceLock::new();
    Arc::clone(ANONYMOUS.get_or_init(|| Arc::new(UserInfo::anonymous())))
}

/// What is kept of a request while it is served.
pub(crate) struct Begun {
    method: Method,
    uri: Uri,
    user: Option<Arc<UserInfo>>,
    peer: Option<IpAddr>,
    user_agent: Option<HeaderValue>,
    received: SystemTime,
    start: Instant,
    log: bool,
}

impl Begun {
    /// Notes `request` as it comes in; `None` when neither a line nor an audit event can be
    /// made of it.
    pub(crate) fn new(audit: Option<&Arc<AuditLog>>, request: &Request) -> Option<Begun> {
        let log = tracing::enabled!(target: TARGET, tracing::Level::WARN);
        if !log && audit.is_none() {
            return None;
        }
        Some(Begun {
            method: request.method().clone(),
            uri: request.uri().clone(),
            user: request.extensions().get::<Arc<UserInfo>>().cloned(),
            peer: request
                .extensions()
                .get::<ConnectInfo<Connection>>()
                .map(|c| c.0.peer().ip()),
            user_agent: request.headers().get(header::USER_AGENT).cloned(),
            received: SystemTime::now(),
            start: Instant::now(),
            log,
        })
    }

    /// The response, with its audit id and a body that logs the request when it ends.
    pub(crate) fn end(self, audit: Option<&Arc<AuditLog>>, mut response: Response) -> Response {
        // An authenticator inside this layer may have left the user on the response.
        let user = self
            .user
            .clone()
            .or_else(|| response.extensions().get::<Arc<UserInfo>>().cloned());
        let audit = audit.and_then(|log| {
            let info = RequestInfo::new(&self.method, self.uri.path(), self.uri.query());
            let user = user.clone().unwrap_or_else(anonymous);
            let stages = log.policy.stages(&info, self.uri.path(), &user);
            if !stages.started && !stages.complete {
                return None;
            }
            let id = uuid::Uuid::new_v4();
            if let Ok(v) = HeaderValue::from_str(&id.to_string()) {
                response.headers_mut().insert(AUDIT_ID, v);
            }
            let pending = Pending {
                log: Arc::clone(log),
                id,
                info,
                user,
                stages,
            };
            // A watch's start is its own stage, as the apiserver's long-running requests'.
            if stages.started && pending.info.verb == "watch" {
                pending.record(&self, Stage::ResponseStarted, response.status().as_u16());
            }
            Some(Box::new(pending))
        });
        if !self.log && audit.is_none() {
            return response;
        }
        let status = response.status().as_u16();
        let finish = Finish {
            begun: self,
            user,
            status,
            audit,
        };
        response.map(|inner| {
            Body::new(Observed {
                inner,
                bytes: 0,
                finish: Some(finish),
            })
        })
    }
}

/// A request's audit events still to make.
struct Pending {
    log: Arc<AuditLog>,
    id: uuid::Uuid,
    info: RequestInfo,
    user: Arc<UserInfo>,
    stages: Stages,
}

impl Pending {
    fn record(&self, b: &Begun, stage: Stage, code: u16) {
        self.log.record(Event {
            stage,
            audit_id: self.id,
            request_uri: b.uri.to_string(),
            info: self.info.clone(),
            user: Arc::clone(&self.user),
            source_ip: b.peer,
            user_agent: b
                .user_agent
                .as_ref()
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            code,
            received: b.received,
            stage_time: SystemTime::now(),
        });
    }
}

/// What is logged when the body ends.
struct Finish {
    begun: Begun,
    user: Option<Arc<UserInfo>>,
    status: u16,
    /// Boxed: without an audit log (the default) a watch does not carry its space while it
    /// lives.
    audit: Option<Box<Pending>>,
}

impl Finish {
    fn finish(self, bytes: u64) {
        let b = &self.begun;
        if b.log {
            let latency = b.start.elapsed();
            let user = self.user.as_deref().map_or("-", |u| u.name.as_str());
            let (verb, path, status) = (b.method.as_str(), &b.uri, self.status);
            if status >= 500 {
                tracing::warn!(target: TARGET, verb, %path, user, status, ?latency, bytes, "request");
            } else {
                tracing::info!(target: TARGET, verb, %path, user, status, ?latency, bytes, "request");
            }
        }
        if let Some(p) = &self.audit
            && p.stages.complete
        {
            p.record(b, Stage::ResponseComplete, self.status);
        }
    }
}

/// A response body that counts its bytes and finishes its request's line when it ends, fails
/// or is dropped.
struct Observed {
    inner: Body,
    bytes: u64,
    finish: Option<Finish>,
}

impl hyper::body::Body for Observed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.bytes += data.len() as u64;
                }
            }
            Poll::Ready(None | Some(Err(_))) => {
                if let Some(f) = this.finish.take() {
                    f.finish(this.bytes);
                }
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        if let Some(f) = self.finish.take() {
            f.finish(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    /// The wrapper a watch's body lives in for as long as the watch: what it keeps to log
    /// the request at its end, the audit's part boxed.
    #[test]
    fn the_wrapper_a_watch_lives_in_stays_small() {
        let size = std::mem::size_of::<super::Observed>();
        assert!(size <= 280, "the request log's wrapper is {size} bytes");
    }

    use super::*;
    use std::sync::Mutex;

    /// A writer into a shared buffer, for the log lines.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn logged<F: FnOnce()>(f: F) -> String {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        String::from_utf8(lines.0.lock().unwrap().clone()).unwrap()
    }

    fn request(path: &str, user: Option<&str>) -> Request {
        let mut r = Request::builder()
            .method("GET")
            .uri(path)
            .body(Body::empty())
            .unwrap();
        if let Some(u) = user {
            r.extensions_mut()
                .insert(Arc::new(UserInfo::authenticated(u, "", Vec::new())));
        }
        r
    }

    #[test]
    fn a_streamed_body_is_logged_once_at_its_end_with_its_bytes() {
        let out = logged(|| {
            let begun = Begun::new(None, &request("/api/v1/pods?watch=true", Some("alice"))).unwrap();
            let chunks: Vec<Result<Bytes, std::io::Error>> =
                vec![Ok(Bytes::from_static(b"12345")), Ok(Bytes::from_static(b"678"))];
            let body = Body::from_stream(futures_util::stream::iter(chunks));
            let response = begun.end(None, Response::new(body));
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let collected = rt.block_on(axum::body::to_bytes(response.into_body(), usize::MAX));
            assert_eq!(collected.unwrap().len(), 8);
        });
        assert_eq!(out.lines().count(), 1, "{out}");
        for part in [
            "INFO",
            "verb=\"GET\"",
            "path=/api/v1/pods?watch=true",
            "user=\"alice\"",
            "status=200",
            "bytes=8",
        ] {
            assert!(out.contains(part), "{part} in {out}");
        }
    }

    #[test]
    fn a_dropped_body_is_logged_and_a_5xx_is_a_warning() {
        let out = logged(|| {
            let begun = Begun::new(None, &request("/api/v1/pods", None)).unwrap();
            let mut response = Response::new(Body::from("x"));
            *response.status_mut() = axum::http::StatusCode::SERVICE_UNAVAILABLE;
            drop(begun.end(None, response));
        });
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(
            out.contains("WARN")
                && out.contains("user=\"-\"")
                && out.contains("status=503")
                && out.contains("bytes=0"),
            "{out}"
        );
    }
}
