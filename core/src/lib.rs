//! The engine of watchcache: a lock-free history of events that any number of watchers read
//! without a copy, a lock or a queue of their own.
//!
//! # Why
//!
//! A Kubernetes apiserver keeps one watch per resource on its store and fans every event out
//! to thousands of watchers. Giving each watcher a queue and a copy of each event makes memory
//! and CPU grow with events × watchers. Here one writer publishes each event once into an
//! [`EventRing`]; a [`Watcher`] is only a cursor into that ring, a [`Filter`] and a waker.
//! Objects are [`ObjectVersion`]s, decoded once and encoded once per wire format, and their
//! bytes are shared by every reader.
//!
//! # What is here
//!
//! * [`Revision`]: resourceVersions, parsed and printed.
//! * [`ObjectVersion`], [`ObjectKey`], [`Codec`], [`Encoding`]: shared, immutable object versions.
//! * [`Event`], [`Delivery`], [`WatchEvent`]: what is published and what one watcher receives.
//! * [`EventRing`], [`Seq`]: the lock-free, epoch-reclaimed history window and positions in it.
//! * [`WatchHub`], [`Publisher`], [`Watcher`]: fan-out through an interest registry (by name,
//!   trigger value, namespace), so an event wakes only the watchers that may care, and a
//!   selective watcher goes from one of its events to the next without reading others'.
//! * [`LabelSelector`], [`FieldSelector`], [`Filter`]: selectors with the apiserver's
//!   transition rules (entering the selection is ADDED, leaving it DELETED).
//! * [`Snapshot`], [`ListItems`]: immutable states of a resource, and a filtered range of one
//!   lent item by item.
//! * [`Cache`]: one resource's state and history behind the apiserver's resourceVersion rules
//!   for GET, LIST and WATCH, kept current by its reflector from a [`Source`];
//!   [`MemorySource`] is the embedded one.
//!
//! Each module's errors live beside what produces them ([`RevisionError`] in `rv`,
//! [`PublishError`] in `ring`, [`Expired`] in `watcher`, [`CacheError`] in `cache`, …) and are
//! re-exported here.
//!
//! # Before you use it
//!
//! The writer never waits for a reader: a watcher that falls more than the ring's capacity
//! behind ends with [`Expired`] (HTTP 410 to a client, which then re-lists). Size the window
//! for the slowest watcher you want to keep. A watcher parked with nothing to read is never
//! expired by events its filter would have dropped anyway.
//!
//! # Example: a cache over a store
//!
//! A [`Cache`] follows a [`Source`] (here the embedded [`MemorySource`]) through a [`Codec`]
//! that decodes each stored value once, and serves GET, LIST and WATCH from memory.
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use watchcache_core::*;
//!
//! /// Values here are `namespace/name app=<label>`; a real codec decodes JSON or protobuf.
//! struct Plain;
//!
//! impl Codec for Plain {
//!     fn decode(&self, raw: &[u8], revision: Revision) -> Result<ObjectVersion, CodecError> {
//!         let text = std::str::from_utf8(raw).map_err(|e| CodecError::Decode(e.to_string()))?;
//!         let (id, app) = text.split_once(" app=").ok_or(CodecError::MissingName)?;
//!         let (namespace, name) = id.split_once('/').ok_or(CodecError::MissingName)?;
//!         Ok(ObjectVersion::builder(ObjectKey::new(namespace, name), revision)
//!             .labels([("app", app)])
//!             .encoding(WireFormat::Json, Encoding::new(Bytes::copy_from_slice(raw)))
//!             .build())
//!     }
//!
//!     fn encode(&self, _: &ObjectVersion, format: WireFormat) -> Result<Encoding, CodecError> {
//!         Err(CodecError::UnsupportedFormat(format)) // the one encoding is made at decode
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemorySource::new();
//! store.create("/registry/pods/default/web-0", Bytes::from("default/web-0 app=web"))?;
//! let cache = Cache::new(store.clone(), Arc::new(Plain), CacheConfig::new("pods", "/registry/pods/"))?;
//!
//! // A watch of app=web from the current state: web-0 first, then what is written after.
//! let filter = Filter::parse(None, "app=web", "")?;
//! let mut watch = cache.watch(WatchOptions { filter, ..Default::default() }).await?;
//! store.create("/registry/pods/default/db-0", Bytes::from("default/db-0 app=db"))?;
//! store.create("/registry/pods/default/web-1", Bytes::from("default/web-1 app=web"))?;
//! let mut seen = Vec::new();
//! while seen.len() < 2 {
//!     let event = watch.next().await.ok_or("the watch ended")??;
//!     seen.push(event.object.map(|o| o.key().name().to_owned()));
//! }
//! assert_eq!(seen, [Some("web-0".to_owned()), Some("web-1".to_owned())]);
//!
//! // A consistent LIST: the cache waits until it has seen the store's current revision.
//! let list = cache.list(&ListOptions::default()).await?;
//! assert_eq!(list.items.len(), 3);
//! # Ok(())
//! # }
//! ```
//!
//! # Example: the fan-out alone
//!
//! Under every cache, a [`WatchHub`]: a publisher and any number of watchers of one ring.
//!
//! ```
//! use std::sync::Arc;
//! use watchcache_core::{Event, EventKind, Filter, ObjectKey, ObjectVersion, Revision, WatchHub, WatchSpec};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (mut publisher, hub) = WatchHub::builder().capacity(1024).trigger_field("spec.nodeName").build()?;
//! let filter = Filter::parse(None, "", "spec.nodeName=node-1")?;
//! let mut kubelet = hub.watch(WatchSpec::new(filter))?;
//!
//! let pod = Arc::new(
//!     ObjectVersion::builder(ObjectKey::new("default", "web-0"), Revision::new(5))
//!         .field("spec.nodeName", "node-1")
//!         .build(),
//! );
//! publisher.publish(Event::Added { object: pod })?;
//!
//! // Borrow the event without touching any shared reference count.
//! let (kind, name) = kubelet
//!     .next_with(|d| (d.kind, d.object.map(|o| o.key().name().to_owned())))
//!     .await
//!     .unwrap()?;
//! assert_eq!((kind, name.as_deref()), (EventKind::Added, Some("web-0")));
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]
#![doc(test(attr(deny(warnings))))]

mod cache;
mod catchup;
mod config;
mod consistency;
mod continue_token;
mod event;
mod filter;
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzz;
mod interest;
mod loom;
mod names;
mod object;
mod page;
mod progress;
pub mod protocol;
mod read;
mod reflector;
mod retention;
mod ring;
mod rv;
mod selector;
mod snapshot;
pub mod source;
mod stats;
mod store;
mod watch;
mod watcher;

pub use cache::{Cache, CacheError, Corrupt, MAX_CORRUPT_LISTED};
pub use config::{BuildError, CacheConfig, CatchUpReads, DEFAULT_CATCH_UP_READS, DEFAULT_READ_BYTES};
pub use consistency::Consistency;
pub use event::{Delivery, Event, EventKind, WatchEvent};
pub use filter::Filter;
pub use interest::BOOKMARK_PHASES;
pub use names::{is_dns1123_label, is_dns1123_subdomain};
pub use object::{Codec, CodecError, Encoding, ObjectKey, ObjectVersion, ObjectVersionBuilder, WireFormat};
pub use read::{ListOptions, ListResult, ResourceVersionMatch};
pub use ring::{CapacityError, Entry, EventRing, PublishError, Read, RingWriter, Seq};
pub use rv::{Revision, RevisionError};
pub use selector::{
    FieldRequirement, FieldSelector, LabelRequirement, LabelSelector, SelectorError, SelectorErrorKind,
};
pub use snapshot::{ListItems, Snapshot};
pub use source::memory::MemorySource;
pub use source::{PrevValue, Source, SourceChange, SourceError, SourceEvent, SourceItem, SourceList};
pub use stats::CacheStats;
pub use watch::{CacheWatch, WatchOptions};
pub use watcher::{
    DEFAULT_CAPACITY, Expired, HubBuilder, Publisher, StartAt, WatchError, WatchHub, WatchSpec, Watcher,
};
