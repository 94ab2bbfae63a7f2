//! The cost of authorization: the same GET of one ConfigMap and LIST of a small namespace,
//! sequential on one keep-alive HTTP/1.1 connection, against three servers started in this
//! process on loopback:
//!
//! - `anonymous`: `AlwaysAllow`, no credentials (authentication finds the anonymous user,
//!   authorization asks nothing);
//! - `rbac-cached`: RBAC, a bearer token user allowed by a RoleBinding, the decision cache warm
//!   (each request's attributes were decided before, under the same policy version);
//! - `rbac-uncached`: the same, but the policy's version moves before every request (the
//!   client replaces the server's `StaticPolicy` with an identical one), so each request pays
//!   what the first request after any RBAC change pays: the policy indexed again and the
//!   decision made from the rules. A distinct object name per request would defeat the cache
//!   too, but would time the decision alone on a 404's path, not the same request.
//!
//! The policy is the RoleBinding and its ClusterRole among `filler` other RoleBindings and
//! ClusterRoleBindings to other users, so that indexing has a cluster's worth of objects.
//!
//! Rounds alternate the designs (A B C C B A …) so that drift on a shared machine (the clients
//! and servers share its cores) falls evenly on each. CPU is this process's (`/proc/self`):
//! the client and the server together, per request.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::net::TcpStream;
use watchcache_server::Server;
use watchcache_server::auth::{AuthorizationMode, Policy, StaticPolicy};

use crate::alloc::cpu_seconds;

/// The bearer token of the user the RoleBinding allows.
const TOKEN: &str = "bench-token-0123456789";
/// The token of a `system:masters` member, who seeds the namespace.
const ADMIN_TOKEN: &str = "admin-token-0123456789";
/// The namespace read.
const NAMESPACE: &str = "bench";

/// What to run.
#[derive(Clone, Debug)]
pub struct Params {
    /// Requests per design, operation and round.
    pub requests: usize,
    /// Rounds (each runs every design twice, in mirrored order).
    pub rounds: usize,
    /// ConfigMaps in the namespace (what the LIST returns).
    pub objects: usize,
    /// Other bindings in the policy.
    pub filler: usize,
}

/// One of the servers compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Design {
    /// `AlwaysAllow`, anonymous.
    Anonymous,
    /// RBAC, a token user, decisions cached.
    RbacCached,
    /// RBAC, a token user, the policy version moved before every request.
    RbacUncached,
}

impl Design {
    /// All designs, in the order of a half round.
    pub const ALL: [Design; 3] = [Design::Anonymous, Design::RbacCached, Design::RbacUncached];

    /// The design's name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Design::Anonymous => "anonymous",
            Design::RbacCached => "rbac-cached",
            Design::RbacUncached => "rbac-uncached",
        }
    }
}

/// The operations timed.
pub const OPERATIONS: [&str; 2] = ["get", "list"];

/// What one design measured for one operation.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Request latencies, nanoseconds.
    pub latencies_ns: Vec<u64>,
    /// Process CPU (clients and server) over the requests, seconds.
    pub cpu_seconds: f64,
    /// Wall time over the requests.
    pub elapsed: Duration,
    /// Answers other than 200.
    pub failed: usize,
}

fn meta(ns: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: (!ns.is_empty()).then(|| ns.to_owned()),
        ..ObjectMeta::default()
    }
}

fn user(name: &str) -> Option<Vec<Subject>> {
    Some(vec![Subject {
        kind: "User".to_owned(),
        name: name.to_owned(),
        ..Subject::default()
    }])
}

fn cluster_role_ref(name: &str) -> RoleRef {
    RoleRef {
        api_group: Some("rbac.authorization.k8s.io".to_owned()),
        kind: "ClusterRole".to_owned(),
        name: name.to_owned(),
    }
}

/// The policy: everyone may read `/readyz`; `bench` may read configmaps in the namespace;
/// `filler` other users hold bindings of their own, half in namespaces, half cluster-wide.
pub fn policy(filler: usize) -> Policy {
    let reader = ClusterRole {
        metadata: meta("", "configmap-reader"),
        rules: Some(vec![PolicyRule {
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            ..PolicyRule::default()
        }]),
        ..ClusterRole::default()
    };
    // As the bootstrap policy's system:public-info-viewer: readiness for everyone.
    let health = ClusterRole {
        metadata: meta("", "public-info-viewer"),
        rules: Some(vec![PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: Some(vec!["/healthz".into(), "/livez".into(), "/readyz".into()]),
            ..PolicyRule::default()
        }]),
        ..ClusterRole::default()
    };
    let everyone = ["system:authenticated", "system:unauthenticated"].map(|g| Subject {
        kind: "Group".to_owned(),
        name: g.to_owned(),
        ..Subject::default()
    });
    let mut p = Policy {
        cluster_roles: vec![reader, health],
        cluster_role_bindings: vec![ClusterRoleBinding {
            metadata: meta("", "public-info-viewer"),
            role_ref: cluster_role_ref("public-info-viewer"),
            subjects: Some(everyone.to_vec()),
        }],
        role_bindings: vec![RoleBinding {
            metadata: meta(NAMESPACE, "bench-reads"),
            role_ref: cluster_role_ref("configmap-reader"),
            subjects: user("bench"),
        }],
        ..Policy::default()
    };
    for i in 0..filler {
        if i % 2 == 0 {
            p.role_bindings.push(RoleBinding {
                metadata: meta(&format!("ns-{}", i % 50), &format!("filler-{i}")),
                role_ref: cluster_role_ref("configmap-reader"),
                subjects: user(&format!("user-{i}")),
            });
        } else {
            p.cluster_role_bindings.push(ClusterRoleBinding {
                metadata: meta("", &format!("filler-{i}")),
                role_ref: cluster_role_ref("configmap-reader"),
                subjects: user(&format!("user-{i}")),
            });
        }
    }
    p
}

/// A started server of `design`, and the policy it decides on (RBAC designs).
struct Target {
    design: Design,
    server: Server,
    policy: Option<(Arc<StaticPolicy>, Policy)>,
    sender: http1::SendRequest<Full<Bytes>>,
}

fn token_file() -> Result<PathBuf, String> {
    let path = std::env::temp_dir().join(format!("watchcache-bench-authz-{}.csv", std::process::id()));
    std::fs::write(
        &path,
        format!("{TOKEN},bench,2000\n{ADMIN_TOKEN},admin,2001,system:masters\n"),
    )
    .map_err(|e| format!("the token file: {e}"))?;
    Ok(path)
}

async fn connect(addr: SocketAddr) -> Result<http1::SendRequest<Full<Bytes>>, String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(sender)
}

/// One request on `sender`, its body read whole: the status.
async fn send(
    sender: &mut http1::SendRequest<Full<Bytes>>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<String>,
) -> Result<u16, String> {
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| e.to_string())?;
    sender.ready().await.map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let code = resp.status().as_u16();
    resp.into_body().collect().await.map_err(|e| e.to_string())?;
    Ok(code)
}

impl Target {
    async fn start(design: Design, p: &Params, tokens: &std::path::Path) -> Result<Target, String> {
        let mut config = watchcache_tests::config(0);
        config.token_auth_file = Some(tokens.to_owned());
        let policy = match design {
            Design::Anonymous => None,
            Design::RbacCached | Design::RbacUncached => {
                let whole = policy(p.filler);
                let source = Arc::new(StaticPolicy::new(whole.clone()));
                config.authorization_mode = AuthorizationMode::Rbac;
                config.policy = Some(source.clone());
                Some((source, whole))
            }
        };
        let server = watchcache_tests::start(config).await;
        let addr = server.addr();
        let mut sender = connect(addr).await?;
        let admin = Some(ADMIN_TOKEN);
        let ns = format!(r#"{{"metadata":{{"name":"{NAMESPACE}"}}}}"#);
        let code = send(&mut sender, addr, "POST", "/api/v1/namespaces", admin, Some(ns)).await?;
        if code != 201 {
            return Err(format!(
                "{}: creating the namespace answered {code}",
                design.name()
            ));
        }
        for i in 0..p.objects {
            let cm = format!(r#"{{"metadata":{{"name":"cm-{i}"}},"data":{{"key":"value {i}"}}}}"#);
            let path = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");
            let code = send(&mut sender, addr, "POST", &path, admin, Some(cm)).await?;
            if code != 201 {
                return Err(format!("{}: creating a configmap answered {code}", design.name()));
            }
        }
        // The reads follow the store through the caches: wait until the list is whole.
        let deadline = Instant::now() + Duration::from_secs(10);
        let list = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");
        while Instant::now() < deadline {
            let path = format!("{list}/cm-{}", p.objects.saturating_sub(1));
            if send(&mut sender, addr, "GET", &path, admin, None).await? == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(Target {
            design,
            server,
            policy,
            sender,
        })
    }

    /// `n` sequential requests of `operation`, timed one by one.
    async fn run(&mut self, operation: &str, n: usize, out: &mut Outcome) -> Result<(), String> {
        let addr = self.server.addr();
        let path = match operation {
            "get" => format!("/api/v1/namespaces/{NAMESPACE}/configmaps/cm-0"),
            _ => format!("/api/v1/namespaces/{NAMESPACE}/configmaps"),
        };
        let token = (self.design != Design::Anonymous).then_some(TOKEN);
        let cpu0 = cpu_seconds(std::process::id()).unwrap_or(0.0);
        let started = Instant::now();
        for _ in 0..n {
            if self.design == Design::RbacUncached
                && let Some((source, whole)) = &self.policy
            {
                // The same policy at the next version: what any RBAC write does.
                source.set(whole.clone());
            }
            let t = Instant::now();
            let code = send(&mut self.sender, addr, "GET", &path, token, None).await?;
            out.latencies_ns.push(t.elapsed().as_nanos() as u64);
            if code != 200 {
                out.failed += 1;
            }
        }
        out.elapsed += started.elapsed();
        out.cpu_seconds += cpu_seconds(std::process::id()).unwrap_or(0.0) - cpu0;
        Ok(())
    }
}

/// Runs every design and operation: the outcomes by design, then operation (as
/// [`Design::ALL`] and [`OPERATIONS`]).
pub fn run(p: &Params, progress: &dyn Fn(u64)) -> Result<Vec<Vec<Outcome>>, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let tokens = token_file()?;
        let mut targets = Vec::new();
        for design in Design::ALL {
            targets.push(Target::start(design, p, &tokens).await?);
        }
        let mut outcomes: Vec<Vec<Outcome>> = Design::ALL
            .iter()
            .map(|_| OPERATIONS.iter().map(|_| Outcome::default()).collect())
            .collect();
        // Warm-up: connections, caches, the decision cache of the cached design.
        for t in &mut targets {
            for op in OPERATIONS {
                t.run(op, p.requests.min(200), &mut Outcome::default()).await?;
            }
        }
        let mut done = 0;
        for _ in 0..p.rounds {
            let order: Vec<usize> = (0..targets.len()).chain((0..targets.len()).rev()).collect();
            for i in order {
                for (o, op) in OPERATIONS.iter().enumerate() {
                    targets[i].run(op, p.requests, &mut outcomes[i][o]).await?;
                    done += p.requests as u64;
                    progress(done);
                }
            }
        }
        for t in targets {
            t.server.shutdown().await.map_err(|e| e.to_string())?;
        }
        let _ = std::fs::remove_file(&tokens);
        Ok(outcomes)
    })
}
