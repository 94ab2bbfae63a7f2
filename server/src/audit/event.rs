//! [`Event`]: one request's audit record and its `audit.k8s.io/v1` JSON. Built on the request
//! path from what the request already has; turned into JSON on the writer thread.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Map, Value, json};

use crate::auth::UserInfo;
use crate::auth::request_info::RequestInfo;

/// The stages of a request that are written.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// A watch's response head was sent.
    ResponseStarted,
    /// The response's body ended (or was dropped).
    ResponseComplete,
}

/// One request's audit event, at level `Metadata`.
#[derive(Debug)]
pub(crate) struct Event {
    /// Which stage of the request.
    pub(crate) stage: Stage,
    /// The request's id, as its `Audit-Id` response header gives it.
    pub(crate) audit_id: uuid::Uuid,
    /// The path and query.
    pub(crate) request_uri: String,
    /// The verb, resource and names.
    pub(crate) info: RequestInfo,
    /// Who asked.
    pub(crate) user: Arc<UserInfo>,
    /// The connection's peer.
    pub(crate) source_ip: Option<IpAddr>,
    /// The User-Agent header.
    pub(crate) user_agent: Option<String>,
    /// The response's status code.
    pub(crate) code: u16,
    /// When the request came in.
    pub(crate) received: SystemTime,
    /// When the stage was reached.
    pub(crate) stage_time: SystemTime,
}

/// `t` in the apiserver's `MicroTime` form: RFC 3339 in UTC with microseconds.
pub(crate) fn micro_time(t: SystemTime) -> String {
    match jiff::Timestamp::try_from(t) {
        Ok(ts) => format!(
            "{}.{:06}Z",
            ts.strftime("%Y-%m-%dT%H:%M:%S"),
            ts.subsec_microsecond().max(0)
        ),
        Err(_) => "1970-01-01T00:00:00.000000Z".to_owned(),
    }
}

/// Puts `value` under `key` unless it is empty, as the apiserver's `omitempty` does.
fn put(map: &mut Map<String, Value>, key: &str, value: &str) {
    if !value.is_empty() {
        map.insert(key.to_owned(), Value::String(value.to_owned()));
    }
}

impl Event {
    /// The `audit.k8s.io/v1` `Event` as JSON.
    pub(crate) fn to_json(&self) -> Value {
        let mut user = Map::new();
        put(&mut user, "username", &self.user.name);
        put(&mut user, "uid", &self.user.uid);
        if !self.user.groups.is_empty() {
            user.insert("groups".into(), json!(self.user.groups));
        }
        let mut event = Map::new();
        event.insert("kind".into(), json!("Event"));
        event.insert("apiVersion".into(), json!("audit.k8s.io/v1"));
        event.insert("level".into(), json!("Metadata"));
        event.insert("auditID".into(), json!(self.audit_id.to_string()));
        let stage = match self.stage {
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
        };
        event.insert("stage".into(), json!(stage));
        event.insert("requestURI".into(), json!(self.request_uri));
        event.insert("verb".into(), json!(self.info.verb));
        event.insert("user".into(), Value::Object(user));
        if let Some(ip) = self.source_ip {
            event.insert("sourceIPs".into(), json!([ip.to_string()]));
        }
        if let Some(ua) = &self.user_agent {
            event.insert("userAgent".into(), json!(ua));
        }
        if self.info.resource_request {
            let i = &self.info;
            let mut object = Map::new();
            put(&mut object, "resource", &i.resource);
            put(&mut object, "namespace", &i.namespace);
            put(&mut object, "name", &i.name);
            put(&mut object, "apiGroup", &i.api_group);
            put(&mut object, "apiVersion", &i.api_version);
            put(&mut object, "subresource", &i.subresource);
            event.insert("objectRef".into(), Value::Object(object));
        }
        event.insert(
            "responseStatus".into(),
            json!({"metadata": {}, "code": self.code}),
        );
        event.insert(
            "requestReceivedTimestamp".into(),
            json!(micro_time(self.received)),
        );
        event.insert("stageTimestamp".into(), json!(micro_time(self.stage_time)));
        Value::Object(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;
    use std::time::Duration;

    #[test]
    fn an_event_has_the_apiservers_fields_and_omits_empty_ones() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        let event = Event {
            stage: Stage::ResponseComplete,
            audit_id: uuid::Uuid::nil(),
            request_uri: "/api/v1/namespaces/a/pods?watch=true".into(),
            info: RequestInfo::new(&Method::GET, "/api/v1/namespaces/a/pods", Some("watch=true")),
            user: Arc::new(UserInfo::authenticated("alice", "", vec!["dev".into()])),
            source_ip: Some("127.0.0.1".parse().unwrap()),
            user_agent: Some("kubectl/v1.32.0".into()),
            code: 200,
            received: at,
            stage_time: at + Duration::from_millis(5),
        };
        let v = event.to_json();
        assert_eq!(v["kind"], "Event");
        assert_eq!(v["stage"], "ResponseComplete");
        assert_eq!(v["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(v["verb"], "watch");
        assert_eq!(
            v["user"],
            json!({"username": "alice", "groups": ["dev", "system:authenticated"]})
        );
        assert_eq!(
            v["objectRef"],
            json!({"resource": "pods", "namespace": "a", "apiVersion": "v1"})
        );
        assert_eq!(v["responseStatus"]["code"], 200);
        assert_eq!(v["sourceIPs"], json!(["127.0.0.1"]));
        assert_eq!(v["requestReceivedTimestamp"], "2023-11-14T22:13:20.123456Z");
        assert_eq!(v["stageTimestamp"], "2023-11-14T22:13:20.128456Z");
    }
}
