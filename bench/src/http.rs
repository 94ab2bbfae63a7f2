//! End to end: `watchcache serve` in its own process, `W` streaming watch clients of all
//! pods over loopback, the server's own churn writing pods, for a bounded time, on each
//! transport (HTTP/1.1 or HTTP/2, plaintext or TLS; see [`crate::wire`], which runs it).
//!
//! Each churned pod carries the time it was written (annotation
//! `watchcache.dev/written-at-us`, set by the server's workload generator); a sampled client
//! subtracts it from its clock on receipt, so latency covers store, cache, encoding, HTTP and
//! the client's own scheduling. Client and server share the machine's two cores, so the
//! clients are made cheap: most only count the frames they receive in the window (a newline
//! count per chunk); one in `watchers / 64` parses each frame for its write time. This module
//! also holds the plaintext HTTP/1.1 helpers the other end-to-end scenarios use.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use tokio::net::TcpStream;

use crate::kubelets::transport_fields;
use crate::report::{quantile, round3};
use crate::wire::{Outcome, Plan, Transport, Watch, connections};

/// Kills the server when dropped, whatever happens.
pub(crate) struct ServerProcess(pub(crate) Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A GET of `path` on a fresh connection, up to its response's head: the sender (which keeps
/// the connection open) and the response, whose body streams.
pub(crate) async fn open(
    addr: SocketAddr,
    path: &str,
) -> Result<
    (
        http1::SendRequest<Empty<Bytes>>,
        hyper::Response<hyper::body::Incoming>,
    ),
    String,
> {
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = http::Request::get(path)
        .header("host", addr.to_string())
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    Ok((sender, resp))
}

/// One GET on a fresh connection: the status and the whole body.
pub(crate) async fn get(addr: SocketAddr, path: &str) -> Result<(u16, Bytes), String> {
    let (_sender, resp) = open(addr, path).await?;
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.map_err(|e| e.to_string())?;
    Ok((code, body.to_bytes()))
}

/// The clients' runtime: two workers, as the server has.
pub(crate) fn clients_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

/// What every watch client asks for: the pods, from the revision current when it opens (as an
/// informer's watch starts from its own fresh LIST), with no initial events.
const WATCH_PATH: &str =
    "/api/v1/pods?watch=1&resourceVersion=0&sendInitialEvents=false&resourceVersionMatch=NotOlderThan";

/// `watchers` watches of all pods, `per_connection` to a connection on HTTP/2; one in
/// `watchers / 64` parses its frames.
pub fn plan(watchers: usize, per_connection: usize, transport: Transport) -> Plan {
    let sample_every = watchers.div_ceil(64).max(1);
    let all: Vec<Watch> = (0..watchers)
        .map(|i| Watch {
            path: WATCH_PATH.to_owned(),
            kind: 0,
            sampled: i % sample_every == 0,
        })
        .collect();
    let groups = all.chunks(per_connection.max(1)).map(<[Watch]>::to_vec).collect();
    Plan {
        kinds: vec!["pods"],
        connections: connections(groups, transport),
    }
}

/// The row of one transport's run.
pub fn row(transport: Transport, watchers: usize, churn: f64, out: &mut Outcome) -> Value {
    let k = &mut out.kinds[0];
    let secs = out.elapsed.as_secs_f64().max(1e-9);
    let mut row = Map::new();
    row.insert("design".into(), json!(transport.name()));
    row.insert("watchers".into(), json!(watchers));
    row.insert(
        "expected_deliveries_per_sec".into(),
        json!(round3(churn * watchers as f64)),
    );
    row.insert(
        "written_in_window_per_watcher".into(),
        json!(k.max_written_in_window),
    );
    row.insert("failed_watchers".into(), json!(k.failed));
    // Every watcher receives every event: against what the sampled clients saw written in
    // the window (the churn's actual rate, rather than its nominal one).
    if k.max_written_in_window > 0 {
        let per_watcher = k.deliveries as f64 / watchers as f64;
        row.insert(
            "delivered_vs_written".into(),
            json!(round3(per_watcher / k.max_written_in_window as f64)),
        );
    }
    for (field, q) in [
        ("p50_latency_us", 0.5),
        ("p99_latency_us", 0.99),
        ("p999_latency_us", 0.999),
    ] {
        if let Some(v) = quantile(&mut k.latencies_us, q) {
            row.insert(field.into(), json!(v));
        }
    }
    row.insert("latency_samples".into(), json!(k.latencies_us.len()));
    let delivered = k.deliveries;
    row.insert(
        "pods_written_per_sec".into(),
        json!(round3(k.max_written_in_window as f64 / secs)),
    );
    transport_fields(out, delivered, &mut row);
    Value::Object(row)
}

/// Starts `binary serve` on a free loopback port with `args` and `env` added; the server is
/// killed when the returned guard drops.
pub(crate) fn start_server(
    binary: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<(ServerProcess, SocketAddr), String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free loopback port: {e}"))?
        .port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    Ok((start_server_at(binary, addr, args, env)?, addr))
}

/// `binary serve` on `addr` (a restarted server, on the port its clients know).
pub(crate) fn start_server_at(
    binary: &Path,
    addr: SocketAddr,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<ServerProcess, String> {
    let child = Command::new(binary)
        .args(["serve", "--addr", &addr.to_string()])
        .args(args)
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    Ok(ServerProcess(child))
}

/// Waits (up to 60 s) until the server at `addr` answers `/readyz`.
pub(crate) async fn wait_ready(addr: SocketAddr, binary: &Path) -> Result<(), String> {
    let ready_by = Instant::now() + Duration::from_secs(60);
    while !matches!(get(addr, "/readyz").await, Ok((200, _))) {
        if Instant::now() > ready_by {
            return Err(format!(
                "the server did not become ready in 60 s (run {} serve by hand to see why)",
                binary.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}
