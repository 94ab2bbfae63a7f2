//! The read path: LIST, GET and WATCH, all served from the caches, never from the source.
//! LIST bodies stream in bounded chunks; a watch body writes frames as events arrive.
//!
//! - `watch_body.rs`: a watch response, bounded per connection.
//! - `table.rs` and `partial.rs`: the Table and PartialObjectMetadata forms of what is read.

pub(crate) mod partial;
pub(crate) mod table;
pub(crate) mod watch_body;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use watchcache_core::{CacheError, ObjectVersion, WireFormat};
use watchcache_encoders::{DEFAULT_CHUNK_SIZE, ListHeader, Status, StreamingList, protobuf};

use crate::handlers::app::AppState;
use crate::handlers::errors;
use crate::handlers::params::Params;
use crate::handlers::response::{json_response, protobuf_response};
use crate::handlers::target::Target;
use crate::metrics;
use crate::transport::connection::Connection;
use partial::{MetadataList, MetadataRequest};
use table::{TableFrames, TableRequest};
use watch_body::{Transform, WatchBody, WatchCounters, WatcherGuard};

/// The form a read answers in, from its Accept header.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Form {
    Json,
    /// Objects in their shared protobuf encoding, in the `k8s\0` envelope; watch frames
    /// length-prefixed.
    Protobuf,
    Table(TableRequest),
    /// Objects reduced to their metadata (`as=PartialObjectMetadata[List]`).
    Metadata(MetadataRequest),
}

impl Form {
    fn table(self) -> Option<TableRequest> {
        match self {
            Form::Table(t) => Some(t),
            _ => None,
        }
    }

    fn metadata(self) -> Option<MetadataRequest> {
        match self {
            Form::Metadata(m) => Some(m),
            _ => None,
        }
    }
}

pub(crate) async fn list(state: &AppState, t: &Target, p: &Params, form: Form) -> Result<Response, Status> {
    let table = form.table();
    if let Some(metadata) = form.metadata() {
        metadata.fits(true)?;
    }
    let r = &t.resource;
    let opts = p.list_options(t.namespace.as_deref())?;
    let result = r
        .cache
        .list(&opts)
        .await
        .map_err(|e| errors::cache(&e, &r.info))?;
    let labels = metrics::resource(&r.label);
    state.metrics.list_requests.get_or_create(&labels).inc();
    if let Some(table) = table {
        // A Table is computed row by row from each object: it is built whole, not streamed
        // (kubectl asks for pages of 500).
        let mut meta = serde_json::json!({"resourceVersion": result.revision.to_string()});
        if let Some(token) = &result.continue_token {
            meta["continue"] = token.clone().into();
        }
        if let Some(n) = result.remaining_item_count {
            meta["remainingItemCount"] = n.into();
        }
        let now = std::time::SystemTime::now();
        let mut rows = Vec::with_capacity(result.items.len());
        for object in result.items {
            rows.push(crate::handlers::reads::table::row(
                table,
                &r.spec.printer,
                &object_json(t, &object)?,
                now,
            ));
        }
        let body = crate::handlers::reads::table::table(table, &r.spec.printer, rows, meta, true).to_string();
        state
            .metrics
            .list_bytes
            .get_or_create(&labels)
            .inc_by(body.len() as u64);
        return Ok(table_response(table, body));
    }
    let bytes_counter = state.metrics.list_bytes.get_or_create(&labels).clone();
    if let Some(metadata) = form.metadata() {
        let chunks = MetadataList::new(metadata, result, r.codec.clone(), DEFAULT_CHUNK_SIZE);
        let body = Body::from_stream(futures_util::stream::iter(chunks).map(move |chunk| {
            let chunk = chunk?;
            bytes_counter.inc_by(chunk.len() as u64);
            Ok::<_, std::io::Error>(chunk)
        }));
        return Ok(with_content_type(
            json_response(StatusCode::OK, body),
            metadata.content_type(),
        ));
    }
    let protobuf = matches!(form, Form::Protobuf);
    let list = if protobuf {
        let header = ListHeader::of(&result);
        StreamingList::protobuf(
            &r.info,
            &header,
            result.items,
            r.codec.clone(),
            DEFAULT_CHUNK_SIZE,
        )
        .map_err(|e| errors::codec(&e))?
    } else {
        StreamingList::of(&r.info, result, r.codec.clone())
    };
    let body = Body::from_stream(list.map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        bytes_counter.inc_by(chunk.len() as u64);
        Ok::<_, std::io::Error>(chunk)
    }));
    Ok(if protobuf {
        protobuf_response(StatusCode::OK, body)
    } else {
        json_response(StatusCode::OK, body)
    })
}

/// An object's JSON, parsed.
fn object_json(t: &Target, object: &ObjectVersion) -> Result<serde_json::Value, Status> {
    let json = object
        .encoding(WireFormat::Json, &*t.resource.codec)
        .map_err(|e| errors::codec(&e))?;
    serde_json::from_slice(json.bytes())
        .map_err(|e| Status::internal(format!("a stored object is not JSON: {e}")))
}

fn table_response(table: TableRequest, body: String) -> Response {
    with_content_type(json_response(StatusCode::OK, body), table.version.content_type())
}

fn with_content_type(mut response: Response, content_type: &'static str) -> Response {
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static(content_type),
    );
    response
}

pub(crate) async fn get(t: &Target, name: &str, p: &Params, form: Form) -> Result<Response, Status> {
    let table = form.table();
    if let Some(metadata) = form.metadata() {
        metadata.fits(false)?;
    }
    let r = &t.resource;
    let (object, _) = r
        .cache
        .get(&t.key(name), p.resource_version)
        .await
        .map_err(|e| errors::cache(&e, &r.info))?;
    let object = object.ok_or_else(|| Status::not_found(&r.info.resource, name))?;
    if let Some(table) = table {
        let row = crate::handlers::reads::table::row(
            table,
            &r.spec.printer,
            &object_json(t, &object)?,
            std::time::SystemTime::now(),
        );
        let meta = serde_json::json!({"resourceVersion": object.revision().to_string()});
        let body =
            crate::handlers::reads::table::table(table, &r.spec.printer, vec![row], meta, true).to_string();
        return Ok(table_response(table, body));
    }
    if let Form::Protobuf = form {
        // The envelope around the shared encoding, which is not copied.
        let encoding = object
            .encoding(WireFormat::Protobuf, &*r.codec)
            .map_err(|e| errors::codec(&e))?;
        let mut head = Vec::with_capacity(64);
        protobuf::envelope_prefix(
            &r.info.api_version,
            &r.info.kind,
            encoding.bytes().len(),
            &mut head,
        );
        let pieces = [
            Bytes::from(head),
            encoding.bytes().clone(),
            Bytes::from_static(protobuf::ENVELOPE_SUFFIX),
        ];
        let body = futures_util::stream::iter(pieces.map(Ok::<_, std::io::Error>));
        return Ok(protobuf_response(StatusCode::OK, Body::from_stream(body)));
    }
    let json = object
        .encoding(WireFormat::Json, &*r.codec)
        .map_err(|e| errors::codec(&e))?;
    if let Some(metadata) = form.metadata() {
        let mut body = BytesMut::with_capacity(json.bytes().len().min(4096));
        metadata.write_encoding(json, &mut body)?;
        return Ok(with_content_type(
            json_response(StatusCode::OK, body.freeze()),
            metadata.content_type(),
        ));
    }
    Ok(json_response(StatusCode::OK, json.bytes().clone()))
}

pub(crate) async fn watch(
    state: &Arc<AppState>,
    conn: &Connection,
    t: &Target,
    p: &Params,
    form: Form,
) -> Result<Response, Status> {
    let table = form.table();
    let metadata = form.metadata();
    if let Some(metadata) = metadata {
        metadata.fits(false)?;
    }
    let r = &t.resource;
    let frames = match form {
        Form::Protobuf => r.frames.protobuf().ok_or_else(|| {
            Status::new(
                406,
                "NotAcceptable",
                format!("{} are not served in protobuf", r.info.resource),
            )
        })?,
        _ => r.frames.clone(),
    };
    let opts = p.watch_options(t.namespace.as_deref())?;
    if state.open_watchers.fetch_add(1, Ordering::Relaxed) >= state.config.max_watchers {
        state.open_watchers.fetch_sub(1, Ordering::Relaxed);
        return Err(Status::too_many_requests(
            "too many open watches",
            Duration::from_secs(1),
        ));
    }
    let resource = &*r.label;
    state
        .metrics
        .watchers
        .get_or_create(&metrics::resource(resource))
        .inc();
    let guard = WatcherGuard {
        metrics: state.metrics.clone(),
        resource: Arc::clone(&r.label),
        open: state.open_watchers.clone(),
    };
    let (watch, pending) = match r.cache.watch(opts).await {
        Ok(w) => (Some(w), None),
        // Too old: HTTP 200, then an ERROR event with a 410 Status (clients re-list on it).
        Err(CacheError::Expired(e)) => {
            state
                .metrics
                .watch_starts_expired
                .get_or_create(&metrics::resource(resource))
                .inc();
            let mut buf = BytesMut::new();
            frames.write_error(&errors::expired(&e), &mut buf);
            (None, Some(buf.freeze()))
        }
        Err(e) => return Err(errors::cache(&e, &r.info)),
    };
    let timeout = p.watch_timeout(state.config.min_request_timeout);
    // The body ends the watch cleanly at its deadline; if the client has stopped reading, that
    // end cannot be flushed, and the connection is dropped once it has stalled for the grace
    // period.
    conn.end_if_stalled_after(timeout, state.config.shutdown_grace);
    // From below the window: reading the store's history.
    let at_start = watch
        .as_ref()
        .is_some_and(watchcache_core::CacheWatch::is_catching_up);
    let body = WatchBody {
        watch,
        frames: frames.clone(),
        deadline: Box::pin(tokio::time::sleep(timeout)),
        phase: watch_body::Phase::Open(None),
        shutdown: state.shutdown.signal(),
        grace_ms: watch_body::grace_ms(state.config.shutdown_grace),
        at_start,
        buf: BytesMut::new(),
        counters: WatchCounters::new(&state.metrics, resource),
        pending,
        guard: Some(guard),
        scratch: BytesMut::new(),
        transform: match (table, metadata) {
            (Some(request), _) => Some(Transform::Table(TableFrames {
                request,
                spec: Arc::clone(&r.spec),
                headers_sent: false,
            })),
            (None, Some(metadata)) => Some(Transform::Metadata(metadata)),
            (None, None) => None,
        },
    };
    if frames.format() == WireFormat::Protobuf {
        let mut response = protobuf_response(StatusCode::OK, Body::from_stream(body));
        response.headers_mut().insert(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/vnd.kubernetes.protobuf;stream=watch"),
        );
        return Ok(response);
    }
    let response = json_response(StatusCode::OK, Body::from_stream(body));
    Ok(match (table, metadata) {
        (Some(table), _) => with_content_type(response, table.version.content_type()),
        (None, Some(metadata)) => with_content_type(response, metadata.content_type()),
        (None, None) => response,
    })
}
