//! Where an implementer serving a kind of their own starts: one declaration of the kind, a
//! store of your own under the server (a [`Source`] the caches follow, plus the [`Writes`]),
//! and the server as a library, serving the built-in kinds and yours over HTTP with
//! discovery, Tables, field selectors and watches. What the server does to a kind's writes is
//! declared with it too: here, a conversion of what is written and a graceful deletion (as a
//! Pod's is).
//!
//! The store here wraps the embedded one and counts the writes it takes: put your own
//! storage behind the same two traits. Run: `cargo run -p watchcache-server --example
//! own_kind` (`cargo test --workspace` runs it too).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use serde_json::{Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use watchcache_api::printers::{self, Printer};
use watchcache_api::{DeletionRule, KindSpec, Registry};
use watchcache_core::{MemorySource, Revision, Source, SourceError, SourceItem, SourceList};
use watchcache_server::store::backend::Writes;
use watchcache_server::{Backend, ServeConfig, Server};

/// A store of your own: here, the embedded store and a count of the writes it took.
#[derive(Clone)]
struct CountingStore {
    inner: MemorySource,
    writes: Arc<AtomicU64>,
}

impl Source for CountingStore {
    type Watch = <MemorySource as Source>::Watch;

    async fn list(&self, prefix: &str, at: Option<Revision>) -> Result<SourceList, SourceError> {
        self.inner.list(prefix, at).await
    }

    async fn watch(&self, prefix: &str, from: Revision) -> Result<Self::Watch, SourceError> {
        self.inner.watch(prefix, from).await
    }

    async fn current_revision(&self) -> Result<Revision, SourceError> {
        self.inner.current_revision().await
    }

    async fn request_progress(&self, prefix: &str) -> Result<(), SourceError> {
        Source::request_progress(&self.inner, prefix).await
    }

    async fn read(&self, key: &str) -> Result<(Option<SourceItem>, Revision), SourceError> {
        self.inner.read(key).await
    }

    async fn signing_key(&self) -> Result<[u8; 16], SourceError> {
        self.inner.signing_key().await
    }
}

impl Writes for CountingStore {
    async fn get(&self, key: &str) -> Result<Option<(Bytes, Revision)>, SourceError> {
        Ok(self.inner.get(key))
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<Revision, SourceError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.inner.create(key, value)
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> Result<Revision, SourceError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.inner.update(key, value, expected)
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(Revision, Bytes), SourceError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.inner.delete(key, expected)
    }
}

/// The kind: `widgets.example.com/v1`, namespaced, with a `/status`, a field selector on its
/// color and its own Table columns. Stored under `/registry/example.com/widgets/`. A color is
/// written lowercase whatever the client sent, and a DELETE is graceful: it marks the widget
/// with a deletion timestamp 30 s ahead (or the grace period the request asks for), for its
/// controller to finish, and a DELETE with a grace period of 0 deletes it (as a kubelet
/// deletes a pod it stopped).
fn widgets() -> KindSpec {
    KindSpec::new("example.com", "v1", "Widget", "widgets")
        .short_names(&["wg"])
        .categories(&["all"])
        .status()
        .fields(&["spec.color"])
        .on_write(lowercase_color)
        .deletion(DeletionRule::Graceful(|_, requested| requested.unwrap_or(30)))
        .printer(Printer::of(vec![
            printers::name(),
            printers::path_col("Color", "string", "", 0, "The widget's color.", "spec.color"),
            printers::path_col("Size", "integer", "", 0, "The widget's size.", "spec.size"),
            printers::age(),
        ]))
}

/// A widget's color as it is stored: lowercase.
fn lowercase_color(widget: &mut Map<String, Value>) {
    if let Some(Value::String(color)) = widget.get_mut("spec").and_then(|s| s.get_mut("color")) {
        *color = color.to_lowercase();
    }
}

/// One HTTP/1.1 request to `server`, its answer whole (the server closes the connection).
async fn http(server: &Server, method: &str, path: &str, accept: &str, body: &str) -> String {
    let mut conn = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connects");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: example\r\nAccept: {accept}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await.expect("sends");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).await.expect("reads");
    answer
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let store = CountingStore {
        inner: MemorySource::new(),
        writes: Arc::default(),
    };
    let mut registry = Registry::builtin();
    registry.add(widgets()).expect("widgets are a kind of their own");
    let config = ServeConfig {
        addr: "127.0.0.1:0".parse().expect("an address"),
        ..ServeConfig::default()
    };
    let server = Server::start_with_registry(config, Backend::custom(store.clone()), registry)
        .await
        .expect("the server starts");

    // Discovery names the kind, and objects of it are written, read, selected and printed.
    let discovery = http(&server, "GET", "/apis/example.com/v1", "application/json", "").await;
    println!("{}", discovery.lines().last().unwrap_or_default());
    assert!(discovery.contains(r#""name":"widgets""#), "{discovery}");
    let path = "/apis/example.com/v1/namespaces/default/widgets";
    for (name, color, size) in [("small", "Blue", 1), ("large", "red", 9)] {
        let widget = format!(
            r#"{{"apiVersion":"example.com/v1","kind":"Widget","metadata":{{"name":"{name}"}},"spec":{{"color":"{color}","size":{size}}}}}"#
        );
        let created = http(&server, "POST", path, "application/json", &widget).await;
        assert!(created.starts_with("HTTP/1.1 201"), "{created}");
    }
    let blue = http(
        &server,
        "GET",
        &format!("{path}?fieldSelector=spec.color%3Dblue"),
        "application/json",
        "",
    )
    .await;
    assert!(
        blue.contains(r#""name":"small""#) && !blue.contains(r#""name":"large""#),
        "{blue}"
    );
    let table = http(
        &server,
        "GET",
        path,
        "application/json;as=Table;v=v1;g=meta.k8s.io",
        "",
    )
    .await;
    println!("{}", table.lines().last().unwrap_or_default());
    assert!(table.contains(r#""cells":["large","red",9,"#), "{table}");

    // A DELETE marks the widget with its grace period, as declared; one with a period of 0
    // deletes it.
    let marked = http(
        &server,
        "DELETE",
        &format!("{path}/small"),
        "application/json",
        "",
    )
    .await;
    assert!(marked.starts_with("HTTP/1.1 200"), "{marked}");
    assert!(
        marked.contains(r#""deletionGracePeriodSeconds":30"#) && marked.contains("deletionTimestamp"),
        "{marked}"
    );
    let gone = http(
        &server,
        "DELETE",
        &format!("{path}/small?gracePeriodSeconds=0"),
        "application/json",
        "",
    )
    .await;
    assert!(gone.starts_with("HTTP/1.1 200"), "{gone}");
    let missing = http(&server, "GET", &format!("{path}/small"), "application/json", "").await;
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    let writes = store.writes.load(Ordering::Relaxed);
    println!("the store took {writes} writes");
    assert!(writes >= 2);
    server.shutdown().await.expect("the server stops");
}

#[test]
fn the_example_runs_and_sees_what_it_prints() {
    main();
}
