//! The printers of discovery, networking, policy, autoscaling, storage and scheduling kinds.

use serde_json::{Value, json};

use super::core::{first_three, load_balancer};
use super::*;

pub(crate) fn endpoint_slice() -> Printer {
    Printer::of(vec![
        name(),
        col("AddressType", "IPv4, IPv6 or FQDN.", |o, _| {
            json!(s(o, &["addressType"]).unwrap_or_default())
        }),
        col("Ports", "The slice's ports.", |o, _| {
            let ports: Vec<String> = list(o, &["ports"])
                .iter()
                .map(|p| match at(p, &["port"]).and_then(Value::as_i64) {
                    Some(n) => n.to_string(),
                    None => "<unset>".to_owned(),
                })
                .collect();
            json!(if ports.is_empty() {
                "<unset>".to_owned()
            } else {
                ports.join(",")
            })
        }),
        col("Endpoints", "The slice's addresses.", |o, _| {
            let all = list(o, &["endpoints"])
                .iter()
                .flat_map(|e| {
                    list(e, &["addresses"])
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                })
                .collect();
            json!(first_three(all, "<unset>"))
        }),
        age(),
    ])
}

pub(crate) fn ingress() -> Printer {
    Printer::of(vec![
        name(),
        col("Class", "The ingress class.", |o, _| {
            json!(or_none(s(o, &["spec", "ingressClassName"])))
        }),
        col("Hosts", "The hosts the rules name.", |o, _| {
            let hosts: Vec<&str> = list(o, &["spec", "rules"])
                .iter()
                .filter_map(|r| s(r, &["host"]))
                .filter(|h| !h.is_empty())
                .collect();
            json!(match hosts.len() {
                0 => "*".to_owned(),
                n if n > 4 => format!("{} + {} more...", hosts[..4].join(","), n - 4),
                _ => hosts.join(","),
            })
        }),
        col("Address", "Where the ingress is reached.", |o, _| {
            json!(load_balancer(o).join(","))
        }),
        col("Ports", "The ports it serves.", |o, _| {
            json!(if list(o, &["spec", "tls"]).is_empty() {
                "80"
            } else {
                "80, 443"
            })
        }),
        age(),
    ])
}

pub(crate) fn ingress_class() -> Printer {
    Printer::of(vec![
        name(),
        col(
            "Controller",
            "The controller that implements the class.",
            |o, _| json!(s(o, &["spec", "controller"]).unwrap_or_default()),
        ),
        col("Parameters", "The class's parameters object.", |o, _| {
            json!(match at(o, &["spec", "parameters"]) {
                Some(p) => {
                    let kind = s(p, &["kind"]).unwrap_or_default();
                    let name = s(p, &["name"]).unwrap_or_default();
                    match s(p, &["apiGroup"]) {
                        Some(g) if !g.is_empty() => format!("{kind}.{g}/{name}"),
                        _ => format!("{kind}/{name}"),
                    }
                }
                None => "<none>".to_owned(),
            })
        }),
        age(),
    ])
}

pub(crate) fn network_policy() -> Printer {
    Printer::of(vec![
        name(),
        col("Pod-Selector", "The pods the policy applies to.", |o, _| {
            json!(selector(at(o, &["spec", "podSelector"])))
        }),
        age(),
    ])
}

fn int_or_string(v: Option<&Value>) -> String {
    match v {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => "N/A".to_owned(),
    }
}

pub(crate) fn pod_disruption_budget() -> Printer {
    Printer::of(vec![
        name(),
        col("Min Available", "Pods that must stay available.", |o, _| {
            json!(int_or_string(at(o, &["spec", "minAvailable"])))
        }),
        col("Max Unavailable", "Pods that may be unavailable.", |o, _| {
            json!(int_or_string(at(o, &["spec", "maxUnavailable"])))
        }),
        int_col("Allowed Disruptions", "Evictions allowed now.", |o, _| {
            json!(int(o, &["status", "disruptionsAllowed"]))
        }),
        age(),
    ])
}

/// An autoscaler's targets: each metric's current value (or `<unknown>`) over its target,
/// two at most, then how many more.
fn hpa_targets(o: &Value) -> String {
    let specs = list(o, &["spec", "metrics"]);
    let current = list(o, &["status", "currentMetrics"]);
    let shown: Vec<String> = specs
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let kind = s(m, &["type"]).unwrap_or_default();
            let source = match kind {
                "Resource" => "resource",
                "ContainerResource" => "containerResource",
                "Pods" => "pods",
                "Object" => "object",
                "External" => "external",
                _ => "",
            };
            let target = at(m, &[source, "target"]);
            let now = current.get(i).and_then(|c| at(c, &[source, "current"]));
            let prefix = match kind {
                "Resource" | "ContainerResource" => {
                    format!("{}: ", s(m, &[source, "name"]).unwrap_or_default())
                }
                _ => String::new(),
            };
            match target
                .and_then(|t| at(t, &["averageUtilization"]))
                .and_then(Value::as_i64)
            {
                Some(want) => {
                    let have = now
                        .and_then(|c| at(c, &["averageUtilization"]))
                        .and_then(Value::as_i64)
                        .map_or("<unknown>".to_owned(), |v| format!("{v}%"));
                    format!("{prefix}{have}/{want}%")
                }
                None => {
                    let field = |v: Option<&Value>| {
                        v.and_then(|v| s(v, &["averageValue"]).or_else(|| s(v, &["value"])))
                            .map(str::to_owned)
                    };
                    let want = field(target).unwrap_or_else(|| "<unknown>".to_owned());
                    let have = field(now).unwrap_or_else(|| "<unknown>".to_owned());
                    format!("{prefix}{have}/{want}")
                }
            }
        })
        .collect();
    match shown.len() {
        0 => "<none>".into(),
        n if n > 2 => format!("{} + {} more...", shown[..2].join(", "), n - 2),
        _ => shown.join(", "),
    }
}

pub(crate) fn horizontal_pod_autoscaler() -> Printer {
    Printer::of(vec![
        name(),
        col("Reference", "The object it scales, as kind/name.", |o, _| {
            json!(format!(
                "{}/{}",
                s(o, &["spec", "scaleTargetRef", "kind"]).unwrap_or_default(),
                s(o, &["spec", "scaleTargetRef", "name"]).unwrap_or_default()
            ))
        }),
        col(
            "Targets",
            "Each metric's current value over its target.",
            |o, _| json!(hpa_targets(o)),
        ),
        col("MinPods", "The fewest replicas.", |o, _| {
            json!(
                at(o, &["spec", "minReplicas"])
                    .and_then(Value::as_i64)
                    .map_or("<unset>".to_owned(), |v| v.to_string())
            )
        }),
        int_col("MaxPods", "The most replicas.", |o, _| {
            json!(int(o, &["spec", "maxReplicas"]))
        }),
        int_col("Replicas", "The replicas now.", |o, _| {
            json!(int(o, &["status", "currentReplicas"]))
        }),
        age(),
    ])
}

pub(crate) fn storage_class() -> Printer {
    let mut columns = vec![
        col(
            "Name",
            "The class's name; `(default)` marks the default class.",
            |o, _| {
                let name = s(o, &["metadata", "name"]).unwrap_or_default();
                let default = [
                    "storageclass.kubernetes.io/is-default-class",
                    "storageclass.beta.kubernetes.io/is-default-class",
                ]
                .iter()
                .any(|a| s(o, &["metadata", "annotations", a]) == Some("true"));
                json!(if default {
                    format!("{name} (default)")
                } else {
                    name.to_owned()
                })
            },
        ),
        col("Provisioner", "What provisions the class's volumes.", |o, _| {
            json!(s(o, &["provisioner"]).unwrap_or_default())
        }),
        col(
            "ReclaimPolicy",
            "What happens to a volume when its claim goes.",
            |o, _| json!(s(o, &["reclaimPolicy"]).unwrap_or("Delete")),
        ),
        col("VolumeBindingMode", "When volumes are bound.", |o, _| {
            json!(s(o, &["volumeBindingMode"]).unwrap_or("Immediate"))
        }),
        col("AllowVolumeExpansion", "Whether volumes may grow.", |o, _| {
            json!(
                at(o, &["allowVolumeExpansion"])
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            )
        }),
        age(),
    ];
    columns[0].format = "name".into();
    columns[4].kind = "boolean".into();
    Printer::of(columns)
}

pub(crate) fn crd() -> Printer {
    let mut columns = vec![
        name(),
        col("Created At", "When the object was created.", |o, _| {
            json!(date(s(o, &["metadata", "creationTimestamp"])))
        }),
    ];
    columns[1].kind = "date".into();
    Printer::of(columns)
}

pub(crate) fn priority_class() -> Printer {
    let mut columns = vec![
        name(),
        int_col("Value", "The priority.", |o, _| json!(int(o, &["value"]))),
        col(
            "Global-Default",
            "Whether pods without a class get this one.",
            |o, _| {
                json!(
                    at(o, &["globalDefault"])
                        .and_then(Value::as_bool)
                        .unwrap_or(false)
                )
            },
        ),
        age(),
        col("PreemptionPolicy", "Whether its pods preempt others.", |o, _| {
            json!(s(o, &["preemptionPolicy"]).unwrap_or("PreemptLowerPriority"))
        }),
    ];
    columns[2].kind = "boolean".into();
    Printer::of(columns)
}
