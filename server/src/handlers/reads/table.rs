//! `meta.k8s.io` Table output: what `kubectl get` prints, computed by the server as the
//! apiserver computes it, for a LIST, a GET and each event of a WATCH.
//!
//! A client asks for it in its Accept header
//! (`application/json;as=Table;v=v1;g=meta.k8s.io`, kubectl's first choice; negotiated in
//! [`media`](crate::handlers::media)); `includeObject`
//! says what each row carries: `None`, `Metadata` (the default, a `PartialObjectMetadata`) or
//! the whole `Object`. Columns with priority 1 are the ones `-o wide` adds.

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Value, json};
use watchcache_api::KindSpec;
use watchcache_api::printers::Printer;
use watchcache_encoders::Status;

/// Which Table version a request asked for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum TableVersion {
    V1,
    V1beta1,
}

impl TableVersion {
    pub(crate) fn api_version(self) -> &'static str {
        match self {
            TableVersion::V1 => "meta.k8s.io/v1",
            TableVersion::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }

    /// The response's Content-Type.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            TableVersion::V1 => "application/json;as=Table;v=v1;g=meta.k8s.io",
            TableVersion::V1beta1 => "application/json;as=Table;v=v1beta1;g=meta.k8s.io",
        }
    }
}

/// What each row carries (`includeObject`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    None,
    #[default]
    Metadata,
    Object,
}

impl IncludeObject {
    pub(crate) fn parse(v: &str) -> Result<IncludeObject, Status> {
        match v {
            "None" => Ok(IncludeObject::None),
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "Object" => Ok(IncludeObject::Object),
            other => Err(Status::bad_request(format!(
                "includeObject: unsupported value {other:?}: supported values: \"None\", \"Metadata\", \"Object\""
            ))),
        }
    }
}

/// How a request wants its Table.
#[derive(Copy, Clone, Debug)]
pub(crate) struct TableRequest {
    pub(crate) version: TableVersion,
    pub(crate) include: IncludeObject,
}

/// A Table holding `rows` of `printer`'s kind, with the list metadata `meta`; column
/// definitions only when `headers` (a watch sends them with its first event only).
pub(crate) fn table(
    t: TableRequest,
    printer: &Printer,
    rows: Vec<Value>,
    meta: Value,
    headers: bool,
) -> Value {
    let mut out = json!({
        "kind": "Table",
        "apiVersion": t.version.api_version(),
        "metadata": meta,
        "rows": rows,
    });
    if headers {
        out["columnDefinitions"] = printer.column_definitions();
    }
    out
}

/// The row of `object`, printed by its kind's `printer`, as of `now`.
pub(crate) fn row(t: TableRequest, printer: &Printer, object: &Value, now: SystemTime) -> Value {
    let cells = printer.cells(object, now);
    let mut row = json!({"cells": cells});
    match t.include {
        IncludeObject::None => {}
        IncludeObject::Object => row["object"] = object.clone(),
        IncludeObject::Metadata => {
            row["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": t.version.api_version(),
                "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
            });
        }
    }
    row
}

/// A watch's frames as Tables: each event's object becomes a Table of one row, the first
/// with the column definitions.
pub(crate) struct TableFrames {
    pub(crate) request: TableRequest,
    /// The kind whose printer makes the rows.
    pub(crate) spec: Arc<KindSpec>,
    pub(crate) headers_sent: bool,
}

impl TableFrames {
    /// Appends the frame for `delivery`: `object` is its object's JSON at the event's
    /// revision (`None` for a bookmark, which becomes a Table of no rows at its revision).
    pub(crate) fn write(
        &mut self,
        kind: watchcache_core::EventKind,
        revision: watchcache_core::Revision,
        object: Option<&[u8]>,
        out: &mut bytes::BytesMut,
    ) -> Result<(), Status> {
        let rows = match object {
            Some(json) => {
                let object: Value = serde_json::from_slice(json)
                    .map_err(|e| Status::internal(format!("a stored object is not JSON: {e}")))?;
                vec![row(self.request, &self.spec.printer, &object, SystemTime::now())]
            }
            None => Vec::new(),
        };
        let headers = !self.headers_sent && object.is_some();
        self.headers_sent |= headers;
        let table = table(
            self.request,
            &self.spec.printer,
            rows,
            json!({"resourceVersion": revision.to_string()}),
            headers,
        );
        let frame = json!({"type": kind.as_str(), "object": table});
        out.extend_from_slice(frame.to_string().as_bytes());
        out.extend_from_slice(b"\n");
        Ok(())
    }
}
