//! Entry points for the fuzz targets in `fuzz/` (built only under `--cfg fuzzing`, which
//! cargo-fuzz sets): request parsing that is not public API.

use watchcache_core::{Codec, Revision};
use watchcache_encoders::{JsonCodec, ResourceInfo};

use crate::apply;
use crate::fields;
use crate::params::{DeleteParams, Params, WriteParams};
use crate::patch::{Patch, PatchType};
use crate::writes::{Addressed, object_from_body};

/// Parses `query` as every verb would: LIST and WATCH options, write and DELETE parameters.
pub fn query(query: &str, body: &[u8]) {
    if let Ok(p) = Params::parse(Some(query)) {
        let _ = p.list_options(Some("ns"));
        let _ = p.watch_options(None);
    }
    let _ = WriteParams::parse(Some(query));
    let _ = DeleteParams::parse(Some(query), body);
}

/// Checks `body` as a create and as an update of a namespaced and of a cluster-scoped
/// resource; a body accepted must be one its codec decodes.
pub fn write_body(body: &[u8]) {
    let pods = ResourceInfo::new("pods", "Pod", "v1");
    let namespaces = ResourceInfo::new("namespaces", "Namespace", "v1");
    for (info, namespaced, namespace) in [(&pods, true, Some("ns")), (&namespaces, false, None)] {
        let addressed = Addressed {
            info,
            namespaced,
            namespace,
        };
        let codec = JsonCodec::new(namespaced, &["spec.nodeName", "status.phase"]);
        for name in [None, Some("named")] {
            if let Ok(object) = object_from_body(&addressed, body, name) {
                // Validation takes any object without a panic, as a create and as an update.
                let _ = crate::validation::on_create(&info.kind, &object);
                let _ = crate::validation::on_update(&info.kind, &object, &object);
                let raw = serde_json::to_vec(&object).expect("a JSON object serialises");
                if let Err(e) = codec.decode(&raw, Revision::new(1)) {
                    // Only values the codec reads itself may still be refused (labels that are
                    // not strings, a namespace that is not a string): never a name or a
                    // namespace the body checks passed.
                    let text = e.to_string();
                    assert!(!text.contains("metadata.name"), "accepted, then refused: {text}");
                }
            }
        }
    }
}

/// Applies `body` as a JSON, merge and strategic patch to a pod with owners, and as an apply
/// configuration (plain, then forced by a second manager); records each result as an update.
pub fn patch(body: &[u8]) {
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "1"}, "finalizers": ["f"]},
        "spec": {"containers": [{"name": "a", "image": "a", "env": [{"name": "E", "value": "1"}]},
                                {"name": "b", "image": "b", "ports": [{"containerPort": 80}]}],
                 "volumes": [{"name": "v", "emptyDir": {}}]}
    });
    let serde_json::Value::Object(pod) = pod else {
        unreachable!("an object literal");
    };
    let mut managers = Vec::new();
    fields::record_update(
        "Pod",
        &mut managers,
        "creator",
        "",
        "t",
        &serde_json::Map::new(),
        &pod,
    );
    let mut owned = pod.clone();
    fields::set_managers(&mut owned, &managers, "v1");
    for ty in [PatchType::Json, PatchType::Merge, PatchType::Strategic] {
        if let Ok(p) = Patch::parse(ty, body)
            && let Ok(after) = p.apply_to("Pod", owned.clone())
        {
            let mut m = fields::managers(&owned);
            fields::record_update("Pod", &mut m, "patcher", "", "t", &owned, &after);
        }
    }
    if let Ok(config) = apply::parse(body)
        && let Ok(applied) = apply::apply("Pod", "v1", Some(&owned), &config, "applier", false, "t")
    {
        let _ = apply::apply("Pod", "v1", Some(&applied), &config, "other", true, "t");
        let _ = apply::apply(
            "Pod",
            "v1",
            Some(&applied),
            &serde_json::Map::new(),
            "applier",
            false,
            "t",
        );
    }
}
