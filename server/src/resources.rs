//! The resources `watchcache serve` offers, each with its own cache and upstream watch.
//!
//! Each is one declaration in `SPECS`: its group-version, kind, storage prefix, name rule
//! and selectable fields.

use std::collections::BTreeMap;
use std::sync::Arc;

use watchcache_core::{BuildError, Cache, CacheConfig};
use watchcache_encoders::{FrameEncoder, JsonCodec, ResourceInfo};

use crate::backend::Backend;
use crate::config::ServeConfig;

/// How one resource is described and served.
pub struct Resource {
    /// Kinds and version.
    pub info: ResourceInfo,
    /// `pod`.
    pub singular: &'static str,
    /// `po`.
    pub short_names: &'static [&'static str],
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// What an object's name must be.
    pub names: NameRule,
    /// Fields the apiserver defaults on create when the object leaves them unset (a
    /// Secret's `type`), stored with the object: `(dotted path, value)`. The status the
    /// server sets on a new pod or namespace is `writes::initial_status`'s.
    pub create_defaults: &'static [(&'static str, &'static str)],
    /// Whether the resource has a `/status` subresource: then writes to the object itself
    /// leave its status alone, and writes to `/status` change only the status.
    pub status_subresource: bool,
    /// Whether the resource has a `/finalize` subresource (namespaces), the only way other than
    /// its controller to change what it reset on an update.
    pub finalize_subresource: bool,
    /// Fields an update of the object itself cannot change (dotted paths): kept as stored, as
    /// the apiserver's "reset fields" are (a namespace's `spec.finalizers`, which only
    /// `/finalize` and the namespace controller change).
    pub reset_on_update: &'static [&'static str],
    /// Whether `metadata.generation` is kept: 1 on create, one more at each change of `spec`
    /// (pods; the other kinds served have no spec or, like nodes, do not count).
    pub generation: bool,
    /// How long an object lives after its last write (Events: `--event-ttl`), through a
    /// store lease; `None`: until it is deleted.
    pub ttl: Option<std::time::Duration>,
    /// The storage key prefix, `/registry/pods/`.
    pub prefix: String,
    /// Decodes source values.
    pub codec: Arc<JsonCodec>,
    /// Writes watch frames.
    pub frames: FrameEncoder,
    /// The watch cache.
    pub cache: Cache<Backend>,
}

/// The rule an object's name follows, as the apiserver's validation of each kind checks it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// A lowercase RFC 1123 subdomain (`web-1.a`): most kinds.
    Subdomain,
    /// A lowercase RFC 1123 label: namespaces.
    Label,
    /// Anything that is a path segment: not `.` or `..`, without `/` or `%`. The RBAC kinds,
    /// whose names hold colons (`system:basic-user`).
    PathSegment,
}

struct Spec {
    name: &'static str,
    /// The API group-version (`v1` for the core group, `coordination.k8s.io/v1`).
    api_version: &'static str,
    /// Where the apiserver keeps the resource under `/registry/` (nodes are `minions`).
    storage: &'static str,
    singular: &'static str,
    kind: &'static str,
    /// The kind's OpenAPI definition, which names its protobuf message.
    protobuf: &'static str,
    short_names: &'static [&'static str],
    namespaced: bool,
    names: NameRule,
    fields: &'static [&'static str],
    trigger: Option<&'static str>,
    create_defaults: &'static [(&'static str, &'static str)],
    reset_on_update: &'static [&'static str],
    /// Selectable fields that read as a value when unset (the Go zero value the apiserver's
    /// field selectors see), never stored.
    unset_reads_as: &'static [(&'static str, &'static str)],
}

const SPECS: &[Spec] = &[
    Spec {
        api_version: "v1",
        name: "pods",
        storage: "pods",
        singular: "pod",
        kind: "Pod",
        protobuf: "io.k8s.api.core.v1.Pod",
        short_names: &["po"],
        namespaced: true,
        names: NameRule::Subdomain,
        fields: &[
            "spec.nodeName",
            "status.phase",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        trigger: Some("spec.nodeName"),
        create_defaults: &[],
        reset_on_update: &[],
        unset_reads_as: &[],
    },
    Spec {
        api_version: "v1",
        name: "configmaps",
        storage: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        protobuf: "io.k8s.api.core.v1.ConfigMap",
        short_names: &["cm"],
        namespaced: true,
        names: NameRule::Subdomain,
        fields: &[],
        trigger: None,
        create_defaults: &[],
        reset_on_update: &[],
        unset_reads_as: &[],
    },
    Spec {
        api_version: "v1",
        name: "secrets",
        storage: "secrets",
        singular: "secret",
        kind: "Secret",
        protobuf: "io.k8s.api.core.v1.Secret",
        short_names: &[],
        namespaced: true,
        names: NameRule::Subdomain,
        fields: &["type"],
        trigger: None,
        create_defaults: &[("type", "Opaque")],
        reset_on_update: &[],
        unset_reads_as: &[],
    },
    Spec {
        api_version: "v1",
        name: "namespaces",
        storage: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        protobuf: "io.k8s.api.core.v1.Namespace",
        short_names: &["ns"],
        namespaced: false,
        names: NameRule::Label,
        fields: &["status.phase"],
        trigger: None,
        create_defaults: &[],
        reset_on_update: &["spec.finalizers"],
        unset_reads_as: &[],
    },
    Spec {
        api_version: "v1",
        name: "nodes",
        storage: "minions",
        singular: "node",
        kind: "Node",
        protobuf: "io.k8s.api.core.v1.Node",
        short_names: &["no"],
        namespaced: false,
        names: NameRule::Subdomain,
        fields: &["spec.unschedulable"],
        trigger: None,
        create_defaults: &[],
        reset_on_update: &[],
        unset_reads_as: &[("spec.unschedulable", "false")],
    },
    Spec {
        api_version: "v1",
        name: "events",
        storage: "events",
        singular: "event",
        kind: "Event",
        protobuf: "io.k8s.api.core.v1.Event",
        short_names: &["ev"],
        namespaced: true,
        names: NameRule::Subdomain,
        // The fields the apiserver lets events be selected by (kubectl describe selects a
        // pod's events by its involvedObject).
        fields: &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        trigger: None,
        create_defaults: &[],
        reset_on_update: &[],
        unset_reads_as: &[],
    },
    Spec {
        api_version: "coordination.k8s.io/v1",
        name: "leases",
        storage: "leases",
        singular: "lease",
        kind: "Lease",
        protobuf: "io.k8s.api.coordination.v1.Lease",
        short_names: &[],
        namespaced: true,
        names: NameRule::Subdomain,
        fields: &[],
        trigger: None,
        create_defaults: &[],
        reset_on_update: &[],
        unset_reads_as: &[],
    },
    Spec {
        api_version: "rbac.authorization.k8s.io/v1",
        name: "roles",
        storage: "roles",
        singular: "role",
        kind: "Role",
        protobuf: "io.k8s.api.rbac.v1.Role",
        short_names: &[],
        namespaced: true,
        names: NameRule::PathSegment,
        fields: &[],
        trigger: None,
        create_defaults: &[],
        reset_on_update: &[],
        unset_reads_as: &[],
    },
    Spec {
        api_version: "rbac.authorization.k8s.io/v1",
        name: "clusterroles",
        storage: "clusterroles",
        singular: "clusterrole",
        kind: "ClusterRole",
        protobuf: "io.k8s.api.rbac.v1.ClusterRole",
        short_names: &[],
        namespaced: false,
        names: NameRule::PathSegment,
        fields: &[],
        trigger: None,
        create_defaults: &[],
        reset_on_update: &[],
        unset_reads_as: &[],
    },
    Spec {
        api_version: "rbac.authorization.k8s.io/v1",
        name: "rolebindings",
        storage: "rolebindings",
        singular: "rolebinding",
        kind: "RoleBinding",
        protobuf: "io.k8s.api.rbac.v1.RoleBinding",
        short_names: &[],
        namespaced: true,
        names: NameRule::PathSegment,
        fields: &[],
        trigger: None,
        create_defaults: &[],
        reset_on_update: &[],
        unset_reads_as: &[],
    },
    Spec {
        api_version: "rbac.authorization.k8s.io/v1",
        name: "clusterrolebindings",
        storage: "clusterrolebindings",
        singular: "clusterrolebinding",
        kind: "ClusterRoleBinding",
        protobuf: "io.k8s.api.rbac.v1.ClusterRoleBinding",
        short_names: &[],
        namespaced: false,
        names: NameRule::PathSegment,
        fields: &[],
        trigger: None,
        create_defaults: &[],
        reset_on_update: &[],
        unset_reads_as: &[],
    },
];

/// The storage key prefix of `resource` (`/registry/pods/`, `/registry/minions/` for nodes), as
/// the apiserver lays out etcd.
pub fn prefix(resource: &str) -> Option<String> {
    SPECS
        .iter()
        .find(|s| s.name == resource)
        .map(|s| format!("/registry/{}/", s.storage))
}

/// Starts one cache per resource over `store`.
pub fn build(
    store: &Backend,
    config: &ServeConfig,
) -> Result<BTreeMap<&'static str, Arc<Resource>>, BuildError> {
    let mut out = BTreeMap::new();
    for spec in SPECS {
        let codec = spec
            .unset_reads_as
            .iter()
            .fold(JsonCodec::new(spec.namespaced, spec.fields), |c, (f, v)| {
                c.with_default(f, v)
            });
        let codec = Arc::new(codec.with_protobuf(spec.protobuf));
        let prefix = format!("/registry/{}/", spec.storage);
        let mut cache_config = CacheConfig::new(spec.name, &prefix);
        cache_config.capacity = config.history;
        cache_config.fresh_timeout = config.fresh_timeout;
        cache_config.ready_timeout = config.fresh_timeout;
        cache_config.bookmark_interval = config.bookmark_interval;
        cache_config.history_bytes = config.history_bytes;
        cache_config.snapshot_retention = config.snapshot_retention;
        cache_config.fields = spec.fields.iter().map(|f| (*f).to_owned()).collect();
        cache_config.trigger_field = spec.trigger.map(str::to_owned);
        cache_config.history_fill = config.history_fill;
        let cache = Cache::new(store.clone(), codec.clone(), cache_config)?;
        let info = ResourceInfo::new(spec.name, spec.kind, spec.api_version).with_protobuf(spec.protobuf);
        let frames = FrameEncoder::new(info.clone(), codec.clone());
        out.insert(
            spec.name,
            Arc::new(Resource {
                info,
                singular: spec.singular,
                short_names: spec.short_names,
                namespaced: spec.namespaced,
                names: spec.names,
                create_defaults: spec.create_defaults,
                generation: spec.name == "pods",
                status_subresource: matches!(spec.name, "pods" | "nodes" | "namespaces"),
                finalize_subresource: spec.name == "namespaces",
                reset_on_update: spec.reset_on_update,
                // Only Events expire, as in the apiserver (its events registry's TTL).
                ttl: (spec.name == "events").then_some(config.event_ttl),
                prefix,
                codec,
                frames,
                cache,
            }),
        );
    }
    Ok(out)
}
