//! [`Policy`]: which requests are audited, from the apiserver's `audit.k8s.io/v1` `Policy`
//! YAML. Rules are tried in order and the first that matches gives the level; a request no
//! rule matches is not audited. A rule matches on `users`, `userGroups`, `verbs`,
//! `namespaces`, `resources` (`group`, `resources` with the `*`, `*/sub` and `res/*` forms,
//! `resourceNames`) and `nonResourceURLs` (exact, or a prefix ending in `*`), each list
//! narrowing when it is not empty, by the apiserver's policy checker.
//!
//! Only `Metadata` is written: `Request` and `RequestResponse` rules audit the request at
//! `Metadata` (no bodies are recorded). Two stages are written: `ResponseStarted` for watches
//! (when the response's head is sent) and `ResponseComplete` for every request; `omitStages`,
//! of the policy or of a rule, omits either (`RequestReceived` and `Panic` are never written).

use serde_json::Value;

use crate::auth::UserInfo;
use crate::auth::request_info::RequestInfo;

/// How much of a request is recorded.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    /// Nothing.
    None,
    /// Who asked what, and the answer's code.
    Metadata,
}

#[derive(Debug, Default)]
struct GroupResources {
    group: String,
    resources: Vec<String>,
    resource_names: Vec<String>,
}

/// Which stages of a request are written.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stages {
    /// `ResponseStarted`, for a watch.
    pub(crate) started: bool,
    /// `ResponseComplete`.
    pub(crate) complete: bool,
}

#[derive(Debug)]
struct Rule {
    level: Level,
    omit_started: bool,
    omit_complete: bool,
    users: Vec<String>,
    user_groups: Vec<String>,
    verbs: Vec<String>,
    namespaces: Vec<String>,
    resources: Vec<GroupResources>,
    non_resource_urls: Vec<String>,
}

/// The rules, in order.
#[derive(Debug)]
pub(crate) struct Policy {
    rules: Vec<Rule>,
}

fn strings(v: Option<&Value>, what: &str) -> Result<Vec<String>, String> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{what}: {i} is not a string"))
            })
            .collect(),
        Some(other) => Err(format!("{what}: {other} is not a list of strings")),
    }
}

/// Fields the apiserver's Policy has that change nothing here.
fn check_fields(object: &serde_json::Map<String, Value>, known: &[&str], what: &str) -> Result<(), String> {
    match object.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!("{what}: unknown field {k:?}")),
        None => Ok(()),
    }
}

/// Whether `omitStages` (of the policy or a rule) omits `ResponseStarted` and
/// `ResponseComplete`.
fn omitted(v: Option<&Value>, what: &str) -> Result<(bool, bool), String> {
    let stages = strings(v, what)?;
    for s in &stages {
        if !matches!(
            s.as_str(),
            "RequestReceived" | "ResponseStarted" | "ResponseComplete" | "Panic"
        ) {
            return Err(format!("{what}: {s:?} is not an audit stage"));
        }
    }
    let has = |stage: &str| stages.iter().any(|s| s == stage);
    Ok((has("ResponseStarted"), has("ResponseComplete")))
}

impl Policy {
    /// Every request at `Metadata`: the log's policy when no policy file is given.
    pub(crate) fn everything() -> Policy {
        Policy {
            rules: vec![Rule {
                level: Level::Metadata,
                omit_started: false,
                omit_complete: false,
                users: Vec::new(),
                user_groups: Vec::new(),
                verbs: Vec::new(),
                namespaces: Vec::new(),
                resources: Vec::new(),
                non_resource_urls: Vec::new(),
            }],
        }
    }

    /// Parses a policy file's text (YAML or JSON); an error names what is wrong.
    pub(crate) fn parse(text: &str) -> Result<Policy, String> {
        let doc: Value = serde_yaml_ng::from_str(text).map_err(|e| format!("not a YAML document: {e}"))?;
        let Some(doc) = doc.as_object() else {
            return Err("not a Policy object".into());
        };
        check_fields(
            doc,
            &[
                "apiVersion",
                "kind",
                "metadata",
                "rules",
                "omitStages",
                "omitManagedFields",
            ],
            "Policy",
        )?;
        match (
            doc.get("apiVersion").and_then(Value::as_str),
            doc.get("kind").and_then(Value::as_str),
        ) {
            (Some("audit.k8s.io/v1"), Some("Policy")) => {}
            (v, k) => {
                return Err(format!(
                    "apiVersion {v:?} kind {k:?}: expected apiVersion audit.k8s.io/v1, kind Policy"
                ));
            }
        }
        let omit_all = omitted(doc.get("omitStages"), "omitStages")?;
        let Some(Value::Array(rules)) = doc.get("rules") else {
            return Err("a Policy needs a list of rules".into());
        };
        let mut out = Vec::with_capacity(rules.len());
        for (i, rule) in rules.iter().enumerate() {
            let what = format!("rules[{i}]");
            let Some(rule) = rule.as_object() else {
                return Err(format!("{what}: not an object"));
            };
            check_fields(
                rule,
                &[
                    "level",
                    "users",
                    "userGroups",
                    "verbs",
                    "resources",
                    "namespaces",
                    "nonResourceURLs",
                    "omitStages",
                    "omitManagedFields",
                ],
                &what,
            )?;
            let level = match rule.get("level").and_then(Value::as_str) {
                Some("None") => Level::None,
                // Bodies are not recorded: Request and RequestResponse audit as Metadata.
                Some("Metadata" | "Request" | "RequestResponse") => Level::Metadata,
                other => {
                    return Err(format!(
                        "{what}.level: {other:?} is not None, Metadata, Request or RequestResponse"
                    ));
                }
            };
            let omit = omitted(rule.get("omitStages"), &format!("{what}.omitStages"))?;
            let mut resources = Vec::new();
            if let Some(list) = rule.get("resources") {
                let Some(list) = list.as_array() else {
                    return Err(format!("{what}.resources: not a list"));
                };
                for (j, gr) in list.iter().enumerate() {
                    let what = format!("{what}.resources[{j}]");
                    let Some(gr) = gr.as_object() else {
                        return Err(format!("{what}: not an object"));
                    };
                    check_fields(gr, &["group", "resources", "resourceNames"], &what)?;
                    resources.push(GroupResources {
                        group: gr
                            .get("group")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        resources: strings(gr.get("resources"), &format!("{what}.resources"))?,
                        resource_names: strings(gr.get("resourceNames"), &format!("{what}.resourceNames"))?,
                    });
                }
            }
            out.push(Rule {
                level,
                omit_started: omit_all.0 || omit.0,
                omit_complete: omit_all.1 || omit.1,
                users: strings(rule.get("users"), &format!("{what}.users"))?,
                user_groups: strings(rule.get("userGroups"), &format!("{what}.userGroups"))?,
                verbs: strings(rule.get("verbs"), &format!("{what}.verbs"))?,
                namespaces: strings(rule.get("namespaces"), &format!("{what}.namespaces"))?,
                resources,
                non_resource_urls: strings(rule.get("nonResourceURLs"), &format!("{what}.nonResourceURLs"))?,
            });
        }
        Ok(Policy { rules: out })
    }

    /// The stages of a request written, by the first matching rule: none when no rule
    /// matches or its level is `None`.
    pub(crate) fn stages(&self, info: &RequestInfo, path: &str, user: &UserInfo) -> Stages {
        match self.rules.iter().find(|r| r.matches(info, path, user)) {
            Some(r) if r.level == Level::Metadata => Stages {
                started: !r.omit_started,
                complete: !r.omit_complete,
            },
            _ => Stages::default(),
        }
    }

    /// The level a request is audited at: `Metadata` when any of its stages is written.
    #[cfg(test)]
    pub(crate) fn level(&self, info: &RequestInfo, path: &str, user: &UserInfo) -> Level {
        let stages = self.stages(info, path, user);
        if stages.started || stages.complete {
            Level::Metadata
        } else {
            Level::None
        }
    }
}

fn has(list: &[String], s: &str) -> bool {
    list.iter().any(|x| x == s)
}

impl Rule {
    fn matches(&self, info: &RequestInfo, path: &str, user: &UserInfo) -> bool {
        if !self.users.is_empty() && !has(&self.users, &user.name) {
            return false;
        }
        if !self.user_groups.is_empty() && !user.groups.iter().any(|g| has(&self.user_groups, g)) {
            return false;
        }
        if !self.verbs.is_empty() && !has(&self.verbs, &info.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(info);
        }
        if !self.non_resource_urls.is_empty() {
            return !info.resource_request
                && self.non_resource_urls.iter().any(|u| match u.strip_suffix('*') {
                    Some(prefix) => path.starts_with(prefix),
                    None => u == path,
                });
        }
        true
    }

    fn matches_resource(&self, info: &RequestInfo) -> bool {
        if !info.resource_request {
            return false;
        }
        if !self.namespaces.is_empty() && !has(&self.namespaces, &info.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let combined = if info.subresource.is_empty() {
            info.resource.clone()
        } else {
            format!("{}/{}", info.resource, info.subresource)
        };
        self.resources.iter().any(|gr| {
            gr.group == info.api_group
                && (gr.resources.is_empty()
                    || gr.resources.iter().any(|res| {
                        (gr.resource_names.is_empty() || has(&gr.resource_names, &info.name))
                            && (*res == combined
                                || res == "*"
                                || (!info.subresource.is_empty()
                                    && res.strip_prefix("*/") == Some(info.subresource.as_str()))
                                || res.strip_suffix("/*") == Some(info.resource.as_str()))
                    }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
  - level: None
    users: ["system:kube-proxy"]
  - level: None
    resources:
      - group: ""
        resources: ["events"]
  - level: None
    nonResourceURLs: ["/healthz*", "/version"]
  - level: RequestResponse
    resources:
      - group: ""
        resources: ["pods/log", "pods/status"]
  - level: Metadata
    namespaces: ["kube-system"]
    verbs: ["get", "list", "watch"]
  - level: None
    namespaces: ["kube-system"]
  - level: Metadata
"#;

    fn level(policy: &Policy, method: &str, path: &str, user: &str) -> Level {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let info = RequestInfo::new(&method, path, None);
        policy.level(&info, path, &UserInfo::authenticated(user, "", Vec::new()))
    }

    #[test]
    fn the_first_matching_rule_gives_the_level() {
        let p = Policy::parse(POLICY).expect("a valid policy");
        assert_eq!(level(&p, "GET", "/api/v1/pods", "system:kube-proxy"), Level::None);
        assert_eq!(level(&p, "GET", "/api/v1/pods", "alice"), Level::Metadata);
        assert_eq!(
            level(&p, "POST", "/api/v1/namespaces/a/events", "alice"),
            Level::None
        );
        assert_eq!(level(&p, "GET", "/healthz", "alice"), Level::None);
        assert_eq!(level(&p, "GET", "/healthz/ready", "alice"), Level::None);
        assert_eq!(level(&p, "GET", "/metrics", "alice"), Level::Metadata);
        assert_eq!(
            level(&p, "GET", "/api/v1/namespaces/a/pods/p/log", "alice"),
            Level::Metadata
        );
        assert_eq!(
            level(&p, "GET", "/api/v1/namespaces/kube-system/configmaps", "alice"),
            Level::Metadata
        );
        assert_eq!(
            level(
                &p,
                "DELETE",
                "/api/v1/namespaces/kube-system/configmaps/c",
                "alice"
            ),
            Level::None
        );
        assert_eq!(
            level(&Policy::everything(), "GET", "/version", "alice"),
            Level::Metadata
        );
    }

    #[test]
    fn resource_patterns_match_as_the_apiservers() {
        let p = Policy::parse(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n\
             - level: Metadata\n  resources: [{group: '', resources: ['*/status']}]\n\
             - level: Metadata\n  resources: [{group: coordination.k8s.io, resources: ['leases/*']}]\n\
             - level: Metadata\n  resources: [{group: '', resources: [configmaps], resourceNames: [c1]}]\n",
        )
        .unwrap();
        assert_eq!(level(&p, "PUT", "/api/v1/nodes/n/status", "u"), Level::Metadata);
        assert_eq!(level(&p, "PUT", "/api/v1/nodes/n", "u"), Level::None);
        assert_eq!(
            level(
                &p,
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/a/leases/l",
                "u"
            ),
            Level::Metadata
        );
        assert_eq!(
            level(&p, "GET", "/api/v1/namespaces/a/configmaps/c1", "u"),
            Level::Metadata
        );
        assert_eq!(
            level(&p, "GET", "/api/v1/namespaces/a/configmaps/c2", "u"),
            Level::None
        );
    }

    #[test]
    fn a_bad_policy_says_what_is_wrong() {
        let e = Policy::parse("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Everything\n")
            .unwrap_err();
        assert!(e.contains("rules[0].level"), "{e}");
        let e = Policy::parse("apiVersion: v1\nkind: ConfigMap\n").unwrap_err();
        assert!(e.contains("audit.k8s.io/v1"), "{e}");
        let e = Policy::parse(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  resource: []\n",
        )
        .unwrap_err();
        assert!(e.contains("unknown field \"resource\""), "{e}");
        let omitted = Policy::parse(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [ResponseComplete]\nrules:\n- level: Metadata\n",
        )
        .unwrap();
        assert_eq!(level(&omitted, "GET", "/api/v1/pods", "u"), Level::Metadata);
        let info = RequestInfo::new(&Method::GET, "/api/v1/pods", Some("watch=true"));
        let user = UserInfo::anonymous();
        assert_eq!(
            omitted.stages(&info, "/api/v1/pods", &user),
            Stages {
                started: true,
                complete: false
            }
        );
        let e = Policy::parse("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [Done]\nrules: []\n")
            .unwrap_err();
        assert!(e.contains("not an audit stage"), "{e}");
    }
}
