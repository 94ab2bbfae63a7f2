//! The core group's printers (and RBAC's, which print as simply).

use std::time::SystemTime;

use serde_json::{Value, json};

use super::*;

/// A Pod's: READY, STATUS and RESTARTS by the apiserver's rules.
pub(crate) fn pod() -> Printer {
    Printer::rows(
        vec![
            name(),
            row_col("Ready", "string", 0, "Ready containers out of all containers."),
            row_col(
                "Status",
                "string",
                0,
                "The aggregate status of the pod's containers.",
            ),
            row_col(
                "Restarts",
                "string",
                0,
                "How often the pod's containers restarted, and when last.",
            ),
            age(),
            row_col("IP", "string", 1, "The pod's IP address."),
            row_col("Node", "string", 1, "The node the pod is bound to."),
            row_col(
                "Nominated Node",
                "string",
                1,
                "The node the scheduler nominated for the pod.",
            ),
            row_col(
                "Readiness Gates",
                "string",
                1,
                "Readiness gates that hold, out of all.",
            ),
        ],
        |o, now| pod_cells(o, name_of(o), json!(age_of(o, now)), now),
    )
}

pub(crate) fn node() -> Printer {
    Printer::rows(
        vec![
            name(),
            row_col(
                "Status",
                "string",
                0,
                "The node's readiness, and whether it takes new pods.",
            ),
            row_col(
                "Roles",
                "string",
                0,
                "The node's roles, from its node-role labels.",
            ),
            age(),
            row_col("Version", "string", 0, "The kubelet's version."),
            row_col(
                "Internal-IP",
                "string",
                1,
                "The node's first internal IP address.",
            ),
            row_col(
                "External-IP",
                "string",
                1,
                "The node's first external IP address.",
            ),
            row_col("OS-Image", "string", 1, "The operating system image."),
            row_col("Kernel-Version", "string", 1, "The kernel version."),
            row_col(
                "Container-Runtime",
                "string",
                1,
                "The container runtime and its version.",
            ),
        ],
        |o, now| node_cells(o, name_of(o), json!(age_of(o, now))),
    )
}

pub(crate) fn namespace() -> Printer {
    Printer::of(vec![
        name(),
        col("Status", "The namespace's phase.", |o, _| {
            json!(s(o, &["status", "phase"]).unwrap_or_default())
        }),
        age(),
    ])
}

fn data_col() -> Column {
    int_col("Data", "The number of keys the object holds.", |o, _| {
        json!(count(o, &["data", "binaryData"]))
    })
}

pub(crate) fn config_map() -> Printer {
    Printer::of(vec![name(), data_col(), age()])
}

pub(crate) fn secret() -> Printer {
    Printer::of(vec![
        name(),
        col("Type", "The secret's type.", |o, _| {
            json!(s(o, &["type"]).unwrap_or_default())
        }),
        int_col("Data", "The number of keys the object holds.", |o, _| {
            json!(count(o, &["data"]))
        }),
        age(),
    ])
}

/// An Event's columns, core or events.k8s.io/v1 (whose fields are named otherwise: `regarding`,
/// `note`, `deprecatedLastTimestamp`).
pub(crate) fn event() -> Printer {
    Printer::of(vec![
        col("Last Seen", "When the event was last seen.", |o, now| {
            // A series' last observation first, as the apiserver's printer reads it.
            let last = s(o, &["series", "lastObservedTime"])
                .or_else(|| s(o, &["lastTimestamp"]))
                .or_else(|| s(o, &["deprecatedLastTimestamp"]))
                .or_else(|| s(o, &["eventTime"]))
                .or_else(|| s(o, &["metadata", "creationTimestamp"]));
            json!(age_since(last, now))
        }),
        col("Type", "Normal or Warning.", |o, _| {
            json!(s(o, &["type"]).unwrap_or_default())
        }),
        col("Reason", "Why the event happened, in one word.", |o, _| {
            json!(s(o, &["reason"]).unwrap_or_default())
        }),
        col("Object", "The object the event is about.", |o, _| {
            let about = if o.get("regarding").is_some() {
                "regarding"
            } else {
                "involvedObject"
            };
            json!(format!(
                "{}/{}",
                s(o, &[about, "kind"]).unwrap_or_default().to_ascii_lowercase(),
                s(o, &[about, "name"]).unwrap_or_default()
            ))
        }),
        col("Message", "What happened.", |o, _| {
            json!(
                s(o, &["message"])
                    .or_else(|| s(o, &["note"]))
                    .unwrap_or_default()
                    .trim()
            )
        }),
    ])
}

pub(crate) fn lease() -> Printer {
    Printer::of(vec![
        name(),
        col("Holder", "Who holds the lease.", |o, _| {
            json!(s(o, &["spec", "holderIdentity"]).unwrap_or_default())
        }),
        age(),
    ])
}

fn created_at() -> Column {
    let mut c = col("Created At", "When the object was created.", |o, _| {
        json!(date(s(o, &["metadata", "creationTimestamp"])))
    });
    c.kind = "date".into();
    c
}

/// Roles and ClusterRoles; LimitRanges.
pub(crate) fn created() -> Printer {
    Printer::of(vec![name(), created_at()])
}

pub(crate) fn binding() -> Printer {
    Printer::rows(
        vec![
            name(),
            row_col(
                "Role",
                "string",
                0,
                "The role the binding grants: its kind and name.",
            ),
            age(),
            row_col("Users", "string", 1, "The users the binding names."),
            row_col("Groups", "string", 1, "The groups the binding names."),
            row_col(
                "ServiceAccounts",
                "string",
                1,
                "The service accounts the binding names, as namespace/name.",
            ),
        ],
        |o, now| binding_cells(o, name_of(o), json!(age_of(o, now))),
    )
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

/// A service's ports as `80/TCP` or, with a node port, `80:30080/TCP`.
fn service_ports(o: &Value) -> String {
    let ports: Vec<String> = list(o, &["spec", "ports"])
        .iter()
        .map(|p| {
            let protocol = s(p, &["protocol"]).unwrap_or("TCP");
            match int(p, &["nodePort"]) {
                0 => format!("{}/{protocol}", int(p, &["port"])),
                node => format!("{}:{node}/{protocol}", int(p, &["port"])),
            }
        })
        .collect();
    if ports.is_empty() {
        "<none>".into()
    } else {
        ports.join(",")
    }
}

/// A load balancer's ingress points (IPs or host names), joined by `,`.
pub(crate) fn load_balancer(o: &Value) -> Vec<String> {
    list(o, &["status", "loadBalancer", "ingress"])
        .iter()
        .filter_map(|i| s(i, &["ip"]).or_else(|| s(i, &["hostname"])))
        .map(str::to_owned)
        .collect()
}

fn service_external_ip(o: &Value) -> String {
    let external: Vec<String> = list(o, &["spec", "externalIPs"])
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    match s(o, &["spec", "type"]).unwrap_or("ClusterIP") {
        "LoadBalancer" => {
            let mut all = load_balancer(o);
            all.extend(external);
            if all.is_empty() {
                "<pending>".into()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => s(o, &["spec", "externalName"]).unwrap_or_default().to_owned(),
        _ if external.is_empty() => "<none>".into(),
        _ => external.join(","),
    }
}

pub(crate) fn service() -> Printer {
    Printer::of(vec![
        name(),
        col("Type", "The type of the service.", |o, _| {
            json!(s(o, &["spec", "type"]).unwrap_or("ClusterIP"))
        }),
        col(
            "Cluster-IP",
            "The IP address of the service in the cluster.",
            |o, _| json!(or_none(s(o, &["spec", "clusterIP"]))),
        ),
        col(
            "External-IP",
            "The service's addresses outside the cluster.",
            |o, _| json!(service_external_ip(o)),
        ),
        col("Port(s)", "The ports the service exposes.", |o, _| {
            json!(service_ports(o))
        }),
        age(),
        wide(
            "Selector",
            "The labels of the pods the service sends traffic to.",
            |o, _| json!(labels(at(o, &["spec", "selector"]))),
        ),
    ])
}

/// Up to three endpoints, then how many more.
pub(crate) fn first_three(all: Vec<String>, none: &str) -> String {
    if all.is_empty() {
        return none.into();
    }
    let mut out = all.iter().take(3).cloned().collect::<Vec<_>>().join(",");
    if all.len() > 3 {
        out.push_str(&format!(" + {} more...", all.len() - 3));
    }
    out
}

pub(crate) fn endpoints() -> Printer {
    Printer::of(vec![
        name(),
        col("Endpoints", "The endpoints' addresses and ports.", |o, _| {
            // Three shown, the rest counted: addresses × ports is never made whole (one
            // object of a million addresses and ports would be a trillion strings).
            let (mut shown, mut total) = (Vec::new(), 0usize);
            for subset in list(o, &["subsets"]) {
                let addresses: Vec<&str> = list(subset, &["addresses"])
                    .iter()
                    .filter_map(|a| s(a, &["ip"]))
                    .collect();
                let ports = list(subset, &["ports"]);
                if ports.is_empty() {
                    total = total.saturating_add(addresses.len());
                    let room = 3usize.saturating_sub(shown.len());
                    shown.extend(addresses.iter().take(room).map(|a| (*a).to_owned()));
                    continue;
                }
                total = total.saturating_add(addresses.len().saturating_mul(ports.len()));
                'ports: for port in ports {
                    let p = int(port, &["port"]);
                    for a in &addresses {
                        if shown.len() == 3 {
                            break 'ports;
                        }
                        shown.push(if a.contains(':') {
                            format!("[{a}]:{p}")
                        } else {
                            format!("{a}:{p}")
                        });
                    }
                }
            }
            if shown.is_empty() {
                return json!("<none>");
            }
            let mut out = shown.join(",");
            if total > shown.len() {
                out.push_str(&format!(" + {} more...", total - shown.len()));
            }
            json!(out)
        }),
        age(),
    ])
}

pub(crate) fn service_account() -> Printer {
    Printer::of(vec![
        name(),
        int_col(
            "Secrets",
            "The number of secrets the service account names.",
            |o, _| json!(list(o, &["secrets"]).len()),
        ),
        age(),
    ])
}

fn access_modes(modes: &[Value]) -> String {
    let short: Vec<&str> = modes
        .iter()
        .filter_map(Value::as_str)
        .map(|m| match m {
            "ReadWriteOnce" => "RWO",
            "ReadOnlyMany" => "ROX",
            "ReadWriteMany" => "RWX",
            "ReadWriteOncePod" => "RWOP",
            other => other,
        })
        .collect();
    short.join(",")
}

fn phase_or_terminating(o: &Value) -> Value {
    if at(o, &["metadata", "deletionTimestamp"]).is_some() {
        json!("Terminating")
    } else {
        json!(s(o, &["status", "phase"]).unwrap_or_default())
    }
}

pub(crate) fn persistent_volume() -> Printer {
    Printer::of(vec![
        name(),
        col("Capacity", "The volume's size.", |o, _| {
            json!(s(o, &["spec", "capacity", "storage"]).unwrap_or_default())
        }),
        col("Access Modes", "How the volume may be mounted.", |o, _| {
            json!(access_modes(list(o, &["spec", "accessModes"])))
        }),
        col(
            "Reclaim Policy",
            "What happens to the volume when its claim goes.",
            |o, _| json!(s(o, &["spec", "persistentVolumeReclaimPolicy"]).unwrap_or_default()),
        ),
        col("Status", "The volume's phase.", |o, _| phase_or_terminating(o)),
        col(
            "Claim",
            "The claim bound to the volume, as namespace/name.",
            |o, _| match at(o, &["spec", "claimRef"]) {
                Some(c) => json!(format!(
                    "{}/{}",
                    s(c, &["namespace"]).unwrap_or_default(),
                    s(c, &["name"]).unwrap_or_default()
                )),
                None => json!(""),
            },
        ),
        col("StorageClass", "The volume's storage class.", |o, _| {
            json!(s(o, &["spec", "storageClassName"]).unwrap_or_default())
        }),
        col(
            "VolumeAttributesClass",
            "The volume's attributes class.",
            |o, _| json!(s(o, &["spec", "volumeAttributesClassName"]).unwrap_or("<unset>")),
        ),
        col("Reason", "Why the volume is in its phase.", |o, _| {
            json!(s(o, &["status", "reason"]).unwrap_or_default())
        }),
        age(),
        wide("VolumeMode", "Filesystem or Block.", |o, _| {
            json!(s(o, &["spec", "volumeMode"]).unwrap_or("Filesystem"))
        }),
    ])
}

pub(crate) fn persistent_volume_claim() -> Printer {
    Printer::of(vec![
        name(),
        col("Status", "The claim's phase.", |o, _| phase_or_terminating(o)),
        col("Volume", "The volume bound to the claim.", |o, _| {
            json!(s(o, &["spec", "volumeName"]).unwrap_or_default())
        }),
        col("Capacity", "The bound volume's size.", |o, _| {
            json!(s(o, &["status", "capacity", "storage"]).unwrap_or_default())
        }),
        col("Access Modes", "How the bound volume may be mounted.", |o, _| {
            json!(access_modes(list(o, &["status", "accessModes"])))
        }),
        col("StorageClass", "The claim's storage class.", |o, _| {
            json!(s(o, &["spec", "storageClassName"]).unwrap_or_default())
        }),
        col(
            "VolumeAttributesClass",
            "The claim's attributes class.",
            |o, _| json!(s(o, &["spec", "volumeAttributesClassName"]).unwrap_or("<unset>")),
        ),
        age(),
        wide("VolumeMode", "Filesystem or Block.", |o, _| {
            json!(s(o, &["spec", "volumeMode"]).unwrap_or("Filesystem"))
        }),
    ])
}

pub(crate) fn replication_controller() -> Printer {
    let [desired, current, ready] = super::apps::replica_counts();
    Printer::of(vec![
        name(),
        desired,
        current,
        ready,
        age(),
        wide("Containers", "The template's containers.", |o, _| {
            json!(containers_and_images(o, &["spec", "template"]).0)
        }),
        wide("Images", "The template's images.", |o, _| {
            json!(containers_and_images(o, &["spec", "template"]).1)
        }),
        wide("Selector", "The labels of the pods it manages.", |o, _| {
            json!(labels(at(o, &["spec", "selector"])))
        }),
    ])
}

pub(crate) fn pod_template() -> Printer {
    Printer::of(vec![
        name(),
        col("Containers", "The template's containers.", |o, _| {
            json!(containers_and_images(o, &["template"]).0)
        }),
        col("Images", "The template's images.", |o, _| {
            json!(containers_and_images(o, &["template"]).1)
        }),
        col("Pod Labels", "The template's pod labels.", |o, _| {
            json!(labels(at(o, &["template", "metadata", "labels"])))
        }),
    ])
}

/// A quota's `Request` (`want == false`: every resource not a limit) or `Limit` column:
/// `resource: used/hard`, in the order of the resources' names.
fn quota(o: &Value, limits: bool) -> String {
    let Some(hard) = at(o, &["spec", "hard"]).and_then(Value::as_object) else {
        return String::new();
    };
    let mut names: Vec<&String> = hard.keys().collect();
    names.sort();
    names
        .into_iter()
        .filter(|r| r.starts_with("limits.") == limits)
        .map(|r| {
            let used = s(o, &["status", "used", r]).unwrap_or("0");
            let hard = s(o, &["status", "hard", r]).or_else(|| hard.get(r.as_str()).and_then(Value::as_str));
            format!("{r}: {used}/{}", hard.unwrap_or("0"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn resource_quota() -> Printer {
    Printer::of(vec![
        name(),
        age(),
        col("Request", "Requested resources: used out of allowed.", |o, _| {
            json!(quota(o, false))
        }),
        col("Limit", "Resource limits: used out of allowed.", |o, _| {
            json!(quota(o, true))
        }),
    ])
}
