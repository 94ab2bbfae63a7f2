//! The RBAC kinds over HTTP: discovered in `rbac.authorization.k8s.io/v1`, the bootstrap
//! policy there from the start, written and watched like every other kind, kept where the
//! apiserver keeps them, read as protobuf, and refused as the apiserver refuses them (a
//! binding's role reference never changes; role kinds and subject kinds are known ones).

use serde_json::{Value, json};
use watchcache_tests::{Frames, Server, config, get_raw, http, request, start};

const GROUP: &str = "/apis/rbac.authorization.k8s.io/v1";

async fn get(server: &Server, path: &str) -> Value {
    let (code, body) = request(&http(), server, "GET", path, None).await;
    assert_eq!(code, 200, "GET {path}: {}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

async fn send(server: &Server, method: &str, path: &str, body: Value) -> (u16, Value) {
    let (code, body) = request(&http(), server, method, path, Some(body)).await;
    let body = serde_json::from_slice(&body).unwrap_or_else(|_| panic!("{method} {path}: JSON"));
    (code, body)
}

fn binding(name: &str, role_kind: &str, role: &str, subjects: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": subjects})
}

#[tokio::test]
async fn the_rbac_group_is_discovered_with_its_four_kinds() {
    let server = start(config(0)).await;
    let group = get(&server, "/apis/rbac.authorization.k8s.io").await;
    assert_eq!(
        group["preferredVersion"]["groupVersion"],
        "rbac.authorization.k8s.io/v1"
    );
    let list = get(&server, GROUP).await;
    let mut served: Vec<(String, bool)> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["namespaced"].as_bool().unwrap(),
            )
        })
        .collect();
    served.sort();
    assert_eq!(
        served,
        [
            ("clusterrolebindings".to_owned(), false),
            ("clusterroles".to_owned(), false),
            ("rolebindings".to_owned(), true),
            ("roles".to_owned(), true),
        ]
    );
    let apis = get(&server, "/apis").await;
    assert!(
        apis["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "rbac.authorization.k8s.io")
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_bootstrap_policy_is_there_from_the_start() {
    let server = start(config(0)).await;
    let admin = get(&server, &format!("{GROUP}/clusterroles/cluster-admin")).await;
    assert_eq!(
        admin["metadata"]["labels"]["kubernetes.io/bootstrapping"],
        "rbac-defaults"
    );
    assert_eq!(
        admin["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"],
        "true"
    );
    assert_eq!(
        admin["rules"],
        json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}, {"verbs": ["*"], "nonResourceURLs": ["*"]}])
    );
    let masters = get(&server, &format!("{GROUP}/clusterrolebindings/cluster-admin")).await;
    assert_eq!(
        masters["subjects"],
        json!([{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:masters"}])
    );
    let public = get(
        &server,
        &format!("{GROUP}/clusterrolebindings/system:public-info-viewer"),
    )
    .await;
    let groups: Vec<&str> = public["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(groups, ["system:authenticated", "system:unauthenticated"]);
    let discovery = get(&server, &format!("{GROUP}/clusterroles/system:discovery")).await;
    let urls = discovery["rules"][0]["nonResourceURLs"].as_array().unwrap();
    for url in [
        "/api",
        "/apis/*",
        "/healthz",
        "/livez",
        "/openapi/*",
        "/readyz",
        "/version/",
    ] {
        assert!(urls.contains(&json!(url)), "{url}");
    }
    let basic = get(&server, &format!("{GROUP}/clusterroles/system:basic-user")).await;
    assert_eq!(basic["rules"][0]["apiGroups"], json!(["authorization.k8s.io"]));
    // admin, edit and view get their rules from the roles they aggregate, soon after start.
    for role in ["view", "edit", "admin"] {
        let path = format!("{GROUP}/clusterroles/{role}");
        let mut rules = Value::Null;
        for _ in 0..200 {
            rules = get(&server, &path).await["rules"].clone();
            if rules.as_array().is_some_and(|r| !r.is_empty()) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        let resources = rules.to_string();
        assert!(resources.contains("\"pods\""), "{role}: {resources}");
        assert_eq!(
            resources.contains("\"secrets\""),
            role != "view",
            "{role}: {resources}"
        );
    }
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn rbac_objects_are_written_watched_and_kept_where_the_apiserver_keeps_them() {
    let server = start(config(0)).await;
    let roles = format!("{GROUP}/namespaces/default/roles");
    let mut watch = Frames::open(&server, &format!("{roles}?watch=true")).await;
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "system:pod-reader"},
        "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]});
    let (code, created) = send(&server, "POST", &roles, role).await;
    assert_eq!(code, 201, "{created}");
    let event = watch.next().await.expect("an event");
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["metadata"]["name"], "system:pod-reader");
    let (value, _) = server
        .store()
        .get("/registry/roles/default/system:pod-reader")
        .await
        .unwrap()
        .expect("stored under /registry/roles/");
    assert!(!value.is_empty());

    // A binding's API groups are defaulted, and it is stored under /registry/rolebindings/.
    let bindings = format!("{GROUP}/namespaces/default/rolebindings");
    let b = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "b"}, "roleRef": {"kind": "Role", "name": "system:pod-reader"},
        "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "default", "namespace": "default"}]});
    let (code, created) = send(&server, "POST", &bindings, b).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
    assert_eq!(created["subjects"][0]["apiGroup"], "rbac.authorization.k8s.io");
    assert_eq!(created["subjects"][1].get("apiGroup"), None);
    assert!(
        server
            .store()
            .get("/registry/rolebindings/default/b")
            .await
            .unwrap()
            .is_some()
    );

    // Read as protobuf, as client-go's typed clients read it.
    let (code, content_type, body) = get_raw(
        &server,
        &format!("{bindings}/b"),
        "application/vnd.kubernetes.protobuf",
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        content_type.as_deref(),
        Some("application/vnd.kubernetes.protobuf")
    );
    assert!(body.starts_with(b"k8s\x00"));

    // Cluster-scoped kinds, under their own prefixes.
    let (code, _) = send(
        &server,
        "POST",
        &format!("{GROUP}/clusterroles"),
        json!({"metadata": {"name": "c"}, "rules": [{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}]}),
    )
    .await;
    assert_eq!(code, 201);
    assert!(
        server
            .store()
            .get("/registry/clusterroles/c")
            .await
            .unwrap()
            .is_some()
    );
    let mut crb = binding(
        "crb",
        "ClusterRole",
        "c",
        json!([{"kind": "Group", "name": "ops"}]),
    );
    crb["kind"] = json!("ClusterRoleBinding");
    let (code, _) = send(&server, "POST", &format!("{GROUP}/clusterrolebindings"), crb).await;
    assert_eq!(code, 201);
    assert!(
        server
            .store()
            .get("/registry/clusterrolebindings/crb")
            .await
            .unwrap()
            .is_some()
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn bad_rbac_objects_are_refused_as_the_apiserver_refuses_them() {
    let server = start(config(0)).await;
    let bindings = format!("{GROUP}/namespaces/default/rolebindings");
    let (code, _) = send(
        &server,
        "POST",
        &bindings,
        binding("b", "ClusterRole", "edit", json!([])),
    )
    .await;
    assert_eq!(code, 201);

    // The role reference never changes.
    let (code, status) = send(
        &server,
        "PUT",
        &format!("{bindings}/b"),
        binding("b", "ClusterRole", "view", json!([])),
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "RoleBinding.rbac.authorization.k8s.io \"b\" is invalid: roleRef: Invalid value: \
         rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"ClusterRole\", Name:\"view\"}: cannot change roleRef"
    );
    assert_eq!(status["details"]["causes"][0]["field"], "roleRef");

    // Only roles are bound; a ClusterRoleBinding binds ClusterRoles only.
    let (code, status) = send(&server, "POST", &bindings, binding("c", "Secret", "s", json!([]))).await;
    assert_eq!(code, 422);
    assert_eq!(status["details"]["causes"][0]["field"], "roleRef.kind");
    let mut crb = binding("crb", "Role", "r", json!([]));
    crb["kind"] = json!("ClusterRoleBinding");
    let (code, status) = send(&server, "POST", &format!("{GROUP}/clusterrolebindings"), crb).await;
    assert_eq!(code, 422);
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\""),
        "{status}"
    );

    // Subjects are Users, Groups or ServiceAccounts.
    let (code, status) = send(
        &server,
        "POST",
        &bindings,
        binding(
            "d",
            "ClusterRole",
            "view",
            json!([{"kind": "Robot", "name": "r2"}]),
        ),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(status["details"]["causes"][0]["field"], "subjects[0].kind");

    // A rule names its verbs; a Role's rules name no URLs.
    let (code, status) = send(
        &server,
        "POST",
        &format!("{GROUP}/namespaces/default/roles"),
        json!({"metadata": {"name": "r"}, "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "rules[0].nonResourceURLs"
    );

    // Names are path segments: colons are fine, slashes are not.
    let (code, status) = send(
        &server,
        "POST",
        &format!("{GROUP}/clusterroles"),
        json!({"metadata": {"name": "a%b"}, "rules": []}),
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "ClusterRole.rbac.authorization.k8s.io \"a%b\" is invalid: metadata.name: Invalid value: \"a%b\": may not contain '%'"
    );
    assert_eq!(status["details"]["group"], "rbac.authorization.k8s.io");
    let (code, _) = send(
        &server,
        "POST",
        &format!("{GROUP}/clusterroles"),
        json!({"metadata": {"name": "team:Readers"}, "rules": []}),
    )
    .await;
    assert_eq!(code, 201);
    server.shutdown().await.unwrap();
}
