//! What a DELETE does to an object, as the apiserver decides it: delete it now, mark it
//! (`deletionTimestamp`, `deletionGracePeriodSeconds`) and leave it for its finalizers or its
//! grace period, or answer it as it is. Plain values in and out; the write path stores the
//! outcome.
//!
//! - A pod is deleted gracefully: a pod bound to a node is marked with `deletionTimestamp` =
//!   now + its grace period (the request's, else `spec.terminationGracePeriodSeconds`, else
//!   30 s) and stays, for its kubelet to stop it and delete it with a grace period of 0; an
//!   unbound or finished pod goes at once. A second delete may shorten the grace period, never
//!   lengthen it.
//! - Any other object goes at once unless finalizers hold it; then it is marked with a grace
//!   period of 0 and goes with its last finalizer. A namespace is always marked first, and set
//!   Terminating: the namespace controller empties it, then finalizes it.
//!
//! Which kinds delete gracefully, and which are always marked, each kind declares
//! ([`Strategy::deletion`](watchcache_api::Strategy::deletion)).

use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};
use watchcache_api::DeletionRule;

/// What a DELETE does.
#[derive(Debug, PartialEq)]
pub(crate) enum Deletion {
    /// Delete the object now.
    Now,
    /// Store the object marked: it stays, for its finalizers or its grace period.
    Mark(Mark),
    /// Nothing to change: answer the object as it is.
    AsIs,
}

/// How an object is marked for deletion.
#[derive(Debug, PartialEq)]
pub(crate) struct Mark {
    /// `metadata.deletionTimestamp`, RFC 3339 to the second.
    pub(crate) timestamp: String,
    /// `metadata.deletionGracePeriodSeconds`.
    pub(crate) grace_period: i64,
    /// The first mark moves `metadata.generation` on, for objects that keep one.
    pub(crate) bump_generation: bool,
    /// The status the kind sets on its first mark.
    pub(crate) status: Option<Value>,
}

impl Mark {
    /// Marks `object` (its metadata is an object: the write path made sure).
    pub(crate) fn apply(self, object: &mut Map<String, Value>) {
        if let Some(status) = self.status {
            object.insert("status".into(), status);
        }
        let Some(Value::Object(meta)) = object.get_mut("metadata") else {
            return;
        };
        meta.insert("deletionTimestamp".into(), Value::String(self.timestamp));
        meta.insert(
            "deletionGracePeriodSeconds".into(),
            Value::from(self.grace_period),
        );
        if self.bump_generation {
            let generation = meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
            meta.insert("generation".into(), Value::from(generation.saturating_add(1)));
        }
    }
}

fn metadata(object: &Map<String, Value>) -> Option<&Map<String, Value>> {
    object.get("metadata").and_then(Value::as_object)
}

fn deletion_timestamp(object: &Map<String, Value>) -> Option<&str> {
    metadata(object)?.get("deletionTimestamp")?.as_str()
}

fn grace_period(object: &Map<String, Value>) -> Option<i64> {
    metadata(object)?.get("deletionGracePeriodSeconds")?.as_i64()
}

fn has_finalizers(object: &Map<String, Value>) -> bool {
    let listed = |v: Option<&Value>| v.and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    listed(metadata(object).and_then(|m| m.get("finalizers")))
        || listed(object.get("spec").and_then(|s| s.get("finalizers")))
}

fn timestamp(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// The longest a deletion's timestamp is moved, whatever grace period is asked for: the
/// timestamp must stay a time RFC 3339 can write.
const MAX_SHIFT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

fn shifted(at: SystemTime, seconds: i64) -> SystemTime {
    let by = Duration::from_secs(seconds.unsigned_abs()).min(MAX_SHIFT);
    let moved = if seconds < 0 {
        at.checked_sub(by)
    } else {
        at.checked_add(by)
    };
    moved.unwrap_or(at)
}

/// What a DELETE of `object` (as stored, of a kind deleted by `rule`), asking for the grace
/// period `requested` if any, does at `now`.
pub(crate) fn plan(
    rule: DeletionRule,
    object: &Map<String, Value>,
    requested: Option<i64>,
    now: SystemTime,
) -> Deletion {
    // A negative grace period is a second, as the apiserver reads it.
    let requested = requested.map(|g| if g < 0 { 1 } else { g });
    let held = has_finalizers(object);
    let generation = metadata(object)
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .is_some_and(|g| g > 0);
    if let Some(marked) = deletion_timestamp(object) {
        let existing = grace_period(object).unwrap_or(0).max(0);
        // Marked with a grace period: a delete may only shorten it.
        if matches!(rule, DeletionRule::Graceful(_)) && existing > 0 {
            let Some(shorter) = requested.filter(|g| *g < existing) else {
                return Deletion::AsIs;
            };
            if shorter == 0 && !held {
                return Deletion::Now;
            }
            let Ok(marked) = humantime::parse_rfc3339_weak(marked) else {
                return Deletion::AsIs;
            };
            return Deletion::Mark(Mark {
                timestamp: timestamp(shifted(marked, shorter - existing)),
                grace_period: shorter,
                bump_generation: false,
                status: None,
            });
        }
        return if held { Deletion::AsIs } else { Deletion::Now };
    }
    if let DeletionRule::MarkedFirst(status) = rule {
        return Deletion::Mark(Mark {
            timestamp: timestamp(now),
            grace_period: 0,
            bump_generation: generation,
            status: Some(status()),
        });
    }
    let grace = match rule {
        DeletionRule::Graceful(period) => period(object, requested),
        _ => 0,
    };
    if grace == 0 && !held {
        return Deletion::Now;
    }
    Deletion::Mark(Mark {
        timestamp: timestamp(shifted(now, grace)),
        grace_period: grace,
        bump_generation: generation,
        status: None,
    })
}

/// Whether an update of an object leaves it to be deleted: it is being deleted, with no
/// finalizer left and no grace period to wait out (an object marked gracefully waits for a
/// delete with a grace period of 0 however its finalizers go).
pub(crate) fn finished(object: &Map<String, Value>) -> bool {
    deletion_timestamp(object).is_some() && !has_finalizers(object) && grace_period(object).unwrap_or(0) <= 0
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// What a DELETE of a core/v1 `kind` of the built-in registry does, by its declared rule.
    fn plan(kind: &str, object: &Map<String, Value>, requested: Option<i64>, now: SystemTime) -> Deletion {
        let registry = watchcache_api::Registry::builtin();
        let spec = registry.by_kind("v1", kind).expect("a built-in kind");
        super::plan(spec.strategy.deletion, object, requested, now)
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn at(s: &str) -> SystemTime {
        humantime::parse_rfc3339(s).unwrap()
    }

    const NOW: &str = "2025-01-01T00:00:00Z";

    fn marked(ts: &str, grace: i64) -> Deletion {
        Deletion::Mark(Mark {
            timestamp: ts.to_owned(),
            grace_period: grace,
            bump_generation: true,
            status: None,
        })
    }

    #[test]
    fn pods_bound_to_a_node_are_marked_with_their_grace_period() {
        let pod = obj(json!({"metadata": {"generation": 1}, "spec": {"nodeName": "n"}}));
        assert_eq!(
            plan("Pod", &pod, None, at(NOW)),
            marked("2025-01-01T00:00:30Z", 30)
        );
        assert_eq!(
            plan("Pod", &pod, Some(5), at(NOW)),
            marked("2025-01-01T00:00:05Z", 5)
        );
        assert_eq!(
            plan("Pod", &pod, Some(-3), at(NOW)),
            marked("2025-01-01T00:00:01Z", 1)
        );
        assert_eq!(plan("Pod", &pod, Some(0), at(NOW)), Deletion::Now);
        let own = obj(
            json!({"metadata": {"generation": 1}, "spec": {"nodeName": "n", "terminationGracePeriodSeconds": 60}}),
        );
        assert_eq!(
            plan("Pod", &own, None, at(NOW)),
            marked("2025-01-01T00:01:00Z", 60)
        );
        let unbound = obj(json!({"spec": {}}));
        assert_eq!(plan("Pod", &unbound, Some(30), at(NOW)), Deletion::Now);
        let done = obj(json!({"spec": {"nodeName": "n"}, "status": {"phase": "Failed"}}));
        assert_eq!(plan("Pod", &done, None, at(NOW)), Deletion::Now);
    }

    #[test]
    fn a_second_delete_only_shortens() {
        let pod = obj(json!({"metadata": {"deletionTimestamp": "2025-01-01T00:01:00Z",
            "deletionGracePeriodSeconds": 60}, "spec": {"nodeName": "n"}}));
        assert_eq!(plan("Pod", &pod, None, at(NOW)), Deletion::AsIs);
        assert_eq!(plan("Pod", &pod, Some(90), at(NOW)), Deletion::AsIs);
        let shorter = Deletion::Mark(Mark {
            timestamp: "2025-01-01T00:00:10Z".to_owned(),
            grace_period: 10,
            bump_generation: false,
            status: None,
        });
        assert_eq!(plan("Pod", &pod, Some(10), at(NOW)), shorter);
        assert_eq!(plan("Pod", &pod, Some(0), at(NOW)), Deletion::Now);
        let mut held = pod.clone();
        held["metadata"]["finalizers"] = json!(["x/y"]);
        assert!(matches!(
            plan("Pod", &held, Some(0), at(NOW)),
            Deletion::Mark(Mark { grace_period: 0, .. })
        ));
        let forced = obj(
            json!({"metadata": {"deletionTimestamp": NOW, "deletionGracePeriodSeconds": 0,
            "finalizers": ["x/y"]}, "spec": {"nodeName": "n"}}),
        );
        assert_eq!(plan("Pod", &forced, Some(0), at(NOW)), Deletion::AsIs);
    }

    #[test]
    fn any_grace_period_makes_a_timestamp() {
        let pod = obj(json!({"spec": {"nodeName": "n"}}));
        for grace in [i64::MAX, i64::MIN, 1 << 40] {
            let Deletion::Mark(mark) = plan("Pod", &pod, Some(grace), at(NOW)) else {
                panic!("marked");
            };
            assert!(
                humantime::parse_rfc3339(&mark.timestamp).is_ok(),
                "{grace}: {}",
                mark.timestamp
            );
        }
    }

    #[test]
    fn other_kinds_go_at_once_unless_held() {
        let cm = obj(json!({"metadata": {}}));
        assert_eq!(plan("ConfigMap", &cm, Some(30), at(NOW)), Deletion::Now);
        let held = obj(json!({"metadata": {"finalizers": ["x/y"]}}));
        let Deletion::Mark(mark) = plan("ConfigMap", &held, Some(30), at(NOW)) else {
            panic!("marked");
        };
        assert_eq!(
            (mark.timestamp.as_str(), mark.grace_period, mark.bump_generation),
            (NOW, 0, false)
        );
        let marked = obj(
            json!({"metadata": {"finalizers": ["x/y"], "deletionTimestamp": NOW, "deletionGracePeriodSeconds": 0}}),
        );
        assert_eq!(plan("ConfigMap", &marked, None, at(NOW)), Deletion::AsIs);
    }

    #[test]
    fn namespaces_are_marked_terminating_then_wait_for_their_finalizers() {
        let ns = obj(json!({"metadata": {}, "spec": {"finalizers": ["kubernetes"]}}));
        let Deletion::Mark(mark) = plan("Namespace", &ns, None, at(NOW)) else {
            panic!("marked");
        };
        assert_eq!(mark.status, Some(json!({"phase": "Terminating"})));
        let mut terminating = ns.clone();
        mark.apply(&mut terminating);
        assert_eq!(terminating["status"]["phase"], "Terminating");
        assert_eq!(plan("Namespace", &terminating, None, at(NOW)), Deletion::AsIs);
        terminating["spec"]["finalizers"] = json!([]);
        assert_eq!(plan("Namespace", &terminating, None, at(NOW)), Deletion::Now);
    }

    #[test]
    fn an_update_finishes_only_a_deletion_with_nothing_to_wait_for() {
        assert!(finished(&obj(
            json!({"metadata": {"deletionTimestamp": NOW, "deletionGracePeriodSeconds": 0}})
        )));
        assert!(!finished(&obj(
            json!({"metadata": {"deletionTimestamp": NOW, "deletionGracePeriodSeconds": 30}})
        )));
        assert!(!finished(&obj(
            json!({"metadata": {"deletionTimestamp": NOW, "finalizers": ["a/b"]}})
        )));
        assert!(!finished(&obj(
            json!({"metadata": {"deletionTimestamp": NOW}, "spec": {"finalizers": ["kubernetes"]}})
        )));
        assert!(!finished(&obj(json!({"metadata": {}}))));
    }
}
