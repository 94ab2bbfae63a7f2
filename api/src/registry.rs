//! The registry of kinds: one declaration per kind ([`KindSpec`]) says everything the server
//! derives about it — its names, scope and subresources, its selectable fields and the trigger
//! field of its watch index, its printer, its strategy (defaulting, validation, what a status
//! write may change, the generation rule, expiry), its protobuf message, its OpenAPI schema
//! and where it is stored.
//!
//! The server makes its routes, discovery, OpenAPI documents, Tables, protobuf, RBAC resource
//! names, caches and storage keys from a [`Registry`]; [`Registry::builtin`] holds the kinds
//! `watchcache serve` serves, and an embedder adds its own with [`Registry::add`].

use std::any::TypeId;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::schemars::generate::SchemaGenerator;
use k8s_openapi::schemars::{JsonSchema, Schema};
use serde_json::{Map, Value};

use crate::mutation::strategic::ListRules;
use crate::printers::Printer;
use crate::validation::Checks;

/// The rule an object's name follows, as the apiserver's validation of each kind checks it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// A lowercase RFC 1123 subdomain (`web-1.a`): most kinds.
    Subdomain,
    /// A lowercase RFC 1123 label: namespaces, services.
    Label,
    /// Anything that is a path segment: not `.` or `..`, without `/` or `%`. The RBAC kinds,
    /// whose names hold colons (`system:basic-user`).
    PathSegment,
}

/// Where a kind's `/scale` subresource reads and writes the replica count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    /// The desired replicas (`spec.replicas`).
    pub spec_replicas: String,
    /// The observed replicas (`status.replicas`).
    pub status_replicas: String,
    /// The label selector, as a string (`status.selector`) or a `LabelSelector`
    /// (`spec.selector`): the Scale's `status.selector`.
    pub label_selector: Option<String>,
}

impl ScalePaths {
    /// `spec.replicas`, `status.replicas` and the label selector at `spec.selector`: the
    /// built-in workloads'.
    pub fn workload() -> ScalePaths {
        ScalePaths {
            spec_replicas: "spec.replicas".into(),
            status_replicas: "status.replicas".into(),
            label_selector: Some("spec.selector".into()),
        }
    }
}

/// A kind's subresources. Non-exhaustive: build it from `Default` (or the [`KindSpec`]
/// builders), so that a subresource added later breaks no embedder.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Subresources {
    /// `/status`: writes to the object itself leave its status alone, and writes to `/status`
    /// change only the status.
    pub status: bool,
    /// `/finalize` (namespaces): the only way other than its controller to change
    /// `spec.finalizers`.
    pub finalize: bool,
    /// `/scale`: an `autoscaling/v1` Scale over the object's replica count.
    pub scale: Option<ScalePaths>,
    /// A pod's `/eviction`: a `policy/v1` Eviction deletes it unless a PodDisruptionBudget
    /// forbids it.
    pub eviction: bool,
    /// A pod's `/ephemeralcontainers`: writes change only `spec.ephemeralContainers`.
    pub ephemeral_containers: bool,
    /// A pod's `/log`, `/exec`, `/attach` and `/portforward`: the kubelet's, which this server
    /// has none of. Declared, they are answered as the apiserver answers them for a pod whose
    /// node it cannot reach (the answer names `pods/<subresource>` and the pod), not as
    /// unknown subresources (404). For pods.
    pub kubelet: bool,
}

/// A field a field selector may name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectableField {
    /// Its dotted path (`spec.nodeName`).
    pub path: String,
    /// What it reads as when unset (the Go zero value the apiserver's selectors see, `false`
    /// for `spec.unschedulable`), never stored.
    pub unset: Option<String>,
}

/// Where a kind's OpenAPI schema comes from.
#[derive(Clone)]
pub enum OpenApiSchema {
    /// A generated type's (k8s-openapi's, through schemars).
    Generated(fn(&mut SchemaGenerator) -> Schema),
    /// A JSON schema given as a value (a CRD's).
    Json(Arc<Value>),
}

impl fmt::Debug for OpenApiSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenApiSchema::Generated(_) => f.write_str("Generated"),
            OpenApiSchema::Json(_) => f.write_str("Json"),
        }
    }
}

/// A function that changes an object in place: defaulting, an initial status.
pub type Mutation = fn(&mut Map<String, Value>);

/// The grace period a DELETE gives an object (of its stored form, asking for a period of its
/// own if any), in seconds: 0 deletes it at once.
pub type GracePeriod = fn(&Map<String, Value>, Option<i64>) -> i64;

/// What a DELETE does to a kind's objects, besides waiting for their finalizers.
#[derive(Copy, Clone, Debug, Default)]
pub enum DeletionRule {
    /// Deleted at once, unless finalizers hold the object: then it is marked
    /// (`deletionTimestamp`, a grace period of 0) and goes with its last finalizer.
    #[default]
    AtOnce,
    /// Deleted gracefully: marked with `deletionTimestamp` = now + the grace period this gives,
    /// and left for its controller to delete with a period of 0 (a Pod, for its kubelet to stop
    /// it). A later DELETE may shorten the period, never lengthen it.
    Graceful(GracePeriod),
    /// Always marked first, whatever holds it, and given this status: its controller empties
    /// it, then finalizes it (a Namespace, set Terminating).
    MarkedFirst(fn() -> Value),
}

/// Which lists of a kind's objects merge under strategic merge patch and server-side apply.
/// The metadata's lists merge in every kind: `finalizers` as a set, `ownerReferences` by `uid`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lists {
    /// Every other list is atomic: a patch or an apply replaces it whole.
    #[default]
    Atomic,
    /// The built-in type of the kind's name merges its lists as its Go struct tags
    /// (`patchStrategy`, `patchMergeKey`) say: a pod's containers by name, in a pod and in
    /// every pod template. What [`KindSpec::of`] declares.
    BuiltIn,
    /// A custom resource's: as its [`schema`](Strategy::schema)'s `x-kubernetes-list-type`
    /// and `x-kubernetes-list-map-keys` say (atomic without a schema), and a strategic merge
    /// patch is refused with 415, as the apiserver serves custom resources.
    Schema,
}

/// How a kind's writes are treated, beyond its metadata's rules. Non-exhaustive: build it from
/// `Default` (or the [`KindSpec`] builders), so that a rule added later breaks no embedder.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Strategy {
    /// Fields set on create when the object leaves them unset: `(dotted path, value)` (a
    /// Secret's `type` is `Opaque`).
    pub defaults: Vec<(String, Value)>,
    /// Further defaulting on create and update, as the apiserver's defaulting functions do
    /// (a Deployment's strategy, a Service's session affinity).
    pub default: Option<Mutation>,
    /// What the server sets as a new object's status (its status is its controller's to
    /// write, through `/status`): a Pod's phase, a Namespace's.
    pub initial_status: Option<Mutation>,
    /// Whether `metadata.generation` is kept: 1 on create, one more at each change of the
    /// object outside its status and metadata.
    pub generation: bool,
    /// Fields an update of the object itself cannot change (dotted paths), kept as stored: a
    /// namespace's `spec.finalizers`, which only `/finalize` and its controller change.
    pub reset_on_update: Vec<String>,
    /// Whether objects expire `--event-ttl` after their last write (Events).
    pub expires: bool,
    /// The kind's own validation, beyond the metadata's.
    pub checks: Option<&'static Checks>,
    /// A custom resource's structural schema: what writes are pruned to, defaulted by and
    /// validated against.
    pub schema: Option<Arc<crate::schema::Schema>>,
    /// A custom resource's schemas by API version (`example.com/v1`), every version's. As
    /// the apiserver reads an object from the store, it prunes and defaults it by the schema
    /// of the version it was written in, then prunes it by the schema of the version served
    /// ([`schema`](Self::schema)): a field a CRD's update adds with a default reads with it
    /// in every object stored before.
    pub version_schemas: Arc<BTreeMap<String, Arc<crate::schema::Schema>>>,
    /// A finalizer a DELETE adds before it marks the object deleted, whose controller then
    /// finishes the deletion (a CRD's objects are deleted first).
    pub deletion_finalizer: Option<String>,
    /// What a DELETE does to an object besides waiting for its finalizers.
    pub deletion: DeletionRule,
    /// How a written object is converted as the apiserver decodes it, before it is defaulted,
    /// validated, owned or stored (a Secret's `stringData` merged into `data`; a binding's
    /// API groups, where it names none).
    pub on_write: Option<Mutation>,
    /// Whether the objects are core/v1 Services whose cluster IPs and node ports the server
    /// allocates (from `--service-cluster-ip-range` and `--service-node-port-range`, each
    /// claimed by a key in the store) and releases when they go. Only for that kind: the
    /// claims name it as their parent, and the repair loop that frees the claims no Service
    /// holds reads its storage (`services/specs`), so another kind's claims would be freed.
    pub service_addresses: bool,
    /// Which lists merge under strategic merge patch and server-side apply.
    pub lists: Lists,
}

/// One kind: everything the server derives about it.
#[derive(Clone, Debug)]
pub struct KindSpec {
    /// The API group; `""` for the core group.
    pub group: String,
    /// The version (`v1`).
    pub version: String,
    /// The kind (`Deployment`).
    pub kind: String,
    /// The resource name, plural and lowercase (`deployments`).
    pub plural: String,
    /// The singular name (`deployment`).
    pub singular: String,
    /// Short names (`deploy`).
    pub short_names: Vec<String>,
    /// Categories (`all`: what `kubectl get all` lists).
    pub categories: Vec<String>,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// The rule an object's name follows.
    pub names: NameRule,
    /// Where objects are stored, under `/registry/` (`deployments`; nodes are `minions`,
    /// services `services/specs`).
    pub storage: String,
    /// The subresources served.
    pub subresources: Subresources,
    /// The fields a field selector may name besides `metadata.name` and
    /// `metadata.namespace`.
    pub fields: Vec<SelectableField>,
    /// The field whose value indexes watchers and LISTs (a pod's `spec.nodeName`).
    pub trigger: Option<String>,
    /// The Table's columns.
    pub printer: Printer,
    /// The protobuf message of the kind's OpenAPI definition (`io.k8s.api.apps.v1.Deployment`),
    /// when it has a protobuf form.
    pub protobuf: Option<String>,
    /// The OpenAPI definition's name and schema.
    pub openapi: Option<(String, OpenApiSchema)>,
    /// How writes are treated.
    pub strategy: Strategy,
    /// The `apiVersion` objects are stored with, when it is not this version's (a custom
    /// resource served in a version other than its storage version).
    pub stored_as: Option<String>,
    /// How objects are converted to and from the kind they are stored as, when it is another
    /// kind's storage (an `events.k8s.io/v1` Event is a core Event in the store).
    pub conversion: Option<Conversion>,
}

/// The conversion of a kind stored as another kind of another group (its
/// [`KindSpec::stored_as`]): both kinds are served over the same objects.
#[derive(Copy, Clone, Debug)]
pub struct Conversion {
    /// Into the stored kind's form, before a write is stored.
    pub to_storage: Mutation,
    /// From the stored kind's form, as every read serves it.
    pub from_storage: Mutation,
    /// The protobuf message of the stored kind's OpenAPI definition
    /// (`io.k8s.api.core.v1.Event`), which stored values in protobuf are.
    pub stored_protobuf: Option<&'static str>,
}

impl KindSpec {
    /// A kind of `group`/`version`, named `kind` and served as `plural`: namespaced, stored
    /// under `/registry/<plural>/` (`/registry/<group>/<plural>/` in a named group, as the
    /// apiserver stores custom resources), with Name and Age columns and nothing else.
    pub fn new(group: &str, version: &str, kind: &str, plural: &str) -> KindSpec {
        KindSpec {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            plural: plural.to_owned(),
            singular: kind.to_ascii_lowercase(),
            short_names: Vec::new(),
            categories: Vec::new(),
            namespaced: true,
            names: NameRule::Subdomain,
            storage: if group.is_empty() {
                plural.to_owned()
            } else {
                format!("{group}/{plural}")
            },
            subresources: Subresources::default(),
            fields: Vec::new(),
            trigger: None,
            printer: Printer::default_columns(),
            protobuf: None,
            openapi: None,
            strategy: Strategy::default(),
            stored_as: None,
            conversion: None,
        }
    }

    /// A built-in kind, named as k8s-openapi's type `T` is: its group, version, kind, plural,
    /// scope, OpenAPI schema and protobuf message. Stored under `/registry/<plural>/`, as the
    /// apiserver stores the built-in kinds.
    pub fn of<T>() -> KindSpec
    where
        T: k8s_openapi::Resource + JsonSchema + 'static,
    {
        let mut spec = KindSpec::new(T::GROUP, T::VERSION, T::KIND, T::URL_PATH_SEGMENT);
        spec.storage = T::URL_PATH_SEGMENT.to_owned();
        spec.namespaced = TypeId::of::<T::Scope>() == TypeId::of::<k8s_openapi::NamespaceResourceScope>();
        let definition = T::schema_name().into_owned();
        spec.protobuf = Some(definition.clone());
        spec.openapi = Some((definition, OpenApiSchema::Generated(|g| g.subschema_for::<T>())));
        spec.strategy.lists = Lists::BuiltIn;
        spec
    }

    /// Which of the kind's lists merge, and on which keys, under strategic merge patch and
    /// server-side apply, as its strategy declares ([`Strategy::lists`]).
    pub fn list_rules(&self) -> ListRules<'_> {
        match (self.strategy.lists, &self.strategy.schema) {
            (Lists::Schema, Some(schema)) => ListRules::Schema(schema),
            (Lists::BuiltIn, _) => ListRules::BuiltIn(&self.kind),
            (Lists::Schema, None) | (Lists::Atomic, _) => ListRules::Atomic,
        }
    }

    /// Whether a strategic merge patch is served (on the object and its subresources): not for
    /// a custom resource ([`Lists::Schema`]).
    pub fn serves_strategic_merge(&self) -> bool {
        self.strategy.lists != Lists::Schema
    }

    /// The API version as objects carry it: `v1`, `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The storage key prefix: `/registry/<storage>/`.
    pub fn prefix(&self) -> String {
        format!("/registry/{}/", self.storage)
    }

    /// The list kind (`DeploymentList`).
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Sets the singular name.
    pub fn singular(mut self, singular: &str) -> Self {
        self.singular = singular.to_owned();
        self
    }

    /// Sets the short names.
    pub fn short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|n| (*n).to_owned()).collect();
        self
    }

    /// Sets the categories.
    pub fn categories(mut self, categories: &[&str]) -> Self {
        self.categories = categories.iter().map(|c| (*c).to_owned()).collect();
        self
    }

    /// Objects live outside namespaces.
    pub fn cluster_scoped(mut self) -> Self {
        self.namespaced = false;
        self
    }

    /// Sets the name rule.
    pub fn names(mut self, rule: NameRule) -> Self {
        self.names = rule;
        self
    }

    /// Stores objects under `/registry/<storage>/`.
    pub fn storage(mut self, storage: &str) -> Self {
        self.storage = storage.to_owned();
        self
    }

    /// Serves `/status`.
    pub fn status(mut self) -> Self {
        self.subresources.status = true;
        self
    }

    /// Serves `/finalize`.
    pub fn finalize(mut self) -> Self {
        self.subresources.finalize = true;
        self
    }

    /// Serves a pod's `/eviction` and `/ephemeralcontainers`, and answers its kubelet's
    /// subresources ([`Subresources::kubelet`]).
    pub fn pod_subresources(mut self) -> Self {
        self.subresources.eviction = true;
        self.subresources.ephemeral_containers = true;
        self.subresources.kubelet = true;
        self
    }

    /// Serves `/scale` over `paths`.
    pub fn scale(mut self, paths: ScalePaths) -> Self {
        self.subresources.scale = Some(paths);
        self
    }

    /// Adds selectable fields.
    pub fn fields(mut self, paths: &[&str]) -> Self {
        self.fields.extend(paths.iter().map(|p| SelectableField {
            path: (*p).to_owned(),
            unset: None,
        }));
        self
    }

    /// Adds a selectable field that reads as `unset` when the object leaves it unset.
    pub fn field_unset_as(mut self, path: &str, unset: &str) -> Self {
        self.fields.push(SelectableField {
            path: path.to_owned(),
            unset: Some(unset.to_owned()),
        });
        self
    }

    /// Indexes watchers and LISTs by the selectable field `path`.
    pub fn trigger(mut self, path: &str) -> Self {
        self.trigger = Some(path.to_owned());
        self
    }

    /// Sets the printer.
    pub fn printer(mut self, printer: Printer) -> Self {
        self.printer = printer;
        self
    }

    /// Sets a create default: `path` is `value` when the object leaves it unset.
    pub fn default_value(mut self, path: &str, value: Value) -> Self {
        self.strategy.defaults.push((path.to_owned(), value));
        self
    }

    /// Sets the defaulting function.
    pub fn defaulting(mut self, f: Mutation) -> Self {
        self.strategy.default = Some(f);
        self
    }

    /// Sets the initial status.
    pub fn initial_status(mut self, f: Mutation) -> Self {
        self.strategy.initial_status = Some(f);
        self
    }

    /// Sets what a DELETE does ([`Strategy::deletion`]).
    pub fn deletion(mut self, rule: DeletionRule) -> Self {
        self.strategy.deletion = rule;
        self
    }

    /// Converts written objects as they are decoded ([`Strategy::on_write`]).
    pub fn on_write(mut self, f: Mutation) -> Self {
        self.strategy.on_write = Some(f);
        self
    }

    /// Allocates Service addresses ([`Strategy::service_addresses`]).
    pub fn service_addresses(mut self) -> Self {
        self.strategy.service_addresses = true;
        self
    }

    /// Stored as `stored_as` (`v1`), another kind's storage, by `conversion` both ways.
    pub fn converted(mut self, stored_as: &str, conversion: Conversion) -> Self {
        self.stored_as = Some(stored_as.to_owned());
        self.conversion = Some(conversion);
        self
    }

    /// Keeps `metadata.generation`.
    pub fn generation(mut self) -> Self {
        self.strategy.generation = true;
        self
    }

    /// Fields an update of the object itself leaves as stored.
    pub fn reset_on_update(mut self, paths: &[&str]) -> Self {
        self.strategy.reset_on_update = paths.iter().map(|p| (*p).to_owned()).collect();
        self
    }

    /// Objects expire `--event-ttl` after their last write.
    pub fn expires(mut self) -> Self {
        self.strategy.expires = true;
        self
    }

    /// Sets the kind's validation.
    pub fn checks(mut self, checks: &'static Checks) -> Self {
        self.strategy.checks = Some(checks);
        self
    }

    /// A workload: `/status` (a new object's status is empty, its controller's to write),
    /// `/scale`, the generation kept.
    pub fn workload(self) -> Self {
        self.status()
            .scale(ScalePaths::workload())
            .generation()
            .initial_status(crate::kinds::empty_status)
    }
}

/// Why a kind cannot join a registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict(pub String);

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Conflict {}

/// The kinds a server serves.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    kinds: Vec<Arc<KindSpec>>,
}

impl Registry {
    /// No kinds.
    pub fn empty() -> Registry {
        Registry::default()
    }

    /// The kinds `watchcache serve` serves.
    pub fn builtin() -> Registry {
        let mut r = Registry::empty();
        for spec in crate::kinds::builtin() {
            r.add(spec).expect("the built-in kinds do not conflict");
        }
        r
    }

    /// Adds `spec`: refused when its group already serves its plural, its kind or one of its
    /// short names, or when its storage prefix overlaps another kind's.
    pub fn add(&mut self, spec: KindSpec) -> Result<Arc<KindSpec>, Conflict> {
        for k in &self.kinds {
            if k.group == spec.group && k.version == spec.version {
                if k.plural == spec.plural {
                    return Err(Conflict(format!(
                        "{}.{} is already served",
                        spec.plural, spec.group
                    )));
                }
                if k.kind == spec.kind {
                    return Err(Conflict(format!(
                        "kind {} of {} is already served",
                        spec.kind,
                        spec.api_version()
                    )));
                }
            }
            let (a, b) = (k.prefix(), spec.prefix());
            // A kind converted to and from another's storage shares it.
            let converts = |x: &KindSpec, y: &KindSpec| {
                x.conversion.is_some() && x.stored_as.as_deref() == Some(y.api_version().as_str())
            };
            if a == b && (converts(&spec, k) || converts(k, &spec)) {
                continue;
            }
            if a.starts_with(&b) || b.starts_with(&a) {
                return Err(Conflict(format!(
                    "storage {b} overlaps {a}, where {} are stored",
                    k.plural
                )));
            }
        }
        let spec = Arc::new(spec);
        self.kinds.push(Arc::clone(&spec));
        Ok(spec)
    }

    /// Every kind, in the order added.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<KindSpec>> {
        self.kinds.iter()
    }

    /// The kind served as `plural` in `api_version` (`v1`, `apps/v1`).
    pub fn get(&self, api_version: &str, plural: &str) -> Option<&Arc<KindSpec>> {
        self.kinds
            .iter()
            .find(|k| k.plural == plural && k.api_version() == api_version)
    }

    /// The kind `kind` of `api_version`.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<&Arc<KindSpec>> {
        self.kinds
            .iter()
            .find(|k| k.kind == kind && k.api_version() == api_version)
    }

    /// How many kinds.
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }
}
