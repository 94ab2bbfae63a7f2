//! The cost of a label PATCH (`kubectl label`: a merge patch of `metadata.labels`) of a config
//! map whose `metadata.finalizers` holds N entries, for N doubling up to near the stored object
//! size limit, through `watchcache serve` in this process over loopback.
//!
//! Each PATCH reads the object, patches it, brings `managedFields` up to date (every finalizer
//! is a field the creator owns), checks and stores it: work that should grow with N, not N².
//! The runner prints the median time per PATCH at each N and, between rows, the factor per
//! doubling of N: about 2 is linear, about 4 quadratic.

use std::time::{Duration, Instant};

use serde_json::json;
use watchcache_tests::{config, create_namespaces, http, request, request_typed, start};

/// What to run.
#[derive(Clone, Debug)]
pub struct Params {
    /// Finalizer counts, one row each.
    pub lengths: Vec<usize>,
    /// Label PATCHes timed at each length (the median is reported).
    pub patches: usize,
}

/// One length's figures.
#[derive(Clone, Debug)]
pub struct Row {
    /// Finalizers in the object.
    pub length: usize,
    /// The object's size as stored (JSON, `managedFields` included).
    pub object_bytes: usize,
    /// The median time of one label PATCH, client to client.
    pub median: Duration,
    /// The fastest.
    pub min: Duration,
}

/// Runs every length in turn on one server; `progress` is told after each PATCH.
pub fn run(p: &Params, progress: &(dyn Fn(u64) + Sync)) -> Result<Vec<Row>, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let server = start(config(0)).await;
        create_namespaces(&server, &["bench"]).await;
        let c = http();
        let mut rows = Vec::new();
        let mut done = 0u64;
        for (n, &length) in p.lengths.iter().enumerate() {
            let finalizers: Vec<String> = (0..length).map(|i| format!("f{i}")).collect();
            let name = format!("held-{n}");
            let body = json!({"metadata": {"name": name, "finalizers": finalizers}, "data": {"k": "v"}});
            let cms = "/api/v1/namespaces/bench/configmaps";
            let (code, out) = request(
                &c,
                &server,
                "POST",
                &format!("{cms}?fieldManager=creator"),
                Some(body),
            )
            .await;
            if code != 201 {
                return Err(format!(
                    "creating {length} finalizers: {code} {}",
                    String::from_utf8_lossy(&out[..out.len().min(300)])
                ));
            }
            let path = format!("{cms}/{name}?fieldManager=labeller");
            let mut times = Vec::with_capacity(p.patches);
            let mut object_bytes = 0;
            for i in 0..p.patches {
                let patch = json!({"metadata": {"labels": {"tier": format!("v{i}")}}}).to_string();
                let started = Instant::now();
                let (code, out) =
                    request_typed(&c, &server, "PATCH", &path, "application/merge-patch+json", patch).await;
                times.push(started.elapsed());
                if code != 200 {
                    return Err(format!("a label PATCH of {length} finalizers: {code} {out}"));
                }
                object_bytes = out.to_string().len();
                done += 1;
                progress(done);
            }
            times.sort();
            rows.push(Row {
                length,
                object_bytes,
                median: times[times.len() / 2],
                min: times[0],
            });
        }
        server.shutdown().await.map_err(|e| e.to_string())?;
        Ok(rows)
    })
}

/// The factor by which the time grows per doubling of the length between two rows: the time
/// ratio brought to a length ratio of 2 (`(t2/t1)^(ln 2 / ln(n2/n1))`).
pub fn per_doubling(a: &Row, b: &Row) -> f64 {
    let time = b.median.as_secs_f64() / a.median.as_secs_f64().max(1e-12);
    let length = b.length as f64 / a.length.max(1) as f64;
    time.powf(std::f64::consts::LN_2 / length.ln())
}
