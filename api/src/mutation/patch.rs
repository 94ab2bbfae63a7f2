//! PATCH bodies: which kind of patch a request carries (its `Content-Type`), and applying one
//! to an object. Server-side apply (`application/apply-patch+yaml`) keeps field ownership and
//! lives in [`apply`](crate::mutation::apply); the other three are here.
//!
//! As the apiserver answers: an unknown patch type is 415, a body that is not a patch of its
//! type is 400, and a patch that cannot apply to the object (a failed JSON-patch `test`, a path
//! that is not there, an element without its merge key) is 422.
//!
//! A JSON patch is bounded as the apiserver bounds it, since a few hundred bytes of `copy`
//! operations can double a document again and again: at most [`MAX_OPERATIONS`] operations
//! (413), and its copies may add at most [`MAX_COPY_BYTES`] of JSON in all (422). What the
//! other operations add is in the body, whose size is bounded already.

use serde_json::{Map, Value};
use watchcache_encoders::Status;

use crate::mutation::strategic::{self, ListRules};

/// The most operations a JSON patch may have, as the apiserver allows.
pub const MAX_OPERATIONS: usize = 10_000;

/// The most bytes of JSON a JSON patch's copies may add up to, as the apiserver allows (its
/// `JSONPatchMaxCopyBytes`): twice etcd's request limit.
pub const MAX_COPY_BYTES: usize = 3 << 20;

/// A JSON patch past its bounds.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PatchLimit {
    /// More operations than the apiserver takes (it has this many).
    #[error("a JSON patch may have at most {MAX_OPERATIONS} operations; this one has {0}")]
    Operations(usize),
    /// Copies that add more than their bound.
    #[error("its copy operations add more than {MAX_COPY_BYTES} bytes")]
    Copies,
}

/// The four patch types the apiserver accepts.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PatchType {
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
    pub fn from_content_type(content_type: Option<&str>) -> Result<PatchType, Status> {
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
pub enum Patch {
    /// RFC 6902 operations.
    Json(json_patch::Patch),
    /// An RFC 7386 merge patch.
    Merge(Value),
    /// A strategic merge patch ([`strategic`]).
    Strategic(Map<String, Value>),
}

impl Patch {
    /// Parses a body of `ty` (not `Apply`); a body that is not such a patch is 400.
    pub fn parse(ty: PatchType, body: &[u8]) -> Result<Patch, Status> {
        let bad = |e: serde_json::Error| Status::bad_request(format!("invalid {ty:?} patch body: {e}"));
        match ty {
            PatchType::Json => {
                let ops: json_patch::Patch = serde_json::from_slice(body).map_err(bad)?;
                if ops.len() > MAX_OPERATIONS {
                    return Err(PatchLimit::Operations(ops.len()).into());
                }
                Ok(Patch::Json(ops))
            }
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

    /// Applies the patch to `object`, whose lists merge as `rules` says; the result must still
    /// be an object.
    pub fn apply_to(
        &self,
        rules: ListRules<'_>,
        object: Map<String, Value>,
    ) -> Result<Map<String, Value>, Status> {
        let cannot = |e: &dyn std::fmt::Display| Status::invalid(format!("the patch cannot be applied: {e}"));
        let result = match self {
            Patch::Json(ops) => {
                let mut doc = Value::Object(object);
                let mut copied = 0usize;
                for op in ops.iter() {
                    if let json_patch::PatchOperation::Copy(c) = op
                        && let Some(from) = doc.pointer(c.from.as_str())
                    {
                        copied = json_len_within(from, MAX_COPY_BYTES - copied)
                            .map(|n| copied + n)
                            .ok_or(PatchLimit::Copies)?;
                    }
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
                strategic::apply(rules, &mut object, patch).map_err(|e| cannot(&e))?;
                Value::Object(object)
            }
        };
        match result {
            Value::Object(m) => Ok(m),
            other => Err(cannot(&format!("the result is not an object: {other}"))),
        }
    }
}

/// The length of `v` as compact JSON, if it is at most `limit`: counted while writing it out,
/// and stopped once past the limit.
fn json_len_within(v: &Value, limit: usize) -> Option<usize> {
    struct Counter {
        n: usize,
        limit: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.n += buf.len();
            if self.n > self.limit {
                return Err(std::io::Error::other("over the limit"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Counter { n: 0, limit };
    serde_json::to_writer(&mut c, v).ok().map(|()| c.n)
}

/// A JSON patch past the apiserver's bounds: too many operations is 413, copies that add up
/// past their bound 422 (as any patch that cannot apply). A conversion, so that
/// [`Patch::apply_to`] returns it with `?`.
impl From<PatchLimit> for Status {
    fn from(e: PatchLimit) -> Status {
        match e {
            PatchLimit::Operations(_) => Status::new(413, "RequestEntityTooLarge", e.to_string()),
            PatchLimit::Copies => Status::invalid(format!("the patch cannot be applied: {e}")),
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
    fn a_patch_past_its_bounds_is_413_or_422() {
        assert_eq!(Status::from(PatchLimit::Operations(10_001)).code, 413);
        assert_eq!(Status::from(PatchLimit::Copies).code, 422);
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
            .apply_to(ListRules::BuiltIn("ConfigMap"), obj(json!({"data": {"a": "1"}})))
            .unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(Patch::parse(PatchType::Json, b"{}").err().unwrap().code, 400);
        assert_eq!(
            Patch::parse(PatchType::Strategic, b"[1]").err().unwrap().code,
            400
        );
        let p = Patch::parse(PatchType::Json, br#"[{"op":"replace","path":"","value":7}]"#).unwrap();
        assert_eq!(
            p.apply_to(ListRules::BuiltIn("ConfigMap"), obj(json!({})))
                .unwrap_err()
                .code,
            422
        );
    }

    #[test]
    fn json_patches_are_bounded_in_operations_and_in_what_their_copies_add() {
        let op = r#"{"op":"test","path":"/kind","value":"ConfigMap"}"#;
        let ops = |n: usize| format!("[{}]", vec![op; n].join(","));
        assert!(Patch::parse(PatchType::Json, ops(MAX_OPERATIONS).as_bytes()).is_ok());
        let err = Patch::parse(PatchType::Json, ops(MAX_OPERATIONS + 1).as_bytes())
            .err()
            .unwrap();
        assert_eq!((err.code, err.reason), (413, "RequestEntityTooLarge"));
        // 30 copies of a map into itself: 2^30 times its size, stopped at 3 MiB of copies.
        let mut doubling = vec![
            r#"{"op":"add","path":"/data","value":{"a":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}"#.to_owned(),
        ];
        for i in 0..30 {
            doubling.push(format!(r#"{{"op":"copy","from":"/data","path":"/data/d{i}"}}"#));
        }
        let p = Patch::parse(PatchType::Json, format!("[{}]", doubling.join(",")).as_bytes()).unwrap();
        let err = p
            .apply_to(ListRules::BuiltIn("ConfigMap"), obj(json!({})))
            .unwrap_err();
        assert_eq!(err.code, 422);
        assert!(err.message.contains("copy"), "{}", err.message);
        // A copy within the bound applies.
        let p = Patch::parse(
            PatchType::Json,
            br#"[{"op":"copy","from":"/data/a","path":"/data/b"}]"#,
        )
        .unwrap();
        let out = p
            .apply_to(ListRules::BuiltIn("ConfigMap"), obj(json!({"data": {"a": "1"}})))
            .unwrap();
        assert_eq!(out["data"], json!({"a": "1", "b": "1"}));
        assert_eq!(json_len_within(&json!({"a": "1"}), 100), Some(9));
        assert_eq!(json_len_within(&json!({"a": "1"}), 8), None);
    }

    #[test]
    fn a_json_patch_test_for_null_passes_on_a_missing_path() {
        let p = Patch::parse(
            PatchType::Json,
            br#"[{"op":"test","path":"/metadata/finalizers","value":null},{"op":"add","path":"/metadata/finalizers","value":["f"]}]"#,
        )
        .unwrap();
        let out = p
            .apply_to(
                ListRules::BuiltIn("ConfigMap"),
                obj(json!({"metadata": {"name": "c"}})),
            )
            .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["f"]));
        // Present and not null, it fails.
        assert_eq!(
            p.apply_to(ListRules::BuiltIn("ConfigMap"), out).unwrap_err().code,
            422
        );
    }

    #[test]
    fn json_and_merge_patches_apply() {
        let p = Patch::parse(
            PatchType::Json,
            br#"[{"op":"test","path":"/data/a","value":"1"},{"op":"add","path":"/data/b","value":"2"}]"#,
        )
        .unwrap();
        let out = p
            .apply_to(ListRules::BuiltIn("ConfigMap"), obj(json!({"data": {"a": "1"}})))
            .unwrap();
        assert_eq!(out["data"], json!({"a": "1", "b": "2"}));
        let p = Patch::parse(PatchType::Merge, br#"{"data":{"a":null,"c":"3"}}"#).unwrap();
        let out = p
            .apply_to(
                ListRules::BuiltIn("ConfigMap"),
                obj(json!({"data": {"a": "1", "b": "2"}})),
            )
            .unwrap();
        assert_eq!(out["data"], json!({"b": "2", "c": "3"}));
        // A merge patch replaces lists whole, even a pod's containers.
        let p = Patch::parse(PatchType::Merge, br#"{"spec":{"containers":[{"name":"b"}]}}"#).unwrap();
        let out = p
            .apply_to(
                ListRules::BuiltIn("Pod"),
                obj(json!({"spec": {"containers": [{"name": "a"}, {"name": "b", "image": "x"}]}})),
            )
            .unwrap();
        assert_eq!(out["spec"]["containers"], json!([{"name": "b"}]));
    }
}
