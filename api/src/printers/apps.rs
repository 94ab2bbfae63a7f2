//! The workload kinds' printers: apps/v1 and batch/v1.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::*;

fn containers(template: &'static [&'static str]) -> [Column; 2] {
    // A column's rule is a plain fn, so each template path has its own pair.
    match template {
        ["spec", "template"] => [
            wide("Containers", "The template's containers.", |o, _| {
                json!(containers_and_images(o, &["spec", "template"]).0)
            }),
            wide("Images", "The template's images.", |o, _| {
                json!(containers_and_images(o, &["spec", "template"]).1)
            }),
        ],
        _ => [
            wide("Containers", "The template's containers.", |o, _| {
                json!(containers_and_images(o, &["spec", "jobTemplate", "spec", "template"]).0)
            }),
            wide("Images", "The template's images.", |o, _| {
                json!(containers_and_images(o, &["spec", "jobTemplate", "spec", "template"]).1)
            }),
        ],
    }
}

fn selector_col() -> Column {
    wide("Selector", "The labels of the pods it manages.", |o, _| {
        json!(selector(at(o, &["spec", "selector"])))
    })
}

fn replicas(o: &Value) -> i64 {
    at(o, &["spec", "replicas"]).and_then(Value::as_i64).unwrap_or(1)
}

/// Ready replicas out of those asked for (`1/3`): a Deployment's and a StatefulSet's.
fn ready_of_desired() -> Column {
    col("Ready", "Ready replicas out of those asked for.", |o, _| {
        json!(format!(
            "{}/{}",
            int(o, &["status", "readyReplicas"]),
            replicas(o)
        ))
    })
}

/// The replicas asked for, running and ready: a ReplicaSet's and a ReplicationController's.
pub(crate) fn replica_counts() -> [Column; 3] {
    [
        int_col("Desired", "The number of replicas asked for.", |o, _| {
            json!(replicas(o))
        }),
        int_col("Current", "The number of replicas running.", |o, _| {
            json!(int(o, &["status", "replicas"]))
        }),
        int_col("Ready", "The number of replicas ready.", |o, _| {
            json!(int(o, &["status", "readyReplicas"]))
        }),
    ]
}

pub(crate) fn deployment() -> Printer {
    let [c, i] = containers(&["spec", "template"]);
    Printer::of(vec![
        name(),
        ready_of_desired(),
        int_col("Up-to-date", "Replicas of the current template.", |o, _| {
            json!(int(o, &["status", "updatedReplicas"]))
        }),
        int_col("Available", "Replicas available to serve.", |o, _| {
            json!(int(o, &["status", "availableReplicas"]))
        }),
        age(),
        c,
        i,
        selector_col(),
    ])
}

pub(crate) fn replica_set() -> Printer {
    let [c, i] = containers(&["spec", "template"]);
    let [desired, current, ready] = replica_counts();
    Printer::of(vec![name(), desired, current, ready, age(), c, i, selector_col()])
}

pub(crate) fn stateful_set() -> Printer {
    let [c, i] = containers(&["spec", "template"]);
    Printer::of(vec![name(), ready_of_desired(), age(), c, i])
}

pub(crate) fn daemon_set() -> Printer {
    let [c, i] = containers(&["spec", "template"]);
    Printer::of(vec![
        name(),
        int_col("Desired", "Nodes that should run the daemon pod.", |o, _| {
            json!(int(o, &["status", "desiredNumberScheduled"]))
        }),
        int_col("Current", "Nodes running the daemon pod.", |o, _| {
            json!(int(o, &["status", "currentNumberScheduled"]))
        }),
        int_col("Ready", "Nodes whose daemon pod is ready.", |o, _| {
            json!(int(o, &["status", "numberReady"]))
        }),
        int_col("Up-to-date", "Nodes running the current template.", |o, _| {
            json!(int(o, &["status", "updatedNumberScheduled"]))
        }),
        int_col("Available", "Nodes whose daemon pod is available.", |o, _| {
            json!(int(o, &["status", "numberAvailable"]))
        }),
        col("Node Selector", "The nodes the daemon pod may run on.", |o, _| {
            json!(labels(at(o, &["spec", "template", "spec", "nodeSelector"])))
        }),
        age(),
        c,
        i,
        selector_col(),
    ])
}

pub(crate) fn controller_revision() -> Printer {
    Printer::of(vec![
        name(),
        col("Controller", "The object that owns the revision.", |o, _| {
            let owner = list(o, &["metadata", "ownerReferences"])
                .iter()
                .find(|r| at(r, &["controller"]).and_then(Value::as_bool) == Some(true));
            json!(match owner {
                Some(r) => {
                    let group = s(r, &["apiVersion"])
                        .and_then(|v| v.split_once('/'))
                        .map_or("", |(g, _)| g);
                    let kind = s(r, &["kind"]).unwrap_or_default().to_ascii_lowercase();
                    let name = s(r, &["name"]).unwrap_or_default();
                    if group.is_empty() {
                        format!("{kind}/{name}")
                    } else {
                        format!("{kind}.{group}/{name}")
                    }
                }
                None => "<none>".to_owned(),
            })
        }),
        int_col("Revision", "The revision's number.", |o, _| {
            json!(int(o, &["revision"]))
        }),
        age(),
    ])
}

fn has_condition(o: &Value, kind: &str) -> bool {
    list(o, &["status", "conditions"])
        .iter()
        .any(|c| s(c, &["type"]) == Some(kind) && s(c, &["status"]) == Some("True"))
}

fn time(v: Option<&str>) -> Option<SystemTime> {
    v.and_then(|t| humantime::parse_rfc3339_weak(t).ok())
}

pub(crate) fn job() -> Printer {
    let [c, i] = containers(&["spec", "template"]);
    Printer::of(vec![
        name(),
        col("Status", "The job's state.", |o, _| {
            json!(if has_condition(o, "Complete") {
                "Complete"
            } else if has_condition(o, "Failed") {
                "Failed"
            } else if at(o, &["metadata", "deletionTimestamp"]).is_some() {
                "Terminating"
            } else if has_condition(o, "Suspended") {
                "Suspended"
            } else if has_condition(o, "FailureTarget") {
                "FailureTarget"
            } else if has_condition(o, "SuccessCriteriaMet") {
                "SuccessCriteriaMet"
            } else {
                "Running"
            })
        }),
        col("Completions", "Pods succeeded out of those asked for.", |o, _| {
            let succeeded = int(o, &["status", "succeeded"]);
            json!(match at(o, &["spec", "completions"]).and_then(Value::as_i64) {
                Some(n) => format!("{succeeded}/{n}"),
                None => match int(o, &["spec", "parallelism"]) {
                    p if p > 1 => format!("{succeeded}/1 of {p}"),
                    _ => format!("{succeeded}/1"),
                },
            })
        }),
        col("Duration", "How long the job ran.", |o, now| {
            let Some(start) = time(s(o, &["status", "startTime"])) else {
                return json!("");
            };
            let end = time(s(o, &["status", "completionTime"])).unwrap_or(now);
            json!(human(end.duration_since(start).unwrap_or(Duration::ZERO)))
        }),
        age(),
        c,
        i,
        selector_col(),
    ])
}

pub(crate) fn cron_job() -> Printer {
    let [c, i] = containers(&["spec", "jobTemplate", "spec", "template"]);
    Printer::of(vec![
        name(),
        col("Schedule", "When jobs are made, in cron syntax.", |o, _| {
            json!(s(o, &["spec", "schedule"]).unwrap_or_default())
        }),
        col("Timezone", "The schedule's time zone.", |o, _| {
            json!(or_none(s(o, &["spec", "timeZone"])))
        }),
        col("Suspend", "Whether no more jobs are made.", |o, _| {
            json!(match at(o, &["spec", "suspend"]).and_then(Value::as_bool) {
                Some(true) => "True",
                Some(false) => "False",
                None => "<unset>",
            })
        }),
        int_col("Active", "Jobs running now.", |o, _| {
            json!(list(o, &["status", "active"]).len())
        }),
        col("Last Schedule", "How long ago a job was last made.", |o, now| {
            json!(match s(o, &["status", "lastScheduleTime"]) {
                Some(t) => age_since(Some(t), now),
                None => "<none>".to_owned(),
            })
        }),
        age(),
        c,
        i,
        wide("Selector", "The labels of the pods its jobs manage.", |o, _| {
            json!(selector(at(o, &["spec", "jobTemplate", "spec", "selector"])))
        }),
    ])
}
