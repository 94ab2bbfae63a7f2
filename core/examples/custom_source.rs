//! Where an apiserver implementer starts: your own store behind [`Source`], a cache over it, a
//! watch with a label selector, and a LIST streamed item by item. Objects here are JSON
//! `{"metadata":{"namespace","name","labels"}}`. Run: `cargo run -p watchcache-core --example
//! custom_source` (`cargo test --workspace` runs it too).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::stream::{self, BoxStream, StreamExt};
use tokio::sync::broadcast;
use watchcache_core::*;

/// A plain map of keys to values (and mod revisions), a log for replays and a channel for live
/// changes. A handle: clones share the store.
#[derive(Clone)]
struct MapSource(Arc<(Mutex<Data>, broadcast::Sender<SourceEvent>)>);

#[derive(Default)]
struct Data(Revision, BTreeMap<String, (Bytes, Revision)>, Vec<SourceEvent>);

impl MapSource {
    fn put(&self, key: &str, value: &str) {
        let Data(rev, map, log) = &mut *self.0.0.lock().unwrap();
        *rev = Revision::new(rev.get() + 1);
        let (key, value) = (key.to_owned(), Bytes::from(value.to_owned()));
        let prev = map
            .insert(key.clone(), (value.clone(), *rev))
            .map(|(value, mod_revision)| PrevValue { value, mod_revision });
        // One change per revision here; a store whose writes change several keys at once
        // (a transaction) yields them in one `Changes`.
        let created = prev.is_none();
        let event = SourceEvent::single(
            *rev,
            SourceChange::Put {
                key,
                value,
                prev,
                created,
            },
        );
        log.push(event.clone());
        let _ = self.0.1.send(event); // under the lock: a watch sees each change once
    }
}

impl Source for MapSource {
    type Watch = BoxStream<'static, Result<SourceEvent, SourceError>>;

    async fn list(&self, prefix: &str, _at: Option<Revision>) -> Result<SourceList, SourceError> {
        let Data(rev, map, _) = &*self.0.0.lock().unwrap();
        let items = map
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix));
        let items = items.map(|(k, (v, r))| SourceItem {
            key: k.clone(),
            value: v.clone(),
            mod_revision: *r,
        });
        Ok(SourceList {
            items: items.collect(),
            revision: *rev,
        })
    }

    async fn watch(&self, prefix: &str, from: Revision) -> Result<Self::Watch, SourceError> {
        let Data(_, _, log) = &*self.0.0.lock().unwrap();
        let since = |e: &&SourceEvent| e.revision() >= from;
        let replay: Vec<_> = log.iter().filter(since).cloned().map(Ok).collect();
        let live = stream::unfold(self.0.1.subscribe(), |mut rx| async move {
            Some((
                rx.recv()
                    .await
                    .map_err(|e| SourceError::Unavailable(e.to_string())),
                rx,
            ))
        });
        let prefix = prefix.to_owned();
        let under = move |e: &Result<SourceEvent, _>| {
            std::future::ready(!matches!(e, Ok(SourceEvent::Changes { changes, .. })
                if changes.iter().all(|c| !c.key().starts_with(&prefix))))
        };
        Ok(stream::iter(replay).chain(live).filter(under).boxed())
    }

    async fn current_revision(&self) -> Result<Revision, SourceError> {
        Ok(self.0.0.lock().unwrap().0)
    }

    async fn request_progress(&self, _prefix: &str) -> Result<(), SourceError> {
        Ok(()) // every change is an event here, so the cache is never behind for long
    }

    async fn signing_key(&self) -> Result<[u8; 16], SourceError> {
        // A real store makes a random key once and keeps it with its data, so continue tokens
        // verify on every replica and after restarts.
        Ok(*b"not-a-secret-key")
    }
}

/// Decodes the JSON objects above; their JSON encoding is the stored bytes.
struct Json;

impl Codec for Json {
    fn decode(&self, raw: &[u8], revision: Revision) -> Result<ObjectVersion, CodecError> {
        let v: serde_json::Value =
            serde_json::from_slice(raw).map_err(|e| CodecError::Decode(e.to_string()))?;
        let meta = &v["metadata"];
        let (ns, name) = (meta["namespace"].as_str().unwrap_or(""), meta["name"].as_str());
        let key = ObjectKey::new(ns, name.ok_or(CodecError::MissingName)?);
        let labels = meta["labels"].as_object().into_iter().flatten();
        let labels = labels.map(|(k, v)| (k.as_str(), v.as_str().unwrap_or("")));
        let json = Encoding::new(Bytes::copy_from_slice(raw));
        Ok(ObjectVersion::builder(key, revision)
            .labels(labels)
            .encoding(WireFormat::Json, json)
            .build())
    }

    fn encode(&self, _: &ObjectVersion, format: WireFormat) -> Result<Encoding, CodecError> {
        Err(CodecError::UnsupportedFormat(format)) // JSON is made at decode; nothing else is offered
    }
}

fn pod(name: &str, app: &str) -> String {
    format!(r#"{{"metadata":{{"namespace":"default","name":"{name}","labels":{{"app":"{app}"}}}}}}"#)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let source = MapSource(Arc::new((Mutex::default(), broadcast::channel(1024).0)));
    source.put("pods/default/web-0", &pod("web-0", "web"));
    let cache = Cache::new(source.clone(), Arc::new(Json), CacheConfig::new("pods", "pods/"))?;

    // A watch of app=web from the current state: ADDED web-0, then live changes.
    let filter = Filter::parse(None, "app=web", "")?;
    let mut watch = cache
        .watch(WatchOptions {
            filter,
            ..Default::default()
        })
        .await?;
    source.put("pods/default/db-0", &pod("db-0", "db")); // not selected: never delivered
    source.put("pods/default/web-1", &pod("web-1", "web"));
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let e = watch.next().await.ok_or("the watch ended")??;
        let name = e
            .object
            .as_ref()
            .map(|o| o.key().name().to_owned())
            .unwrap_or_default();
        println!("{} {name} at {}", e.kind.as_str(), e.revision);
        seen.push(name);
    }
    assert_eq!(seen, ["web-0", "web-1"]);

    // A consistent LIST, written out item by item from the shared bytes: nothing is collected.
    let list = cache.list(&ListOptions::default()).await?;
    let mut out = std::io::stdout().lock();
    write!(
        out,
        r#"{{"metadata":{{"resourceVersion":"{}"}},"items":["#,
        list.revision
    )?;
    let (mut items, mut n) = (list.items, 0);
    items.lend_while(|o| {
        let bytes = o.encoded(WireFormat::Json).map_or(&b"null"[..], |e| e.bytes());
        n += 1;
        out.write_all(if n > 1 { b"," } else { b"" })
            .and_then(|()| out.write_all(bytes))
            .is_ok()
    });
    writeln!(out, "]}}")?;
    assert_eq!(n, 3);
    Ok(())
}

#[test]
fn the_example_runs_and_sees_what_it_prints() {
    main().expect("the example runs");
}
