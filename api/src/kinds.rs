//! The built-in kinds `watchcache serve` serves, each one declaration.
//!
//! Names, scope, the OpenAPI schema and the protobuf message come from k8s-openapi's types
//! ([`KindSpec::of`]); what is declared here is what the apiserver's registry adds for each:
//! short names and categories, where it is stored, its subresources, selectable fields, printer
//! and strategy.

use k8s_openapi::api::{
    apps::v1 as apps, autoscaling::v2 as autoscaling, batch::v1 as batch, coordination::v1 as coordination,
    core::v1 as core, discovery::v1 as discovery, events::v1 as events, networking::v1 as networking,
    policy::v1 as policy, rbac::v1 as rbac, scheduling::v1 as scheduling, storage::v1 as storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use serde_json::{Map, Value, json};

use crate::printers;
use crate::registry::{Conversion, DeletionRule, KindSpec, NameRule};
use crate::validation;

mod on_write;

/// Every built-in kind, in the order discovery lists them.
pub(crate) fn builtin() -> Vec<KindSpec> {
    let mut out = core_kinds();
    out.extend(group_kinds());
    out
}

fn core_kinds() -> Vec<KindSpec> {
    vec![
        KindSpec::of::<core::Pod>()
            .short_names(&["po"])
            .categories(&["all"])
            .status()
            .pod_subresources()
            .generation()
            .fields(&[
                "spec.nodeName",
                "status.phase",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "status.podIP",
                "status.nominatedNodeName",
            ])
            .trigger("spec.nodeName")
            .initial_status(pod_status)
            .deletion(DeletionRule::Graceful(pod_grace_period))
            .defaulting(|o| container_ports_default(o, "spec"))
            .checks(&validation::POD)
            .printer(printers::pod()),
        KindSpec::of::<core::ConfigMap>()
            .short_names(&["cm"])
            .checks(&validation::CONFIG_MAP)
            .printer(printers::config_map()),
        KindSpec::of::<core::Secret>()
            .fields(&["type"])
            .on_write(on_write::secret_string_data)
            .default_value("type", json!("Opaque"))
            .checks(&validation::SECRET)
            .printer(printers::secret()),
        KindSpec::of::<core::Namespace>()
            .short_names(&["ns"])
            .names(NameRule::Label)
            .status()
            .finalize()
            .fields(&["status.phase"])
            .reset_on_update(&["spec.finalizers"])
            .initial_status(namespace_status)
            .deletion(DeletionRule::MarkedFirst(|| json!({"phase": "Terminating"})))
            .printer(printers::namespace()),
        KindSpec::of::<core::Node>()
            .short_names(&["no"])
            .storage("minions")
            .status()
            .field_unset_as("spec.unschedulable", "false")
            .checks(&validation::NODE)
            .printer(printers::node()),
        KindSpec::of::<core::Event>()
            .short_names(&["ev"])
            .checks(&validation::EVENT)
            // The fields the apiserver lets events be selected by (kubectl describe selects a
            // pod's events by its involvedObject).
            .fields(&[
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
            ])
            .expires()
            .printer(printers::event()),
        KindSpec::of::<core::Service>()
            .short_names(&["svc"])
            .categories(&["all"])
            .names(NameRule::Label)
            .storage("services/specs")
            .status()
            .fields(&["spec.clusterIP", "spec.type"])
            .defaulting(service_defaults)
            .checks(&validation::SERVICE)
            .service_addresses()
            .initial_status(|o| set(o, "status", json!({"loadBalancer": {}})))
            .printer(printers::service()),
        KindSpec::of::<core::Endpoints>()
            .short_names(&["ep"])
            .storage("services/endpoints")
            .printer(printers::endpoints()),
        KindSpec::of::<core::ServiceAccount>()
            .short_names(&["sa"])
            .printer(printers::service_account()),
        KindSpec::of::<core::PersistentVolume>()
            .short_names(&["pv"])
            .status()
            .default_value("spec.persistentVolumeReclaimPolicy", json!("Retain"))
            .default_value("spec.volumeMode", json!("Filesystem"))
            .initial_status(|o| set(o, "status", json!({"phase": "Pending"})))
            .printer(printers::persistent_volume()),
        KindSpec::of::<core::PersistentVolumeClaim>()
            .short_names(&["pvc"])
            .status()
            .default_value("spec.volumeMode", json!("Filesystem"))
            .initial_status(|o| set(o, "status", json!({"phase": "Pending"})))
            .printer(printers::persistent_volume_claim()),
        KindSpec::of::<core::ReplicationController>()
            .short_names(&["rc"])
            .categories(&["all"])
            .storage("controllers")
            .workload()
            .fields(&["status.replicas"])
            .defaulting(replication_controller_defaults)
            .initial_status(replicas_status)
            .printer(printers::replication_controller()),
        KindSpec::of::<core::PodTemplate>()
            .defaulting(|o| pod_template_defaults(o, "template"))
            .printer(printers::pod_template()),
        KindSpec::of::<core::LimitRange>()
            .short_names(&["limits"])
            .printer(printers::created()),
        KindSpec::of::<core::ResourceQuota>()
            .initial_status(empty_status)
            .short_names(&["quota"])
            .status()
            .printer(printers::resource_quota()),
    ]
}

fn group_kinds() -> Vec<KindSpec> {
    vec![
        KindSpec::of::<coordination::Lease>().printer(printers::lease()),
        KindSpec::of::<apps::Deployment>()
            .short_names(&["deploy"])
            .categories(&["all"])
            .workload()
            .defaulting(deployment_defaults)
            .printer(printers::deployment()),
        KindSpec::of::<apps::ReplicaSet>()
            .short_names(&["rs"])
            .categories(&["all"])
            .workload()
            .fields(&["status.replicas"])
            .default_value("spec.replicas", json!(1))
            .initial_status(replicas_status)
            .printer(printers::replica_set()),
        KindSpec::of::<apps::StatefulSet>()
            .short_names(&["sts"])
            .categories(&["all"])
            .workload()
            .defaulting(stateful_set_defaults)
            .initial_status(|o| set(o, "status", json!({"replicas": 0, "availableReplicas": 0})))
            .printer(printers::stateful_set()),
        KindSpec::of::<apps::DaemonSet>()
            .initial_status(|o| {
                let zero = json!({"currentNumberScheduled": 0, "numberMisscheduled": 0,
                    "desiredNumberScheduled": 0, "numberReady": 0});
                set(o, "status", zero);
            })
            .short_names(&["ds"])
            .categories(&["all"])
            .status()
            .generation()
            .defaulting(daemon_set_defaults)
            .printer(printers::daemon_set()),
        KindSpec::of::<apps::ControllerRevision>().printer(printers::controller_revision()),
        KindSpec::of::<batch::Job>()
            .initial_status(empty_status)
            .categories(&["all"])
            .status()
            .generation()
            .fields(&["status.successful"])
            .defaulting(job_defaults)
            .printer(printers::job()),
        KindSpec::of::<batch::CronJob>()
            .initial_status(empty_status)
            .short_names(&["cj"])
            .categories(&["all"])
            .status()
            .generation()
            .defaulting(cron_job_defaults)
            .printer(printers::cron_job()),
        // The same objects as core Events, in the events.k8s.io form.
        KindSpec::of::<events::Event>()
            .short_names(&["ev"])
            .checks(&validation::EVENTS_V1_EVENT)
            .storage("events")
            .converted(
                "v1",
                Conversion {
                    to_storage: event_to_core,
                    from_storage: event_from_core,
                    stored_protobuf: Some("io.k8s.api.core.v1.Event"),
                },
            )
            .fields(&[
                "regarding.kind",
                "regarding.namespace",
                "regarding.name",
                "regarding.uid",
                "regarding.apiVersion",
                "regarding.resourceVersion",
                "regarding.fieldPath",
                "reason",
                "reportingController",
                "type",
            ])
            .expires()
            .printer(printers::event()),
        KindSpec::of::<discovery::EndpointSlice>().printer(printers::endpoint_slice()),
        KindSpec::of::<networking::Ingress>()
            .initial_status(empty_status)
            .short_names(&["ing"])
            .storage("ingress")
            .status()
            .generation()
            .printer(printers::ingress()),
        KindSpec::of::<networking::IngressClass>()
            .cluster_scoped()
            .printer(printers::ingress_class()),
        KindSpec::of::<networking::NetworkPolicy>()
            .short_names(&["netpol"])
            .generation()
            .defaulting(network_policy_defaults)
            .printer(printers::network_policy()),
        KindSpec::of::<policy::PodDisruptionBudget>()
            .initial_status(|o| {
                let zero = json!({"disruptionsAllowed": 0, "currentHealthy": 0,
                    "desiredHealthy": 0, "expectedPods": 0});
                set(o, "status", zero);
            })
            .short_names(&["pdb"])
            .status()
            .generation()
            .printer(printers::pod_disruption_budget()),
        KindSpec::of::<autoscaling::HorizontalPodAutoscaler>()
            .initial_status(|o| set(o, "status", json!({"desiredReplicas": 0})))
            .short_names(&["hpa"])
            .categories(&["all"])
            .status()
            .default_value("spec.minReplicas", json!(1))
            .printer(printers::horizontal_pod_autoscaler()),
        KindSpec::of::<storage::StorageClass>()
            .short_names(&["sc"])
            .default_value("reclaimPolicy", json!("Delete"))
            .default_value("volumeBindingMode", json!("Immediate"))
            .printer(printers::storage_class()),
        KindSpec::of::<scheduling::PriorityClass>()
            .short_names(&["pc"])
            .default_value("preemptionPolicy", json!("PreemptLowerPriority"))
            .printer(printers::priority_class()),
        crd_kind(),
        KindSpec::of::<rbac::Role>()
            .names(NameRule::PathSegment)
            .checks(&validation::ROLE)
            .printer(printers::created()),
        KindSpec::of::<rbac::ClusterRole>()
            .names(NameRule::PathSegment)
            .checks(&validation::CLUSTER_ROLE)
            .printer(printers::created()),
        KindSpec::of::<rbac::RoleBinding>()
            .names(NameRule::PathSegment)
            .on_write(on_write::binding_api_groups)
            .checks(&validation::ROLE_BINDING)
            .printer(printers::binding()),
        KindSpec::of::<rbac::ClusterRoleBinding>()
            .names(NameRule::PathSegment)
            .on_write(on_write::binding_api_groups)
            .checks(&validation::CLUSTER_ROLE_BINDING)
            .printer(printers::binding()),
    ]
}

/// CustomResourceDefinitions: served in JSON only (their schemas' `JSON` values have no
/// protobuf form here), stored where the apiserver stores them; deleting one deletes its
/// objects first, under the cleanup finalizer.
fn crd_kind() -> KindSpec {
    let mut spec = KindSpec::of::<apiextensions::CustomResourceDefinition>()
        .short_names(&["crd", "crds"])
        .categories(&["api-extensions"])
        .storage("apiextensions.k8s.io/customresourcedefinitions")
        .status()
        .generation()
        .initial_status(|o| {
            let stored: Vec<Value> = get(o, "spec.versions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|v| v["storage"].as_bool() == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect();
            o.insert(
                "status".into(),
                json!({"conditions": [], "acceptedNames": {"plural": "", "kind": ""}, "storedVersions": stored}),
            );
        })
        .checks(&validation::CUSTOM_RESOURCE_DEFINITION)
        .printer(printers::crd());
    spec.protobuf = None;
    spec.strategy.deletion_finalizer = Some(crate::crd::CLEANUP_FINALIZER.to_owned());
    spec
}

/// The object at dotted `path`, made (as maps) where missing; `None` where a non-map is in
/// the way.
fn map_at<'a>(object: &'a mut Map<String, Value>, path: &str) -> Option<&'a mut Map<String, Value>> {
    let mut at = object;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        at = at
            .entry(part)
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()?;
    }
    Some(at)
}

/// The value at dotted `path`.
fn get<'a>(object: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    let (first, rest) = path.split_once('.').unwrap_or((path, ""));
    let mut at = object.get(first)?;
    for part in rest.split('.').filter(|p| !p.is_empty()) {
        at = at.get(part)?;
    }
    Some(at)
}

/// Sets `key` (the last part of a dotted path) to `value`.
fn set(object: &mut Map<String, Value>, path: &str, value: Value) {
    let (parent, key) = path.rsplit_once('.').unwrap_or(("", path));
    if let Some(m) = map_at(object, parent) {
        m.insert(key.to_owned(), value);
    }
}

/// Sets `path` to `value` when unset (or null).
pub(crate) fn set_default(object: &mut Map<String, Value>, path: &str, value: Value) {
    let (parent, key) = path.rsplit_once('.').unwrap_or(("", path));
    if let Some(m) = map_at(object, parent)
        && m.get(key).is_none_or(Value::is_null)
    {
        m.insert(key.to_owned(), value);
    }
}

/// A pod's initial status: Pending, with its QoS class.
fn pod_status(object: &mut Map<String, Value>) {
    let qos = qos_class(object.get("spec").unwrap_or(&Value::Null));
    object.insert("status".into(), json!({"phase": "Pending", "qosClass": qos}));
}

/// A pod's QoS class, from its containers' requests and limits, as the apiserver computes it.
fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .filter_map(|f| spec.get(*f).and_then(Value::as_array))
        .flatten()
        .collect();
    let quantity = |c: &Value, kind: &str, r: &str| {
        c.get("resources")
            .and_then(|x| x.get(kind))
            .and_then(|x| x.get(r))
            .cloned()
    };
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in &containers {
        for r in ["cpu", "memory"] {
            let (request, limit) = (quantity(c, "requests", r), quantity(c, "limits", r));
            any |= request.is_some() || limit.is_some();
            match (request, limit) {
                (_, None) => guaranteed = false,
                (Some(req), Some(lim)) if req != lim => guaranteed = false,
                _ => {}
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// The grace period of a pod whose spec names none, as the apiserver defaults it.
const DEFAULT_POD_GRACE: i64 = 30;

/// A pod's grace period, as its strategy gives it: none for a pod not bound to a node (no
/// kubelet runs it) or one that has finished; a negative one is a second.
fn pod_grace_period(pod: &Map<String, Value>, requested: Option<i64>) -> i64 {
    let spec = pod.get("spec");
    let bound = spec
        .and_then(|s| s.get("nodeName"))
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let phase = pod
        .get("status")
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str);
    let finished = matches!(phase, Some("Succeeded" | "Failed"));
    let period = requested.unwrap_or_else(|| {
        spec.and_then(|s| s.get("terminationGracePeriodSeconds"))
            .and_then(Value::as_i64)
            .unwrap_or(DEFAULT_POD_GRACE)
    });
    match period {
        _ if !bound || finished => 0,
        p if p < 0 => 1,
        p => p,
    }
}

/// A namespace's initial status: Active, with the `kubernetes` finalizer.
fn namespace_status(object: &mut Map<String, Value>) {
    object.insert("status".into(), json!({"phase": "Active"}));
    if let Some(spec) = map_at(object, "spec") {
        let finalizers = spec
            .entry("finalizers")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = finalizers
            && !list.iter().any(|f| f == "kubernetes")
        {
            list.push(Value::String("kubernetes".into()));
        }
    }
}

/// A pod template's defaults (`spec.template` of a workload), as kubectl's output of a
/// workload shows them.
fn pod_template_defaults(object: &mut Map<String, Value>, template: &str) {
    let spec = format!("{template}.spec");
    if let Some(s) = map_at(object, &spec) {
        for (k, v) in [
            ("restartPolicy", json!("Always")),
            ("terminationGracePeriodSeconds", json!(30)),
            ("dnsPolicy", json!("ClusterFirst")),
            ("securityContext", json!({})),
            ("schedulerName", json!("default-scheduler")),
        ] {
            s.entry(k).or_insert(v);
        }
        for list in ["containers", "initContainers"] {
            for c in s
                .get_mut(list)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                let Some(c) = c.as_object_mut() else { continue };
                c.entry("terminationMessagePath")
                    .or_insert(json!("/dev/termination-log"));
                c.entry("terminationMessagePolicy").or_insert(json!("File"));
                c.entry("resources").or_insert(json!({}));
                let latest = c.get("image").and_then(Value::as_str).is_some_and(|i| {
                    !i.rsplit('/').next().unwrap_or(i).contains(':') || i.ends_with(":latest")
                });
                c.entry("imagePullPolicy")
                    .or_insert(json!(if latest { "Always" } else { "IfNotPresent" }));
            }
        }
    }
    container_ports_default(object, &spec);
}

/// Every container port's protocol defaulted, in each container list of the pod spec at
/// `spec`.
fn container_ports_default(object: &mut Map<String, Value>, spec: &str) {
    let mut at = Some(object);
    for part in spec.split('.') {
        at = at.and_then(|m| m.get_mut(part)).and_then(Value::as_object_mut);
    }
    let Some(s) = at else { return };
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        let containers = s
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten();
        for c in containers.filter_map(Value::as_object_mut) {
            let ports = c
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten();
            ports.filter_map(Value::as_object_mut).for_each(protocol_default);
        }
    }
}

/// A port's protocol is TCP when unset or empty (a container's port, a Service's), as the
/// apiserver defaults it.
fn protocol_default(port: &mut Map<String, Value>) {
    let protocol = port.entry("protocol").or_insert(Value::Null);
    if protocol.is_null() || protocol == "" {
        *protocol = json!("TCP");
    }
}

fn service_defaults(o: &mut Map<String, Value>) {
    // As the apiserver's: an empty value is unset.
    for (path, value) in [("spec.type", "ClusterIP"), ("spec.sessionAffinity", "None")] {
        if get(o, path).is_some_and(|v| v == "") {
            set(o, path, Value::Null);
        }
        set_default(o, path, json!(value));
    }
    let external_name = get(o, "spec.type").and_then(Value::as_str) == Some("ExternalName");
    if let Some(spec) = map_at(o, "spec") {
        if !external_name {
            spec.entry("internalTrafficPolicy").or_insert(json!("Cluster"));
        }
        for p in spec
            .get_mut("ports")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let Some(p) = p.as_object_mut() else { continue };
            protocol_default(p);
            // A target port unset, 0 or "" is the port.
            if let Some(port) = p.get("port").cloned() {
                let target = p.entry("targetPort").or_insert(Value::Null);
                if target.is_null() || target == 0 || target == "" {
                    *target = port;
                }
            }
        }
    }
}

fn replication_controller_defaults(o: &mut Map<String, Value>) {
    set_default(o, "spec.replicas", json!(1));
    // An unset selector (or template labels) is the other's, as the apiserver defaults them.
    let labels = get(o, "spec.template.metadata.labels").cloned();
    if let Some(labels) = labels {
        set_default(o, "spec.selector", labels.clone());
        set_default(o, "metadata.labels", labels);
    }
    pod_template_defaults(o, "spec.template");
}

fn deployment_defaults(o: &mut Map<String, Value>) {
    set_default(o, "spec.replicas", json!(1));
    set_default(o, "spec.revisionHistoryLimit", json!(10));
    set_default(o, "spec.progressDeadlineSeconds", json!(600));
    set_default(o, "spec.strategy.type", json!("RollingUpdate"));
    if get(o, "spec.strategy.type").and_then(Value::as_str) == Some("RollingUpdate") {
        set_default(o, "spec.strategy.rollingUpdate.maxUnavailable", json!("25%"));
        set_default(o, "spec.strategy.rollingUpdate.maxSurge", json!("25%"));
    }
    pod_template_defaults(o, "spec.template");
}

fn stateful_set_defaults(o: &mut Map<String, Value>) {
    set_default(o, "spec.replicas", json!(1));
    set_default(o, "spec.podManagementPolicy", json!("OrderedReady"));
    set_default(o, "spec.revisionHistoryLimit", json!(10));
    set_default(o, "spec.updateStrategy.type", json!("RollingUpdate"));
    if get(o, "spec.updateStrategy.type").and_then(Value::as_str) == Some("RollingUpdate") {
        set_default(o, "spec.updateStrategy.rollingUpdate.partition", json!(0));
    }
    set_default(
        o,
        "spec.persistentVolumeClaimRetentionPolicy",
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
    );
    pod_template_defaults(o, "spec.template");
}

fn daemon_set_defaults(o: &mut Map<String, Value>) {
    set_default(o, "spec.revisionHistoryLimit", json!(10));
    set_default(o, "spec.updateStrategy.type", json!("RollingUpdate"));
    if get(o, "spec.updateStrategy.type").and_then(Value::as_str) == Some("RollingUpdate") {
        set_default(o, "spec.updateStrategy.rollingUpdate.maxUnavailable", json!(1));
        set_default(o, "spec.updateStrategy.rollingUpdate.maxSurge", json!(0));
    }
    pod_template_defaults(o, "spec.template");
}

fn job_defaults(o: &mut Map<String, Value>) {
    let unset =
        |o: &Map<String, Value>, f: &str| o.get("spec").and_then(|s| s.get(f)).is_none_or(Value::is_null);
    if unset(o, "completions") && unset(o, "parallelism") {
        set(o, "spec.completions", json!(1));
        set(o, "spec.parallelism", json!(1));
    }
    set_default(o, "spec.parallelism", json!(1));
    set_default(o, "spec.backoffLimit", json!(6));
    set_default(o, "spec.completionMode", json!("NonIndexed"));
    set_default(o, "spec.suspend", json!(false));
    set_default(o, "spec.podReplacementPolicy", json!("TerminatingOrFailed"));
    pod_template_defaults(o, "spec.template");
}

fn cron_job_defaults(o: &mut Map<String, Value>) {
    set_default(o, "spec.concurrencyPolicy", json!("Allow"));
    set_default(o, "spec.suspend", json!(false));
    set_default(o, "spec.successfulJobsHistoryLimit", json!(3));
    set_default(o, "spec.failedJobsHistoryLimit", json!(1));
    pod_template_defaults(o, "spec.jobTemplate.spec.template");
}

fn network_policy_defaults(o: &mut Map<String, Value>) {
    // Egress only when there are egress rules, as the apiserver defaults it (`egress: []` is
    // none); an empty list of types is unset.
    let egress = get(o, "spec.egress")
        .and_then(Value::as_array)
        .is_some_and(|e| !e.is_empty());
    let unset = |t: &Value| t.is_null() || t.as_array().is_some_and(Vec::is_empty);
    if get(o, "spec.policyTypes").is_none_or(unset) {
        let mut types = vec![json!("Ingress")];
        if egress {
            types.push(json!("Egress"));
        }
        set(o, "spec.policyTypes", Value::Array(types));
    }
}

/// The fields an events.k8s.io/v1 Event names otherwise than a core Event (events.k8s.io
/// name, core name), as the apiserver converts between them.
const EVENT_RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
];

fn rename_fields(object: &mut Map<String, Value>, from_core: bool, api_version: &str) {
    for (ours, core) in EVENT_RENAMES {
        let (from, to) = if from_core { (core, ours) } else { (ours, core) };
        match object.remove(*from) {
            Some(v) => {
                object.insert((*to).to_owned(), v);
            }
            None => {
                object.remove(*to);
            }
        }
    }
    object.insert("apiVersion".into(), Value::from(api_version));
    object.insert("kind".into(), Value::from("Event"));
}

/// An events.k8s.io/v1 Event as the core Event it is stored as.
fn event_to_core(object: &mut Map<String, Value>) {
    rename_fields(object, false, "v1");
}

/// A stored core Event as an events.k8s.io/v1 Event.
fn event_from_core(object: &mut Map<String, Value>) {
    rename_fields(object, true, "events.k8s.io/v1");
}

/// A new replica set's or replication controller's status: no replicas (a field Go writes even
/// when zero, which clients that decode into the types require).
fn replicas_status(object: &mut Map<String, Value>) {
    set(object, "status", json!({"replicas": 0}));
}

/// A new object's status, when its controller writes it: empty (the status fields the
/// apiserver writes even when zero are set by each kind's own initial status).
pub(crate) fn empty_status(object: &mut Map<String, Value>) {
    object.insert("status".into(), json!({}));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    #[test]
    fn every_builtin_kind_has_a_distinct_resource_and_storage() {
        let r = Registry::builtin();
        assert!(r.len() >= 35, "{}", r.len());
        assert!(
            r.get("apps/v1", "deployments")
                .unwrap()
                .subresources
                .scale
                .is_some()
        );
        assert_eq!(r.get("v1", "nodes").unwrap().prefix(), "/registry/minions/");
        assert_eq!(
            r.get("v1", "services").unwrap().prefix(),
            "/registry/services/specs/"
        );
        assert!(!r.get("v1", "namespaces").unwrap().namespaced);
        assert!(r.get("networking.k8s.io/v1", "ingresses").unwrap().namespaced);
    }

    #[test]
    fn an_events_v1_event_is_a_core_event_renamed_both_ways() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Pod", "name": "p"}, "note": "pulled", "reason": "Pulled",
            "reportingController": "kubelet", "deprecatedCount": 2, "type": "Normal"});
        let mut core = v1.as_object().unwrap().clone();
        event_to_core(&mut core);
        assert_eq!(
            Value::Object(core.clone()),
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
                "involvedObject": {"kind": "Pod", "name": "p"}, "message": "pulled", "reason": "Pulled",
                "reportingComponent": "kubelet", "count": 2, "type": "Normal"})
        );
        event_from_core(&mut core);
        assert_eq!(Value::Object(core), v1);
        let r = Registry::builtin();
        let both = [
            r.get("v1", "events").unwrap(),
            r.get("events.k8s.io/v1", "events").unwrap(),
        ];
        assert_eq!(both[0].prefix(), both[1].prefix());
    }

    #[test]
    fn a_deployment_is_defaulted_as_kubectl_shows_it() {
        let mut d =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "nginx"}]}}}});
        deployment_defaults(d.as_object_mut().unwrap());
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
            "Always"
        );
        assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
    }

    #[test]
    fn a_network_policy_has_egress_only_with_egress_rules() {
        for (spec, want) in [
            (json!({"egress": []}), json!(["Ingress"])),
            (json!({"egress": [{}]}), json!(["Ingress", "Egress"])),
            (json!({"policyTypes": []}), json!(["Ingress"])),
            (json!({"policyTypes": ["Egress"]}), json!(["Egress"])),
        ] {
            let mut p = json!({"spec": spec});
            network_policy_defaults(p.as_object_mut().unwrap());
            assert_eq!(p["spec"]["policyTypes"], want, "{p}");
        }
    }

    #[test]
    fn a_job_without_completions_or_parallelism_runs_one_pod() {
        let mut j = json!({"spec": {"template": {"spec": {"containers": []}}}});
        job_defaults(j.as_object_mut().unwrap());
        assert_eq!(
            (j["spec"]["completions"].clone(), j["spec"]["parallelism"].clone()),
            (json!(1), json!(1))
        );
        let mut j = json!({"spec": {"parallelism": 3, "template": {}}});
        job_defaults(j.as_object_mut().unwrap());
        assert!(j["spec"].get("completions").is_none());
    }
}
