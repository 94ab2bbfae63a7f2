//! Authorization: `--authorization-mode` `AlwaysAllow` or `RBAC`, and what each answers a
//! request and a rules review.
//!
//! In RBAC mode, members of `system:masters` are allowed everything before RBAC is asked, as
//! the apiserver's privileged-group authorizer allows them: a server whose RBAC objects are
//! gone or wrong can still be repaired.

use std::sync::Arc;

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::rbac::{PolicySource, Rbac, Rules};
use super::{Attributes, Decision, MASTERS, UserInfo};

/// How requests are authorized (`--authorization-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AuthorizationMode {
    /// Every authenticated (or anonymous) request is allowed.
    #[default]
    AlwaysAllow,
    /// By the RBAC objects.
    Rbac,
}

impl std::str::FromStr for AuthorizationMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "AlwaysAllow" => Ok(AuthorizationMode::AlwaysAllow),
            "RBAC" => Ok(AuthorizationMode::Rbac),
            other => Err(format!(
                "unknown authorization mode {other:?}: AlwaysAllow or RBAC"
            )),
        }
    }
}

/// The most decisions RBAC mode keeps cached.
pub(crate) const DECISION_CACHE_ENTRIES: usize = 10_000;

/// Decides requests.
pub(crate) enum Authorizer {
    /// Everything is allowed.
    AlwaysAllow,
    /// `system:masters`, then RBAC.
    Rbac(Rbac),
}

impl Authorizer {
    /// The authorizer of `mode`, on `policy` in RBAC mode.
    pub(crate) fn new(mode: AuthorizationMode, policy: Arc<dyn PolicySource>) -> Self {
        match mode {
            AuthorizationMode::AlwaysAllow => Authorizer::AlwaysAllow,
            AuthorizationMode::Rbac => Authorizer::Rbac(Rbac::new(policy, DECISION_CACHE_ENTRIES)),
        }
    }

    /// Whether every request is allowed, whatever its attributes.
    pub(crate) fn allows_everything(&self) -> bool {
        matches!(self, Authorizer::AlwaysAllow)
    }

    /// Decides on `a`.
    pub(crate) fn authorize(&self, a: &Attributes) -> Decision {
        match self {
            Authorizer::AlwaysAllow => Decision::Allow(String::new()),
            Authorizer::Rbac(_) if is_master(&a.user) => Decision::Allow(String::new()),
            Authorizer::Rbac(rbac) => rbac.authorize(a),
        }
    }

    /// What `user` may do in `namespace`, for a rules review.
    pub(crate) fn rules_for(&self, user: &UserInfo, namespace: &str) -> Rules {
        match self {
            Authorizer::Rbac(rbac) if !is_master(user) => rbac.rules_for(user, namespace),
            _ => everything(),
        }
    }

    /// The rules of the role `kind`/`name` a binding in `namespace` refers to (none in
    /// `AlwaysAllow` mode, which reads no policy).
    pub(crate) fn role_rules(
        &self,
        kind: &str,
        name: &str,
        namespace: &str,
    ) -> Result<Vec<PolicyRule>, String> {
        match self {
            Authorizer::Rbac(rbac) => rbac.role_rules(kind, name, namespace),
            Authorizer::AlwaysAllow => Ok(Vec::new()),
        }
    }
}

fn is_master(user: &UserInfo) -> bool {
    user.groups.iter().any(|g| g == MASTERS)
}

/// The rules that allow everything.
fn everything() -> Rules {
    let all = || Some(vec!["*".to_owned()]);
    Rules {
        resource: vec![PolicyRule {
            verbs: vec!["*".to_owned()],
            api_groups: all(),
            resources: all(),
            ..PolicyRule::default()
        }],
        non_resource: vec![PolicyRule {
            verbs: vec!["*".to_owned()],
            non_resource_urls: all(),
            ..PolicyRule::default()
        }],
        errors: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::rbac::{Policy, StaticPolicy};
    use crate::auth::request::attributes;

    #[test]
    fn masters_are_allowed_everything_in_rbac_mode() {
        let rbac = Authorizer::new(
            AuthorizationMode::Rbac,
            Arc::new(StaticPolicy::new(Policy::default())),
        );
        let master = Arc::new(UserInfo::authenticated("admin", "", vec![MASTERS.into()]));
        let a = attributes(master.clone(), "DELETE", "/api/v1/namespaces/x", None).unwrap();
        assert!(matches!(rbac.authorize(&a), Decision::Allow(_)));
        assert_eq!(rbac.rules_for(&master, "x").resource.len(), 1);
        let other = Arc::new(UserInfo::authenticated("bob", "", vec![]));
        let a = attributes(other.clone(), "DELETE", "/api/v1/namespaces/x", None).unwrap();
        assert!(matches!(rbac.authorize(&a), Decision::Deny(_)));
        assert!(rbac.rules_for(&other, "x").resource.is_empty());
        assert_eq!("RBAC".parse(), Ok(AuthorizationMode::Rbac));
        assert!("rbac".parse::<AuthorizationMode>().is_err());
    }
}
