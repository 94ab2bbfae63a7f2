//! The resources a server serves: for each kind of its [`Registry`], its cache over the store,
//! its codec and its watch frames.
//!
//! Everything about a kind comes from its declaration ([`KindSpec`]); this module only starts
//! what serving it takes.

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::ArcSwap;

use watchcache_api::{KindSpec, Registry};
use watchcache_core::{BuildError, Cache, CacheConfig};
use watchcache_encoders::{FrameEncoder, JsonCodec, ResourceInfo};

use crate::config::ServeConfig;
use crate::metrics::{CacheCounts, Metrics};
use crate::store::backend::Backend;

pub use watchcache_api::NameRule;

/// How one resource is described and served.
pub struct Resource {
    /// Its declaration.
    pub spec: Arc<KindSpec>,
    /// Kinds and version, as the encoders name them.
    pub info: ResourceInfo,
    /// How long an object lives after its last write (Events: `--event-ttl`), through a
    /// store lease; `None`: until it is deleted.
    pub ttl: Option<std::time::Duration>,
    /// The storage key prefix, `/registry/pods/`.
    pub prefix: String,
    /// The `resource` label of its metrics: the plural, qualified by the group outside the
    /// core group (`pods`, `deployments.apps`), as the apiserver's metrics name resources.
    pub label: Arc<str>,
    /// Decodes source values.
    pub codec: Arc<JsonCodec>,
    /// Writes watch frames.
    pub frames: FrameEncoder,
    /// The watch cache.
    pub cache: Cache<Backend>,
    /// Whether its CRD is being deleted: objects are read, updated and deleted, none made.
    pub terminating: std::sync::atomic::AtomicBool,
    /// The cache's counts, added to its label's counters (`None` once dropped).
    pub(crate) counts: Option<CacheCounts>,
    metrics: Arc<Metrics>,
}

impl Drop for Resource {
    /// What the cache counted since the last scrape, and what its last watches and catch-ups
    /// count after, is not lost with it.
    fn drop(&mut self) {
        if let Some(counts) = self.counts.take() {
            self.metrics.retire(counts);
        }
    }
}

/// The resources served, found by API version and plural.
#[derive(Clone, Default)]
pub struct Served {
    /// By plural: the resources of that name, one per group-version (`events` is in `v1` and
    /// `events.k8s.io/v1`).
    by_plural: BTreeMap<String, Vec<Arc<Resource>>>,
    /// In the registry's order.
    all: Vec<Arc<Resource>>,
}

impl Served {
    /// The resource `plural` of `api_version` (`v1`, `apps/v1`).
    pub fn get(&self, api_version: &str, plural: &str) -> Option<&Arc<Resource>> {
        self.by_plural
            .get(plural)?
            .iter()
            .find(|r| r.info.api_version == api_version)
    }

    /// The core group's resource `plural`.
    pub fn core(&self, plural: &str) -> Option<&Arc<Resource>> {
        self.get("v1", plural)
    }

    /// Every resource, in the registry's order.
    pub fn values(&self) -> std::slice::Iter<'_, Arc<Resource>> {
        self.all.iter()
    }

    /// Takes the resource `plural` of `api_version` out.
    fn remove(&mut self, api_version: &str, plural: &str) -> Option<Arc<Resource>> {
        let list = self.by_plural.get_mut(plural)?;
        let at = list.iter().position(|r| r.info.api_version == api_version)?;
        let gone = list.remove(at);
        if list.is_empty() {
            self.by_plural.remove(plural);
        }
        self.all.retain(|r| !Arc::ptr_eq(r, &gone));
        Some(gone)
    }

    fn insert(&mut self, r: Arc<Resource>) {
        self.by_plural
            .entry(r.spec.plural.clone())
            .or_default()
            .push(Arc::clone(&r));
        self.all.push(r);
    }
}

/// The resources served now: a [`Served`] read without a lock, and swapped whole when kinds
/// come or go (a CustomResourceDefinition established or deleted).
pub struct Resources(ArcSwap<Served>);

impl Resources {
    /// Serves `served`.
    pub fn new(served: Served) -> Resources {
        Resources(ArcSwap::from_pointee(served))
    }

    /// The resource `plural` of `api_version` (`v1`, `apps/v1`).
    pub fn get(&self, api_version: &str, plural: &str) -> Option<Arc<Resource>> {
        self.0.load().get(api_version, plural).cloned()
    }

    /// The core group's resource `plural`.
    pub fn core(&self, plural: &str) -> Option<Arc<Resource>> {
        self.get("v1", plural)
    }

    /// Every resource served now.
    pub fn now(&self) -> Arc<Served> {
        self.0.load_full()
    }

    /// Serves `r` too, in place of any resource of its API version and plural.
    pub(crate) fn add(&self, r: Arc<Resource>) {
        self.0.rcu(|served| {
            let mut next = Served::clone(served);
            next.remove(&r.info.api_version, &r.info.resource);
            next.insert(Arc::clone(&r));
            next
        });
    }

    /// Stops serving the resource `plural` of `api_version`.
    pub(crate) fn remove(&self, api_version: &str, plural: &str) {
        self.0.rcu(|served| {
            let mut next = Served::clone(served);
            next.remove(api_version, plural);
            next
        });
    }
}

/// The storage key prefix of the core group's `resource` (`/registry/pods/`,
/// `/registry/minions/` for nodes), as the apiserver lays out etcd.
pub fn prefix(resource: &str) -> Option<String> {
    Registry::builtin().get("v1", resource).map(|s| s.prefix())
}

/// The codec of `spec`: its namespacing, selectable fields (with what they read as when unset)
/// and protobuf message.
fn codec(spec: &KindSpec) -> JsonCodec {
    let fields: Vec<&str> = spec.fields.iter().map(|f| f.path.as_str()).collect();
    let mut codec = JsonCodec::new(spec.namespaced, &fields);
    // Stored in another version: served as this one.
    if spec.stored_as.is_some() {
        codec = codec.with_api_version(&spec.api_version());
    }
    // A custom resource reads as the apiserver reads it from etcd: pruned and defaulted by the
    // schema of the version it was written in (the storage version's, when that version is
    // gone), then pruned by the served version's.
    let (written, served) = (
        spec.strategy.version_schemas.clone(),
        spec.strategy.schema.clone(),
    );
    let storage = spec.stored_as.clone();
    if !written.is_empty() || served.is_some() {
        codec = codec.with_conversion(move |object| {
            let version = object.get("apiVersion").and_then(serde_json::Value::as_str);
            let schema = version
                .and_then(|v| written.get(v))
                .or_else(|| storage.as_ref().and_then(|v| written.get(v)));
            if let Some(s) = schema {
                s.prune(object);
                // Past their budget, defaults stop part way: the object is served with those
                // copied so far (it was stored without them).
                let _ = s.apply_defaults(object);
            }
            if let Some(s) = &served {
                s.prune(object);
            }
        });
    }
    if let Some(conversion) = spec.conversion {
        codec = codec.with_conversion(conversion.from_storage);
        if let Some(stored) = conversion
            .stored_protobuf
            .and_then(watchcache_encoders::protobuf::message_name)
        {
            codec = codec.with_stored_protobuf(stored);
        }
    }
    let codec = spec
        .fields
        .iter()
        .filter_map(|f| Some((f.path.as_str(), f.unset.as_deref()?)))
        .fold(codec, |c, (f, v)| c.with_default(f, v));
    match protobuf_message(spec) {
        Some(message) => codec.with_protobuf(message),
        None => codec,
    }
}

/// The protobuf message of `spec`, when it declares one the schema has (a message the
/// schema lacks is served in JSON only).
fn protobuf_message(spec: &KindSpec) -> Option<&'static str> {
    watchcache_encoders::protobuf::message_name(spec.protobuf.as_deref()?)
}

/// Starts one cache per kind of `registry` over `store`, counted in `metrics`.
pub fn build(
    store: &Backend,
    config: &ServeConfig,
    metrics: &Arc<Metrics>,
    registry: &Registry,
) -> Result<Served, BuildError> {
    let mut out = Served::default();
    for spec in registry.iter() {
        out.insert(Arc::new(start(store, config, metrics, spec)?));
    }
    Ok(out)
}

/// Starts serving `spec` over `store`: its cache, codec and frames; its cache's counts go to
/// `metrics`.
pub fn start(
    store: &Backend,
    config: &ServeConfig,
    metrics: &Arc<Metrics>,
    spec: &Arc<KindSpec>,
) -> Result<Resource, BuildError> {
    let codec = Arc::new(codec(spec));
    let prefix = spec.prefix();
    let mut cache_config = CacheConfig::new(&spec.plural, &prefix);
    cache_config.capacity = config.history;
    cache_config.fresh_timeout = config.fresh_timeout;
    cache_config.ready_timeout = config.fresh_timeout;
    cache_config.bookmark_interval = config.bookmark_interval;
    cache_config.history_bytes = config.history_bytes;
    cache_config.snapshot_retention = config.snapshot_retention;
    cache_config.fields = spec.fields.iter().map(|f| f.path.clone()).collect();
    cache_config.trigger_field = spec.trigger.clone();
    cache_config.history_fill = config.history_fill;
    cache_config.catch_up = config.catch_up.clone();
    let cache = Cache::new(store.clone(), codec.clone(), cache_config)?;
    let mut info = ResourceInfo::new(&spec.plural, &spec.kind, &spec.api_version());
    if let Some(message) = protobuf_message(spec) {
        info = info.with_protobuf(message);
    }
    let frames = FrameEncoder::new(info.clone(), codec.clone());
    let label: Arc<str> = if spec.group.is_empty() {
        Arc::from(spec.plural.as_str())
    } else {
        Arc::from(format!("{}.{}", spec.plural, spec.group))
    };
    Ok(Resource {
        spec: Arc::clone(spec),
        info,
        ttl: spec.strategy.expires.then_some(config.event_ttl),
        prefix,
        counts: Some(CacheCounts::new(metrics, &label, cache.shared_stats())),
        metrics: Arc::clone(metrics),
        label,
        codec,
        frames,
        cache,
        terminating: std::sync::atomic::AtomicBool::new(false),
    })
}
