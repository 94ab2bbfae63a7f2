//! PATCH bodies: which kind of patch a request carries (its `Content-Type`), and applying one
//! to an object. Server-side apply (`application/apply-patch+yaml`) keeps field ownership and
//! lives in [`apply`](crate::apply); the other three are here.
//!
//! As the apiserver answers: an unknown patch type is 415, a body that is not a patch of its
//! type is 400, and a patch that cannot apply to the object (a failed JSON-patch `test`, a path
//! that is not there, an element without its merge key) is 422.

use serde_json::{Map, Value};
use watchcache_encoders::Status;

use crate::strategic;

/// The four patch types the apiserver accepts.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum PatchType {
    /// `application/json-patch+json`: RFC 6902 operations.
    Json,
    /// `application/merge-patch+json`: RFC 7396.
    Merge,
    /// `application/strategic-merge-patch+json`: merge keys and directives.
    Strategic,
    /// `application/apply-patch+yaml`: server-side apply.
    Apply,
}

impl PatchType {
    /// The patch type of a request's `Content-Type` (parameters such as `charset` ignored); an
    /// unknown or missing one is 415.
    pub(crate) fn from_content_type(content_type: Option<&str>) -> Result<PatchType, Status> {
        let media = content_type
            .and_then(|ct| ct.split(';').next())
            .map(|m| m.trim().to_ascii_lowercase());
        match media.as_deref() {
            Some("application/json-patch+json") => Ok(PatchType::Json),
            Some("application/merge-patch+json") => Ok(PatchType::Merge),
            Some("application/strategic-merge-patch+json") => Ok(PatchType::Strategic),
            Some("application/apply-patch+yaml" | "application/apply-patch+json") => Ok(PatchType::Apply),
            other => Err(Status::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format ({}) - accepted media types include: \
                     application/json-patch+json, application/merge-patch+json, \
                     application/strategic-merge-patch+json, application/apply-patch+yaml",
                    other.unwrap_or("no Content-Type")
                ),
            )),
        }
    }
}

/// A JSON, merge or strategic patch, parsed once and applied to as many attempts as a
/// conflicting write makes.
pub(crate) enum Patch {
    Json(json_patch::Patch),
    Merge(Value),
    Strategic(Map<String, Value>),
}

impl Patch {
    /// Parses a body of `ty` (not `Apply`); a body that is not such a patch is 400.
    pub(crate) fn parse(ty: PatchType, body: &[u8]) -> Result<Patch, Status> {
        let bad = |e: serde_json::Error| Status::bad_request(format!("invalid {ty:?} patch body: {e}"));
        match ty {
            PatchType::Json => serde_json::from_slice(body).map(Patch::Json).map_err(bad),
            PatchType::Merge => serde_json::from_slice(body).map(Patch::Merge).map_err(bad),
            PatchType::Strategic => match serde_json::from_slice(body).map_err(bad)? {
                Value::Object(m) => Ok(Patch::Strategic(m)),
                _ => Err(Status::bad_request(
                    "a strategic merge patch must be a JSON object",
                )),
            },
            PatchType::Apply => Err(Status::internal("an apply patch is applied by the field manager")),
        }
    }

    /// Applies the patch to `object`, of `kind`; the result must still be an object.
    pub(crate) fn apply_to(
        &self,
        kind: &str,
        object: Map<String, Value>,
    ) -> Result<Map<String, Value>, Status> {
        let cannot = |e: &dyn std::fmt::Display| Status::invalid(format!("the patch cannot be applied: {e}"));
        let result = match self {
            Patch::Json(ops) => {
                let mut doc = Value::Object(object);
                for op in ops.iter() {
                    // As the apiserver's JSON patch has it, a `test` for null passes where the
                    // path is missing (kube-runtime's finalizer() relies on it).
                    if let json_patch::PatchOperation::Test(t) = op
                        && t.value.is_null()
                        && doc.pointer(t.path.as_str()).is_none()
                    {
                        continue;
                    }
                    json_patch::patch(&mut doc, std::slice::from_ref(op)).map_err(|e| cannot(&e))?;
                }
                doc
            }
            Patch::Merge(patch) => {
                let mut doc = Value::Object(object);
                json_patch::merge(&mut doc, patch);
                doc
            }
            Patch::Strategic(patch) => {
                let mut object = object;
                strategic::apply(kind, &mut object, patch).map_err(|e| cannot(&e))?;
                Value::Object(object)
            }
        };
        match result {
            Value::Object(m) => Ok(m),
            other => Err(cannot(&format!("the result is not an object: {other}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn content_types_map_to_patch_types_and_others_are_415() {
        assert_eq!(
            PatchType::from_content_type(Some("application/merge-patch+json; charset=utf-8")).unwrap(),
            PatchType::Merge
        );
        assert_eq!(
            PatchType::from_content_type(Some("Application/JSON-Patch+JSON")).unwrap(),
            PatchType::Json
        );
        for ct in [None, Some("application/json"), Some("text/plain"), Some("")] {
            assert_eq!(PatchType::from_content_type(ct).unwrap_err().code, 415, "{ct:?}");
        }
    }

    #[test]
    fn a_failed_json_patch_test_is_422_and_a_bad_body_400() {
        let p = Patch::parse(
            PatchType::Json,
            br#"[{"op":"test","path":"/data/a","value":"2"}]"#,
        )
        .unwrap();
        let err = p
            .apply_to("ConfigMap", obj(json!({"data": {"a": "1"}})))
            .unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(Patch::parse(PatchType::Json, b"{}").err().unwrap().code, 400);
        assert_eq!(
            Patch::parse(PatchType::Strategic, b"[1]").err().unwrap().code,
            400
        );
        let p = Patch::parse(PatchType::Json, br#"[{"op":"replace","path":"","value":7}]"#).unwrap();
        assert_eq!(p.apply_to("ConfigMap", obj(json!({}))).unwrap_err().code, 422);
    }

    #[test]
    fn a_json_patch_test_for_null_passes_on_a_missing_path() {
        let p = Patch::parse(
            PatchType::Json,
            br#"[{"op":"test","path":"/metadata/finalizers","value":null},{"op":"add","path":"/metadata/finalizers","value":["f"]}]"#,
        )
        .unwrap();
        let out = p
            .apply_to("ConfigMap", obj(json!({"metadata": {"name": "c"}})))
            .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["f"]));
        // Present and not null, it fails.
        assert_eq!(p.apply_to("ConfigMap", out).unwrap_err().code, 422);
    }

    #[test]
    fn json_and_merge_patches_apply() {
        let p = Patch::parse(
            PatchType::Json,
            br#"[{"op":"test","path":"/data/a","value":"1"},{"op":"add","path":"/data/b","value":"2"}]"#,
        )
        .unwrap();
        let out = p.apply_to("ConfigMap", obj(json!({"data": {"a": "1"}}))).unwrap();
        assert_eq!(out["data"], json!({"a": "1", "b": "2"}));
        let p = Patch::parse(PatchType::Merge, br#"{"data":{"a":null,"c":"3"}}"#).unwrap();
        let out = p
            .apply_to("ConfigMap", obj(json!({"data": {"a": "1", "b": "2"}})))
            .unwrap();
        assert_eq!(out["data"], json!({"b": "2", "c": "3"}));
        // A merge patch replaces lists whole, even a pod's containers.
        let p = Patch::parse(PatchType::Merge, br#"{"spec":{"containers":[{"name":"b"}]}}"#).unwrap();
        let out = p
            .apply_to(
                "Pod",
                obj(json!({"spec": {"containers": [{"name": "a"}, {"name": "b", "image": "x"}]}})),
            )
            .unwrap();
        assert_eq!(out["spec"]["containers"], json!([{"name": "b"}]));
    }
}
