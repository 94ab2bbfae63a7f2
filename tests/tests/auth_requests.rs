//! Authentication and authorization over HTTP: bearer tokens from `--token-auth-file`,
//! anonymous requests, RBAC's 403s in the apiserver's words, and `kubectl auth can-i` (every
//! kubectl build on the image) answering from the server's self-checks.
//!
//! Most tests give the server its policy whole, through `ServeConfig::policy`; one decides on
//! the RBAC objects the server stores and serves, its bootstrap policy among them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};
use watchcache_server::auth::AuthorizationMode;
use watchcache_server::auth::rbac::{Policy, StaticPolicy};
use watchcache_tests::{ServeConfig, Server, config, http, kubectl_builds, start};

const ALICE: &str = "alice-token-0123456789";
const ADMIN: &str = "admin-token-0123456789";
const BOB: &str = "bob-token-0123456789";

/// A token file of its own for each test: alice, an admin in system:masters, and bob in no
/// group that is bound to anything.
fn token_file(test: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("watchcache-tokens-{}-{test}.csv", std::process::id()));
    std::fs::write(
        &path,
        format!("{ALICE},alice,1001,\"dev,readers\"\n{ADMIN},admin,1000,system:masters\n{BOB},bob,1002\n"),
    )
    .expect("the token file is written");
    path
}

fn meta(ns: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: (!ns.is_empty()).then(|| ns.to_owned()),
        ..ObjectMeta::default()
    }
}

fn strings(items: &[&str]) -> Option<Vec<String>> {
    Some(items.iter().map(|s| (*s).to_owned()).collect())
}

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    PolicyRule {
        verbs: strings(verbs).unwrap(),
        api_groups: strings(groups),
        resources: strings(resources),
        ..PolicyRule::default()
    }
}

fn urls(verbs: &[&str], urls: &[&str]) -> PolicyRule {
    PolicyRule {
        verbs: strings(verbs).unwrap(),
        non_resource_urls: strings(urls),
        ..PolicyRule::default()
    }
}

fn subject(kind: &str, name: &str) -> Subject {
    Subject {
        kind: kind.to_owned(),
        name: name.to_owned(),
        ..Subject::default()
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        kind: kind.to_owned(),
        name: name.to_owned(),
        ..RoleRef::default()
    }
}

/// What the apiserver's bootstrap policy gives everyone (health and version) and every
/// authenticated user (discovery, the self-checks), and alice: pods and configmaps in `team`, the status of pods there.
fn policy() -> Policy {
    Policy {
        cluster_roles: vec![
            ClusterRole {
                metadata: meta("", "basics"),
                rules: Some(vec![
                    rule(
                        &["create"],
                        &["authorization.k8s.io"],
                        &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    ),
                    urls(
                        &["get"],
                        &[
                            "/api",
                            "/api/*",
                            "/apis",
                            "/apis/*",
                            "/version",
                            "/healthz",
                            "/openapi/*",
                        ],
                    ),
                ]),
                ..ClusterRole::default()
            },
            // As the bootstrap policy's system:public-info-viewer, to everyone.
            ClusterRole {
                metadata: meta("", "public-info-viewer"),
                rules: Some(vec![urls(
                    &["get"],
                    &["/healthz", "/livez", "/readyz", "/version", "/version/"],
                )]),
                ..ClusterRole::default()
            },
            ClusterRole {
                metadata: meta("", "pod-reader"),
                rules: Some(vec![rule(&["get", "list", "watch"], &[""], &["pods"])]),
                ..ClusterRole::default()
            },
        ],
        roles: vec![Role {
            metadata: meta("team", "editor"),
            rules: Some(vec![
                rule(
                    &["create", "get", "list", "watch", "update", "delete"],
                    &[""],
                    &["configmaps"],
                ),
                rule(&["update", "patch"], &[""], &["pods/status"]),
            ]),
        }],
        cluster_role_bindings: vec![
            ClusterRoleBinding {
                metadata: meta("", "basics"),
                role_ref: role_ref("ClusterRole", "basics"),
                subjects: Some(vec![subject("Group", "system:authenticated")]),
            },
            ClusterRoleBinding {
                metadata: meta("", "public-info-viewer"),
                role_ref: role_ref("ClusterRole", "public-info-viewer"),
                subjects: Some(vec![
                    subject("Group", "system:authenticated"),
                    subject("Group", "system:unauthenticated"),
                ]),
            },
        ],
        role_bindings: vec![
            RoleBinding {
                metadata: meta("team", "readers"),
                role_ref: role_ref("ClusterRole", "pod-reader"),
                subjects: Some(vec![subject("Group", "readers")]),
            },
            RoleBinding {
                metadata: meta("team", "alice-edits"),
                role_ref: role_ref("Role", "editor"),
                subjects: Some(vec![subject("User", "alice")]),
            },
        ],
    }
}

fn rbac_config(test: &str) -> ServeConfig {
    ServeConfig {
        token_auth_file: Some(token_file(test)),
        authorization_mode: AuthorizationMode::Rbac,
        policy: Some(Arc::new(StaticPolicy::new(policy()))),
        ..config(0)
    }
}

/// Sends a request with `Authorization: <authorization>` (none for `None`); the code and the
/// answer as JSON (or as a string, when it is not JSON).
async fn send(
    server: &Server,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    send_typed(server, method, path, authorization, "application/json", body).await
}

/// [`send`] with a body of `content_type`.
async fn send_typed(
    server: &Server,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    content_type: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", server.addr()))
        .header("content-type", content_type);
    if let Some(a) = authorization {
        req = req.header("authorization", a);
    }
    let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    let req = req.body(Full::new(body)).expect("a valid request");
    let resp = tokio::time::timeout(Duration::from_secs(30), http().request(req))
        .await
        .expect("an answer in time")
        .expect("the request is sent");
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.expect("the body").to_bytes();
    let value =
        serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::from(String::from_utf8_lossy(&bytes)));
    (code, value)
}

fn bearer(token: &str) -> Option<String> {
    Some(format!("Bearer {token}"))
}

fn assert_unauthorized(code: u16, body: &Value) {
    assert_eq!(code, 401, "{body}");
    assert_eq!(body["kind"], "Status", "{body}");
    assert_eq!(body["reason"], "Unauthorized", "{body}");
    assert_eq!(body["message"], "Unauthorized", "{body}");
    assert_eq!(body["code"], 401, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_token_is_401_and_writes_nothing() {
    let server = start(rbac_config("bad-token")).await;
    let admin = bearer(ADMIN);
    create_namespaces_as_admin(&server).await;
    let cm = json!({"metadata": {"name": "cm1"}, "data": {"a": "b"}});
    let path = "/api/v1/namespaces/team/configmaps";
    for authorization in [
        "Bearer not-a-token",
        "Bearer alice-token-012345678",
        "Basic YWxpY2U6cGFzc3dvcmQ=",
    ] {
        let (code, body) = send(&server, "POST", path, Some(authorization), Some(cm.clone())).await;
        assert_unauthorized(code, &body);
    }
    let (code, list) = send(&server, "GET", path, admin.as_deref(), None).await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["items"], json!([]), "nothing was written");
    // The same write with alice's token goes through, and she reads it back.
    let alice = bearer(ALICE);
    let (code, body) = send(&server, "POST", path, alice.as_deref(), Some(cm)).await;
    assert_eq!(code, 201, "{body}");
    let (code, got) = send(&server, "GET", &format!("{path}/cm1"), alice.as_deref(), None).await;
    assert_eq!((code, &got["data"]), (200, &json!({"a": "b"})), "{got}");
    server.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_requests_are_401_when_anonymous_auth_is_off() {
    let server = Server::start(ServeConfig {
        token_auth_file: Some(token_file("anonymous-off")),
        anonymous_auth: false,
        ..config(0)
    })
    .await
    .expect("the server starts");
    for path in ["/api/v1/namespaces", "/healthz", "/version", "/no/such/path"] {
        let (code, body) = send(&server, "GET", path, None, None).await;
        assert_unauthorized(code, &body);
    }
    // With a token, everything (AlwaysAllow).
    let (code, body) = send(&server, "GET", "/api/v1/namespaces", bearer(BOB).as_deref(), None).await;
    assert_eq!(code, 200, "{body}");
    server.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_rbac_does_not_allow_is_403_in_the_apiservers_words() {
    let server = start(rbac_config("forbidden")).await;
    let alice = bearer(ALICE);
    let alice = alice.as_deref();
    let cases = [
        (
            "GET",
            "/api/v1/namespaces/kube-system/pods",
            alice,
            r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "kube-system""#,
            json!({"kind": "pods"}),
        ),
        (
            "GET",
            "/api/v1/nodes",
            alice,
            r#"nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the cluster scope"#,
            json!({"kind": "nodes"}),
        ),
        (
            "GET",
            "/api/v1/namespaces/team/pods/x/status",
            alice,
            r#"pods "x" is forbidden: User "alice" cannot get resource "pods/status" in API group "" in the namespace "team""#,
            json!({"name": "x", "kind": "pods"}),
        ),
        (
            "DELETE",
            "/apis/coordination.k8s.io/v1/namespaces/team/leases/l",
            alice,
            r#"leases.coordination.k8s.io "l" is forbidden: User "alice" cannot delete resource "leases" in API group "coordination.k8s.io" in the namespace "team""#,
            json!({"name": "l", "group": "coordination.k8s.io", "kind": "leases"}),
        ),
        (
            "GET",
            "/metrics",
            None,
            r#"forbidden: User "system:anonymous" cannot get path "/metrics""#,
            Value::Null,
        ),
        (
            "GET",
            "/api/v1/namespaces/team/pods?watch=true",
            None,
            r#"pods is forbidden: User "system:anonymous" cannot watch resource "pods" in API group "" in the namespace "team""#,
            json!({"kind": "pods"}),
        ),
    ];
    for (method, path, authorization, message, details) in cases {
        let (code, body) = send(&server, method, path, authorization, None).await;
        assert_eq!(code, 403, "{method} {path}: {body}");
        assert_eq!(body["reason"], "Forbidden", "{body}");
        assert_eq!(body["message"], message, "{method} {path}");
        assert_eq!(body["details"], details, "{method} {path}");
    }
    // What the policy grants: a list and a watch through the group, discovery to everyone
    // authenticated, everything to system:masters.
    let (code, body) = send(&server, "GET", "/api/v1/namespaces/team/pods", alice, None).await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = send(&server, "GET", "/apis", alice, None).await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = send(&server, "GET", "/metrics", bearer(ADMIN).as_deref(), None).await;
    assert_eq!(code, 200, "{body}");
    // Bob is authenticated and bound to the basics only.
    let (code, body) = send(
        &server,
        "GET",
        "/api/v1/namespaces/team/pods",
        bearer(BOB).as_deref(),
        None,
    )
    .await;
    assert_eq!(code, 403, "{body}");
    server.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_token_file_refuses_the_start() {
    let path = std::env::temp_dir().join(format!("watchcache-tokens-{}-malformed.csv", std::process::id()));
    std::fs::write(&path, "t1,alice,1\nt2,bob\n").unwrap();
    let e = Server::start(ServeConfig {
        token_auth_file: Some(path.clone()),
        ..config(0)
    })
    .await
    .err()
    .expect("the start is refused");
    assert!(e.to_string().contains("line 2"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_subject_access_review_answers_for_the_token_user() {
    let server = start(rbac_config("review")).await;
    let review = |verb: &str, ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": verb, "resource": "pods", "namespace": ns}}})
    };
    let path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let alice = bearer(ALICE);
    let (code, body) = send(
        &server,
        "POST",
        path,
        alice.as_deref(),
        Some(review("list", "team")),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        body["status"],
        json!({"allowed": true, "reason": r#"RBAC: allowed by RoleBinding "readers/team" of ClusterRole "pod-reader" to Group "readers""#})
    );
    let (code, body) = send(
        &server,
        "POST",
        path,
        alice.as_deref(),
        Some(review("delete", "team")),
    )
    .await;
    assert_eq!(
        (code, &body["status"]),
        (201, &json!({"allowed": false})),
        "{body}"
    );
    // Anonymous requests may not ask: the review is a create, authorized as any.
    let (code, body) = send(&server, "POST", path, None, Some(review("list", "team"))).await;
    assert_eq!(code, 403, "{body}");
    let (code, body) = send(
        &server,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        alice.as_deref(),
        Some(json!({"spec": {"namespace": "team"}})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["status"]["incomplete"], false, "{body}");
    assert_eq!(
        body["status"]["resourceRules"].as_array().map(Vec::len),
        Some(4),
        "{body}"
    );
    server.shutdown().await.expect("a clean shutdown");
}

/// `kubectl auth can-i`, as the anonymous user: client-go sends a bearer token only over TLS
/// (its client config reads the user's credentials only for a TLS transport), and this
/// server's listener is plaintext. So here every binding of [`policy`] is to
/// `system:unauthenticated`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_answers_yes_and_no_by_the_policy() {
    let builds = kubectl_builds();
    if builds.is_empty() {
        return;
    }
    let mut anonymous = policy();
    let everyone = || Some(vec![subject("Group", "system:unauthenticated")]);
    anonymous
        .cluster_role_bindings
        .iter_mut()
        .for_each(|b| b.subjects = everyone());
    anonymous
        .role_bindings
        .iter_mut()
        .for_each(|b| b.subjects = everyone());
    let server = start(ServeConfig {
        policy: Some(Arc::new(StaticPolicy::new(anonymous))),
        ..rbac_config("can-i")
    })
    .await;
    create_namespaces_as_admin(&server).await;
    let url = format!("http://{}", server.addr());
    for bin in &builds {
        let cache = std::env::temp_dir().join(format!(
            "watchcache-kubectl-auth-{}-{}",
            std::process::id(),
            bin.display().to_string().replace('/', "_")
        ));
        let kubectl = |args: &[&str]| {
            let mut c = tokio::process::Command::new(bin);
            c.env("KUBECONFIG", "/dev/null")
                .arg(format!("--server={url}"))
                .arg(format!("--cache-dir={}", cache.display()))
                .args(args)
                .kill_on_drop(true);
            c
        };
        for (args, yes) in [
            (&["auth", "can-i", "list", "pods", "-n", "team"][..], true),
            (&["auth", "can-i", "watch", "pods", "-n", "team"][..], true),
            (&["auth", "can-i", "delete", "pods", "-n", "team"][..], false),
            (&["auth", "can-i", "list", "pods", "-n", "kube-system"][..], false),
            (&["auth", "can-i", "create", "configmaps", "-n", "team"][..], true),
            (
                &[
                    "auth",
                    "can-i",
                    "patch",
                    "pods",
                    "--subresource=status",
                    "-n",
                    "team",
                ][..],
                true,
            ),
            (
                &[
                    "auth",
                    "can-i",
                    "get",
                    "pods",
                    "--subresource=status",
                    "-n",
                    "team",
                ][..],
                false,
            ),
            (&["auth", "can-i", "list", "nodes"][..], false),
            (&["auth", "can-i", "get", "/healthz"][..], true),
            (&["auth", "can-i", "get", "/metrics"][..], false),
        ] {
            let out = tokio::time::timeout(Duration::from_secs(60), kubectl(args).output())
                .await
                .expect("kubectl in time")
                .expect("kubectl runs");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                (stdout.trim(), out.status.success()),
                (if yes { "yes" } else { "no" }, yes),
                "{} {args:?}: {stdout} {stderr}",
                bin.display()
            );
        }
        let out = tokio::time::timeout(
            Duration::from_secs(60),
            kubectl(&["auth", "can-i", "--list", "-n", "team"]).output(),
        )
        .await
        .expect("kubectl in time")
        .expect("kubectl runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: {stdout} {stderr}", bin.display());
        for expected in [
            "pods ",
            "configmaps ",
            "pods/status ",
            "selfsubjectaccessreviews.authorization.k8s.io",
            "/healthz",
        ] {
            assert!(
                stdout.contains(expected),
                "{}: {expected} in {stdout}",
                bin.display()
            );
        }
        let _ = std::fs::remove_dir_all(&cache);
    }
    server.shutdown().await.expect("a clean shutdown");
}

/// The namespace `team`, made by the admin (anonymous requests may not).
async fn create_namespaces_as_admin(server: &Server) {
    let (code, body) = send(
        server,
        "POST",
        "/api/v1/namespaces",
        bearer(ADMIN).as_deref(),
        Some(json!({"metadata": {"name": "team"}})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
}

/// Polls `path` as `token` until it answers `want` (the policy follows the RBAC caches, which
/// follow the store); the last answer.
async fn until_code(server: &Server, path: &str, token: &str, want: u16) -> (u16, Value) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (code, body) = send(server, "GET", path, bearer(token).as_deref(), None).await;
        if code == want || tokio::time::Instant::now() > deadline {
            return (code, body);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stored_policy_grants_what_bindings_say_and_revokes_it_with_them() {
    // No policy given: RBAC decides on what the server stores, the bootstrap policy included.
    let server = start(ServeConfig {
        token_auth_file: Some(token_file("stored")),
        authorization_mode: AuthorizationMode::Rbac,
        ..config(0)
    })
    .await;
    let admin = bearer(ADMIN);
    let admin = admin.as_deref();
    // The bootstrap policy: health for everyone, discovery for the authenticated, nothing else.
    let (code, body) = send(&server, "GET", "/healthz", None, None).await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = send(&server, "GET", "/api", bearer(BOB).as_deref(), None).await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = send(&server, "GET", "/api/v1/pods", None, None).await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        r#"pods is forbidden: User "system:anonymous" cannot list resource "pods" in API group "" at the cluster scope"#
    );
    create_namespaces_as_admin(&server).await;
    let path = "/api/v1/namespaces/team/configmaps";
    let (code, body) = send(&server, "GET", path, bearer(ALICE).as_deref(), None).await;
    assert_eq!(code, 403, "{body}");
    // The admin (system:masters, cluster-admin) grants alice the bootstrap `view` role in team.
    let binding = json!({
        "metadata": {"name": "alice-views"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}],
    });
    let bindings = "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings";
    let (code, body) = send(&server, "POST", bindings, admin, Some(binding)).await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = until_code(&server, path, ALICE, 200).await;
    assert_eq!(code, 200, "view lets alice list configmaps in team: {body}");
    // Only there, and only reading.
    let (code, body) = send(
        &server,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        bearer(ALICE).as_deref(),
        None,
    )
    .await;
    assert_eq!(code, 403, "{body}");
    let cm = json!({"metadata": {"name": "cm"}});
    let (code, body) = send(&server, "POST", path, bearer(ALICE).as_deref(), Some(cm)).await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        r#"configmaps is forbidden: User "alice" cannot create resource "configmaps" in API group "" in the namespace "team""#
    );
    // Deleting the binding takes it back.
    let (code, body) = send(&server, "DELETE", &format!("{bindings}/alice-views"), admin, None).await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = until_code(&server, path, ALICE, 403).await;
    assert_eq!(code, 403, "the binding's deletion revokes it: {body}");
    server.shutdown().await.expect("a clean shutdown");
}

/// A rule of `verbs` on the RBAC `resources` named `names` (all, for none).
fn rbac_rule(verbs: &[&str], resources: &[&str], names: &[&str]) -> PolicyRule {
    PolicyRule {
        resource_names: (!names.is_empty()).then(|| strings(names).unwrap()),
        ..rule(verbs, &["rbac.authorization.k8s.io"], resources)
    }
}

/// [`policy`], and: alice may write Roles and RoleBindings in `team`, ClusterRoles anywhere,
/// and bind the ClusterRole `secret-reader` in `team`; bob may create Roles in `team` and
/// `escalate` them; `cluster-admin` and `secret-reader` exist, bound to no one.
fn escalation_policy() -> Policy {
    let mut p = policy();
    p.roles[0].rules.as_mut().unwrap().extend([
        rbac_rule(
            &["create", "update", "patch", "get"],
            &["roles", "rolebindings"],
            &[],
        ),
        rbac_rule(&["bind"], &["clusterroles"], &["secret-reader"]),
    ]);
    p.roles.push(Role {
        metadata: meta("team", "escalator"),
        rules: Some(vec![rbac_rule(&["create", "escalate"], &["roles"], &[])]),
    });
    p.role_bindings.push(RoleBinding {
        metadata: meta("team", "bob-escalates"),
        role_ref: role_ref("Role", "escalator"),
        subjects: Some(vec![subject("User", "bob")]),
    });
    p.cluster_roles.extend([
        ClusterRole {
            metadata: meta("", "cluster-admin"),
            rules: Some(vec![rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])]),
            ..ClusterRole::default()
        },
        ClusterRole {
            metadata: meta("", "secret-reader"),
            rules: Some(vec![rule(&["get", "list"], &[""], &["secrets"])]),
            ..ClusterRole::default()
        },
        ClusterRole {
            metadata: meta("", "clusterrole-writer"),
            rules: Some(vec![rbac_rule(&["create"], &["clusterroles"], &[])]),
            ..ClusterRole::default()
        },
    ]);
    p.cluster_role_bindings.push(ClusterRoleBinding {
        metadata: meta("", "alice-writes-clusterroles"),
        role_ref: role_ref("ClusterRole", "clusterrole-writer"),
        subjects: Some(vec![subject("User", "alice")]),
    });
    p
}

fn role_object(kind: &str, name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
        "metadata": {"name": name}, "rules": rules})
}

fn binding_object(name: &str, role_kind: &str, role: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "carol"}]})
}

fn assert_escalation_refused(code: u16, body: &Value, what: &str, missing: &str) {
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["reason"], "Forbidden", "{body}");
    assert_eq!(
        body["message"],
        format!(
            "{what} is forbidden: user \"alice\" (groups=[\"dev\" \"readers\" \"system:authenticated\"]) \
             is attempting to grant RBAC permissions not currently held:\n{missing}"
        ),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_grant_only_what_their_writer_holds_unless_they_may_escalate() {
    let server = start(ServeConfig {
        policy: Some(Arc::new(StaticPolicy::new(escalation_policy()))),
        ..rbac_config("escalate-roles")
    })
    .await;
    create_namespaces_as_admin(&server).await;
    let alice = bearer(ALICE);
    let alice = alice.as_deref();
    let roles = "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles";
    // Secrets are not alice's to read, so not hers to grant.
    let secrets = json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]);
    let (code, body) = send(
        &server,
        "POST",
        roles,
        alice,
        Some(role_object("Role", "secrets", secrets.clone())),
    )
    .await;
    assert_escalation_refused(
        code,
        &body,
        r#"roles.rbac.authorization.k8s.io "secrets""#,
        r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}"#,
    );
    // What she holds she may grant, whole or in part.
    let within = json!([
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["p1"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    ]);
    let (code, body) = send(
        &server,
        "POST",
        roles,
        alice,
        Some(role_object("Role", "mine", within)),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    // An update or a patch that adds what she does not hold is refused the same way; the
    // missing rights are listed compacted, sorted, one a line.
    let wider = json!([
        {"apiGroups": [""], "resources": ["configmaps", "pods"], "verbs": ["get", "deletecollection", "delete"]},
    ]);
    let (code, body) = send(
        &server,
        "PUT",
        &format!("{roles}/mine"),
        alice,
        Some(role_object("Role", "mine", wider)),
    )
    .await;
    assert_escalation_refused(
        code,
        &body,
        r#"roles.rbac.authorization.k8s.io "mine""#,
        "{APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"deletecollection\"]}\n\
         {APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"deletecollection\" \"delete\"]}",
    );
    let patch = json!({"rules": secrets});
    let merge = "application/merge-patch+json";
    let (code, body) = send_typed(
        &server,
        "PATCH",
        &format!("{roles}/mine"),
        alice,
        merge,
        Some(patch),
    )
    .await;
    assert_eq!(code, 403, "a merge patch is checked too: {body}");
    // So is an apply.
    let apply = role_object(
        "Role",
        "mine",
        json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]),
    );
    let (code, body) = send_typed(
        &server,
        "PATCH",
        &format!("{roles}/mine?fieldManager=alice&force=true"),
        alice,
        "application/apply-patch+yaml",
        Some(apply),
    )
    .await;
    assert_eq!(code, 403, "an apply is checked too: {body}");
    // A change to nothing the role grants is checked as well (only what the garbage collector
    // changes is not); within her rights, it passes.
    let labels = json!({"metadata": {"labels": {"a": "b"}}});
    let (code, body) = send_typed(
        &server,
        "PATCH",
        &format!("{roles}/mine"),
        alice,
        merge,
        Some(labels),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    // A ClusterRole is checked against what she holds cluster-wide: not team's pods.
    let clusterroles = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
    let pods = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]);
    let (code, body) = send(
        &server,
        "POST",
        clusterroles,
        alice,
        Some(role_object("ClusterRole", "pods", pods.clone())),
    )
    .await;
    assert_escalation_refused(
        code,
        &body,
        r#"clusterroles.rbac.authorization.k8s.io "pods""#,
        r#"{APIGroups:[""], Resources:["pods"], Verbs:["get"]}"#,
    );
    let reviews = json!([
        {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews"], "verbs": ["create"]},
        {"nonResourceURLs": ["/version", "/apis/apps"], "verbs": ["get"]},
    ]);
    let (code, body) = send(
        &server,
        "POST",
        clusterroles,
        alice,
        Some(role_object("ClusterRole", "reviews", reviews)),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    // An aggregation rule can gather anything: it takes every right, whatever the rules.
    let mut aggregated = role_object("ClusterRole", "gathers", json!([]));
    aggregated["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]});
    let (code, body) = send(&server, "POST", clusterroles, alice, Some(aggregated)).await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        r#"clusterroles.rbac.authorization.k8s.io "gathers" is forbidden: must have cluster-admin privileges to use the aggregationRule"#
    );
    // bob may escalate roles in team: he grants what he does not hold.
    let (code, body) = send(
        &server,
        "POST",
        roles,
        bearer(BOB).as_deref(),
        Some(role_object("Role", "bobs", secrets)),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    // And system:masters pass.
    let admin = bearer(ADMIN);
    let (code, body) = send(
        &server,
        "POST",
        clusterroles,
        admin.as_deref(),
        Some(role_object("ClusterRole", "pods", pods)),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    server.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bindings_bind_only_roles_their_writer_holds_or_may_bind() {
    let server = start(ServeConfig {
        policy: Some(Arc::new(StaticPolicy::new(escalation_policy()))),
        ..rbac_config("escalate-bindings")
    })
    .await;
    create_namespaces_as_admin(&server).await;
    let alice = bearer(ALICE);
    let alice = alice.as_deref();
    let bindings = "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings";
    // cluster-admin: neither held nor hers to bind.
    let (code, body) = send(
        &server,
        "POST",
        bindings,
        alice,
        Some(binding_object("admins", "ClusterRole", "cluster-admin")),
    )
    .await;
    assert_eq!(code, 403, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "rolebindings.rbac.authorization.k8s.io \"admins\" is forbidden: user \"alice\" \
             (groups=[\"dev\" \"readers\" \"system:authenticated\"]) is attempting to grant RBAC \
             permissions not currently held:\n"
        ),
        "{message}"
    );
    assert!(
        message.contains(r#"{NonResourceURLs:["*"], Verbs:["*"]}"#),
        "{message}"
    );
    // secret-reader: not held, but `bind` on exactly that ClusterRole lets her bind it.
    let (code, body) = send(
        &server,
        "POST",
        bindings,
        alice,
        Some(binding_object("secrets", "ClusterRole", "secret-reader")),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    // pod-reader: no `bind` on it, but she holds all it grants in team.
    let (code, body) = send(
        &server,
        "POST",
        bindings,
        alice,
        Some(binding_object("pods", "ClusterRole", "pod-reader")),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    // Her `bind` is on secret-reader only: an update to another role would not pass either
    // (and a role reference never changes anyway); the Role she is bound to is hers to bind.
    let (code, body) = send(
        &server,
        "POST",
        bindings,
        alice,
        Some(binding_object("edits", "Role", "editor")),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    // The admin binds anything.
    let admin = bearer(ADMIN);
    let (code, body) = send(
        &server,
        "POST",
        bindings,
        admin.as_deref(),
        Some(binding_object("admins", "ClusterRole", "cluster-admin")),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    server.shutdown().await.expect("a clean shutdown");
}

/// A custom resource of another group whose kind is named as an RBAC kind's grants nothing,
/// so its writer is not checked for escalation: alice, who may not bind cluster-admin with a
/// RoleBinding, may write an example.com RoleBinding that names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_resource_named_as_an_rbac_kind_is_not_checked_for_escalation() {
    let mut policy = escalation_policy();
    policy.roles[0].rules.as_mut().unwrap().push(rule(
        &["create", "get"],
        &["example.com"],
        &["rolebindings"],
    ));
    let server = start(ServeConfig {
        policy: Some(Arc::new(StaticPolicy::new(policy))),
        ..rbac_config("crd-named-as-rbac")
    })
    .await;
    create_namespaces_as_admin(&server).await;
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "rolebindings.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "rolebindings", "singular": "rolebinding", "kind": "RoleBinding",
                "listKind": "RoleBindingList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let (code, body) = send(&server, "POST", crds, bearer(ADMIN).as_deref(), Some(crd)).await;
    assert_eq!(code, 201, "{body}");
    let custom = "/apis/example.com/v1/namespaces/team/rolebindings";
    let (code, body) = until_code(&server, custom, ADMIN, 200).await;
    assert_eq!(code, 200, "the CRD is served: {body}");
    let alice = bearer(ALICE);
    let mut binding = binding_object("admins", "ClusterRole", "cluster-admin");
    binding["apiVersion"] = json!("example.com/v1");
    let (code, body) = send(&server, "POST", custom, alice.as_deref(), Some(binding.clone())).await;
    assert_eq!(code, 201, "{body}");
    // The RBAC kind itself still is checked.
    binding["apiVersion"] = json!("rbac.authorization.k8s.io/v1");
    let rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings";
    let (code, body) = send(&server, "POST", rbac, alice.as_deref(), Some(binding)).await;
    assert_eq!(code, 403, "{body}");
    server.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_that_creates_needs_create_not_only_patch() {
    // bob may patch and read configmaps in team, and not create them.
    let mut p = policy();
    p.cluster_roles.push(ClusterRole {
        metadata: meta("", "configmap-patcher"),
        rules: Some(vec![rule(&["get", "patch"], &[""], &["configmaps"])]),
        ..ClusterRole::default()
    });
    p.role_bindings.push(RoleBinding {
        metadata: meta("team", "bob-patches"),
        role_ref: role_ref("ClusterRole", "configmap-patcher"),
        subjects: Some(vec![subject("User", "bob")]),
    });
    let server = start(ServeConfig {
        policy: Some(Arc::new(StaticPolicy::new(p))),
        ..rbac_config("apply-create")
    })
    .await;
    create_namespaces_as_admin(&server).await;
    let bob = bearer(BOB);
    let bob = bob.as_deref();
    let cm = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}});
    let path = "/api/v1/namespaces/team/configmaps";
    let (code, body) = send(&server, "POST", path, bob, Some(cm("posted"))).await;
    assert_eq!(code, 403, "{body}");
    for dry_run in ["", "&dryRun=All"] {
        let (code, body) = send_typed(
            &server,
            "PATCH",
            &format!("{path}/applied?fieldManager=bob{dry_run}"),
            bob,
            "application/apply-patch+yaml",
            Some(cm("applied")),
        )
        .await;
        assert_eq!(
            code, 403,
            "an apply that would create is a create ({dry_run}): {body}"
        );
        assert_eq!(
            body["message"],
            r#"configmaps "applied" is forbidden: User "bob" cannot create resource "configmaps" in API group "" in the namespace "team""#
        );
    }
    let (code, body) = send(
        &server,
        "GET",
        &format!("{path}/applied"),
        bearer(ADMIN).as_deref(),
        None,
    )
    .await;
    assert_eq!(code, 404, "nothing was created: {body}");
    // Once the object exists, bob's apply is a patch, and his to make.
    let (code, body) = send(
        &server,
        "POST",
        path,
        bearer(ADMIN).as_deref(),
        Some(cm("applied")),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let mut changed = cm("applied");
    changed["data"]["a"] = json!("c");
    let (code, body) = send_typed(
        &server,
        "PATCH",
        &format!("{path}/applied?fieldManager=bob&force=true"),
        bob,
        "application/apply-patch+yaml",
        Some(changed),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["data"]["a"], "c", "{body}");
    server.shutdown().await.expect("a clean shutdown");
}
