//! Building responses: a JSON body with its content type, and a `metav1.Status` as an HTTP
//! response (code, body, `Retry-After`).

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use watchcache_encoders::Status;

/// A Status as an HTTP response.
pub(crate) fn status_response(s: &Status) -> Response {
    let code = StatusCode::from_u16(s.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = json_response(code, s.to_body());
    if let Some(secs) = s.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    r
}

/// `body` as `application/json` with status `code`.
pub(crate) fn json_response(code: StatusCode, body: impl Into<Body>) -> Response {
    let mut r = (code, body.into()).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// `body` as `application/vnd.kubernetes.protobuf` with status `code`.
pub(crate) fn protobuf_response(code: StatusCode, body: impl Into<Body>) -> Response {
    let mut r = (code, body.into()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(watchcache_encoders::protobuf::PROTOBUF),
    );
    r
}
