//! Who a request comes from and what it asks to do: the types authentication produces and
//! authorization decides on, as kube-apiserver's `user.Info` and `authorizer.Attributes`.
//!
//! Authentication turns a request (its connection's client certificate, its bearer token, or
//! neither) into a [`UserInfo`]; authorization decides on [`Attributes`] made from the user
//! and the request's path and method.
//!
//! - `token.rs`: the `--token-auth-file` tokens.
//! - `authn.rs`: authentication, certificate then token then anonymous.
//! - `request.rs`: a request's [`Attributes`], as the apiserver's request info.
//! - `rbac.rs`: the RBAC authorizer over a [`PolicySource`].
//! - `cache.rs`: the RBAC authorizer's decision cache.
//! - `authorizer.rs`: `--authorization-mode`.
//! - `escalation.rs`: the RBAC kinds' writes grant nothing the writer does not hold.
//! - `review.rs`: the self-checks `kubectl auth can-i` asks.

mod authn;
mod authorizer;
mod cache;
mod escalation;
pub mod rbac;
mod request;
pub(crate) mod request_info;
mod review;
mod token;

pub(crate) use authn::Authenticator;
pub use authorizer::AuthorizationMode;
pub(crate) use authorizer::Authorizer;
pub(crate) use escalation::{RbacWrite, confirm as confirm_no_escalation};
pub use rbac::{Policy, PolicySource, StaticPolicy};
pub(crate) use request::attributes;
pub(crate) use review::{
    GROUP_VERSION as REVIEW_GROUP_VERSION, access_review, access_review_from_protobuf, rules_review,
    rules_review_from_protobuf,
};
pub use token::{TokenFile, TokenFileError};

use std::sync::Arc;

/// The group every authenticated user is in.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group of anonymous requests.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user of anonymous requests.
pub const ANONYMOUS: &str = "system:anonymous";
/// The group bound to `cluster-admin`.
pub const MASTERS: &str = "system:masters";

/// An authenticated (or anonymous) user, as the apiserver's `user.Info`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct UserInfo {
    /// The user's name (a certificate's CN, a token's user).
    pub name: String,
    /// The user's uid, where the authenticator knows one (a token file's column).
    pub uid: String,
    /// The groups, `system:authenticated` (or `system:unauthenticated`) among them.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> Self {
        UserInfo {
            name: ANONYMOUS.to_owned(),
            uid: String::new(),
            groups: vec![UNAUTHENTICATED.to_owned()],
        }
    }

    /// An authenticated user: `groups` plus `system:authenticated`.
    pub fn authenticated(name: impl Into<String>, uid: impl Into<String>, mut groups: Vec<String>) -> Self {
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.to_owned());
        }
        UserInfo {
            name: name.into(),
            uid: uid.into(),
            groups,
        }
    }
}

/// What the TLS layer learned of a connection's client certificate. Verified when the
/// handshake ends, against the client CA of that moment; the handshake itself accepts any
/// certificate whose key the client proves it holds, so that a bad one gets a 401 `Status`
/// over HTTP, as the apiserver gives it, rather than a TLS alert.
#[derive(Clone, Debug, Default)]
pub enum ClientCert {
    /// No certificate (or no TLS, or no `--client-ca-file`).
    #[default]
    None,
    /// A certificate that chains to the client CA and is valid now: CN is the user, each O a
    /// group.
    Valid(Arc<UserInfo>),
    /// A certificate that does not verify (expired, another CA, wrong usage): why.
    Invalid(Arc<str>),
}

/// A request's attributes for authorization, as the apiserver's `authorizer.Attributes`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// Who asks.
    pub user: Arc<UserInfo>,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection` on
    /// resources; the lower-cased HTTP method (`get`, `post`, …) on other paths.
    pub verb: String,
    /// Whether the request is for a resource (else a non-resource URL such as `/healthz`).
    pub resource_request: bool,
    /// The API group (`""` for the core group).
    pub api_group: String,
    /// The API version.
    pub api_version: String,
    /// The resource (`pods`), empty for non-resource requests.
    pub resource: String,
    /// The subresource (`status`), or empty.
    pub subresource: String,
    /// The namespace, empty for cluster-scoped requests and requests across namespaces.
    pub namespace: String,
    /// The object's name, empty for collections.
    pub name: String,
    /// The request path (what `nonResourceURLs` match).
    pub path: String,
}

impl Attributes {
    /// `verb` on the non-resource URL `path` by `user`.
    pub fn non_resource(user: Arc<UserInfo>, verb: impl Into<String>, path: impl Into<String>) -> Self {
        Attributes {
            user,
            verb: verb.into(),
            resource_request: false,
            api_group: String::new(),
            api_version: String::new(),
            resource: String::new(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
            path: path.into(),
        }
    }
}

/// An authorizer's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed; why (the rule or binding), for audit and `can-i`.
    Allow(String),
    /// Denied or not allowed by any rule; why, for the 403 message's tail (may be empty).
    Deny(String),
}
