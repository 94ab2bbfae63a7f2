//! Entry points for the fuzz targets in `fuzz/` (built only under `--cfg fuzzing`, which
//! cargo-fuzz sets): request parsing that is not public API.

use watchcache_core::{Codec, Revision};
use watchcache_encoders::{JsonCodec, ResourceInfo};

use crate::params::{DeleteParams, Params, WriteParams};
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
