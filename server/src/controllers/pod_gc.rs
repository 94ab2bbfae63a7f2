//! The pod garbage collector: finishes the graceful deletions that no kubelet will finish,
//! since none runs here.
//!
//! A pod bound to a node is deleted gracefully: marked, and left for the node's kubelet to
//! stop and then delete with a grace period of 0 ([`deletion`](crate::handlers::writes::deletion)). Here the
//! collector does that, by two rules ([`RULES`]):
//!
//! - a terminating pod whose node does not exist is deleted at once, as kube-controller-
//!   manager's podgc deletes the pods of nodes that are gone;
//! - a terminating pod whose grace period has run out is deleted, as its kubelet would have
//!   deleted it by then (at the latest: a kubelet kills what its grace period did not stop).
//!
//! It follows the pods through their cache (one watch, from the current state; a pod's JSON is
//! read only when it mentions a `deletionTimestamp`) and keeps the terminating ones; every
//! [`TICK`], once it has read every change its watch has ready, it applies the rules to them.
//!
//! What it keeps may still be behind the store (its watch lags, and a round awaits the store
//! pod after pod), and a pod's name is not the pod: one force-deleted and made again under its
//! name (as a StatefulSet does) is a new pod, running, that nobody asked to delete. So a pod is
//! deleted only as the collector saw it, on the preconditions of its `uid` and
//! `resourceVersion`, as a kubelet deletes the pod it ran; a 409 or a 404 says the pod is no
//! longer the one the collector saw (made again, changed, or deleted by someone else, another
//! replica among them), and it is left alone: the watch brings what it is now.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use watchcache_core::{EventKind, ObjectVersion, Revision, WireFormat};

use crate::handlers::app::AppState;
use crate::handlers::params::{DeleteParams, Params};
use crate::handlers::target::Target;
use crate::handlers::writes;
use crate::store::resources::Resource;

/// How often the rules are applied.
const TICK: Duration = Duration::from_millis(500);

/// How long the collector waits before watching again when its watch could not start.
const RETRY: Duration = Duration::from_secs(1);

/// A pod being deleted, as the collector keeps it.
#[derive(Clone, Debug, PartialEq)]
struct Terminating {
    /// Which pod of its name it is, and which version of it the collector saw: its delete is
    /// conditional on both.
    uid: String,
    revision: Revision,
    /// The node it is bound to.
    node: String,
    /// Its `deletionTimestamp`: when its grace period runs out.
    deadline: SystemTime,
}

/// Why a terminating pod is deleted now: whether its node exists, and the time.
type Rule = fn(&Terminating, bool, SystemTime) -> bool;

/// The rules, each with the reason it is logged with.
const RULES: &[(&str, Rule)] = &[
    ("its node does not exist", |_, node_exists, _| !node_exists),
    ("its grace period has run out", |pod, _, now| pod.deadline <= now),
];

/// Runs until the server stops.
pub(crate) async fn run(state: Arc<AppState>) {
    let stop = state.shutdown.token();
    let (Some(pods), Some(nodes)) = (state.resources.core("pods"), state.resources.core("nodes")) else {
        return;
    };
    let (pods, nodes) = (pods.clone(), nodes.clone());
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = follow(&state, &pods, &nodes) => {}
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(RETRY) => {}
        }
    }
}

/// Watches the pods from their current state and applies the rules every [`TICK`], until the
/// watch ends (it fell behind, or the cache relisted): then the caller watches again.
async fn follow(state: &Arc<AppState>, pods: &Arc<Resource>, nodes: &Arc<Resource>) {
    let Ok(mut opts) = Params::default().watch_options(None) else {
        return;
    };
    opts.resource_version = Some(Revision::ZERO);
    let Ok(mut watch) = pods.cache.watch(opts).await else {
        return;
    };
    let mut terminating: HashMap<(String, String), Terminating> = HashMap::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // Every change the watch has ready is read before a round starts, so that a round
            // does not start from what is already known to be gone (the preconditions keep a
            // round that does from deleting what it should not; this keeps it from trying).
            biased;
            event = watch.next() => {
                let Some(Ok(event)) = event else { return };
                let Some(object) = event.object else { continue };
                let key = (object.key().namespace().to_owned(), object.key().name().to_owned());
                match (event.kind, terminating_of(&object, pods)) {
                    (EventKind::Added | EventKind::Modified, Some(pod)) => {
                        terminating.insert(key, pod);
                    }
                    (EventKind::Bookmark, _) => {}
                    _ => {
                        terminating.remove(&key);
                    }
                }
            }
            _ = tick.tick() => collect(state, pods, nodes, &terminating).await,
        }
    }
}

/// The pod `object` if it is being deleted and a kubelet would still have to finish that: it
/// is bound to a node, and has a grace period left or no finalizer holding it.
fn terminating_of(object: &ObjectVersion, pods: &Resource) -> Option<Terminating> {
    let json = object.encoding(WireFormat::Json, &*pods.codec).ok()?;
    // Most pods are not being deleted: their JSON is not parsed.
    if !contains(json.bytes(), b"\"deletionTimestamp\"") {
        return None;
    }
    let pod: Value = serde_json::from_slice(json.bytes()).ok()?;
    let meta = &pod["metadata"];
    let uid = meta["uid"].as_str()?;
    let deadline = humantime::parse_rfc3339_weak(meta["deletionTimestamp"].as_str()?).ok()?;
    let node = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty())?;
    let grace = meta["deletionGracePeriodSeconds"].as_i64().unwrap_or(0);
    let held = meta["finalizers"].as_array().is_some_and(|f| !f.is_empty());
    (grace > 0 || !held).then(|| Terminating {
        uid: uid.to_owned(),
        revision: object.revision(),
        node: node.to_owned(),
        deadline,
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Applies the rules to the terminating pods, and deletes those a rule picks with a grace
/// period of 0, each on the condition that it is still the version the collector saw.
async fn collect(
    state: &Arc<AppState>,
    pods: &Arc<Resource>,
    nodes: &Arc<Resource>,
    terminating: &HashMap<(String, String), Terminating>,
) {
    if terminating.is_empty() {
        return;
    }
    let now = SystemTime::now();
    // Each node is looked up once a round, in the store (the cache may not have seen a node
    // created a moment ago).
    let mut exists: BTreeMap<&str, bool> = BTreeMap::new();
    for ((namespace, name), pod) in terminating {
        let node_exists = match exists.get(pod.node.as_str()) {
            Some(e) => *e,
            None => {
                let key = format!("{}{}", nodes.prefix, pod.node);
                // A store that does not answer proves nothing: the node is taken to exist.
                let e = state.store.get(&key).await.map_or(true, |n| n.is_some());
                exists.insert(&pod.node, e);
                e
            }
        };
        let Some((why, _)) = RULES.iter().find(|(_, rule)| rule(pod, node_exists, now)) else {
            continue;
        };
        let target = Target {
            resource: pods.clone(),
            namespace: Some(namespace.clone()),
            name: None,
            subresource: None,
        };
        let force = DeleteParams {
            grace_period_seconds: Some(0),
            precondition_uid: Some(pod.uid.clone()),
            precondition_revision: Some(pod.revision),
            ..DeleteParams::default()
        };
        match writes::delete(state, &target, name, &force).await {
            Ok(_) => tracing::info!(
                namespace,
                pod = name,
                node = pod.node,
                reason = why,
                "deleted a terminating pod"
            ),
            // No longer the pod the collector saw: not its to delete.
            Err(s) if s.code == 404 || s.code == 409 => {
                tracing::debug!(
                    namespace,
                    pod = name,
                    code = s.code,
                    "a terminating pod changed or went"
                )
            }
            Err(s) => {
                tracing::warn!(namespace, pod = name, error = %s.message, "cannot delete a terminating pod")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(deadline: &str) -> Terminating {
        Terminating {
            uid: "u".to_owned(),
            revision: Revision::new(1),
            node: "n".to_owned(),
            deadline: humantime::parse_rfc3339(deadline).unwrap(),
        }
    }

    fn picked(pod: &Terminating, node_exists: bool, now: &str) -> Option<&'static str> {
        let now = humantime::parse_rfc3339(now).unwrap();
        RULES
            .iter()
            .find(|(_, rule)| rule(pod, node_exists, now))
            .map(|(why, _)| *why)
    }

    #[test]
    fn the_rules() {
        let p = pod("2025-01-01T00:00:30Z");
        assert_eq!(
            picked(&p, true, "2025-01-01T00:00:00Z"),
            None,
            "a kubelet's to finish"
        );
        assert_eq!(
            picked(&p, false, "2025-01-01T00:00:00Z"),
            Some("its node does not exist")
        );
        assert_eq!(
            picked(&p, true, "2025-01-01T00:00:30Z"),
            Some("its grace period has run out")
        );
    }

    #[test]
    fn pods_not_being_deleted_are_passed_over_unparsed() {
        let needle = b"\"deletionTimestamp\"";
        assert!(contains(br#"{"metadata":{"deletionTimestamp":"x"}}"#, needle));
        assert!(!contains(br#"{"metadata":{"name":"p"}}"#, needle));
        assert!(!contains(b"", needle));
    }
}
