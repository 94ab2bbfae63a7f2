//! `meta.k8s.io` PartialObjectMetadata output: objects reduced to their `metadata`, what
//! metadata-only clients read (kube-rs's `metadata_watcher` and `Controller::owns`, client-go's
//! metadata informers, the garbage collector). A client asks for it in its Accept header:
//! `application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1` for a LIST and
//! `as=PartialObjectMetadata` for a GET or each event of a WATCH (negotiated in
//! [`media`](crate::handlers::media)). Asking for the list form of one object, or the object form of a
//! list, is 406, as the apiserver answers it.
//!
//! The metadata is the part of the object's shared JSON encoding its codec recorded
//! ([`Encoding::metadata_at`]): made once per stored version, with the JSON, and copied from
//! there by every GET, LIST and watch, never parsed per reader (a DELETED event's is stamped
//! with its revision as the whole object's is). JSON whose codec recorded no such part is
//! read for its `metadata` (as a value, never decoded into a tree). A LIST streams in bounded
//! chunks, as a LIST of whole objects does.

use bytes::{BufMut, Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::sync::Arc;

use watchcache_core::{CodecError, Encoding, EventKind, ListResult, ObjectVersion, Revision, WireFormat};
use watchcache_encoders::{FrameEncoder, JsonCodec, Status};

use crate::handlers::reads::table::TableVersion;

/// What a metadata-only read asked for: the `meta.k8s.io` version, and whether it named the
/// list kind.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct MetadataRequest {
    pub(crate) version: TableVersion,
    pub(crate) list: bool,
}

impl MetadataRequest {
    /// The response's Content-Type.
    pub(crate) fn content_type(self) -> &'static str {
        match (self.list, self.version) {
            (true, TableVersion::V1) => "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            (true, TableVersion::V1beta1) => {
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1"
            }
            (false, TableVersion::V1) => "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
            (false, TableVersion::V1beta1) => {
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1"
            }
        }
    }

    /// 406 unless the kind asked for fits what the request reads: a list for a LIST, one
    /// object for a GET or a watch event.
    pub(crate) fn fits(self, reads_a_list: bool) -> Result<(), Status> {
        match (self.list, reads_a_list) {
            (true, false) => Err(not_acceptable(
                "you requested PartialObjectMetadataList, but the requested object is not a list",
            )),
            (false, true) => Err(not_acceptable(
                "you requested PartialObjectMetadata, but the requested object is a list",
            )),
            _ => Ok(()),
        }
    }

    /// Appends a PartialObjectMetadata's head, up to its `metadata` value.
    fn write_head(self, out: &mut BytesMut) {
        out.put_slice(br#"{"kind":"PartialObjectMetadata","apiVersion":""#);
        out.put_slice(self.version.api_version().as_bytes());
        out.put_slice(br#"","metadata":"#);
    }

    /// Appends `object` (an object's JSON) as a PartialObjectMetadata, reading the metadata
    /// out of it: for JSON no codec recorded the metadata part of (a write's answer).
    pub(crate) fn write_object(self, object: &[u8], out: &mut BytesMut) -> Result<(), Status> {
        #[derive(Deserialize)]
        struct Object<'a> {
            #[serde(borrow, default)]
            metadata: Option<&'a RawValue>,
        }
        let parsed: Object<'_> = serde_json::from_slice(object)
            .map_err(|e| Status::internal(format!("a stored object is not JSON: {e}")))?;
        self.write_head(out);
        out.put_slice(parsed.metadata.map_or("{}", RawValue::get).as_bytes());
        out.put_slice(b"}");
        Ok(())
    }

    /// Appends a stored version's JSON encoding as a PartialObjectMetadata: the metadata
    /// part its codec recorded, copied from the shared bytes; read out of the JSON only for
    /// an encoding that records none.
    pub(crate) fn write_encoding(self, json: &Encoding, out: &mut BytesMut) -> Result<(), Status> {
        match json.metadata_at() {
            Some(at) => {
                self.write_head(out);
                out.put_slice(&json.bytes()[at]);
                out.put_slice(b"}");
                Ok(())
            }
            None => self.write_object(json.bytes(), out),
        }
    }

    /// Appends the metadata frame of an event of `object` at `revision`
    /// (`{"type":…,"object":{"kind":"PartialObjectMetadata",…}}\n`), from the metadata part of
    /// the object's shared JSON encoding, stamped with `revision`: nothing is parsed per
    /// watcher. `Ok(false)`, with nothing written, when the encoding records no metadata part
    /// (or the object is corrupt): then [`write_frame`](Self::write_frame) reads it out of the
    /// whole frame.
    pub(crate) fn write_event(
        self,
        frames: &FrameEncoder,
        kind: EventKind,
        object: &ObjectVersion,
        revision: Revision,
        out: &mut BytesMut,
    ) -> Result<bool, CodecError> {
        let start = out.len();
        out.put_slice(br#"{"type":""#);
        out.put_slice(kind.as_str().as_bytes());
        out.put_slice(br#"","object":"#);
        self.write_head(out);
        match frames.write_metadata(object, revision, out) {
            Ok(true) => {
                out.put_slice(b"}}\n");
                Ok(true)
            }
            other => {
                out.truncate(start);
                other
            }
        }
    }

    /// Appends the metadata form of `frame`, one JSON watch frame
    /// (`{"type":…,"object":…}\n`): its type kept, its object reduced to its metadata. A
    /// Status (an ERROR event's object) is kept whole, as the apiserver keeps it.
    pub(crate) fn write_frame(self, frame: &[u8], out: &mut BytesMut) -> Result<(), Status> {
        #[derive(Deserialize)]
        struct Frame<'a> {
            #[serde(rename = "type", borrow)]
            kind: &'a str,
            #[serde(borrow)]
            object: &'a RawValue,
        }
        let parsed: Frame<'_> = serde_json::from_slice(frame)
            .map_err(|e| Status::internal(format!("a watch frame is not JSON: {e}")))?;
        out.put_slice(br#"{"type":"#);
        out.put_slice(serde_json::to_string(parsed.kind).unwrap_or_default().as_bytes());
        out.put_slice(br#","object":"#);
        let object = parsed.object.get().as_bytes();
        if parsed.kind == "ERROR" {
            out.put_slice(object);
        } else {
            self.write_object(object, out)?;
        }
        out.put_slice(b"}\n");
        Ok(())
    }
}

fn not_acceptable(message: &str) -> Status {
    Status::new(406, "NotAcceptable", message)
}

/// The chunks of a PartialObjectMetadataList of `result`'s items: the list's head, then items
/// until a chunk holds `chunk_size` bytes, then the rest. Each chunk is computed when the
/// body is polled for it, so the list is never whole in memory.
pub(crate) struct MetadataList {
    request: MetadataRequest,
    result: ListResult,
    codec: Arc<JsonCodec>,
    chunk_size: usize,
    started: bool,
    first: bool,
    done: bool,
}

impl MetadataList {
    pub(crate) fn new(
        request: MetadataRequest,
        result: ListResult,
        codec: Arc<JsonCodec>,
        chunk_size: usize,
    ) -> Self {
        MetadataList {
            request,
            result,
            codec,
            chunk_size,
            started: false,
            first: true,
            done: false,
        }
    }

    fn head(&self, out: &mut BytesMut) {
        let mut meta = serde_json::Map::new();
        meta.insert("resourceVersion".into(), self.result.revision.to_string().into());
        if let Some(token) = &self.result.continue_token {
            meta.insert("continue".into(), token.clone().into());
        }
        if let Some(n) = self.result.remaining_item_count {
            meta.insert("remainingItemCount".into(), n.into());
        }
        out.put_slice(br#"{"kind":"PartialObjectMetadataList","apiVersion":""#);
        out.put_slice(self.request.version.api_version().as_bytes());
        out.put_slice(br#"","metadata":"#);
        out.put_slice(serde_json::Value::Object(meta).to_string().as_bytes());
        out.put_slice(br#","items":["#);
    }
}

impl Iterator for MetadataList {
    type Item = Result<Bytes, std::io::Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut out = BytesMut::with_capacity(self.chunk_size.min(64 * 1024));
        if !self.started {
            self.started = true;
            self.head(&mut out);
        }
        while out.len() < self.chunk_size {
            let Some(object) = self.result.items.next() else {
                out.put_slice(b"]}");
                self.done = true;
                break;
            };
            let json = match object.encoding(WireFormat::Json, &*self.codec) {
                Ok(json) => json,
                Err(e) => {
                    self.done = true;
                    return Some(Err(std::io::Error::other(e.to_string())));
                }
            };
            if !std::mem::take(&mut self.first) {
                out.put_slice(b",");
            }
            if let Err(status) = self.request.write_encoding(json, &mut out) {
                self.done = true;
                return Some(Err(std::io::Error::other(status.message)));
            }
        }
        Some(Ok(out.freeze()))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const V1: MetadataRequest = MetadataRequest {
        version: TableVersion::V1,
        list: false,
    };

    fn parsed(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).expect("JSON")
    }

    #[test]
    fn an_object_keeps_only_its_metadata_byte_for_byte() {
        let pod = br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","labels":{"a":"\u00e9"}},"spec":{"nodeName":"n"}}"#;
        let mut out = BytesMut::new();
        V1.write_object(pod, &mut out).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"p","labels":{"a":"\u00e9"}}}"#
        );
        let mut out = BytesMut::new();
        let v1beta1 = MetadataRequest {
            version: TableVersion::V1beta1,
            ..V1
        };
        v1beta1.write_object(br#"{"kind":"Pod"}"#, &mut out).unwrap();
        assert_eq!(
            parsed(&out),
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1beta1", "metadata": {}})
        );
        assert_eq!(V1.write_object(b"{not json", &mut out).unwrap_err().code, 500);
    }

    #[test]
    fn a_frame_keeps_its_type_and_an_error_keeps_its_status() {
        let mut out = BytesMut::new();
        let bookmark = br#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"7","annotations":{"k8s.io/initial-events-end":"true"}}}}
"#;
        V1.write_frame(bookmark, &mut out).unwrap();
        assert!(out.ends_with(b"}\n"));
        assert_eq!(
            parsed(&out),
            json!({"type": "BOOKMARK", "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"resourceVersion": "7", "annotations": {"k8s.io/initial-events-end": "true"}}}})
        );
        out.clear();
        let error = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"code":410,"reason":"Expired"}}"#;
        V1.write_frame(error, &mut out).unwrap();
        assert_eq!(parsed(&out)["object"]["code"], 410);
        assert_eq!(V1.write_frame(b"{\"type\":1}", &mut out).unwrap_err().code, 500);
    }

    /// A metadata frame made from the encoding's metadata part is the one read out of the
    /// whole frame, for an event at the object's revision and for a deletion stamped later.
    #[test]
    fn an_events_metadata_frame_comes_from_the_shared_metadata_part() {
        use watchcache_core::{Codec, Delivery};
        use watchcache_encoders::ResourceInfo;

        let codec = Arc::new(JsonCodec::new(true, &[]));
        let frames = FrameEncoder::new(ResourceInfo::new("pods", "Pod", "v1"), codec.clone());
        let raw = br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"ns","labels":{"a":"\u00e9"},"resourceVersion":"1"},"spec":{"x":[1,2,{"y":"}"}]}}"#;
        let pod = Arc::new(codec.decode(raw, Revision::new(7)).unwrap());
        let v1beta1 = MetadataRequest {
            version: TableVersion::V1beta1,
            ..V1
        };
        for request in [V1, v1beta1] {
            for (kind, revision) in [(EventKind::Added, 7), (EventKind::Deleted, 12)] {
                let delivery = Delivery {
                    kind,
                    revision: Revision::new(revision),
                    object: Some(&pod),
                    initial_events_end: false,
                };
                let mut whole = BytesMut::new();
                frames.write(&delivery, &mut whole).unwrap();
                let mut expected = BytesMut::new();
                request.write_frame(&whole, &mut expected).unwrap();
                let mut out = BytesMut::from(&b"before"[..]);
                assert!(
                    request
                        .write_event(&frames, kind, &pod, Revision::new(revision), &mut out)
                        .unwrap()
                );
                assert_eq!(&out[..6], b"before");
                assert_eq!(std::str::from_utf8(&out[6..]), std::str::from_utf8(&expected));
                assert_eq!(
                    parsed(&out[6..])["object"]["metadata"]["resourceVersion"],
                    revision.to_string()
                );
            }
        }
    }

    /// The metadata part is copied, not parsed: an encoding whose bytes outside it are no JSON
    /// still gives its metadata; one that records no part is left to the reading path.
    #[test]
    fn the_metadata_part_is_copied_and_a_codec_that_records_none_is_read_out() {
        use watchcache_core::{ObjectKey, WireFormat};
        use watchcache_encoders::ResourceInfo;

        let bytes = Bytes::from_static(br#"{"metadata":{"name":"p","resourceVersion":"3"},"spec":not json"#);
        let json = Encoding::with_revision_at(bytes.clone(), 43..44).with_metadata_at(12..46);
        let mut out = BytesMut::new();
        V1.write_encoding(&json, &mut out).unwrap();
        assert_eq!(
            parsed(&out),
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"name": "p", "resourceVersion": "3"}})
        );
        // Without the part the object is read, and this one is no JSON.
        out.clear();
        assert_eq!(
            V1.write_encoding(&Encoding::new(bytes.clone()), &mut out)
                .unwrap_err()
                .code,
            500
        );

        let frames = FrameEncoder::new(
            ResourceInfo::new("pods", "Pod", "v1"),
            Arc::new(JsonCodec::new(false, &[])),
        );
        let none = ObjectVersion::builder(ObjectKey::cluster("p"), Revision::new(3))
            .encoding(WireFormat::Json, Encoding::new(bytes))
            .build();
        let mut out = BytesMut::from(&b"x"[..]);
        assert!(
            !V1.write_event(&frames, EventKind::Modified, &none, Revision::new(3), &mut out)
                .unwrap()
        );
        assert_eq!(&out[..], b"x", "nothing is left of a frame not written");
    }

    #[test]
    fn the_list_form_fits_only_a_list() {
        let list = MetadataRequest { list: true, ..V1 };
        assert!(list.fits(true).is_ok() && V1.fits(false).is_ok());
        assert_eq!(list.fits(false).unwrap_err().code, 406);
        assert_eq!(V1.fits(true).unwrap_err().code, 406);
    }
}
