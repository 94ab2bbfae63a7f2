//! The RBAC authorizer: decides [`Attributes`] on the Role, ClusterRole, RoleBinding and
//! ClusterRoleBinding objects a [`PolicySource`] holds, with the apiserver's rules.
//!
//! A request is allowed when some rule of some role bound to the user allows it: every
//! ClusterRoleBinding's ClusterRole, anywhere; a RoleBinding's Role or ClusterRole, in the
//! binding's namespace only (so never for cluster-scoped requests). A binding applies to a
//! user named by a `User` subject, to a member of a `Group` subject, and to the service
//! account user `system:serviceaccount:<ns>:<name>` of a `ServiceAccount` subject (its
//! namespace, when the subject names none, is the RoleBinding's). A rule allows when it has
//! the verb, the API group, the resource (`pods`, `pods/status`, `*/status` for any
//! resource's status, `*`) and, where it lists `resourceNames`, the object's name, so such a
//! rule never allows a request without one (a create, a list or watch without a
//! `metadata.name` field selector, a deletecollection). A non-resource request needs a rule
//! with the verb and a `nonResourceURLs` entry equal to the path, `*`, or a prefix of it
//! ending in `*`. RBAC never denies: what no rule allows is simply not allowed.
//!
//! ClusterRoles' `aggregationRule`s are not read here: the RBAC objects' owner aggregates
//! their rules into the ClusterRole's `rules`, as the apiserver's controller does.
//!
//! Cost: the policy is indexed once per version (roles by name, bindings by the user name or
//! group their subjects name), so a decision looks at the bindings of this user's name and
//! groups only; and decisions are kept in a cache (`cache.rs`) under the policy's version.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject};

use super::cache::DecisionCache;
use super::{Attributes, Decision, UserInfo};

/// Where the RBAC objects come from.
pub trait PolicySource: Send + Sync {
    /// The RBAC objects now, and a version that changes whenever any of them changes.
    fn policy(&self) -> (u64, Arc<Policy>);
}

impl std::fmt::Debug for dyn PolicySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PolicySource")
    }
}

/// The RBAC objects.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// Roles, each in its namespace.
    pub roles: Vec<Role>,
    /// ClusterRoles, with their aggregated rules in `rules`.
    pub cluster_roles: Vec<ClusterRole>,
    /// RoleBindings, each in its namespace.
    pub role_bindings: Vec<RoleBinding>,
    /// ClusterRoleBindings.
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
}

/// A fixed policy: for tests, and for a server given its policy whole.
#[derive(Debug, Default)]
pub struct StaticPolicy {
    current: Mutex<(u64, Arc<Policy>)>,
}

impl StaticPolicy {
    /// Holds `policy`, at version 1.
    pub fn new(policy: Policy) -> Self {
        StaticPolicy {
            current: Mutex::new((1, Arc::new(policy))),
        }
    }

    /// Replaces the policy, with the next version.
    pub fn set(&self, policy: Policy) {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        *current = (current.0 + 1, Arc::new(policy));
    }
}

impl PolicySource for StaticPolicy {
    fn policy(&self) -> (u64, Arc<Policy>) {
        self.current.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The service account user of `name` in `namespace`.
pub(crate) fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// Bindings by the user name or group their subjects name: for each, `(binding, subject)`
/// indices in the policy's order.
#[derive(Debug, Default)]
struct SubjectIndex {
    users: HashMap<String, Vec<(usize, usize)>>,
    groups: HashMap<String, Vec<(usize, usize)>>,
}

impl SubjectIndex {
    /// Files binding `b`'s subjects; a ServiceAccount subject without a namespace takes
    /// `namespace` (the RoleBinding's), and without either it names no one.
    fn add(&mut self, b: usize, subjects: &[Subject], namespace: &str) {
        for (s, subject) in subjects.iter().enumerate() {
            let key = match subject.kind.as_str() {
                "User" => &mut self.users,
                "Group" => &mut self.groups,
                "ServiceAccount" => {
                    let ns = subject
                        .namespace
                        .as_deref()
                        .filter(|n| !n.is_empty())
                        .unwrap_or(namespace);
                    if ns.is_empty() {
                        continue;
                    }
                    self.users
                        .entry(service_account_user(ns, &subject.name))
                        .or_default()
                        .push((b, s));
                    continue;
                }
                _ => continue,
            };
            key.entry(subject.name.clone()).or_default().push((b, s));
        }
    }

    /// The bindings that apply to `user`, each once with the first subject naming the user,
    /// in the policy's order.
    fn for_user(&self, user: &UserInfo) -> Vec<(usize, usize)> {
        let mut found: Vec<(usize, usize)> = Vec::new();
        found.extend(self.users.get(&user.name).into_iter().flatten());
        for g in &user.groups {
            found.extend(self.groups.get(g).into_iter().flatten());
        }
        found.sort_unstable();
        found.dedup_by_key(|(b, _)| *b);
        found
    }
}

/// One version of the policy, indexed.
#[derive(Debug)]
struct Index {
    version: u64,
    policy: Arc<Policy>,
    /// Roles by (namespace, name).
    roles: HashMap<(String, String), usize>,
    cluster_roles: HashMap<String, usize>,
    cluster_bindings: SubjectIndex,
    /// RoleBindings by namespace.
    role_bindings: HashMap<String, SubjectIndex>,
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn namespace_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_default()
}

impl Index {
    fn new(version: u64, policy: Arc<Policy>) -> Index {
        let roles = policy
            .roles
            .iter()
            .enumerate()
            .map(|(i, r)| ((namespace_of(&r.metadata), name_of(&r.metadata)), i))
            .collect();
        let cluster_roles = policy
            .cluster_roles
            .iter()
            .enumerate()
            .map(|(i, r)| (name_of(&r.metadata), i))
            .collect();
        let mut cluster_bindings = SubjectIndex::default();
        for (b, binding) in policy.cluster_role_bindings.iter().enumerate() {
            cluster_bindings.add(b, binding.subjects.as_deref().unwrap_or_default(), "");
        }
        let mut role_bindings: HashMap<String, SubjectIndex> = HashMap::new();
        for (b, binding) in policy.role_bindings.iter().enumerate() {
            let ns = namespace_of(&binding.metadata);
            let subjects = binding.subjects.as_deref().unwrap_or_default();
            role_bindings.entry(ns.clone()).or_default().add(b, subjects, &ns);
        }
        Index {
            version,
            policy,
            roles,
            cluster_roles,
            cluster_bindings,
            role_bindings,
        }
    }

    /// The rules of the role `kind`/`name` a binding in `namespace` refers to (a Role only
    /// from a RoleBinding), or why there are none.
    fn rules(&self, kind: &str, name: &str, namespace: &str) -> Result<&[PolicyRule], String> {
        let found = match kind {
            "ClusterRole" => self
                .cluster_roles
                .get(name)
                .map(|&i| self.policy.cluster_roles[i].rules.as_deref().unwrap_or_default()),
            "Role" if !namespace.is_empty() => self
                .roles
                .get(&(namespace.to_owned(), name.to_owned()))
                .map(|&i| self.policy.roles[i].rules.as_deref().unwrap_or_default()),
            _ => return Err(format!("unsupported role reference kind: {kind:?}")),
        };
        found.ok_or_else(|| {
            format!(
                "{}.rbac.authorization.k8s.io {name:?} not found",
                kind.to_ascii_lowercase()
            )
        })
    }

    /// Visits each rule bound to `user` in `namespace` (cluster-wide bindings first, then the
    /// namespace's), with a description of the binding that grants it, until `visit` returns
    /// false; the errors met (bindings to roles that do not exist).
    fn visit(
        &self,
        user: &UserInfo,
        namespace: &str,
        mut visit: impl FnMut(&dyn Fn() -> String, &PolicyRule) -> bool,
    ) -> Vec<String> {
        let mut errors = Vec::new();
        for (b, s) in self.cluster_bindings.for_user(user) {
            let binding = &self.policy.cluster_role_bindings[b];
            let role = &binding.role_ref;
            match self.rules(&role.kind, &role.name, "") {
                Ok(rules) => {
                    let subjects = binding.subjects.as_deref().unwrap_or_default();
                    let describe = || {
                        format!(
                            "ClusterRoleBinding {:?} of {} {:?} to {}",
                            name_of(&binding.metadata),
                            role.kind,
                            role.name,
                            describe_subject(&subjects[s], "")
                        )
                    };
                    for rule in rules {
                        if !visit(&describe, rule) {
                            return errors;
                        }
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        if namespace.is_empty() {
            return errors;
        }
        let Some(index) = self.role_bindings.get(namespace) else {
            return errors;
        };
        for (b, s) in index.for_user(user) {
            let binding = &self.policy.role_bindings[b];
            let role = &binding.role_ref;
            match self.rules(&role.kind, &role.name, namespace) {
                Ok(rules) => {
                    let subjects = binding.subjects.as_deref().unwrap_or_default();
                    let describe = || {
                        format!(
                            "RoleBinding {:?} of {} {:?} to {}",
                            format!("{}/{namespace}", name_of(&binding.metadata)),
                            role.kind,
                            role.name,
                            describe_subject(&subjects[s], namespace)
                        )
                    };
                    for rule in rules {
                        if !visit(&describe, rule) {
                            return errors;
                        }
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        errors
    }
}

/// A subject as the apiserver's allow reasons name it: `User "alice"`, `ServiceAccount
/// "name/namespace"`.
fn describe_subject(s: &Subject, binding_namespace: &str) -> String {
    match s.kind.as_str() {
        "ServiceAccount" => {
            let ns = s
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_namespace);
            format!("{} {:?}", s.kind, format!("{}/{ns}", s.name))
        }
        _ => format!("{} {:?}", s.kind, s.name),
    }
}

/// Several errors as the apiserver's aggregate error writes them.
fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

fn has(list: Option<&Vec<String>>, wanted: &str) -> bool {
    list.is_some_and(|l| l.iter().any(|x| x == "*" || x == wanted))
}

/// Whether `rule` allows `a`.
pub(crate) fn rule_allows(rule: &PolicyRule, a: &Attributes) -> bool {
    if !rule.verbs.iter().any(|v| v == "*" || *v == a.verb) {
        return false;
    }
    if !a.resource_request {
        return rule
            .non_resource_urls
            .iter()
            .flatten()
            .any(|url| match url.strip_suffix('*') {
                Some(prefix) => a.path.starts_with(prefix),
                None => *url == a.path,
            });
    }
    has(rule.api_groups.as_ref(), &a.api_group)
        && resource_matches(rule.resources.as_deref().unwrap_or_default(), a)
        && match rule.resource_names.as_deref() {
            None | Some([]) => true,
            Some(names) => names.contains(&a.name),
        }
}

/// Whether `resources` (`*`, `pods`, `pods/status`, `*/status`) names `a`'s resource and
/// subresource.
fn resource_matches(resources: &[String], a: &Attributes) -> bool {
    resources.iter().any(|r| {
        if r == "*" {
            return true;
        }
        if a.subresource.is_empty() {
            return *r == a.resource;
        }
        match r.split_once('/') {
            Some((res, sub)) => (res == a.resource || res == "*") && sub == a.subresource,
            None => false,
        }
    })
}

/// What a rules review lists for a user in a namespace.
#[derive(Debug, Default)]
pub(crate) struct Rules {
    /// The rules that name resources.
    pub(crate) resource: Vec<PolicyRule>,
    /// The rules that name non-resource URLs.
    pub(crate) non_resource: Vec<PolicyRule>,
    /// What could not be read (bindings to roles that do not exist): the list is incomplete.
    pub(crate) errors: Vec<String>,
}

/// The RBAC authorizer over a [`PolicySource`].
pub(crate) struct Rbac {
    source: Arc<dyn PolicySource>,
    index: Mutex<Arc<Index>>,
    cache: DecisionCache,
}

impl Rbac {
    /// Decides on `source`'s policy, caching up to `cache_entries` decisions.
    pub(crate) fn new(source: Arc<dyn PolicySource>, cache_entries: usize) -> Rbac {
        Rbac {
            source,
            index: Mutex::new(Arc::new(Index::new(u64::MAX, Arc::default()))),
            cache: DecisionCache::new(cache_entries),
        }
    }

    /// The policy now, indexed (again, if its version changed).
    fn index(&self) -> Arc<Index> {
        let (version, policy) = self.source.policy();
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        if index.version != version || !Arc::ptr_eq(&index.policy, &policy) {
            *index = Arc::new(Index::new(version, policy));
        }
        index.clone()
    }

    /// Decides on `a`. Decisions on attributes of at most [`CACHED_ATTRIBUTES_BYTES`] are
    /// cached: a key is a copy of the attributes, which a client writes (a path, a review's
    /// body), so the cache's bytes stay bounded by its count.
    pub(crate) fn authorize(&self, a: &Attributes) -> Decision {
        let index = self.index();
        let cacheable = attributes_bytes(a) <= CACHED_ATTRIBUTES_BYTES;
        if cacheable && let Some(d) = self.cache.get(index.version, a) {
            return d;
        }
        let d = decide(&index, a);
        if cacheable {
            self.cache.insert(index.version, a.clone(), d.clone());
        }
        d
    }

    /// The rules bound to `user` in `namespace` (cluster-wide ones only, for `""`).
    pub(crate) fn rules_for(&self, user: &UserInfo, namespace: &str) -> Rules {
        let index = self.index();
        let mut rules = Rules::default();
        rules.errors = index.visit(user, namespace, |_, rule| {
            if rule.non_resource_urls.as_ref().is_some_and(|u| !u.is_empty()) {
                rules.non_resource.push(rule.clone());
            } else {
                rules.resource.push(rule.clone());
            }
            true
        });
        rules
    }

    /// The rules of the role `kind`/`name` a binding in `namespace` refers to, or why there
    /// are none.
    pub(crate) fn role_rules(
        &self,
        kind: &str,
        name: &str,
        namespace: &str,
    ) -> Result<Vec<PolicyRule>, String> {
        self.index()
            .rules(kind, name, namespace)
            .map(<[PolicyRule]>::to_vec)
    }

    /// How many decisions the cache holds.
    #[cfg(test)]
    pub(crate) fn cached(&self) -> usize {
        self.cache.len()
    }
}

fn decide(index: &Index, a: &Attributes) -> Decision {
    let mut allowed = None;
    let errors = index.visit(&a.user, &a.namespace, |describe, rule| {
        if rule_allows(rule, a) {
            allowed = Some(format!("RBAC: allowed by {}", describe()));
            return false;
        }
        true
    });
    match allowed {
        Some(reason) => Decision::Allow(reason),
        None if errors.is_empty() => Decision::Deny(String::new()),
        None => Decision::Deny(format!("RBAC: {}", aggregate(&errors))),
    }
}

/// The largest attributes whose decision is cached, counted as the bytes of their strings and
/// the user's: a request's usual attributes are a few hundred bytes.
const CACHED_ATTRIBUTES_BYTES: usize = 1024;

/// The bytes of `a`'s strings, the user's included.
fn attributes_bytes(a: &Attributes) -> usize {
    let user = a.user.name.len() + a.user.uid.len() + a.user.groups.iter().map(String::len).sum::<usize>();
    user + a.verb.len()
        + a.api_group.len()
        + a.api_version.len()
        + a.resource.len()
        + a.subresource.len()
        + a.namespace.len()
        + a.name.len()
        + a.path.len()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::auth::request::attributes;
    use k8s_openapi::api::rbac::v1::RoleRef;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn meta(ns: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: (!ns.is_empty()).then(|| ns.to_owned()),
            ..ObjectMeta::default()
        }
    }

    fn strings(items: &[&str]) -> Option<Vec<String>> {
        (!items.is_empty()).then(|| items.iter().map(|s| (*s).to_owned()).collect())
    }

    /// A resource rule: verbs, groups, resources, names.
    pub(crate) fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> PolicyRule {
        PolicyRule {
            verbs: strings(verbs).unwrap_or_default(),
            api_groups: Some(groups.iter().map(|s| (*s).to_owned()).collect()),
            resources: strings(resources),
            resource_names: strings(names),
            non_resource_urls: None,
        }
    }

    /// A non-resource rule.
    pub(crate) fn urls(verbs: &[&str], urls: &[&str]) -> PolicyRule {
        PolicyRule {
            verbs: strings(verbs).unwrap_or_default(),
            non_resource_urls: strings(urls),
            ..PolicyRule::default()
        }
    }

    pub(crate) fn subject(kind: &str, name: &str, ns: &str) -> Subject {
        Subject {
            kind: kind.to_owned(),
            name: name.to_owned(),
            namespace: (!ns.is_empty()).then(|| ns.to_owned()),
            api_group: None,
        }
    }

    pub(crate) fn cluster_role(name: &str, rules: Vec<PolicyRule>) -> ClusterRole {
        ClusterRole {
            metadata: meta("", name),
            rules: Some(rules),
            aggregation_rule: None,
        }
    }

    pub(crate) fn role(ns: &str, name: &str, rules: Vec<PolicyRule>) -> Role {
        Role {
            metadata: meta(ns, name),
            rules: Some(rules),
        }
    }

    fn role_ref(kind: &str, name: &str) -> RoleRef {
        RoleRef {
            kind: kind.to_owned(),
            name: name.to_owned(),
            ..RoleRef::default()
        }
    }

    pub(crate) fn cluster_binding(name: &str, role: &str, subjects: Vec<Subject>) -> ClusterRoleBinding {
        ClusterRoleBinding {
            metadata: meta("", name),
            role_ref: role_ref("ClusterRole", role),
            subjects: Some(subjects),
        }
    }

    pub(crate) fn binding(
        ns: &str,
        name: &str,
        kind: &str,
        role: &str,
        subjects: Vec<Subject>,
    ) -> RoleBinding {
        RoleBinding {
            metadata: meta(ns, name),
            role_ref: role_ref(kind, role),
            subjects: Some(subjects),
        }
    }

    /// The policy the table runs on.
    fn policy() -> Policy {
        Policy {
            cluster_roles: vec![
                cluster_role(
                    "pod-reader",
                    vec![rule(&["get", "list", "watch"], &[""], &["pods"], &[])],
                ),
                cluster_role(
                    "status-writer",
                    vec![rule(&["update", "patch"], &[""], &["pods/status"], &[])],
                ),
                cluster_role("scaler", vec![rule(&["update"], &["*"], &["*/scale"], &[])]),
                cluster_role(
                    "one-configmap",
                    vec![rule(
                        &[
                            "get",
                            "list",
                            "watch",
                            "update",
                            "delete",
                            "create",
                            "deletecollection",
                        ],
                        &[""],
                        &["configmaps"],
                        &["cm1"],
                    )],
                ),
                cluster_role(
                    "health",
                    vec![
                        urls(&["get"], &["/healthz", "/readyz"]),
                        urls(&["get"], &["/openapi/*"]),
                    ],
                ),
                cluster_role(
                    "everything",
                    vec![rule(&["*"], &["*"], &["*"], &[]), urls(&["*"], &["*"])],
                ),
                cluster_role("node-lister", vec![rule(&["list"], &[""], &["nodes"], &[])]),
                cluster_role(
                    "lease-editor",
                    vec![rule(&["*"], &["coordination.k8s.io"], &["leases"], &[])],
                ),
            ],
            roles: vec![role(
                "team",
                "secret-reader",
                vec![rule(&["get"], &[""], &["secrets"], &[])],
            )],
            cluster_role_bindings: vec![
                cluster_binding(
                    "nodes",
                    "node-lister",
                    vec![subject("Group", "node-watchers", "")],
                ),
                cluster_binding(
                    "health",
                    "health",
                    vec![subject("Group", "system:unauthenticated", "")],
                ),
                cluster_binding("admins", "everything", vec![subject("User", "root", "")]),
                cluster_binding(
                    "sa-leases",
                    "lease-editor",
                    vec![subject("ServiceAccount", "leader", "kube-system")],
                ),
                // A ServiceAccount subject without a namespace, in a cluster binding: no one.
                cluster_binding(
                    "sa-nowhere",
                    "everything",
                    vec![subject("ServiceAccount", "default", "")],
                ),
                cluster_binding("dangling", "no-such-role", vec![subject("User", "dora", "")]),
            ],
            role_bindings: vec![
                binding(
                    "team",
                    "readers",
                    "ClusterRole",
                    "pod-reader",
                    vec![subject("User", "alice", "")],
                ),
                binding(
                    "team",
                    "status",
                    "ClusterRole",
                    "status-writer",
                    vec![subject("User", "alice", "")],
                ),
                binding(
                    "team",
                    "secrets",
                    "Role",
                    "secret-reader",
                    vec![subject("Group", "devs", "")],
                ),
                binding(
                    "team",
                    "scale",
                    "ClusterRole",
                    "scaler",
                    vec![subject("User", "alice", "")],
                ),
                binding(
                    "team",
                    "cm",
                    "ClusterRole",
                    "one-configmap",
                    vec![subject("User", "carol", "")],
                ),
                // The service account in the binding's namespace, and all of a namespace's.
                binding(
                    "team",
                    "sa",
                    "ClusterRole",
                    "pod-reader",
                    vec![subject("ServiceAccount", "builder", "")],
                ),
                binding(
                    "apps",
                    "all-sa",
                    "ClusterRole",
                    "pod-reader",
                    vec![subject("Group", "system:serviceaccounts:apps", "")],
                ),
                // A Role of another namespace is not found from this one.
                binding(
                    "other",
                    "secrets",
                    "Role",
                    "secret-reader",
                    vec![subject("User", "alice", "")],
                ),
            ],
        }
    }

    fn user(name: &str, groups: &[&str]) -> Arc<UserInfo> {
        Arc::new(UserInfo::authenticated(
            name,
            "",
            groups.iter().map(|g| (*g).to_owned()).collect(),
        ))
    }

    fn decide_on(rbac: &Rbac, u: &Arc<UserInfo>, method: &str, target: &str) -> Decision {
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        rbac.authorize(&attributes(u.clone(), method, path, query).unwrap())
    }

    #[test]
    fn rules_allow_what_they_name_and_nothing_more() {
        let rbac = Rbac::new(Arc::new(StaticPolicy::new(policy())), 100);
        let alice = user("alice", &[]);
        let bob = user("bob", &["devs"]);
        let carol = user("carol", &[]);
        let nodes = user("nina", &["node-watchers"]);
        let anonymous = Arc::new(UserInfo::anonymous());
        let root = user("root", &[]);
        let builder = user(
            "system:serviceaccount:team:builder",
            &["system:serviceaccounts", "system:serviceaccounts:team"],
        );
        let leader = user("system:serviceaccount:kube-system:leader", &[]);
        let app_sa = user(
            "system:serviceaccount:apps:web",
            &["system:serviceaccounts", "system:serviceaccounts:apps"],
        );
        let table: &[(&Arc<UserInfo>, &str, &str, bool)] = &[
            // A ClusterRole bound in a namespace grants there only.
            (&alice, "GET", "/api/v1/namespaces/team/pods", true),
            (&alice, "GET", "/api/v1/namespaces/team/pods/p?watch=1", true),
            (&alice, "GET", "/api/v1/namespaces/team/pods?watch=true", true),
            (&alice, "GET", "/api/v1/namespaces/other/pods", false),
            (&alice, "GET", "/api/v1/pods", false),
            (&alice, "DELETE", "/api/v1/namespaces/team/pods/p", false),
            // Subresources: named in full, and only the one named.
            (&alice, "PUT", "/api/v1/namespaces/team/pods/p/status", true),
            (&alice, "GET", "/api/v1/namespaces/team/pods/p/status", false),
            (&alice, "PUT", "/api/v1/namespaces/team/pods/p", false),
            // `*/scale`: any resource's scale, of any group, and not the resource itself.
            (
                &alice,
                "PUT",
                "/apis/apps/v1/namespaces/team/deployments/d/scale",
                true,
            ),
            (
                &alice,
                "PUT",
                "/apis/apps/v1/namespaces/team/deployments/d",
                false,
            ),
            (
                &alice,
                "PUT",
                "/apis/apps/v1/namespaces/team/deployments/d/status",
                false,
            ),
            // A Role from a RoleBinding of its namespace; a Role of another namespace is not
            // found from a binding in this one.
            (&bob, "GET", "/api/v1/namespaces/team/secrets/s", true),
            (&bob, "GET", "/api/v1/namespaces/team/secrets", false),
            (&alice, "GET", "/api/v1/namespaces/other/secrets/s", false),
            // resourceNames: the named object, never a collection.
            (&carol, "GET", "/api/v1/namespaces/team/configmaps/cm1", true),
            (&carol, "PUT", "/api/v1/namespaces/team/configmaps/cm1", true),
            (&carol, "GET", "/api/v1/namespaces/team/configmaps/cm2", false),
            (&carol, "GET", "/api/v1/namespaces/team/configmaps", false),
            (
                &carol,
                "GET",
                "/api/v1/namespaces/team/configmaps?fieldSelector=metadata.name%3Dcm1",
                true,
            ),
            (
                &carol,
                "GET",
                "/api/v1/namespaces/team/configmaps?watch=1&fieldSelector=metadata.name%3Dcm1",
                true,
            ),
            (
                &carol,
                "GET",
                "/api/v1/namespaces/team/configmaps?fieldSelector=metadata.name%3Dcm2",
                false,
            ),
            (&carol, "DELETE", "/api/v1/namespaces/team/configmaps", false),
            (&carol, "DELETE", "/api/v1/namespaces/team/configmaps/cm1", true),
            (&carol, "POST", "/api/v1/namespaces/team/configmaps", false),
            // A ClusterRoleBinding grants everywhere, cluster scope included.
            (&nodes, "GET", "/api/v1/nodes", true),
            (&nodes, "GET", "/api/v1/nodes/n1", false),
            (&root, "DELETE", "/api/v1/namespaces/x", true),
            (&root, "POST", "/logs/anything", true),
            // Non-resource URLs: exact, or a prefix ending in `*`; the verb is the method's.
            (&anonymous, "GET", "/healthz", true),
            (&anonymous, "GET", "/readyz", true),
            (&anonymous, "POST", "/healthz", false),
            (&anonymous, "GET", "/healthz/etcd", false),
            (&anonymous, "GET", "/openapi/v3/api/v1", true),
            (&anonymous, "GET", "/openapi", false),
            (&anonymous, "GET", "/metrics", false),
            (&anonymous, "GET", "/api/v1/namespaces/team/pods", false),
            // Service accounts: by the binding's namespace, by an explicit one, by group.
            (&builder, "GET", "/api/v1/namespaces/team/pods", true),
            (&builder, "GET", "/api/v1/namespaces/apps/pods", false),
            (
                &leader,
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l",
                true,
            ),
            (
                &leader,
                "PUT",
                "/api/v1/namespaces/kube-system/configmaps/l",
                false,
            ),
            (&app_sa, "GET", "/api/v1/namespaces/apps/pods", true),
            (&app_sa, "GET", "/api/v1/namespaces/team/pods", false),
            // A ServiceAccount subject with no namespace in a ClusterRoleBinding names no one.
            (
                &user("system:serviceaccount::default", &[]),
                "GET",
                "/api/v1/pods",
                false,
            ),
        ];
        for (u, method, target, allowed) in table {
            let d = decide_on(&rbac, u, method, target);
            assert_eq!(
                matches!(d, Decision::Allow(_)),
                *allowed,
                "{} {method} {target}: {d:?}",
                u.name
            );
        }
    }

    #[test]
    fn allow_reasons_name_the_binding_role_and_subject() {
        let rbac = Rbac::new(Arc::new(StaticPolicy::new(policy())), 100);
        let d = decide_on(&rbac, &user("alice", &[]), "GET", "/api/v1/namespaces/team/pods");
        assert_eq!(
            d,
            Decision::Allow(
                r#"RBAC: allowed by RoleBinding "readers/team" of ClusterRole "pod-reader" to User "alice""#
                    .into()
            )
        );
        let d = decide_on(&rbac, &user("nina", &["node-watchers"]), "GET", "/api/v1/nodes");
        assert_eq!(
            d,
            Decision::Allow(
                r#"RBAC: allowed by ClusterRoleBinding "nodes" of ClusterRole "node-lister" to Group "node-watchers""#
                    .into()
            )
        );
        let sa = user("system:serviceaccount:team:builder", &[]);
        let d = decide_on(&rbac, &sa, "GET", "/api/v1/namespaces/team/pods");
        assert_eq!(
            d,
            Decision::Allow(
                r#"RBAC: allowed by RoleBinding "sa/team" of ClusterRole "pod-reader" to ServiceAccount "builder/team""#
                    .into()
            )
        );
        // Not allowed: no reason, unless a binding's role is missing.
        let d = decide_on(&rbac, &user("alice", &[]), "GET", "/api/v1/nodes");
        assert_eq!(d, Decision::Deny(String::new()));
        let d = decide_on(&rbac, &user("dora", &[]), "GET", "/api/v1/nodes");
        assert_eq!(
            d,
            Decision::Deny(r#"RBAC: clusterrole.rbac.authorization.k8s.io "no-such-role" not found"#.into())
        );
    }

    #[test]
    fn decisions_are_cached_until_the_policy_changes() {
        let source = Arc::new(StaticPolicy::new(Policy::default()));
        let rbac = Rbac::new(source.clone(), 100);
        let alice = user("alice", &[]);
        let list = "/api/v1/namespaces/team/pods";
        assert!(matches!(decide_on(&rbac, &alice, "GET", list), Decision::Deny(_)));
        assert_eq!(rbac.cached(), 1);
        assert!(matches!(decide_on(&rbac, &alice, "GET", list), Decision::Deny(_)));
        assert_eq!(rbac.cached(), 1, "a second ask is answered from the cache");
        // A new version: the cached denial goes.
        source.set(policy());
        assert!(matches!(
            decide_on(&rbac, &alice, "GET", list),
            Decision::Allow(_)
        ));
        assert_eq!(rbac.cached(), 1);
        // And back.
        source.set(Policy::default());
        assert!(matches!(decide_on(&rbac, &alice, "GET", list), Decision::Deny(_)));
    }

    #[test]
    fn decisions_on_attributes_a_client_made_large_are_not_kept() {
        let rbac = Rbac::new(Arc::new(StaticPolicy::new(policy())), 100);
        let alice = user("alice", &[]);
        // A long name in the path (a review's body may hold megabytes): decided, not kept.
        let long = format!("/api/v1/namespaces/team/pods/{}", "x".repeat(64 << 10));
        for _ in 0..3 {
            decide_on(&rbac, &alice, "GET", &long);
        }
        assert_eq!(rbac.cached(), 0, "no key of 64 KiB is kept");
        decide_on(&rbac, &alice, "GET", "/api/v1/namespaces/team/pods/short");
        assert_eq!(rbac.cached(), 1, "an everyday request's decision is kept");
    }

    #[test]
    fn the_rules_review_lists_cluster_and_namespace_rules() {
        let rbac = Rbac::new(Arc::new(StaticPolicy::new(policy())), 100);
        let alice = user("alice", &["system:unauthenticated"]);
        let rules = rbac.rules_for(&alice, "team");
        assert_eq!(rules.non_resource.len(), 2, "{rules:?}");
        assert_eq!(rules.resource.len(), 3, "{rules:?}");
        assert!(rules.errors.is_empty());
        let rules = rbac.rules_for(&alice, "");
        assert!(rules.resource.is_empty(), "{rules:?}");
        let rules = rbac.rules_for(&user("dora", &[]), "");
        assert_eq!(rules.errors.len(), 1);
    }
}
