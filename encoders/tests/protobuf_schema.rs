//! Generates `src/protobuf/generated.rs`, the protobuf schema of the served types, and fails
//! when the committed file differs from what it would generate.
//!
//! The schema is not written by hand. Field numbers and types come from the k8s-pb crate
//! (prost code generated from the published Kubernetes `.proto` files); JSON field names come
//! from k8s-openapi's schemas (generated from the published OpenAPI document), matched to the
//! protobuf fields the way protoc-gen-gogo derived the Go names (case and underscores aside,
//! they are the same name). Regenerate after bumping either crate with
//! `WATCHCACHE_BLESS=1 cargo test -p watchcache-encoders --test protobuf_schema`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use k8s_openapi::schemars::generate::SchemaSettings;
use serde_json::Value;

/// The messages the server reads and writes; everything they reach is generated too.
const ROOTS: &[&str] = &[
    "api::core::v1::Pod",
    "api::core::v1::PodList",
    "api::core::v1::Node",
    "api::core::v1::NodeList",
    "api::core::v1::Namespace",
    "api::core::v1::NamespaceList",
    "api::core::v1::ConfigMap",
    "api::core::v1::ConfigMapList",
    "api::core::v1::Secret",
    "api::core::v1::SecretList",
    "api::core::v1::Event",
    "api::core::v1::EventList",
    "api::coordination::v1::Lease",
    "api::coordination::v1::LeaseList",
    "api::rbac::v1::Role",
    "api::rbac::v1::RoleList",
    "api::rbac::v1::ClusterRole",
    "api::rbac::v1::ClusterRoleList",
    "api::rbac::v1::RoleBinding",
    "api::rbac::v1::RoleBindingList",
    "api::rbac::v1::ClusterRoleBinding",
    "api::rbac::v1::ClusterRoleBindingList",
    "api::core::v1::Service",
    "api::core::v1::ServiceList",
    "api::core::v1::Endpoints",
    "api::core::v1::EndpointsList",
    "api::core::v1::ServiceAccount",
    "api::core::v1::ServiceAccountList",
    "api::core::v1::PersistentVolume",
    "api::core::v1::PersistentVolumeList",
    "api::core::v1::PersistentVolumeClaim",
    "api::core::v1::PersistentVolumeClaimList",
    "api::core::v1::ReplicationController",
    "api::core::v1::ReplicationControllerList",
    "api::core::v1::PodTemplate",
    "api::core::v1::PodTemplateList",
    "api::core::v1::LimitRange",
    "api::core::v1::LimitRangeList",
    "api::core::v1::ResourceQuota",
    "api::core::v1::ResourceQuotaList",
    "api::apps::v1::Deployment",
    "api::apps::v1::DeploymentList",
    "api::apps::v1::ReplicaSet",
    "api::apps::v1::ReplicaSetList",
    "api::apps::v1::StatefulSet",
    "api::apps::v1::StatefulSetList",
    "api::apps::v1::DaemonSet",
    "api::apps::v1::DaemonSetList",
    "api::apps::v1::ControllerRevision",
    "api::apps::v1::ControllerRevisionList",
    "api::batch::v1::Job",
    "api::batch::v1::JobList",
    "api::batch::v1::CronJob",
    "api::batch::v1::CronJobList",
    "api::discovery::v1::EndpointSlice",
    "api::discovery::v1::EndpointSliceList",
    "api::networking::v1::Ingress",
    "api::networking::v1::IngressList",
    "api::networking::v1::IngressClass",
    "api::networking::v1::IngressClassList",
    "api::networking::v1::NetworkPolicy",
    "api::networking::v1::NetworkPolicyList",
    "api::policy::v1::PodDisruptionBudget",
    "api::policy::v1::PodDisruptionBudgetList",
    "api::autoscaling::v2::HorizontalPodAutoscaler",
    "api::autoscaling::v2::HorizontalPodAutoscalerList",
    "api::storage::v1::StorageClass",
    "api::storage::v1::StorageClassList",
    "api::scheduling::v1::PriorityClass",
    "api::scheduling::v1::PriorityClassList",
    "api::events::v1::Event",
    "api::events::v1::EventList",
    "api::autoscaling::v1::Scale",
    "api::policy::v1::Eviction",
    "apimachinery::pkg::apis::meta::v1::Status",
    "apimachinery::pkg::apis::meta::v1::DeleteOptions",
    "apimachinery::pkg::apis::meta::v1::WatchEvent",
    "apimachinery::pkg::runtime::Unknown",
];

/// Messages whose JSON form is not their protobuf fields: the transcoder handles each itself.
const SPECIAL: &[(&str, &str)] = &[
    ("apimachinery::pkg::apis::meta::v1::Time", "Time"),
    ("apimachinery::pkg::apis::meta::v1::MicroTime", "MicroTime"),
    ("apimachinery::pkg::apis::meta::v1::FieldsV1", "FieldsV1"),
    ("apimachinery::pkg::util::intstr::IntOrString", "IntOrString"),
    ("apimachinery::pkg::api::resource::Quantity", "Quantity"),
    ("apimachinery::pkg::runtime::RawExtension", "RawExtension"),
];

#[derive(Debug)]
struct PbField {
    /// prost's snake_case name.
    name: String,
    tag: u32,
    /// string, bool, int32, int64, double, bytes, message, or map.
    kind: String,
    repeated: bool,
    /// For maps, the value kind.
    map_value: Option<String>,
    /// For messages (and maps of messages), the resolved path.
    type_path: Option<String>,
}

/// The triple of the machine the tests run on, as the rustc that cargo builds with names it.
fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let out = std::process::Command::new(rustc)
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names its host")
        .to_owned()
}

/// Where k8s-pb's sources are. `cargo metadata` reads the manifest of every package it lists:
/// filtered to this machine's platform it lists (and, when they are missing, downloads) only
/// the packages a build here uses, never the lock file's Windows-only ones, which a build on
/// Linux never fetched (`--offline` without the filter failed on a fresh `CARGO_HOME`).
fn k8s_pb_src() -> PathBuf {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--filter-platform"])
        .arg(host_triple())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pkg = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "k8s-pb")
        .expect("k8s-pb is a dev-dependency");
    Path::new(pkg["manifest_path"].as_str().unwrap())
        .parent()
        .unwrap()
        .join("src")
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// `super::super::x::Y` written in module `a::b::c` is `a::x::Y`.
fn resolve(module: &[&str], ty: &str) -> String {
    let mut parts: Vec<&str> = ty.split("::").filter(|p| !p.is_empty()).collect();
    let mut base = module.to_vec();
    while parts.first() == Some(&"super") {
        parts.remove(0);
        base.pop();
    }
    if parts.first() == Some(&"crate") {
        parts.remove(0);
        base.clear();
    }
    base.extend(parts);
    base.join("::")
}

/// The innermost type argument, with `Option`, `Vec` and `Box` peeled off.
fn inner(ty: &str) -> &str {
    let mut t = ty;
    for wrapper in [
        "::core::option::Option<",
        "::prost::alloc::vec::Vec<",
        "::prost::alloc::boxed::Box<",
    ] {
        if let Some(rest) = t.strip_prefix(wrapper) {
            t = inner(rest.strip_suffix('>').unwrap().trim_end_matches(','));
            return t;
        }
    }
    t
}

fn parse(src: &Path) -> BTreeMap<String, Vec<PbField>> {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    let mut messages = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap().with_extension("");
        let mut module: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
        if module.last().is_some_and(|m| m == "mod" || m == "lib") {
            module.pop();
        }
        let module: Vec<&str> = module.iter().map(String::as_str).collect();
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut current: Option<(String, Vec<PbField>)> = None;
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i].trim();
            if let Some(name) = line
                .strip_prefix("pub struct ")
                .and_then(|l| l.strip_suffix(" {"))
            {
                let mut path = module.clone();
                path.push(name);
                current = Some((path.join("::"), Vec::new()));
            } else if lines[i] == "}" {
                if let Some((path, fields)) = current.take() {
                    messages.insert(path, fields);
                }
            } else if let (Some(attr), Some((_, fields))) = (
                line.strip_prefix("#[prost(").and_then(|l| l.strip_suffix(")]")),
                current.as_mut(),
            ) {
                // The declaration follows, perhaps over several lines.
                let mut decl = String::new();
                i += 1;
                loop {
                    decl.push_str(lines[i].trim());
                    let opened = decl.matches('<').count();
                    if decl.ends_with(',') && opened == decl.matches('>').count() {
                        break;
                    }
                    i += 1;
                }
                let decl = decl.replace(' ', "");
                let decl = decl.strip_prefix("pub").unwrap().trim_end_matches(',');
                let (name, ty) = decl.split_once(':').unwrap();
                let name = name.trim_start_matches("r#").to_owned();
                let parts: Vec<&str> = attr.split(", ").collect();
                let tag = parts
                    .iter()
                    .find_map(|p| p.strip_prefix("tag = \""))
                    .and_then(|t| t.strip_suffix('"'))
                    .unwrap()
                    .parse()
                    .unwrap();
                let field = if let Some(map) = attr.strip_prefix("btree_map = \"string, ") {
                    let value = map.split('"').next().unwrap().to_owned();
                    let type_path = (value == "message").then(|| {
                        let args = ty
                            .strip_prefix(
                                "::prost::alloc::collections::BTreeMap<::prost::alloc::string::String,",
                            )
                            .unwrap()
                            .strip_suffix('>')
                            .unwrap();
                        resolve(&module, args.trim_end_matches(','))
                    });
                    PbField {
                        name,
                        tag,
                        kind: "map".into(),
                        repeated: false,
                        map_value: Some(value),
                        type_path,
                    }
                } else {
                    let kind = parts[0].split(' ').next().unwrap().to_owned();
                    let repeated = parts.contains(&"repeated");
                    let type_path = (kind == "message").then(|| resolve(&module, inner(ty)));
                    PbField {
                        name,
                        tag,
                        kind,
                        repeated,
                        map_value: None,
                        type_path,
                    }
                };
                fields.push(field);
            }
            i += 1;
        }
    }
    messages
}

fn normalize(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

fn lower_camel(snake: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn definitions() -> serde_json::Map<String, Value> {
    use k8s_openapi::api::autoscaling::v1 as autoscaling_v1;
    use k8s_openapi::api::autoscaling::v2 as autoscaling;
    use k8s_openapi::api::coordination::v1 as coordination;
    use k8s_openapi::api::core::v1 as core;
    use k8s_openapi::api::rbac::v1 as rbac;
    use k8s_openapi::api::{
        apps::v1 as apps, batch::v1 as batch, discovery::v1 as discovery, events::v1 as events,
        networking::v1 as networking, policy::v1 as policy, scheduling::v1 as scheduling,
        storage::v1 as storage,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
    let mut g = SchemaSettings::draft07().into_generator();
    g.subschema_for::<core::Pod>();
    g.subschema_for::<core::Node>();
    g.subschema_for::<core::Namespace>();
    g.subschema_for::<core::ConfigMap>();
    g.subschema_for::<core::Secret>();
    g.subschema_for::<core::Event>();
    g.subschema_for::<coordination::Lease>();
    // A root left out here still generates, its JSON names guessed from protobuf's
    // (`nonResourceUrLs` rather than `nonResourceURLs`): every root is here.
    g.subschema_for::<rbac::Role>();
    g.subschema_for::<rbac::ClusterRole>();
    g.subschema_for::<rbac::RoleBinding>();
    g.subschema_for::<rbac::ClusterRoleBinding>();
    g.subschema_for::<core::Service>();
    g.subschema_for::<core::Endpoints>();
    g.subschema_for::<core::ServiceAccount>();
    g.subschema_for::<core::PersistentVolume>();
    g.subschema_for::<core::PersistentVolumeClaim>();
    g.subschema_for::<core::ReplicationController>();
    g.subschema_for::<core::PodTemplate>();
    g.subschema_for::<core::LimitRange>();
    g.subschema_for::<core::ResourceQuota>();
    g.subschema_for::<apps::Deployment>();
    g.subschema_for::<apps::ReplicaSet>();
    g.subschema_for::<apps::StatefulSet>();
    g.subschema_for::<apps::DaemonSet>();
    g.subschema_for::<apps::ControllerRevision>();
    g.subschema_for::<batch::Job>();
    g.subschema_for::<batch::CronJob>();
    g.subschema_for::<discovery::EndpointSlice>();
    g.subschema_for::<networking::Ingress>();
    g.subschema_for::<networking::IngressClass>();
    g.subschema_for::<networking::NetworkPolicy>();
    g.subschema_for::<policy::PodDisruptionBudget>();
    g.subschema_for::<policy::Eviction>();
    g.subschema_for::<autoscaling::HorizontalPodAutoscaler>();
    g.subschema_for::<autoscaling_v1::Scale>();
    g.subschema_for::<storage::StorageClass>();
    g.subschema_for::<scheduling::PriorityClass>();
    g.subschema_for::<events::Event>();
    g.subschema_for::<meta::Status>();
    g.subschema_for::<meta::DeleteOptions>();
    g.subschema_for::<meta::ListMeta>();
    g.take_definitions(true)
}

fn generate() -> String {
    let src = k8s_pb_src();
    let messages = parse(&src);
    let defs = definitions();
    let defs_by_lower: HashMap<String, &String> = defs.keys().map(|k| (k.to_lowercase(), k)).collect();
    let special: HashMap<&str, &str> = SPECIAL.iter().copied().collect();
    // A root without an OpenAPI definition would have its JSON names guessed, and an inline
    // struct of it (a PersistentVolumeSpec's volume source) not found: `definitions` names
    // every root but the lists, the watch event and the runtime envelope.
    let enveloping = |r: &str| {
        r.ends_with("List") || r.ends_with("WatchEvent") || r.starts_with("apimachinery::pkg::runtime")
    };
    for root in ROOTS.iter().filter(|r| !enveloping(r)) {
        let def = format!("io.k8s.{}", root.replace("::", ".")).to_lowercase();
        assert!(
            defs_by_lower.contains_key(&def),
            "{root}: add it to definitions()"
        );
    }

    // Every message reachable from the roots, in a stable order: roots first, then by path.
    let mut reached = BTreeSet::new();
    let mut queue: VecDeque<String> = ROOTS.iter().map(|r| (*r).to_owned()).collect();
    while let Some(path) = queue.pop_front() {
        if special.contains_key(path.as_str()) || !reached.insert(path.clone()) {
            continue;
        }
        let fields = messages
            .get(&path)
            .unwrap_or_else(|| panic!("k8s-pb has no message {path}"));
        for f in fields {
            if let Some(t) = &f.type_path {
                queue.push_back(t.clone());
            }
        }
    }
    let order: Vec<&String> = reached.iter().collect();
    let index: HashMap<&str, usize> = order.iter().enumerate().map(|(i, p)| (p.as_str(), i)).collect();

    let ty = |f: &PbField, kind: &str| -> String {
        match kind {
            "string" => "Str".into(),
            "bool" => "Bool".into(),
            "int32" => "I32".into(),
            "int64" => "I64".into(),
            "bytes" => "Bytes".into(),
            "message" => {
                let t = f.type_path.as_deref().unwrap();
                match special.get(t) {
                    Some(s) => (*s).to_owned(),
                    None => format!("Msg({})", index[t]),
                }
            }
            other => panic!("field {} has kind {other}", f.name),
        }
    };

    let mut out = String::new();
    let pb_version = src
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    writeln!(
        out,
        "// @generated by encoders/tests/protobuf_schema.rs from {pb_version} (field numbers and"
    )
    .unwrap();
    writeln!(
        out,
        "// types) and k8s-openapi's schemas (JSON names). Do not edit: regenerate with"
    )
    .unwrap();
    writeln!(
        out,
        "// `WATCHCACHE_BLESS=1 cargo test -p watchcache-encoders --test protobuf_schema`."
    )
    .unwrap();
    writeln!(out).unwrap();
    writeln!(out, "use super::schema::{{Field, Message, Type::*}};").unwrap();
    writeln!(out).unwrap();
    writeln!(out, "#[rustfmt::skip]").unwrap();
    writeln!(out, "pub(crate) static MESSAGES: [Message; {}] = [", order.len()).unwrap();
    let mut unmatched = Vec::new();
    for path in &order {
        let def_name = defs_by_lower
            .get(&format!("io.k8s.{}", path.replace("::", ".")).to_lowercase())
            .map(|s| s.to_string());
        let props: Vec<String> = def_name
            .as_ref()
            .and_then(|d| defs[d]["properties"].as_object())
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        let name = def_name
            .clone()
            .unwrap_or_else(|| format!("io.k8s.{}", path.replace("::", ".")));
        writeln!(out, "    Message {{ name: {name:?}, fields: &[").unwrap();
        let mut fields: Vec<&PbField> = messages[*path].iter().collect();
        fields.sort_by_key(|f| f.tag);
        for f in fields {
            // A Go struct embedded with `json:",inline"` is a field in protobuf whose fields
            // are the parent's own in JSON.
            let inline = !props.is_empty()
                && f.kind == "message"
                && !f.repeated
                && props.iter().all(|p| normalize(p) != normalize(&f.name))
                && messages.get(f.type_path.as_deref().unwrap()).is_some_and(|sub| {
                    sub.iter()
                        .all(|s| props.iter().any(|p| normalize(p) == normalize(&s.name)))
                });
            let json = match props.iter().find(|p| normalize(p) == normalize(&f.name)) {
                Some(p) => p.clone(),
                None => {
                    if def_name.is_some() && !inline {
                        unmatched.push(format!("{name}.{}", f.name));
                    }
                    lower_camel(&f.name)
                }
            };
            let t = if f.kind == "map" {
                format!("Map(&{})", ty(f, f.map_value.as_deref().unwrap()))
            } else {
                ty(f, &f.kind)
            };
            writeln!(
                out,
                "        Field {{ json: {json:?}, tag: {}, ty: {t}, repeated: {}, inline: {inline} }},",
                f.tag, f.repeated
            )
            .unwrap();
        }
        writeln!(out, "    ] }},").unwrap();
    }
    writeln!(out, "];").unwrap();
    if !unmatched.is_empty() {
        eprintln!("protobuf fields without an OpenAPI property (named by camelCase): {unmatched:?}");
    }
    out
}

#[test]
fn the_committed_protobuf_schema_is_what_k8s_pb_and_k8s_openapi_generate() {
    let generated = generate();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/protobuf/generated.rs");
    if std::env::var_os("WATCHCACHE_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale: regenerate it with WATCHCACHE_BLESS=1 cargo test -p watchcache-encoders --test protobuf_schema",
        path.display()
    );
}
