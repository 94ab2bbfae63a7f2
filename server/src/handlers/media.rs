//! Media types: the Accept header's ranges in the order a client prefers them, and what a
//! request body's Content-Type allows. One parser for every negotiation the server does:
//! reads (JSON, protobuf or a Table; 406 when the client accepts none), discovery (aggregated
//! or not), `/openapi/v2` (JSON or protobuf) and request bodies (JSON, YAML or protobuf; 415
//! otherwise).

use std::borrow::Cow;

use watchcache_encoders::{Status, protobuf};

use crate::handlers::errors;
use crate::handlers::reads::partial::MetadataRequest;
use crate::handlers::reads::table::TableVersion;
use watchcache_api::mutation::yaml;

/// One media range of an Accept header: `type/subtype;k=v;…`.
#[derive(Debug, PartialEq)]
pub(crate) struct MediaRange<'a> {
    pub(crate) media: &'a str,
    params: Vec<(&'a str, &'a str)>,
}

impl<'a> MediaRange<'a> {
    /// The value of parameter `k`, if given.
    pub(crate) fn param(&self, k: &str) -> Option<&'a str> {
        self.params
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(k))
            .map(|(_, v)| *v)
    }

    /// Whether the range admits `application/json`.
    pub(crate) fn is_json(&self) -> bool {
        ["application/json", "application/*", "*/*"]
            .iter()
            .any(|m| m.eq_ignore_ascii_case(self.media))
    }
}

/// The ranges of `accept`, most preferred first: by quality, then in the order given; ranges
/// of quality 0 are left out. No header, or an empty one, accepts anything.
pub(crate) fn ranges(accept: Option<&str>) -> Vec<MediaRange<'_>> {
    let accept = accept.map(str::trim).filter(|a| !a.is_empty()).unwrap_or("*/*");
    let mut out: Vec<(f32, MediaRange<'_>)> = accept
        .split(',')
        .filter_map(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().filter(|m| !m.is_empty())?;
            let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
            let range = MediaRange { media, params };
            let q = range
                .param("q")
                .and_then(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            (q > 0.0).then_some((q, range))
        })
        .collect();
    out.sort_by(|a, b| b.0.total_cmp(&a.0));
    out.into_iter().map(|(_, r)| r).collect()
}

/// What a read answers with.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReadFormat {
    Json,
    /// `application/vnd.kubernetes.protobuf` (and `;stream=watch` for a watch).
    Protobuf,
    Table(TableVersion),
    /// `meta.k8s.io` PartialObjectMetadata or PartialObjectMetadataList, in JSON.
    Metadata(MetadataRequest),
}

/// The format of a GET, LIST or WATCH: the first range that JSON, protobuf, a `meta.k8s.io`
/// Table or PartialObjectMetadata(List) (those two in JSON) meets; 406 when none does.
pub(crate) fn read_format(accept: Option<&str>) -> Result<ReadFormat, Status> {
    read_format_of(accept, true)
}

/// [`read_format`] for a resource that has a protobuf form (`has_protobuf`) or is served in
/// JSON only (custom resources, CRDs): then protobuf is not offered, and a client that
/// accepts nothing else gets 406, as the apiserver answers.
pub(crate) fn read_format_of(accept: Option<&str>, has_protobuf: bool) -> Result<ReadFormat, Status> {
    for range in ranges(accept) {
        let protobuf = range.media.eq_ignore_ascii_case(protobuf::PROTOBUF);
        if !(protobuf || range.is_json()) || (protobuf && !has_protobuf) {
            continue;
        }
        match (range.param("as"), range.param("g"), range.param("v")) {
            (None, _, _) if protobuf => return Ok(ReadFormat::Protobuf),
            (None, _, _) => return Ok(ReadFormat::Json),
            (Some("Table"), ..) if protobuf => {}
            (Some("Table"), Some("meta.k8s.io"), Some("v1")) => {
                return Ok(ReadFormat::Table(TableVersion::V1));
            }
            (Some("Table"), Some("meta.k8s.io"), Some("v1beta1")) => {
                return Ok(ReadFormat::Table(TableVersion::V1beta1));
            }
            (
                Some(kind @ ("PartialObjectMetadata" | "PartialObjectMetadataList")),
                Some("meta.k8s.io"),
                v,
            ) if !protobuf => {
                let version = match v {
                    Some("v1") => TableVersion::V1,
                    Some("v1beta1") => TableVersion::V1beta1,
                    _ => continue,
                };
                let list = kind == "PartialObjectMetadataList";
                return Ok(ReadFormat::Metadata(MetadataRequest { version, list }));
            }
            _ => {}
        }
    }
    Err(Status::new(
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json, \
         application/vnd.kubernetes.protobuf, application/json;as=Table;v=v1;g=meta.k8s.io, \
         application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io, \
         application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
    ))
}

/// A POST or PUT body as JSON: JSON as it is, YAML converted, protobuf (message
/// `protobuf_message`, in its envelope) transcoded; 415 for any other Content-Type. A body
/// without a Content-Type is read as JSON.
pub(crate) fn json_body<'a>(
    content_type: Option<&str>,
    body: &'a [u8],
    protobuf_message: Option<&str>,
) -> Result<Cow<'a, [u8]>, Status> {
    let media = content_type
        .and_then(|ct| ct.split(';').next())
        .map(str::trim)
        .unwrap_or("");
    if media.is_empty() || media.eq_ignore_ascii_case("application/json") {
        return Ok(Cow::Borrowed(body));
    }
    if media.eq_ignore_ascii_case("application/yaml") {
        let value = yaml::parse(body).map_err(|e| errors::yaml(&e, "invalid YAML body"))?;
        let json = serde_json::to_vec(&value).map_err(|e| Status::internal(e.to_string()))?;
        return Ok(Cow::Owned(json));
    }
    if let (true, Some(message)) = (media.eq_ignore_ascii_case(protobuf::PROTOBUF), protobuf_message) {
        let invalid =
            |e: protobuf::TranscodeError| Status::bad_request(format!("invalid protobuf body: {e}"));
        let envelope = protobuf::open_envelope(body).map_err(invalid)?;
        let mut object = protobuf::decode_json(message, envelope.raw).map_err(invalid)?;
        if !envelope.kind.is_empty() {
            object.insert("kind".into(), envelope.kind.into());
        }
        if !envelope.api_version.is_empty() {
            object.insert("apiVersion".into(), envelope.api_version.into());
        }
        let json = serde_json::to_vec(&object).map_err(|e| Status::internal(e.to_string()))?;
        return Ok(Cow::Owned(json));
    }
    Err(Status::new(
        415,
        "UnsupportedMediaType",
        format!(
            "the body of the request was in an unknown format ({media}) - accepted media types include: \
             application/json, application/yaml, application/vnd.kubernetes.protobuf"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn ranges_follow_quality_then_order() {
        let r = ranges(Some("a/x;q=0.5, b/y, c/z;q=0.9, d/w;q=0"));
        let media: Vec<&str> = r.iter().map(|r| r.media).collect();
        assert_eq!(media, ["b/y", "c/z", "a/x"]);
        assert_eq!(ranges(None)[0].media, "*/*");
        assert_eq!(ranges(Some(" "))[0].media, "*/*");
    }

    #[test]
    fn reads_are_json_or_a_table_or_406() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(
            read_format(Some(kubectl)).unwrap(),
            ReadFormat::Table(TableVersion::V1)
        );
        assert_eq!(
            read_format(Some("application/vnd.kubernetes.protobuf, application/json")).unwrap(),
            ReadFormat::Protobuf
        );
        assert_eq!(
            read_format(Some(
                "application/vnd.kubernetes.protobuf;q=0.5, application/json"
            ))
            .unwrap(),
            ReadFormat::Json
        );
        assert_eq!(
            read_format(Some("application/vnd.kubernetes.protobuf;stream=watch")).unwrap(),
            ReadFormat::Protobuf
        );
        assert_eq!(read_format(Some("*/*")).unwrap(), ReadFormat::Json);
        assert_eq!(read_format(None).unwrap(), ReadFormat::Json);
        let preferred = "application/json;q=0.5, application/json;as=Table;v=v1;g=meta.k8s.io;q=0.9";
        assert_eq!(
            read_format(Some(preferred)).unwrap(),
            ReadFormat::Table(TableVersion::V1)
        );
        assert_eq!(
            read_format(Some(
                "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io"
            ))
            .unwrap_err()
            .code,
            406
        );
        assert_eq!(
            read_format(Some("text/html, application/xml")).unwrap_err().code,
            406
        );
        assert_eq!(read_format(Some("application/json;q=0")).unwrap_err().code, 406);
    }

    #[test]
    fn metadata_only_reads_are_json() {
        let list = |version| ReadFormat::Metadata(MetadataRequest { version, list: true });
        let one = |version| ReadFormat::Metadata(MetadataRequest { version, list: false });
        // kube-rs's metadata list and watch.
        assert_eq!(
            read_format(Some(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
            ))
            .unwrap(),
            list(TableVersion::V1)
        );
        assert_eq!(
            read_format(Some(
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
            ))
            .unwrap(),
            one(TableVersion::V1)
        );
        assert_eq!(
            read_format(Some(
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1"
            ))
            .unwrap(),
            one(TableVersion::V1beta1)
        );
        // client-go's metadata client: protobuf first, which is skipped for the JSON form.
        let client_go = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,\
                         application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(read_format(Some(client_go)).unwrap(), list(TableVersion::V1));
        // Another group or version, or none: not this form.
        for accept in [
            "application/json;as=PartialObjectMetadata;g=example.com;v=v1",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v2",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io",
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        ] {
            assert_eq!(read_format(Some(accept)).unwrap_err().code, 406, "{accept}");
        }
    }

    #[test]
    fn bodies_are_json_or_yaml_or_415() {
        assert_eq!(
            &*json_body(Some("application/json; charset=utf-8"), b"{}", None).unwrap(),
            b"{}"
        );
        assert_eq!(&*json_body(None, b"{}", None).unwrap(), b"{}");
        let yaml = json_body(Some("application/yaml"), b"metadata:\n  name: x\n", None).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&yaml).unwrap()["metadata"]["name"],
            "x"
        );
        assert_eq!(
            json_body(Some("application/vnd.kubernetes.protobuf"), b"k8s\0", None)
                .unwrap_err()
                .code,
            415
        );
        assert_eq!(json_body(Some("text/plain"), b"{}", None).unwrap_err().code, 415);
        let pod = "io.k8s.api.core.v1.Pod";
        let raw = protobuf::encode_json(
            pod,
            serde_json::json!({"metadata": {"name": "p"}})
                .as_object()
                .unwrap(),
        )
        .unwrap();
        let body = protobuf::envelope("v1", "Pod", &raw);
        let json = json_body(Some("application/vnd.kubernetes.protobuf"), &body, Some(pod)).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&json).unwrap(),
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
        );
        for bad in [&b"{}"[..], b"k8s\0\x12\x05ab", &body[..body.len() - 9]] {
            let err = json_body(Some("application/vnd.kubernetes.protobuf"), bad, Some(pod)).unwrap_err();
            assert_eq!(err.code, 400, "{bad:?}");
        }
        assert_eq!(
            json_body(Some("application/yaml"), b"a: [", None)
                .unwrap_err()
                .code,
            400
        );
    }
}
