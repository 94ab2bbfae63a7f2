//! Helpers shared by the core integration tests.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use watchcache_core::{Expired, ObjectKey, ObjectVersion, Revision, WatchEvent, Watcher};

/// Ring sizes every behaviour is checked at: tiny (wrap-around on every other event), mid, large.
pub const SIZES: [usize; 3] = if cfg!(miri) { [2, 8, 16] } else { [2, 64, 4096] };

pub fn pod(ns: &str, name: &str, rev: u64, app: &str, node: &str) -> Arc<ObjectVersion> {
    Arc::new(
        ObjectVersion::builder(ObjectKey::new(ns, name), Revision::new(rev))
            .label("app", app)
            .field("spec.nodeName", node)
            .build(),
    )
}

/// A waker that counts how often it was woken.
#[derive(Default)]
pub struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl CountingWaker {
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A watcher polled by hand with its own counting waker.
pub struct Probe {
    pub watcher: Watcher,
    pub waker: Arc<CountingWaker>,
}

impl Probe {
    pub fn new(watcher: Watcher) -> Self {
        Probe {
            watcher,
            waker: Arc::new(CountingWaker::default()),
        }
    }

    pub fn poll(&mut self) -> Poll<Option<Result<WatchEvent, Expired>>> {
        let waker = Waker::from(Arc::clone(&self.waker));
        let mut cx = Context::from_waker(&waker);
        self.watcher.poll_next_with(&mut cx, |d| d.to_owned())
    }

    /// Everything ready now, stopping at `Pending` or the end.
    pub fn drain(&mut self) -> Vec<Result<WatchEvent, Expired>> {
        let mut out = Vec::new();
        while let Poll::Ready(Some(item)) = self.poll() {
            out.push(item);
        }
        out
    }

    pub fn woken(&self) -> usize {
        self.waker.count()
    }
}

/// `(type, stamped revision, object revision, name)` of an event, for compact assertions.
pub fn summary(e: &WatchEvent) -> (&'static str, u64, u64, String) {
    (
        e.kind.as_str(),
        e.revision.get(),
        e.object.as_ref().map_or(0, |o| o.revision().get()),
        e.object
            .as_ref()
            .map_or(String::new(), |o| o.key().name().to_owned()),
    )
}

/// [`TextCodec`] with a bug: it panics on values that start with `ns/boom` (all of them, or
/// only the first), as a codec bug would. The reflector's supervisor survives it.
pub struct PanicsOnBoom {
    once: bool,
    fired: std::sync::atomic::AtomicBool,
}

impl PanicsOnBoom {
    /// Panics on every such value.
    pub fn always() -> Self {
        PanicsOnBoom {
            once: false,
            fired: Default::default(),
        }
    }

    /// Panics on the first such value only.
    pub fn once() -> Self {
        PanicsOnBoom {
            once: true,
            fired: Default::default(),
        }
    }
}

impl watchcache_core::Codec for PanicsOnBoom {
    fn decode(&self, raw: &[u8], revision: Revision) -> Result<ObjectVersion, watchcache_core::CodecError> {
        if raw.starts_with(b"ns/boom") && !(self.once && self.fired.swap(true, Ordering::Relaxed)) {
            panic!("a codec bug");
        }
        TextCodec.decode(raw, revision)
    }

    fn encode(
        &self,
        v: &ObjectVersion,
        f: watchcache_core::WireFormat,
    ) -> Result<watchcache_core::Encoding, watchcache_core::CodecError> {
        TextCodec.encode(v, f)
    }
}

/// A toy codec for cache tests: the value is `ns/name;k=v,k=v;node` (ns empty for
/// cluster-scoped objects; labels and node optional).
pub struct TextCodec;

impl watchcache_core::Codec for TextCodec {
    fn decode(&self, raw: &[u8], revision: Revision) -> Result<ObjectVersion, watchcache_core::CodecError> {
        use watchcache_core::CodecError;
        let text = std::str::from_utf8(raw).map_err(|e| CodecError::Decode(e.to_string()))?;
        let mut parts = text.split(';');
        let id = parts.next().unwrap_or_default();
        let (ns, name) = id
            .split_once('/')
            .ok_or_else(|| CodecError::Decode(format!("no key in {text:?}")))?;
        if name.is_empty() {
            return Err(CodecError::MissingName);
        }
        let mut b = ObjectVersion::builder(ObjectKey::new(ns, name), revision);
        for label in parts
            .next()
            .unwrap_or_default()
            .split(',')
            .filter(|l| !l.is_empty())
        {
            let (k, v) = label
                .split_once('=')
                .ok_or_else(|| CodecError::Decode(format!("bad label {label:?}")))?;
            b = b.label(k, v);
        }
        if let Some(node) = parts.next() {
            b = b.field("spec.nodeName", node);
        }
        Ok(b.build())
    }

    fn encode(
        &self,
        _: &ObjectVersion,
        format: watchcache_core::WireFormat,
    ) -> Result<watchcache_core::Encoding, watchcache_core::CodecError> {
        Err(watchcache_core::CodecError::UnsupportedFormat(format))
    }
}

/// The value [`TextCodec`] decodes into a pod `ns/name` with label `app` and node.
pub fn text_pod(ns: &str, name: &str, app: &str, node: &str) -> bytes::Bytes {
    bytes::Bytes::from(format!("{ns}/{name};app={app};{node}"))
}
