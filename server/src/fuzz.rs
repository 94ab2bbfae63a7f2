//! Entry points for the fuzz targets in `fuzz/` (built only under `--cfg fuzzing`, which
//! cargo-fuzz sets): request parsing that is not public API.

use watchcache_core::{Codec, Revision};
use watchcache_encoders::{JsonCodec, ResourceInfo};

use serde_json::{Map, Value, json};

use crate::handlers::params::{DeleteParams, Params, WriteParams};
use watchcache_api::mutation::apply;
use watchcache_api::mutation::fields::{self, Writer};
use watchcache_api::mutation::patch::{MAX_COPY_BYTES, MAX_OPERATIONS, Patch, PatchType};
use watchcache_api::mutation::strategic::ListRules;
use watchcache_api::validation;

use crate::handlers::writes::{Addressed, object_from_body};
use crate::store::resources::NameRule;
use watchcache_api::mutation::yaml;

/// Parses `query` as every verb would: LIST and WATCH options, write and DELETE parameters.
pub fn query(query: &str, body: &[u8]) {
    if let Ok(p) = Params::parse(Some(query)) {
        let _ = p.list_options(Some("ns"));
        let _ = p.watch_options(None);
    }
    let _ = WriteParams::parse(Some(query));
    let _ = DeleteParams::parse(Some(query), body);
}

/// The built-in kinds, made once.
fn builtin() -> &'static watchcache_api::Registry {
    static REGISTRY: std::sync::OnceLock<watchcache_api::Registry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(watchcache_api::Registry::builtin)
}

/// Checks `body` as a create and as an update of a namespaced and of a cluster-scoped
/// resource; a body accepted must be one its codec decodes.
pub fn write_body(body: &[u8]) {
    let pods = ResourceInfo::new("pods", "Pod", "v1");
    let namespaces = ResourceInfo::new("namespaces", "Namespace", "v1");
    for (info, namespaced, namespace, names) in [
        (&pods, true, Some("ns"), NameRule::Subdomain),
        (&namespaces, false, None, NameRule::Label),
    ] {
        let addressed = Addressed {
            info,
            namespaced,
            names,
            namespace,
        };
        let codec = JsonCodec::new(namespaced, &["spec.nodeName", "status.phase"]);
        for name in [None, Some("named")] {
            if let Ok(object) = object_from_body(&addressed, body, name) {
                // Every kind's strategy (defaulting, initial status, validation) and printer
                // take any object without a panic, as a create and as an update.
                for spec in builtin().iter() {
                    let mut converted = object.clone();
                    if let Some(convert) = spec.strategy.on_write {
                        convert(&mut converted);
                    }
                    if let Some(default) = spec.strategy.default {
                        default(&mut converted);
                    }
                    if let Some(initial) = spec.strategy.initial_status {
                        initial(&mut converted);
                    }
                    let _ = validation::on_create(spec.strategy.checks, &converted);
                    let _ = validation::on_update(spec.strategy.checks, &converted, &object);
                    let _ = spec.printer.cells(
                        &serde_json::Value::Object(converted),
                        std::time::SystemTime::now(),
                    );
                }
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
        ListRules::BuiltIn("Pod"),
        &mut managers,
        &Writer {
            manager: "creator",
            subresource: "",
            api_version: "v1",
            time: "t",
        },
        &serde_json::Map::new(),
        &pod,
    );
    let mut owned = pod.clone();
    fields::set_managers(&mut owned, &managers, "v1");
    for ty in [PatchType::Json, PatchType::Merge, PatchType::Strategic] {
        if let Ok(p) = Patch::parse(ty, body)
            && let Ok(after) = p.apply_to(ListRules::BuiltIn("Pod"), owned.clone())
        {
            let mut m = fields::managers(&owned);
            fields::record_update(
                ListRules::BuiltIn("Pod"),
                &mut m,
                &Writer {
                    manager: "patcher",
                    subresource: "",
                    api_version: "v1",
                    time: "t",
                },
                &owned,
                &after,
            );
        }
    }
    if let Ok(config) = apply::parse(body)
        && let Ok(applied) = apply::apply(
            ListRules::BuiltIn("Pod"),
            "v1",
            Some(&owned),
            &config,
            "applier",
            false,
            "t",
        )
    {
        let _ = apply::apply(
            ListRules::BuiltIn("Pod"),
            "v1",
            Some(&applied),
            &config,
            "other",
            true,
            "t",
        );
        let _ = apply::apply(
            ListRules::BuiltIn("Pod"),
            "v1",
            Some(&applied),
            &serde_json::Map::new(),
            "applier",
            false,
            "t",
        );
    }
}

/// Pointers a generated JSON patch uses: maps, a list, strings, the root, and ones that are
/// not there.
const POINTERS: &[&str] = &[
    "",
    "/data",
    "/data/a",
    "/data/b",
    "/data/d",
    "/data/d/a",
    "/metadata/annotations",
    "/metadata/annotations/x",
    "/metadata/finalizers",
    "/metadata/finalizers/0",
    "/metadata/finalizers/-",
    "/missing/path",
];

/// A JSON patch made from `data`, applied to a config map: a body that does not start with
/// `[` is read as operations, two bytes each (which operation, which pointers), so that most
/// inputs are patches that copy, move and add, and the fuzzer explores how far they can grow
/// a document. Whatever is accepted is no larger than the document, the copies allowed and
/// what the body spells out (a value written in a patch can take more bytes once written
/// again: `1e15` is `1000000000000000.0`, under five times) together; more operations than
/// allowed are refused.
pub fn json_patch_growth(data: &[u8]) {
    let body = if data.first() == Some(&b'[') {
        data.to_vec()
    } else {
        let ops: Vec<Value> = data
            .chunks(2)
            .map(|c| {
                let (a, b) = (c[0], c.get(1).copied().unwrap_or(0));
                let path = POINTERS[usize::from(b) % POINTERS.len()];
                let from = POINTERS[usize::from(b / 16) % POINTERS.len()];
                match a % 6 {
                    0 | 1 => json!({"op": "copy", "from": from, "path": path}),
                    2 => json!({"op": "move", "from": from, "path": path}),
                    3 => json!({"op": "add", "path": path, "value": {"a": "x".repeat(usize::from(a))}}),
                    4 => json!({"op": "remove", "path": path}),
                    _ => json!({"op": "test", "path": path, "value": null}),
                }
            })
            .collect();
        serde_json::to_vec(&ops).expect("a patch serialises")
    };
    let doc = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "ns", "finalizers": ["f"]},
        "data": {"a": "0123456789abcdef", "d": {"a": "x"}}
    });
    let Value::Object(doc) = doc else {
        unreachable!("an object literal");
    };
    let doc_len = serde_json::to_vec(&doc).expect("serialises").len();
    let patch = match Patch::parse(PatchType::Json, &body) {
        Ok(p) => p,
        Err(s) => {
            let ops = serde_json::from_slice::<Vec<Value>>(&body).map_or(0, |v| v.len());
            assert!(s.code != 413 || ops > MAX_OPERATIONS, "{ops} operations refused");
            return;
        }
    };
    if let Ok(after) = patch.apply_to(ListRules::BuiltIn("ConfigMap"), doc) {
        let len = serde_json::to_vec(&after).expect("serialises").len();
        assert!(
            len <= doc_len + 5 * body.len() + MAX_COPY_BYTES,
            "a {}-byte patch grew a {doc_len}-byte document to {len} bytes",
            body.len()
        );
    }
}

/// Values and bytes a JSON value holds, as the YAML reader spends its budget on them.
fn units(v: &Value) -> usize {
    1 + match v {
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().map(units).sum(),
        Value::Object(m) => m.iter().map(|(k, v)| 1 + k.len() + units(v)).sum(),
        _ => 0,
    }
}

/// A YAML apply body made from `data`: read as it is when it starts with a printable byte,
/// otherwise built from it as anchors and aliases (each level a flow list of aliases to the
/// levels before, so the fuzzer explores how far aliases can expand a small body). What the
/// reader accepts holds no more than its budget; what it accepts is then applied to a pod.
pub fn yaml_apply(data: &[u8]) {
    let body = match data.first() {
        Some(b) if b.is_ascii_graphic() || b.is_ascii_whitespace() => data.to_vec(),
        _ => {
            let mut yaml = String::from("metadata:\n  name: p\n  annotations:\n    l0: &l0 lol\n");
            for (i, &n) in data.iter().enumerate().skip(1).take(12) {
                let refs: Vec<String> = (0..usize::from(n % 16) + 1)
                    .map(|r| format!("*l{}", (i + r) % i))
                    .collect();
                yaml.push_str(&format!("    l{i}: &l{i} [{}]\n", refs.join(", ")));
            }
            yaml.into_bytes()
        }
    };
    let Ok(value) = yaml::parse(&body) else {
        return;
    };
    let spent = units(&value);
    assert!(
        spent <= yaml::budget(body.len()),
        "a {}-byte YAML body expanded to {spent} values and bytes",
        body.len()
    );
    if let Ok(config) = apply::parse(&body) {
        let live = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
                          "spec": {"containers": [{"name": "a", "image": "a"}]}});
        let Value::Object(live) = live else {
            unreachable!("an object literal");
        };
        if let Ok(applied) = apply::apply(
            ListRules::BuiltIn("Pod"),
            "v1",
            Some(&live),
            &config,
            "applier",
            false,
            "t",
        ) {
            let _ = apply::apply(
                ListRules::BuiltIn("Pod"),
                "v1",
                Some(&applied),
                &Map::new(),
                "applier",
                false,
                "t",
            );
        }
    }
}

/// Reads a request as authorization reads it: `data`'s first byte picks the method, the rest
/// is a path with an optional `?query`. Attributes come out (or a typed refusal), the 403
/// message is made from them, and the path and query bytes are read as a review in protobuf.
pub fn request_attributes(data: &[u8]) {
    const METHODS: &[&str] = &[
        "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "PROPFIND",
    ];
    let Some((&m, rest)) = data.split_first() else {
        return;
    };
    let _ = crate::auth::access_review_from_protobuf(rest);
    let _ = crate::auth::rules_review_from_protobuf(rest);
    let Ok(target) = std::str::from_utf8(rest) else {
        return;
    };
    let method = METHODS[usize::from(m) % METHODS.len()];
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let user = std::sync::Arc::new(crate::auth::UserInfo::anonymous());
    if let Ok(a) = crate::auth::attributes(user, method, path, query) {
        let status = crate::handlers::errors::forbidden(&a, "");
        assert_eq!(status.code, 403);
        // A non-resource request names no resource. (Empty segments are read as the
        // apiserver reads them: `/api/v1/pods//status` has an empty name and a subresource.)
        let named = [&a.api_group, &a.api_version, &a.resource, &a.namespace, &a.name];
        assert!(a.resource_request || named.iter().all(|s| s.is_empty()), "{a:?}");
        assert!(a.path == path, "{a:?}");
    }
}
