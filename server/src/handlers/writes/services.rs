//! Service addresses: ClusterIPs from `--service-cluster-ip-range` and NodePorts from
//! `--service-node-port-range`, allocated as the apiserver allocates them, each claimed by a
//! key of its own in the store, created only if absent, so that replicas sharing a store never
//! hand out one address twice.
//!
//! - A new Service of a type with a cluster IP gets a free one at random (or the one it asks
//!   for, if free and in range); a NodePort or LoadBalancer Service gets a node port per port.
//!   A headless Service (`clusterIP: None`) and an ExternalName one get none.
//! - An update keeps what was allocated: an unset `clusterIP` or `nodePort` is the stored one,
//!   a changed cluster IP is refused (immutable), and a port that newly needs a node port gets
//!   one.
//! - A deleted Service's addresses are released at once. What a write failed before using, or
//!   a Service deleted another way (a namespace's cleanup, another replica that stopped) left
//!   claimed, the repair loop releases: a claim no Service holds, seen twice a repair period
//!   apart unchanged, goes (as the apiserver's repair controllers do).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use watchcache_core::{Revision, Source, SourceError};
use watchcache_encoders::Status;

use crate::handlers::app::AppState;
use crate::handlers::errors;
use crate::handlers::target::Target;

/// Where each allocated cluster IP is claimed (an `networking.k8s.io/v1` IPAddress, as the
/// apiserver's allocator keeps them).
const IP_PREFIX: &str = "/registry/ipaddresses/";
/// Where each allocated node port is claimed.
const PORT_PREFIX: &str = "/registry/servicenodeports/";

/// Whether `t` addresses objects whose addresses are allocated: Services, as their kind
/// declares ([`Strategy::service_addresses`](watchcache_api::Strategy::service_addresses)).
pub(crate) fn is_services(t: &Target) -> bool {
    t.resource.spec.strategy.service_addresses
}

/// The claims one write made, and those of the Service it replaces that it no longer holds.
#[derive(Default)]
pub(crate) struct Claims {
    /// Made for this write: released if it does not happen.
    keys: Vec<String>,
    /// Held by the stored Service and not by the new one: released once the write is stored.
    dropped: Vec<String>,
    /// The Service's uid, which a claim to release must name.
    uid: Value,
}

impl Claims {
    /// Releases the claims made for a write that did not happen (or was a dry run). Only for
    /// a failure that proves nothing was stored: a write whose outcome is unknown keeps them,
    /// for the repair loop to release if no Service holds them.
    pub(crate) async fn release(self, state: &AppState) {
        for key in self.keys {
            if let Err(e) = state.store.delete(&key, None).await
                && !matches!(e, SourceError::NotFound(_))
            {
                tracing::warn!(key, error = %e, "releasing a Service address; the repair loop will");
            }
        }
    }

    /// The write was stored: the addresses the Service no longer holds go.
    pub(crate) async fn settle(self, state: &AppState) {
        for key in &self.dropped {
            release_owned(state, key, &self.uid).await;
        }
    }

    /// Releases these claims if the write failed for certain (`failed`, the code of its
    /// error, is the client's: nothing was stored), or was a dry run; settles them if it was
    /// stored.
    pub(crate) async fn after(self, state: &AppState, failed: Option<u16>, dry_run: bool) {
        match failed {
            None if !dry_run => self.settle(state).await,
            Some(code) if code >= 500 => {}
            _ => self.release(state).await,
        }
    }
}

/// Releases `key` if its claim names the Service `uid`.
async fn release_owned(state: &AppState, key: &str, uid: &Value) {
    let Ok(Some((value, revision))) = state.store.get(key).await else {
        return;
    };
    let owner: Value = serde_json::from_slice(&value).unwrap_or(Value::Null);
    if owner["spec"]["parentRef"]["uid"] == *uid {
        let _ = state.store.delete(key, Some(revision)).await;
    }
}

fn spec_str<'a>(object: &'a Map<String, Value>, field: &str) -> Option<&'a str> {
    object.get("spec")?.get(field)?.as_str()
}

fn needs_cluster_ip(service_type: &str) -> bool {
    service_type != "ExternalName"
}

fn needs_node_ports(service_type: &str) -> bool {
    matches!(service_type, "NodePort" | "LoadBalancer")
}

/// What a claim's value says: the Service holding it (`owner`: its stored metadata, whose uid
/// the server set).
fn claim_value(kind: &str, name: &str, owner: &Map<String, Value>) -> Bytes {
    let meta = owner.get("metadata").cloned().unwrap_or_default();
    Bytes::from(
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": name},
            "spec": {"parentRef": {
                "group": "", "resource": "services",
                "namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid"),
            }},
        })
        .to_string(),
    )
}

fn ip_key(ip: &str) -> String {
    format!("{IP_PREFIX}{ip}")
}

fn port_key(port: i64) -> String {
    format!("{PORT_PREFIX}{port}")
}

/// Claims `key`: `Ok(false)` if it is claimed already.
async fn claim(state: &AppState, key: &str, value: Bytes) -> Result<bool, Status> {
    match state.store.create(key, value).await {
        Ok(_) => Ok(true),
        Err(SourceError::AlreadyExists(_)) => Ok(false),
        Err(e) => Err(errors::source(&e, "services", "")),
    }
}

/// Whether `key` is the Service `owner`'s: claimed for it now if nobody has it (a Service
/// stored before its claims were, or restored from a backup).
async fn held_by(
    state: &AppState,
    key: &str,
    value: Bytes,
    owner: &Map<String, Value>,
) -> Result<bool, Status> {
    if claim(state, key, value).await? {
        return Ok(true);
    }
    let uid = owner.get("metadata").and_then(|m| m.get("uid"));
    let stored = state
        .store
        .get(key)
        .await
        .map_err(|e| errors::source(&e, "services", ""))?;
    Ok(stored.is_some_and(|(v, _)| {
        let claim: Value = serde_json::from_slice(&v).unwrap_or(Value::Null);
        uid.is_some_and(|u| claim["spec"]["parentRef"]["uid"] == *u)
    }))
}

fn invalid(name: &str, field: &str, value: Value, why: &str) -> Status {
    errors::invalid_field("Service", "", name, field, value, why)
}

fn name_of(object: &Map<String, Value>) -> String {
    object
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A cluster IP for `object`: the one it asks for (kept if `owner` holds it), or a free one
/// at random.
async fn allocate_ip(
    state: &AppState,
    owner: &Map<String, Value>,
    wanted: Option<&str>,
    claims: &mut Claims,
) -> Result<String, Status> {
    let range = &state.config.service_ranges.ips;
    let name = name_of(owner);
    if let Some(ip) = wanted {
        if range.offset(ip).is_none() {
            return Err(invalid(
                &name,
                "spec.clusterIPs",
                json!([ip]),
                &format!(
                    "failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of valid IPs is {}",
                    range.text
                ),
            ));
        }
        let ip = ip
            .parse::<IpAddr>()
            .map_or_else(|_| ip.to_owned(), |a| a.to_string());
        let key = ip_key(&ip);
        if claim(state, &key, claim_value("IPAddress", &ip, owner)).await? {
            claims.keys.push(key);
        } else if !held_by(state, &key, claim_value("IPAddress", &ip, owner), owner).await? {
            return Err(invalid(
                &name,
                "spec.clusterIPs",
                json!([ip]),
                &format!("failed to allocate IP {ip}: provided IP is already allocated"),
            ));
        }
        return Ok(ip);
    }
    // Offsets 2..last: the network's address, the `kubernetes` Service's and an IPv4
    // broadcast are never handed out.
    let span = range.last() - 2;
    let start = u128::from(fastrand::u64(..)) % span;
    for i in 0..span.min(1 << 16) {
        let ip = range.nth(2 + (start + i) % span).to_string();
        if claim(state, &ip_key(&ip), claim_value("IPAddress", &ip, owner)).await? {
            claims.keys.push(ip_key(&ip));
            return Ok(ip);
        }
    }
    Err(Status::internal(format!(
        "failed to allocate a serviceIP: range is full ({})",
        range.text
    )))
}

/// A node port for port `index`: the one it asks for (kept if `owner` holds it), or a free
/// one at random.
async fn allocate_port(
    state: &AppState,
    owner: &Map<String, Value>,
    index: usize,
    wanted: Option<i64>,
    claims: &mut Claims,
) -> Result<i64, Status> {
    let (first, last) = state.config.service_ranges.node_ports;
    let name = name_of(owner);
    let field = format!("spec.ports[{index}].nodePort");
    if let Some(port) = wanted {
        if port < i64::from(first) || port > i64::from(last) {
            return Err(invalid(
                &name,
                &field,
                json!(port),
                &format!(
                    "provided port is not in the valid range. The range of valid ports is {first}-{last}"
                ),
            ));
        }
        let value = claim_value("NodePort", &port.to_string(), owner);
        if claim(state, &port_key(port), value.clone()).await? {
            claims.keys.push(port_key(port));
        } else if !held_by(state, &port_key(port), value, owner).await? {
            return Err(invalid(
                &name,
                &field,
                json!(port),
                "provided port is already allocated",
            ));
        }
        return Ok(port);
    }
    let span = i64::from(last) - i64::from(first) + 1;
    let start = fastrand::i64(0..span);
    for i in 0..span {
        let port = i64::from(first) + (start + i) % span;
        if claim(
            state,
            &port_key(port),
            claim_value("NodePort", &port.to_string(), owner),
        )
        .await?
        {
            claims.keys.push(port_key(port));
            return Ok(port);
        }
    }
    Err(Status::internal(format!(
        "failed to allocate a nodePort: range is full ({first}-{last})"
    )))
}

fn spec_mut(object: &mut Map<String, Value>) -> &mut Map<String, Value> {
    let spec = object.entry("spec").or_insert_with(|| json!({}));
    if !spec.is_object() {
        *spec = json!({});
    }
    spec.as_object_mut().expect("made an object")
}

/// Sets the cluster IP fields of a Service given `ip` (or `None` for a headless one).
fn set_cluster_ip(state: &AppState, spec: &mut Map<String, Value>, ip: &str) {
    spec.insert("clusterIP".into(), json!(ip));
    spec.insert("clusterIPs".into(), json!([ip]));
    let family = state.config.service_ranges.ips.family();
    spec.entry("ipFamilies").or_insert_with(|| json!([family]));
    spec.entry("ipFamilyPolicy")
        .or_insert_with(|| json!("SingleStack"));
}

/// Allocates a Service's addresses (`current`: the stored Service an update replaces, whose
/// addresses it keeps). Only for Services; anything else gets no claims.
pub(crate) async fn allocate(
    state: &AppState,
    t: &Target,
    object: &mut Map<String, Value>,
    current: Option<&Map<String, Value>>,
) -> Result<Claims, Status> {
    let mut claims = Claims::default();
    if !is_services(t) {
        return Ok(claims);
    }
    // Claims name the stored Service (its server-set uid), or the new one.
    let owner = current.cloned().unwrap_or_else(|| object.clone());
    claims.uid = owner
        .get("metadata")
        .and_then(|m| m.get("uid"))
        .cloned()
        .unwrap_or(Value::Null);
    match allocate_into(state, object, current, &owner, &mut claims).await {
        Ok(()) => {
            if let Some(current) = current {
                let now = held(&Value::Object(object.clone()));
                claims.dropped = held(&Value::Object(current.clone()))
                    .into_iter()
                    .filter(|k| !now.contains(k))
                    .collect();
            }
            Ok(claims)
        }
        Err(e) => {
            claims.release(state).await;
            Err(e)
        }
    }
}

async fn allocate_into(
    state: &AppState,
    object: &mut Map<String, Value>,
    current: Option<&Map<String, Value>>,
    owner: &Map<String, Value>,
    claims: &mut Claims,
) -> Result<(), Status> {
    let service_type = spec_str(object, "type").unwrap_or("ClusterIP").to_owned();
    let name = name_of(object);
    let old_ip = current
        .filter(|c| needs_cluster_ip(spec_str(c, "type").unwrap_or("ClusterIP")))
        .and_then(|c| spec_str(c, "clusterIP"))
        .filter(|ip| !ip.is_empty());
    let new_ip = spec_str(object, "clusterIP")
        .filter(|ip| !ip.is_empty())
        .map(str::to_owned);
    if !needs_cluster_ip(&service_type) {
        if let Some(ip) = new_ip.filter(|ip| ip != "None") {
            return Err(invalid(
                &name,
                "spec.clusterIP",
                json!(ip),
                "may not be set for ExternalName services",
            ));
        }
    } else {
        match (old_ip, new_ip.as_deref()) {
            // Kept: unset in the update, or the same (claimed again if its claim is gone).
            (Some(old), None) => {
                let old = old.to_owned();
                let kept = current.and_then(|c| c.get("spec")).cloned().unwrap_or_default();
                let spec = spec_mut(object);
                spec.insert("clusterIP".into(), json!(old));
                for f in ["clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
                    if let Some(v) = kept.get(f) {
                        spec.entry(f).or_insert_with(|| v.clone());
                    }
                }
                if old != "None" {
                    allocate_ip(state, owner, Some(&old), claims).await?;
                }
            }
            (Some(old), Some(new)) if old == new => {
                if old != "None" {
                    allocate_ip(state, owner, Some(old), claims).await?;
                }
            }
            (Some(_), Some(new)) => {
                return Err(invalid(
                    &name,
                    "spec.clusterIPs[0]",
                    json!(new),
                    "may not change once set",
                ));
            }
            (None, Some("None")) => {
                let spec = spec_mut(object);
                spec.insert("clusterIPs".into(), json!(["None"]));
                let family = state.config.service_ranges.ips.family();
                spec.entry("ipFamilies").or_insert_with(|| json!([family]));
                spec.entry("ipFamilyPolicy")
                    .or_insert_with(|| json!("SingleStack"));
            }
            (None, wanted) => {
                let ip = allocate_ip(state, owner, wanted, claims).await?;
                set_cluster_ip(state, spec_mut(object), &ip);
            }
        }
    }
    let count = object
        .get("spec")
        .and_then(|s| s.get("ports"))
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    if !needs_node_ports(&service_type) {
        for i in 0..count {
            if object["spec"]["ports"][i]["nodePort"]
                .as_i64()
                .is_some_and(|p| p != 0)
            {
                return Err(errors::invalid_field(
                    "Service",
                    "",
                    &name,
                    &format!("spec.ports[{i}].nodePort"),
                    object["spec"]["ports"][i]["nodePort"].clone(),
                    &format!("may not be used when `type` is '{service_type}'"),
                ));
            }
        }
        return Ok(());
    }
    // The node ports the stored Service holds: any of them may be kept, on any port.
    let old_ports: Vec<Value> = current
        .filter(|c| needs_node_ports(spec_str(c, "type").unwrap_or("ClusterIP")))
        .and_then(|c| c.get("spec")?.get("ports")?.as_array().cloned())
        .unwrap_or_default();
    let mut taken: Vec<i64> = (0..count)
        .filter_map(|i| object["spec"]["ports"][i]["nodePort"].as_i64())
        .filter(|p| *p > 0)
        .collect();
    for i in 0..count {
        let port = &object["spec"]["ports"][i];
        let wanted = port.get("nodePort").and_then(Value::as_i64).filter(|p| *p > 0);
        let same = |o: &&Value| {
            o.get("port") == port.get("port")
                && o.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
                    == port.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
        };
        // Unset: the stored port's, if this port had one no other port takes.
        let kept = old_ports
            .iter()
            .find(same)
            .and_then(|o| o.get("nodePort"))
            .and_then(Value::as_i64)
            .filter(|p| *p > 0 && !taken.contains(p));
        let node_port = match (wanted, kept) {
            (Some(w), _) => allocate_port(state, owner, i, Some(w), claims).await?,
            (None, Some(k)) => {
                taken.push(k);
                allocate_port(state, owner, i, Some(k), claims).await?
            }
            (None, None) => allocate_port(state, owner, i, None, claims).await?,
        };
        if let Some(p) = object
            .get_mut("spec")
            .and_then(|s| s.get_mut("ports"))
            .and_then(|p| p.get_mut(i))
            .and_then(Value::as_object_mut)
        {
            p.insert("nodePort".into(), json!(node_port));
        }
    }
    Ok(())
}

/// The claims a stored Service holds: its cluster IPs and node ports.
fn held(object: &Value) -> Vec<String> {
    let spec = &object["spec"];
    let mut keys: Vec<String> = spec["clusterIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(std::iter::once(&spec["clusterIP"]))
        .filter_map(Value::as_str)
        .filter(|ip| !ip.is_empty() && *ip != "None")
        .map(ip_key)
        .collect();
    keys.extend(
        spec["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["nodePort"].as_i64())
            .filter(|p| *p > 0)
            .map(port_key),
    );
    keys.sort();
    keys.dedup();
    keys
}

/// Releases the claims of a deleted Service (`raw`: its last stored value), each only if it is
/// still this Service's.
pub(crate) async fn release_deleted(state: &AppState, t: &Target, raw: &[u8]) {
    if !is_services(t) {
        return;
    }
    let Ok(object) = serde_json::from_slice::<Value>(raw) else {
        return;
    };
    let uid = &object["metadata"]["uid"];
    for key in held(&object) {
        release_owned(state, &key, uid).await;
    }
}

/// Releases the claims no Service holds, every [`ServiceRanges::repair_every`], until the
/// server stops.
pub(crate) async fn repair(state: Arc<AppState>) {
    let stop = state.shutdown.token();
    // A claim seen orphaned, at its mod revision: released if still so next time.
    let mut suspects: HashMap<String, Revision> = HashMap::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(state.config.service_ranges.repair_every) => {}
        }
        match repair_once(&state, &suspects).await {
            Ok(orphans) => suspects = orphans,
            Err(e) => tracing::warn!(error = %e, "repairing Service address claims"),
        }
    }
}

/// One pass: releases the `suspects` still orphaned and unchanged, and returns the claims
/// orphaned now.
async fn repair_once(
    state: &AppState,
    suspects: &HashMap<String, Revision>,
) -> Result<HashMap<String, Revision>, SourceError> {
    // The claims first, then the Services: a claim made for a Service that is stored in
    // between is seen held.
    let mut claims = state.store.list(IP_PREFIX, None).await?.items;
    claims.extend(state.store.list(PORT_PREFIX, None).await?.items);
    let services = state.store.list("/registry/services/specs/", None).await?;
    let services: Vec<Value> = services
        .items
        .iter()
        .filter_map(|i| serde_json::from_slice::<Value>(&i.value).ok())
        .collect();
    let holding: HashSet<String> = services.iter().flat_map(held).collect();
    // An address a Service holds without a claim (stored before its claims were, restored
    // from a backup) is claimed for it.
    let claimed: HashSet<&str> = claims.iter().map(|c| c.key.as_str()).collect();
    for service in &services {
        let Some(owner) = service.as_object() else {
            continue;
        };
        for key in held(service)
            .into_iter()
            .filter(|k| !claimed.contains(k.as_str()))
        {
            let (kind, name) = match key.strip_prefix(IP_PREFIX) {
                Some(ip) => ("IPAddress", ip.to_owned()),
                None => ("NodePort", key.trim_start_matches(PORT_PREFIX).to_owned()),
            };
            let _ = state.store.create(&key, claim_value(kind, &name, owner)).await;
        }
    }
    let mut orphans = HashMap::new();
    for claim in claims.into_iter().filter(|c| !holding.contains(&c.key)) {
        if suspects.get(&claim.key) == Some(&claim.mod_revision) {
            let _ = state.store.delete(&claim.key, Some(claim.mod_revision)).await;
        } else {
            orphans.insert(claim.key, claim.mod_revision);
        }
    }
    Ok(orphans)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_holds_its_ips_and_node_ports() {
        let s = json!({"spec": {"clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5"],
            "ports": [{"port": 80, "nodePort": 30080}, {"port": 81}]}});
        assert_eq!(
            held(&s),
            [
                "/registry/ipaddresses/10.0.0.5",
                "/registry/servicenodeports/30080"
            ]
        );
        let headless = json!({"spec": {"clusterIP": "None", "clusterIPs": ["None"]}});
        assert!(held(&headless).is_empty());
    }
}
