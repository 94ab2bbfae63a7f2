//! `meta.k8s.io` Table output: what `kubectl get` prints, computed by the server as the
//! apiserver computes it, for a LIST, a GET and each event of a WATCH.
//!
//! A client asks for it in its Accept header
//! (`application/json;as=Table;v=v1;g=meta.k8s.io`, kubectl's first choice; negotiated in
//! [`media`](crate::media)); `includeObject`
//! says what each row carries: `None`, `Metadata` (the default, a `PartialObjectMetadata`) or
//! the whole `Object`. Columns with priority 1 are the ones `-o wide` adds.

use std::time::{Duration, SystemTime};

use serde_json::{Map, Value, json};
use watchcache_encoders::Status;

/// Which Table version a request asked for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum TableVersion {
    V1,
    V1beta1,
}

impl TableVersion {
    pub(crate) fn api_version(self) -> &'static str {
        match self {
            TableVersion::V1 => "meta.k8s.io/v1",
            TableVersion::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }

    /// The response's Content-Type.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            TableVersion::V1 => "application/json;as=Table;v=v1;g=meta.k8s.io",
            TableVersion::V1beta1 => "application/json;as=Table;v=v1beta1;g=meta.k8s.io",
        }
    }
}

/// What each row carries (`includeObject`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    None,
    #[default]
    Metadata,
    Object,
}

impl IncludeObject {
    pub(crate) fn parse(v: &str) -> Result<IncludeObject, Status> {
        match v {
            "None" => Ok(IncludeObject::None),
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "Object" => Ok(IncludeObject::Object),
            other => Err(Status::bad_request(format!(
                "includeObject: unsupported value {other:?}: supported values: \"None\", \"Metadata\", \"Object\""
            ))),
        }
    }
}

/// How a request wants its Table.
#[derive(Copy, Clone, Debug)]
pub(crate) struct TableRequest {
    pub(crate) version: TableVersion,
    pub(crate) include: IncludeObject,
}

struct Column {
    name: &'static str,
    kind: &'static str,
    format: &'static str,
    priority: u8,
    description: &'static str,
}

const fn col(name: &'static str, description: &'static str) -> Column {
    Column {
        name,
        kind: "string",
        format: "",
        priority: 0,
        description,
    }
}

const fn wide(name: &'static str, description: &'static str) -> Column {
    Column {
        name,
        kind: "string",
        format: "",
        priority: 1,
        description,
    }
}

const NAME: Column = Column {
    name: "Name",
    kind: "string",
    format: "name",
    priority: 0,
    description: "The object's name, unique within its namespace.",
};
const AGE: Column = col("Age", "How long ago the object was created.");
const CREATED_AT: Column = Column {
    name: "Created At",
    kind: "date",
    format: "",
    priority: 0,
    description: "When the object was created.",
};
const DATA: Column = Column {
    name: "Data",
    kind: "integer",
    format: "",
    priority: 0,
    description: "The number of keys the object holds.",
};

fn columns(kind: &str) -> Vec<Column> {
    match kind {
        "Pod" => vec![
            NAME,
            col("Ready", "Ready containers out of all containers."),
            col("Status", "The aggregate status of the pod's containers."),
            col(
                "Restarts",
                "How often the pod's containers restarted, and when last.",
            ),
            AGE,
            wide("IP", "The pod's IP address."),
            wide("Node", "The node the pod is bound to."),
            wide("Nominated Node", "The node the scheduler nominated for the pod."),
            wide("Readiness Gates", "Readiness gates that hold, out of all."),
        ],
        "Node" => vec![
            NAME,
            col("Status", "The node's readiness, and whether it takes new pods."),
            col("Roles", "The node's roles, from its node-role labels."),
            AGE,
            col("Version", "The kubelet's version."),
            wide("Internal-IP", "The node's first internal IP address."),
            wide("External-IP", "The node's first external IP address."),
            wide("OS-Image", "The operating system image."),
            wide("Kernel-Version", "The kernel version."),
            wide("Container-Runtime", "The container runtime and its version."),
        ],
        "Namespace" => vec![NAME, col("Status", "The namespace's phase."), AGE],
        "ConfigMap" => vec![NAME, DATA, AGE],
        "Secret" => vec![NAME, col("Type", "The secret's type."), DATA, AGE],
        "Event" => vec![
            col("Last Seen", "When the event was last seen."),
            col("Type", "Normal or Warning."),
            col("Reason", "Why the event happened, in one word."),
            col("Object", "The object the event is about."),
            col("Message", "What happened."),
        ],
        "Lease" => vec![NAME, col("Holder", "Who holds the lease."), AGE],
        "Role" | "ClusterRole" => vec![NAME, CREATED_AT],
        "RoleBinding" | "ClusterRoleBinding" => vec![
            NAME,
            col("Role", "The role the binding grants: its kind and name."),
            AGE,
            wide("Users", "The users the binding names."),
            wide("Groups", "The groups the binding names."),
            wide(
                "ServiceAccounts",
                "The service accounts the binding names, as namespace/name.",
            ),
        ],
        _ => vec![NAME, AGE],
    }
}

fn column_definitions(kind: &str) -> Value {
    Value::Array(
        columns(kind)
            .iter()
            .map(|c| {
                json!({"name": c.name, "type": c.kind, "format": c.format, "description": c.description, "priority": c.priority})
            })
            .collect(),
    )
}

/// A Table of `kind` holding `rows`, with the list metadata `meta`; column definitions only
/// when `headers` (a watch sends them with its first event only).
pub(crate) fn table(t: TableRequest, kind: &str, rows: Vec<Value>, meta: Value, headers: bool) -> Value {
    let mut out = json!({
        "kind": "Table",
        "apiVersion": t.version.api_version(),
        "metadata": meta,
        "rows": rows,
    });
    if headers {
        out["columnDefinitions"] = column_definitions(kind);
    }
    out
}

/// The row of `object`, an object of `kind`, as of `now`.
pub(crate) fn row(t: TableRequest, kind: &str, object: &Value, now: SystemTime) -> Value {
    let cells = cells(kind, object, now);
    let mut row = json!({"cells": cells});
    match t.include {
        IncludeObject::None => {}
        IncludeObject::Object => row["object"] = object.clone(),
        IncludeObject::Metadata => {
            row["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": t.version.api_version(),
                "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
            });
        }
    }
    row
}

fn s<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path).and_then(Value::as_str)
}

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

fn list<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    at(v, path).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn or_none(v: Option<&str>) -> String {
    v.filter(|s| !s.is_empty()).unwrap_or("<none>").to_owned()
}

fn count(v: &Value, fields: &[&str]) -> usize {
    fields
        .iter()
        .map(|f| v.get(*f).and_then(Value::as_object).map_or(0, Map::len))
        .sum()
}

fn cells(kind: &str, o: &Value, now: SystemTime) -> Vec<Value> {
    let name = json!(s(o, &["metadata", "name"]).unwrap_or_default());
    let created = json!(age(s(o, &["metadata", "creationTimestamp"]), now));
    match kind {
        "Pod" => pod_cells(o, name, created, now),
        "Node" => node_cells(o, name, created),
        "Namespace" => vec![
            name,
            json!(s(o, &["status", "phase"]).unwrap_or_default()),
            created,
        ],
        "ConfigMap" => vec![name, json!(count(o, &["data", "binaryData"])), created],
        "Secret" => vec![
            name,
            json!(s(o, &["type"]).unwrap_or_default()),
            json!(count(o, &["data"])),
            created,
        ],
        "Event" => {
            let last = s(o, &["lastTimestamp"])
                .or_else(|| s(o, &["eventTime"]))
                .or_else(|| s(o, &["metadata", "creationTimestamp"]));
            let object = format!(
                "{}/{}",
                s(o, &["involvedObject", "kind"])
                    .unwrap_or_default()
                    .to_ascii_lowercase(),
                s(o, &["involvedObject", "name"]).unwrap_or_default()
            );
            vec![
                json!(age(last, now)),
                json!(s(o, &["type"]).unwrap_or_default()),
                json!(s(o, &["reason"]).unwrap_or_default()),
                json!(object),
                json!(s(o, &["message"]).unwrap_or_default().trim()),
            ]
        }
        "Lease" => vec![
            name,
            json!(s(o, &["spec", "holderIdentity"]).unwrap_or_default()),
            created,
        ],
        "Role" | "ClusterRole" => vec![name, json!(date(s(o, &["metadata", "creationTimestamp"])))],
        "RoleBinding" | "ClusterRoleBinding" => binding_cells(o, name, created),
        _ => vec![name, created],
    }
}

/// A binding's row: its role as `Kind/name`, then (wide) the users, groups and service
/// accounts (`namespace/name`) it names, each list joined by `, `; other subjects are left out.
fn binding_cells(o: &Value, name: Value, age_cell: Value) -> Vec<Value> {
    let role = format!(
        "{}/{}",
        s(o, &["roleRef", "kind"]).unwrap_or_default(),
        s(o, &["roleRef", "name"]).unwrap_or_default()
    );
    let (mut users, mut groups, mut accounts) = (Vec::new(), Vec::new(), Vec::new());
    for subject in list(o, &["subjects"]) {
        let subject_name = s(subject, &["name"]).unwrap_or_default();
        match s(subject, &["kind"]) {
            Some("User") => users.push(subject_name.to_owned()),
            Some("Group") => groups.push(subject_name.to_owned()),
            Some("ServiceAccount") => accounts.push(format!(
                "{}/{subject_name}",
                s(subject, &["namespace"]).unwrap_or_default()
            )),
            _ => {}
        }
    }
    vec![
        name,
        json!(role),
        age_cell,
        json!(users.join(", ")),
        json!(groups.join(", ")),
        json!(accounts.join(", ")),
    ]
}

/// A timestamp as the apiserver prints a date column: RFC 3339 in UTC, to the second.
fn date(timestamp: Option<&str>) -> String {
    match timestamp.and_then(|t| humantime::parse_rfc3339_weak(t).ok()) {
        Some(t) => humantime::format_rfc3339_seconds(t).to_string(),
        None => "<unknown>".into(),
    }
}

/// The pod's row, by the apiserver's rules for READY, STATUS and RESTARTS.
fn pod_cells(o: &Value, name: Value, age_cell: Value, now: SystemTime) -> Vec<Value> {
    let total = list(o, &["spec", "containers"]).len();
    let mut ready = 0;
    let mut restarts: u64 = 0;
    let mut last_restart: Option<SystemTime> = None;
    let mut note_restart = |c: &Value| {
        if let Some(t) = s(c, &["lastState", "terminated", "finishedAt"])
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
        {
            last_restart = Some(last_restart.map_or(t, |l| l.max(t)));
        }
    };
    let mut reason = s(o, &["status", "phase"]).unwrap_or_default().to_owned();
    if let Some(r) = s(o, &["status", "reason"]).filter(|r| !r.is_empty()) {
        reason = r.to_owned();
    }
    let gated = list(o, &["status", "conditions"])
        .iter()
        .any(|c| s(c, &["type"]) == Some("PodScheduled") && s(c, &["reason"]) == Some("SchedulingGated"));
    if gated {
        reason = "SchedulingGated".into();
    }
    let init_specs = list(o, &["spec", "initContainers"]).len();
    let mut initializing = false;
    for (i, c) in list(o, &["status", "initContainerStatuses"]).iter().enumerate() {
        restarts += at(c, &["restartCount"]).and_then(Value::as_u64).unwrap_or(0);
        note_restart(c);
        let terminated = at(c, &["state", "terminated"]);
        if terminated.is_some_and(|t| t.get("exitCode").and_then(Value::as_i64) == Some(0)) {
            continue;
        }
        if at(c, &["started"]).and_then(Value::as_bool) == Some(true)
            && at(c, &["state", "running"]).is_some()
        {
            continue; // a sidecar (restartable init container) that runs
        }
        reason = match (terminated, s(c, &["state", "waiting", "reason"])) {
            (Some(t), _) => match s(t, &["reason"]).filter(|r| !r.is_empty()) {
                Some(r) => format!("Init:{r}"),
                None => match t.get("signal").and_then(Value::as_i64).filter(|s| *s != 0) {
                    Some(signal) => format!("Init:Signal:{signal}"),
                    None => format!(
                        "Init:ExitCode:{}",
                        t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)
                    ),
                },
            },
            (None, Some(r)) if !r.is_empty() && r != "PodInitializing" => format!("Init:{r}"),
            _ => format!("Init:{i}/{init_specs}"),
        };
        initializing = true;
        break;
    }
    let initialized = list(o, &["status", "conditions"])
        .iter()
        .any(|c| s(c, &["type"]) == Some("Initialized") && s(c, &["status"]) == Some("True"));
    if !initializing || initialized {
        restarts = 0;
        let mut has_running = false;
        for c in list(o, &["status", "containerStatuses"]).iter().rev() {
            restarts += at(c, &["restartCount"]).and_then(Value::as_u64).unwrap_or(0);
            note_restart(c);
            let terminated = at(c, &["state", "terminated"]);
            if let Some(r) = s(c, &["state", "waiting", "reason"]).filter(|r| !r.is_empty()) {
                reason = r.to_owned();
            } else if let Some(t) = terminated {
                reason = match s(t, &["reason"]).filter(|r| !r.is_empty()) {
                    Some(r) => r.to_owned(),
                    None => match t.get("signal").and_then(Value::as_i64).filter(|s| *s != 0) {
                        Some(signal) => format!("Signal:{signal}"),
                        None => format!(
                            "ExitCode:{}",
                            t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)
                        ),
                    },
                };
            } else if at(c, &["ready"]).and_then(Value::as_bool) == Some(true)
                && at(c, &["state", "running"]).is_some()
            {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let ready_condition = list(o, &["status", "conditions"])
                .iter()
                .any(|c| s(c, &["type"]) == Some("Ready") && s(c, &["status"]) == Some("True"));
            reason = if ready_condition { "Running" } else { "NotReady" }.into();
        }
    }
    if at(o, &["metadata", "deletionTimestamp"]).is_some_and(|d| !d.is_null()) {
        let phase = s(o, &["status", "phase"]).unwrap_or_default();
        if s(o, &["status", "reason"]) == Some("NodeLost") {
            reason = "Unknown".into();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".into();
        }
    }
    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 => format!(
            "{restarts} ({} ago)",
            human(now.duration_since(t).unwrap_or_default())
        ),
        _ => restarts.to_string(),
    };
    let gates = list(o, &["spec", "readinessGates"]);
    let gates_cell = if gates.is_empty() {
        "<none>".to_owned()
    } else {
        let conditions = list(o, &["status", "conditions"]);
        let holding = gates
            .iter()
            .filter(|g| {
                conditions
                    .iter()
                    .any(|c| s(c, &["type"]) == s(g, &["conditionType"]) && s(c, &["status"]) == Some("True"))
            })
            .count();
        format!("{holding}/{}", gates.len())
    };
    vec![
        name,
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_cell),
        age_cell,
        json!(or_none(s(o, &["status", "podIP"]))),
        json!(or_none(s(o, &["spec", "nodeName"]))),
        json!(or_none(s(o, &["status", "nominatedNodeName"]))),
        json!(gates_cell),
    ]
}

fn node_cells(o: &Value, name: Value, age: Value) -> Vec<Value> {
    let ready = list(o, &["status", "conditions"])
        .iter()
        .find(|c| s(c, &["type"]) == Some("Ready"));
    let mut status = match ready.and_then(|c| s(c, &["status"])) {
        Some("True") => "Ready".to_owned(),
        Some(_) => "NotReady".to_owned(),
        None => "Unknown".to_owned(),
    };
    if at(o, &["spec", "unschedulable"]).and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<String> = Vec::new();
    if let Some(labels) = at(o, &["metadata", "labels"]).and_then(Value::as_object) {
        for (k, v) in labels {
            if let Some(role) = k
                .strip_prefix("node-role.kubernetes.io/")
                .filter(|r| !r.is_empty())
            {
                roles.push(role.to_owned());
            } else if k == "kubernetes.io/role" && v.as_str().is_some_and(|v| !v.is_empty()) {
                roles.push(v.as_str().unwrap_or_default().to_owned());
            }
        }
    }
    roles.sort();
    roles.dedup();
    let address = |kind: &str| {
        list(o, &["status", "addresses"])
            .iter()
            .find(|a| s(a, &["type"]) == Some(kind))
            .and_then(|a| s(a, &["address"]))
    };
    let info = |field: &str| {
        s(o, &["status", "nodeInfo", field])
            .filter(|v| !v.is_empty())
            .unwrap_or("<unknown>")
            .to_owned()
    };
    vec![
        name,
        json!(status),
        json!(if roles.is_empty() {
            "<none>".to_owned()
        } else {
            roles.join(",")
        }),
        age,
        json!(s(o, &["status", "nodeInfo", "kubeletVersion"]).unwrap_or_default()),
        json!(or_none(address("InternalIP"))),
        json!(or_none(address("ExternalIP"))),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}

/// The AGE cell: how long ago `timestamp` was, or `<unknown>`.
fn age(timestamp: Option<&str>, now: SystemTime) -> String {
    let Some(then) = timestamp.and_then(|t| humantime::parse_rfc3339_weak(t).ok()) else {
        return "<unknown>".into();
    };
    match now.duration_since(then) {
        Ok(d) => human(d),
        // A clock a little behind the writer's: up to a second reads as now.
        Err(e) if e.duration() < Duration::from_secs(2) => "0s".into(),
        Err(_) => "<invalid>".into(),
    }
}

/// A duration as kubectl shows ages: the two largest units while they are informative
/// (`90s`, `5m30s`, `3h15m`, `2d4h`, `1y20d`), one unit beyond.
fn human(d: Duration) -> String {
    let secs = d.as_secs();
    let (minutes, hours, days) = (secs / 60, secs / 3600, secs / 86_400);
    let pair = |a: u64, ua: &str, b: u64, ub: &str| {
        if b == 0 {
            format!("{a}{ua}")
        } else {
            format!("{a}{ua}{b}{ub}")
        }
    };
    if secs < 120 {
        format!("{secs}s")
    } else if minutes < 10 {
        pair(minutes, "m", secs % 60, "s")
    } else if minutes < 180 {
        format!("{minutes}m")
    } else if hours < 8 {
        pair(hours, "h", minutes % 60, "m")
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        pair(days, "d", hours % 24, "h")
    } else if days < 365 * 2 {
        format!("{days}d")
    } else if days < 365 * 8 {
        pair(days / 365, "y", days % 365, "d")
    } else {
        format!("{}y", days / 365)
    }
}

/// A watch's frames as Tables: each event's object becomes a Table of one row, the first
/// with the column definitions.
pub(crate) struct TableFrames {
    pub(crate) request: TableRequest,
    pub(crate) kind: String,
    pub(crate) headers_sent: bool,
}

impl TableFrames {
    /// Appends the frame for `delivery`: `object` is its object's JSON at the event's
    /// revision (`None` for a bookmark, which becomes a Table of no rows at its revision).
    pub(crate) fn write(
        &mut self,
        kind: watchcache_core::EventKind,
        revision: watchcache_core::Revision,
        object: Option<&[u8]>,
        out: &mut bytes::BytesMut,
    ) -> Result<(), Status> {
        let rows = match object {
            Some(json) => {
                let object: Value = serde_json::from_slice(json)
                    .map_err(|e| Status::internal(format!("a stored object is not JSON: {e}")))?;
                vec![row(self.request, &self.kind, &object, SystemTime::now())]
            }
            None => Vec::new(),
        };
        let headers = !self.headers_sent && object.is_some();
        self.headers_sent |= headers;
        let table = table(
            self.request,
            &self.kind,
            rows,
            json!({"resourceVersion": revision.to_string()}),
            headers,
        );
        let frame = json!({"type": kind.as_str(), "object": table});
        out.extend_from_slice(frame.to_string().as_bytes());
        out.extend_from_slice(b"\n");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (150, "2m30s"),
            (300, "5m"),
            (3600, "60m"),
            (3 * 3600 + 900, "3h15m"),
            (10 * 3600, "10h"),
            (50 * 3600, "2d2h"),
            (72 * 3600, "3d"),
            (30 * 86_400, "30d"),
            (800 * 86_400, "2y70d"),
            (3000 * 86_400, "8y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human(Duration::from_secs(secs)), want, "{secs}s");
        }
    }

    #[test]
    fn rbac_rows_show_the_role_and_each_kind_of_subject() {
        let now = humantime::parse_rfc3339("2026-01-01T01:00:00Z").unwrap();
        let binding = json!({
            "metadata": {"name": "b", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [
                {"kind": "User", "name": "alice"},
                {"kind": "Group", "name": "devs"},
                {"kind": "User", "name": "bob"},
                {"kind": "ServiceAccount", "name": "default", "namespace": "ns"},
            ],
        });
        assert_eq!(
            cells("RoleBinding", &binding, now),
            [
                json!("b"),
                json!("ClusterRole/view"),
                json!("60m"),
                json!("alice, bob"),
                json!("devs"),
                json!("ns/default")
            ]
        );
        assert_eq!(columns("ClusterRoleBinding").len(), 6);
        let role =
            json!({"metadata": {"name": "system:basic-user", "creationTimestamp": "2026-01-01T00:00:00Z"}});
        assert_eq!(
            cells("ClusterRole", &role, now),
            [json!("system:basic-user"), json!("2026-01-01T00:00:00Z")]
        );
        assert_eq!(column_definitions("Role")[1]["type"], "date");
    }

    fn pod_row(status: Value, deleting: bool) -> Vec<Value> {
        let mut pod = json!({
            "metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
            "status": status,
        });
        if deleting {
            pod["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:01:00Z");
        }
        let now = humantime::parse_rfc3339("2026-01-01T00:05:00Z").unwrap();
        cells("Pod", &pod, now)
    }

    #[test]
    fn pod_rows_follow_the_apiservers_status_rules() {
        let running = json!({"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [
            {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}},
             "lastState": {"terminated": {"finishedAt": "2026-01-01T00:03:00Z"}}},
            {"name": "b", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
        ]});
        let cells = pod_row(running, false);
        assert_eq!(
            cells[..5],
            [
                json!("p"),
                json!("1/2"),
                json!("CrashLoopBackOff"),
                json!("2 (2m ago)"),
                json!("5m")
            ]
        );
        assert_eq!(
            cells[5..],
            [json!("10.0.0.1"), json!("n1"), json!("<none>"), json!("<none>")]
        );
        assert_eq!(pod_row(json!({"phase": "Running"}), true)[2], "Terminating");
        assert_eq!(pod_row(json!({"phase": "Pending"}), false)[1], "0/2");
        let init = json!({"phase": "Pending", "initContainerStatuses": [
            {"name": "i", "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]});
        assert_eq!(pod_row(init, false)[2], "Init:0/0");
        let exited = json!({"phase": "Running", "containerStatuses": [
            {"name": "a", "restartCount": 0, "state": {"terminated": {"exitCode": 3}}}]});
        assert_eq!(pod_row(exited, false)[2], "ExitCode:3");
    }

    #[test]
    fn node_rows_show_readiness_roles_and_addresses() {
        let node = json!({
            "metadata": {"name": "n", "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "edge"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "InternalIP", "address": "10.1.1.1"}],
                       "nodeInfo": {"kubeletVersion": "v1.32.0"}}
        });
        let cells = cells("Node", &node, SystemTime::now());
        assert_eq!(cells[1], "Ready,SchedulingDisabled");
        assert_eq!(cells[2], "control-plane,edge");
        assert_eq!(cells[3], "<unknown>");
        assert_eq!(cells[4], "v1.32.0");
        assert_eq!(cells[5], "10.1.1.1");
        assert_eq!(cells[6], "<none>");
        assert_eq!(cells[7], "<unknown>");
    }
}
