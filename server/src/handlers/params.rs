//! Query parameters, parsed into typed values: [`Params`] for reads, [`WriteParams`] for
//! writes and [`DeleteParams`] (which also reads the `DeleteOptions` a DELETE body may carry).
//! Anything malformed is a 400 (or, for values the apiserver validates as options, a 422)
//! Status whose message names the parameter, as the apiserver's messages do.

use std::time::Duration;

use serde_json::Value;
use watchcache_core::{Filter, ListOptions, ResourceVersionMatch, Revision, WatchOptions};
use watchcache_encoders::Status;

use crate::handlers::reads::table::IncludeObject;

/// A request's parameters.
#[derive(Debug, Default)]
pub(crate) struct Params {
    pub(crate) watch: bool,
    pub(crate) resource_version: Option<Revision>,
    pub(crate) resource_version_match: Option<ResourceVersionMatch>,
    pub(crate) limit: Option<usize>,
    pub(crate) continue_token: Option<String>,
    pub(crate) label_selector: String,
    pub(crate) field_selector: String,
    pub(crate) timeout: Option<Duration>,
    pub(crate) allow_bookmarks: bool,
    pub(crate) send_initial_events: Option<bool>,
    /// What each row of a Table carries (`includeObject`).
    pub(crate) include_object: IncludeObject,
}

fn parse_bool(name: &str, v: &str) -> Result<bool, Status> {
    match v {
        "true" | "1" => Ok(true),
        "false" | "0" | "" => Ok(false),
        _ => Err(Status::bad_request(format!(
            "invalid value for {name}: {v:?} is not a boolean"
        ))),
    }
}

impl Params {
    pub(crate) fn parse(query: Option<&str>) -> Result<Params, Status> {
        let mut p = Params::default();
        for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            match &*k {
                "watch" => p.watch = parse_bool("watch", &v)?,
                "resourceVersion" if v.is_empty() => {}
                "resourceVersion" => {
                    p.resource_version =
                        Some(Revision::parse(&v).map_err(|e| {
                            Status::bad_request(format!("invalid resourceVersion {v:?}: {e}"))
                        })?);
                }
                "resourceVersionMatch" => {
                    p.resource_version_match = match &*v {
                        "" => None,
                        "NotOlderThan" => Some(ResourceVersionMatch::NotOlderThan),
                        "Exact" => Some(ResourceVersionMatch::Exact),
                        other => {
                            return Err(Status::bad_request(format!(
                                "invalid resourceVersionMatch {other:?}: must be NotOlderThan or Exact"
                            )));
                        }
                    };
                }
                "limit" if v.is_empty() => {}
                "limit" => {
                    let n: i64 = v
                        .parse()
                        .map_err(|_| Status::bad_request(format!("invalid limit {v:?}: not an integer")))?;
                    if n < 0 {
                        return Err(Status::bad_request(format!(
                            "invalid limit {n}: must be non-negative"
                        )));
                    }
                    p.limit = usize::try_from(n).ok().filter(|&n| n > 0);
                }
                "continue" if v.is_empty() => {}
                "continue" => p.continue_token = Some(v.into_owned()),
                "labelSelector" => p.label_selector = v.into_owned(),
                "fieldSelector" => p.field_selector = v.into_owned(),
                "timeoutSeconds" if v.is_empty() => {}
                "timeoutSeconds" => {
                    let n: u64 = v.parse().map_err(|_| {
                        Status::bad_request(format!(
                            "invalid timeoutSeconds {v:?}: not a non-negative integer"
                        ))
                    })?;
                    // 0 is "unset": the server's default, not a watch that ends at once.
                    p.timeout = (n > 0).then(|| Duration::from_secs(n));
                }
                "timeout" => {} // a client-side deadline (kubectl's ?timeout=32s); nothing to do here
                "allowWatchBookmarks" => p.allow_bookmarks = parse_bool("allowWatchBookmarks", &v)?,
                "sendInitialEvents" => p.send_initial_events = Some(parse_bool("sendInitialEvents", &v)?),
                "includeObject" => p.include_object = IncludeObject::parse(&v)?,
                _ => {} // unknown parameters are ignored, as the apiserver does
            }
        }
        Ok(p)
    }

    /// How long a watch runs before the server ends it: `timeoutSeconds` when the client gave
    /// one, cut to the longest the server would choose (twice `min_request_timeout`), so that
    /// any value, up to 2^64 - 1 seconds, is a deadline the server can compute and keep;
    /// otherwise a random time between `min_request_timeout` and twice it, so that clients
    /// reconnect spread out (the apiserver's default).
    pub(crate) fn watch_timeout(&self, min_request_timeout: Duration) -> Duration {
        let longest = min_request_timeout.saturating_mul(2);
        match self.timeout {
            Some(asked) => asked.min(longest),
            None => {
                let jitter = Duration::try_from_secs_f64(min_request_timeout.as_secs_f64() * fastrand::f64())
                    .unwrap_or(min_request_timeout);
                min_request_timeout.saturating_add(jitter)
            }
        }
    }

    /// The filter of a request in `namespace`.
    pub(crate) fn filter(&self, namespace: Option<&str>) -> Result<Filter, Status> {
        let labels = watchcache_core::LabelSelector::parse(&self.label_selector)
            .map_err(|e| Status::bad_request(format!("labelSelector: {e}")))?;
        let fields = watchcache_core::FieldSelector::parse(&self.field_selector)
            .map_err(|e| Status::bad_request(format!("fieldSelector: {e}")))?;
        Ok(Filter::new(namespace, labels, fields))
    }

    pub(crate) fn list_options(&self, namespace: Option<&str>) -> Result<ListOptions, Status> {
        if self.send_initial_events.is_some() {
            return Err(Status::bad_request(
                "sendInitialEvents is only supported for watch requests",
            ));
        }
        Ok(ListOptions {
            resource_version: self.resource_version,
            resource_version_match: self.resource_version_match,
            limit: self.limit,
            continue_token: self.continue_token.clone(),
            filter: self.filter(namespace)?,
        })
    }

    pub(crate) fn watch_options(&self, namespace: Option<&str>) -> Result<WatchOptions, Status> {
        if let Some(send_initial_events) = self.send_initial_events {
            if self.resource_version_match != Some(ResourceVersionMatch::NotOlderThan) {
                return Err(Status::bad_request(
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if send_initial_events && !self.allow_bookmarks {
                return Err(Status::bad_request(
                    "sendInitialEvents requires setting allowWatchBookmarks to true",
                ));
            }
        } else if self.resource_version_match.is_some() {
            return Err(Status::bad_request(
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        if self.continue_token.is_some() {
            return Err(Status::bad_request(
                "continue is not supported for watch requests",
            ));
        }
        Ok(WatchOptions {
            resource_version: self.resource_version,
            send_initial_events: self.send_initial_events,
            allow_bookmarks: self.allow_bookmarks,
            filter: self.filter(namespace)?,
        })
    }
}

/// What a write does with fields its object's schema does not know (`fieldValidation`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum FieldValidation {
    /// Drop them silently, as decoding into the built-in types drops them.
    Ignore,
    /// Drop them and answer with a `Warning` header per field: the apiserver's default.
    #[default]
    Warn,
    /// Refuse the write: 400 naming each field.
    Strict,
}

/// What every write verb accepts: `dryRun`, `fieldManager`, `fieldValidation`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct WriteParams {
    /// `dryRun=All`: validate and answer, store nothing.
    pub(crate) dry_run: bool,
    /// `fieldManager`: who `managedFields` records as making the change.
    pub(crate) field_manager: Option<String>,
    /// `force=true`: a server-side apply takes the fields it conflicts on.
    pub(crate) force: bool,
    /// `fieldValidation`: what to do with fields the schema does not know.
    pub(crate) field_validation: FieldValidation,
    /// Who an update is recorded as: `fieldManager`, or one named after the User-Agent
    /// ([`WriteParams::with_user_agent`]).
    pub(crate) manager: String,
    /// Who writes, as authentication found them ([`WriteParams::with_requester`]): a write of
    /// an RBAC kind grants nothing they do not hold. `None` for the server's own writes.
    pub(crate) requester: Option<std::sync::Arc<crate::auth::UserInfo>>,
}

/// The longest `fieldManager` the apiserver accepts.
const FIELD_MANAGER_MAX: usize = 128;

impl WriteParams {
    pub(crate) fn parse(query: Option<&str>) -> Result<WriteParams, Status> {
        let mut p = WriteParams::default();
        for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            p.take(&k, &v)?;
        }
        Ok(p)
    }

    /// Takes one parameter if it is a write parameter; ignores any other, as the apiserver
    /// does.
    fn take(&mut self, k: &str, v: &str) -> Result<(), Status> {
        match k {
            "dryRun" => match v {
                "All" => self.dry_run = true,
                "" => {}
                other => {
                    return Err(Status::invalid(format!(
                        "dryRun: Unsupported value: {other:?}: supported values: \"All\""
                    )));
                }
            },
            "fieldManager" => {
                if v.chars().count() > FIELD_MANAGER_MAX || v.chars().any(char::is_control) {
                    return Err(Status::invalid(format!(
                        "fieldManager: Invalid value: {v:?}: must be at most {FIELD_MANAGER_MAX} printable characters"
                    )));
                }
                self.field_manager = Some(v.to_owned());
            }
            "force" => match v {
                "true" | "1" => self.force = true,
                "false" | "0" | "" => self.force = false,
                other => {
                    return Err(Status::bad_request(format!(
                        "force: invalid value {other:?}: must be true or false"
                    )));
                }
            },
            "fieldValidation" => match v {
                "" => {}
                "Ignore" => self.field_validation = FieldValidation::Ignore,
                "Warn" => self.field_validation = FieldValidation::Warn,
                "Strict" => self.field_validation = FieldValidation::Strict,
                other => {
                    return Err(Status::bad_request(format!(
                        "fieldValidation: invalid value {other:?}: must be Ignore, Warn or Strict"
                    )));
                }
            },
            _ => {}
        }
        Ok(())
    }
}

impl WriteParams {
    /// Records who writes.
    pub(crate) fn with_requester(mut self, user: std::sync::Arc<crate::auth::UserInfo>) -> WriteParams {
        self.requester = Some(user);
        self
    }

    /// Resolves who `managedFields` records for the write: `fieldManager`, else the client's
    /// User-Agent up to its first `/` (`kubectl`, `OpenAPI-Generator`), as the apiserver
    /// names it, else `unknown`.
    pub(crate) fn with_user_agent(mut self, user_agent: Option<&str>) -> WriteParams {
        self.manager = match &self.field_manager {
            Some(m) => m.clone(),
            None => manager_from_user_agent(user_agent),
        };
        self
    }
}

fn manager_from_user_agent(user_agent: Option<&str>) -> String {
    user_agent
        .and_then(|ua| ua.split('/').next())
        .map(|m| {
            m.chars()
                .filter(|c| !c.is_control())
                .take(FIELD_MANAGER_MAX)
                .collect::<String>()
        })
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// How the dependents of a deleted object are handled (`propagationPolicy`). Accepted and
/// checked; watchcache keeps no owner references to follow.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Propagation {
    Orphan,
    Background,
    Foreground,
}

/// A DELETE's options, from its query and from the `DeleteOptions` its body may carry (as
/// kubectl sends them): the write parameters, `gracePeriodSeconds`, `propagationPolicy` and the
/// preconditions on the object's `uid` and `resourceVersion`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct DeleteParams {
    pub(crate) write: WriteParams,
    pub(crate) grace_period_seconds: Option<i64>,
    pub(crate) propagation: Option<Propagation>,
    pub(crate) precondition_uid: Option<String>,
    pub(crate) precondition_revision: Option<Revision>,
    /// `ignoreStoreReadErrorWithClusterBreakingPotential`: delete a corrupt object (one whose
    /// stored value does not decode) without reading it (KEP-3926).
    pub(crate) ignore_store_read_error: bool,
}

impl DeleteParams {
    pub(crate) fn parse(query: Option<&str>, body: &[u8]) -> Result<DeleteParams, Status> {
        let mut p = DeleteParams::default();
        for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            match &*k {
                "gracePeriodSeconds" => p.grace_period_seconds = Some(grace_period(&v)?),
                "propagationPolicy" => p.propagation = Some(propagation(&v)?),
                "ignoreStoreReadErrorWithClusterBreakingPotential" => {
                    p.ignore_store_read_error = boolean(k.as_ref(), &v)?
                }
                other => p.write.take(other, &v)?,
            }
        }
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(p);
        }
        let options: Value = serde_json::from_slice(body)
            .map_err(|e| Status::bad_request(format!("invalid DeleteOptions body: {e}")))?;
        let Value::Object(options) = options else {
            return Err(Status::bad_request("the DeleteOptions body is not an object"));
        };
        let string = |v: &Value, name: &str| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| Status::bad_request(format!("{name} is not a string")))
        };
        for (k, v) in &options {
            match k.as_str() {
                "gracePeriodSeconds" => {
                    let n = v
                        .as_i64()
                        .ok_or_else(|| Status::bad_request("gracePeriodSeconds is not an integer"))?;
                    p.grace_period_seconds = Some(clamp_grace_period(n));
                }
                "propagationPolicy" => p.propagation = Some(propagation(&string(v, k)?)?),
                "ignoreStoreReadErrorWithClusterBreakingPotential" => {
                    p.ignore_store_read_error = v
                        .as_bool()
                        .ok_or_else(|| Status::bad_request(format!("{k} is not a boolean")))?;
                }
                "dryRun" => {
                    for d in v
                        .as_array()
                        .ok_or_else(|| Status::bad_request("dryRun is not a list"))?
                    {
                        p.write.take("dryRun", &string(d, "dryRun")?)?;
                    }
                }
                "preconditions" => {
                    if let Some(uid) = v.get("uid").filter(|u| !u.is_null()) {
                        p.precondition_uid = Some(string(uid, "preconditions.uid")?);
                    }
                    if let Some(rv) = v.get("resourceVersion").filter(|r| !r.is_null()) {
                        let rv = string(rv, "preconditions.resourceVersion")?;
                        p.precondition_revision = Some(Revision::parse(&rv).map_err(|e| {
                            Status::bad_request(format!("preconditions.resourceVersion: {e}"))
                        })?);
                    }
                }
                // kind, apiVersion, orphanDependents and options we do not act on.
                _ => {}
            }
        }
        Ok(p)
    }
}

/// A boolean query parameter, as the apiserver reads them.
fn boolean(name: &str, v: &str) -> Result<bool, Status> {
    match v {
        "true" => Ok(true),
        "false" | "" => Ok(false),
        other => Err(Status::bad_request(format!(
            "invalid {name} {other:?}: not a boolean"
        ))),
    }
}

/// The longest grace period kept: about 136 years, so that a deletion time computed from it
/// (now plus the grace period) is a time every clock and RFC 3339 can write.
pub(crate) const MAX_GRACE_PERIOD_SECONDS: i64 = 1 << 32;

/// A grace period as the apiserver takes it on the delete path: a negative one is one second;
/// and, here, a longer one than [`MAX_GRACE_PERIOD_SECONDS`] is that.
fn clamp_grace_period(seconds: i64) -> i64 {
    if seconds < 0 {
        1
    } else {
        seconds.min(MAX_GRACE_PERIOD_SECONDS)
    }
}

fn grace_period(v: &str) -> Result<i64, Status> {
    v.parse()
        .map(clamp_grace_period)
        .map_err(|_| Status::bad_request(format!("invalid gracePeriodSeconds {v:?}: not an integer")))
}

fn propagation(v: &str) -> Result<Propagation, Status> {
    match v {
        "Orphan" => Ok(Propagation::Orphan),
        "Background" => Ok(Propagation::Background),
        "Foreground" => Ok(Propagation::Foreground),
        other => Err(Status::invalid(format!(
            "propagationPolicy: Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(q: &str) -> String {
        let e = Params::parse(Some(q)).and_then(|p| {
            if p.watch {
                p.watch_options(None).map(|_| ())
            } else {
                p.list_options(None).map(|_| ())
            }
        });
        let s = e.expect_err(q);
        assert_eq!(s.code, 400, "{q}");
        s.message
    }

    #[test]
    fn malformed_parameters_are_400s_that_name_the_parameter() {
        for (q, name) in [
            ("resourceVersion=abc", "resourceVersion"),
            ("resourceVersion=-1", "resourceVersion"),
            ("limit=-5", "limit"),
            ("limit=ten", "limit"),
            ("resourceVersionMatch=Newest", "resourceVersionMatch"),
            ("labelSelector=app%20in%20web", "labelSelector"),
            ("fieldSelector=spec.nodeName", "fieldSelector"),
            ("watch=maybe", "watch"),
            ("watch=1&timeoutSeconds=-3", "timeoutSeconds"),
            ("watch=1&allowWatchBookmarks=yes", "allowWatchBookmarks"),
            ("watch=1&sendInitialEvents=true", "resourceVersionMatch"),
            (
                "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
                "allowWatchBookmarks",
            ),
            (
                "watch=1&resourceVersionMatch=NotOlderThan",
                "resourceVersionMatch",
            ),
            ("sendInitialEvents=true", "sendInitialEvents"),
        ] {
            let m = bad(q);
            assert!(m.contains(name), "{q}: {m}");
        }
    }

    #[test]
    fn kubectl_and_kube_rs_queries_parse() {
        let p = Params::parse(Some("limit=500")).unwrap();
        assert_eq!(p.limit, Some(500));
        let p = Params::parse(Some("&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0")).unwrap();
        let w = p.watch_options(None).unwrap();
        assert!(p.watch && w.send_initial_events == Some(true) && w.allow_bookmarks);
        assert_eq!(w.resource_version, Some(Revision::ZERO));
        assert_eq!(p.timeout, Some(Duration::from_secs(290)));
        let p = Params::parse(Some("limit=0&resourceVersion=&timeout=32s")).unwrap();
        assert_eq!((p.limit, p.resource_version), (None, None));
    }

    #[test]
    fn timeout_seconds_zero_means_the_servers_default() {
        let p = Params::parse(Some("watch=1&timeoutSeconds=0")).unwrap();
        assert_eq!(p.timeout, None);
        let p = Params::parse(Some("watch=1&timeoutSeconds=5")).unwrap();
        assert_eq!(p.timeout, Some(Duration::from_secs(5)));
    }

    #[test]
    fn deadlines_from_the_client_are_clamped_never_overflowed() {
        let min = Duration::from_secs(1800);
        let p = Params::parse(Some("watch=1&timeoutSeconds=18446744073709551615")).unwrap();
        assert_eq!(p.timeout, Some(Duration::from_secs(u64::MAX)));
        assert_eq!(
            p.watch_timeout(min),
            Duration::from_secs(3600),
            "the longest default"
        );
        let p = Params::parse(Some("watch=1&timeoutSeconds=290")).unwrap();
        assert_eq!(p.watch_timeout(min), Duration::from_secs(290));
        let p = Params::parse(Some("watch=1")).unwrap();
        for _ in 0..100 {
            let t = p.watch_timeout(min);
            assert!(t >= min && t <= min * 2, "{t:?}");
        }
        // Even an absurd minimum: saturating, not a panic.
        assert_eq!(p.watch_timeout(Duration::MAX), Duration::MAX);
        for (q, want) in [
            ("gracePeriodSeconds=-5", 1),
            ("gracePeriodSeconds=0", 0),
            ("gracePeriodSeconds=30", 30),
            ("gracePeriodSeconds=9223372036854775807", MAX_GRACE_PERIOD_SECONDS),
        ] {
            assert_eq!(
                DeleteParams::parse(Some(q), b"").unwrap().grace_period_seconds,
                Some(want),
                "{q}"
            );
        }
        let body = br#"{"gracePeriodSeconds":-9223372036854775808}"#;
        assert_eq!(
            DeleteParams::parse(None, body).unwrap().grace_period_seconds,
            Some(1)
        );
    }

    #[test]
    fn send_initial_events_false_is_passed_on_not_dropped() {
        let q = "watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&resourceVersion=0";
        let w = Params::parse(Some(q)).unwrap().watch_options(None).unwrap();
        assert_eq!(w.send_initial_events, Some(false));
        let w = Params::parse(Some("watch=1"))
            .unwrap()
            .watch_options(None)
            .unwrap();
        assert_eq!(w.send_initial_events, None);
        // Set to false, it still needs resourceVersionMatch=NotOlderThan.
        assert!(bad("watch=1&sendInitialEvents=false").contains("resourceVersionMatch"));
    }

    #[test]
    fn write_parameters_are_accepted_checked_and_refused_by_name() {
        let w = WriteParams::parse(Some(
            "dryRun=All&fieldManager=kubectl-client-side-apply&fieldValidation=Strict",
        ))
        .unwrap();
        assert_eq!(
            w,
            WriteParams {
                dry_run: true,
                field_manager: Some("kubectl-client-side-apply".into()),
                force: false,
                field_validation: FieldValidation::Strict,
                manager: String::new(),
                requester: None,
            }
        );
        assert_eq!(
            w.with_user_agent(Some("kubectl/v1.31.0")).manager,
            "kubectl-client-side-apply"
        );
        let anonymous = WriteParams::parse(None).unwrap();
        assert_eq!(
            anonymous
                .with_user_agent(Some("kubectl/v1.31.0 (linux/amd64)"))
                .manager,
            "kubectl",
            "named after the User-Agent, as the apiserver names it"
        );
        assert_eq!(
            WriteParams::parse(None).unwrap().with_user_agent(None).manager,
            "unknown"
        );
        for (q, code, name) in [
            ("dryRun=Some", 422, "dryRun"),
            ("fieldValidation=Loose", 400, "fieldValidation"),
            ("force=maybe", 400, "force"),
            ("fieldManager=%07", 422, "fieldManager"),
        ] {
            let e = WriteParams::parse(Some(q)).unwrap_err();
            assert_eq!(e.code, code, "{q}");
            assert!(e.message.contains(name), "{q}: {}", e.message);
        }
        let long = format!("fieldManager={}", "m".repeat(129));
        assert_eq!(WriteParams::parse(Some(&long)).unwrap_err().code, 422);
    }

    #[test]
    fn delete_options_come_from_the_query_and_from_kubectls_body() {
        let body = br#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background","dryRun":["All"],"preconditions":{"uid":"u-1","resourceVersion":"42"}}"#;
        let d = DeleteParams::parse(Some("gracePeriodSeconds=0"), body).unwrap();
        assert_eq!(d.grace_period_seconds, Some(0));
        assert_eq!(d.propagation, Some(Propagation::Background));
        assert!(d.write.dry_run);
        assert_eq!(d.precondition_uid.as_deref(), Some("u-1"));
        assert_eq!(d.precondition_revision, Some(Revision::new(42)));
        assert_eq!(DeleteParams::parse(None, b"").unwrap(), DeleteParams::default());
        for (q, body, code) in [
            ("gracePeriodSeconds=soon", &b""[..], 400),
            ("propagationPolicy=Sideways", b"", 422),
            ("", b"not json", 400),
            ("", br#"{"preconditions":{"resourceVersion":"x"}}"#, 400),
            ("", br#"{"propagationPolicy":"Up"}"#, 422),
        ] {
            let e = DeleteParams::parse(Some(q), body).unwrap_err();
            assert_eq!(e.code, code, "{q} {}", String::from_utf8_lossy(body));
        }
    }
}
