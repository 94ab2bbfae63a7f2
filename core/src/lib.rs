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
//! * [`EventRing`]: the lock-free, epoch-reclaimed history window.
//! * [`WatchHub`], [`Publisher`], [`Watcher`]: fan-out with an interest index, so an event
//!   wakes only the watchers that may care.
//! * [`LabelSelector`], [`FieldSelector`], [`Filter`]: selectors with the apiserver's
//!   transition rules (entering the selection is ADDED, leaving it DELETED).
//!
//! # Before you use it
//!
//! The writer never waits for a reader: a watcher that falls more than the ring's capacity
//! behind ends with [`Expired`] (HTTP 410 to a client, which then re-lists). Size the window
//! for the slowest watcher you want to keep. A watcher parked with nothing to read is never
//! expired by events its filter would have dropped anyway.
//!
//! # Example
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
mod continue_token;
mod error;
mod event;
mod filter;
mod interest;
mod loom;
mod object;
pub mod protocol;
mod reflector;
mod ring;
mod rv;
mod selector;
mod snapshot;
pub mod source;
mod watcher;

pub use cache::{
    Cache, CacheConfig, CacheStats, CacheWatch, Consistency, ListOptions, ListResult, ResourceVersionMatch,
    WatchOptions,
};
pub use error::{
    BuildError, CacheError, CodecError, Expired, PublishError, RevisionError, SelectorError,
    SelectorErrorKind, WatchError,
};
pub use event::{Delivery, Event, EventKind, WatchEvent};
pub use filter::Filter;
pub use object::{Codec, Encoding, ObjectKey, ObjectVersion, ObjectVersionBuilder, WireFormat};
pub use ring::{Entry, EventRing, Read, RingWriter};
pub use rv::Revision;
pub use selector::{FieldRequirement, FieldSelector, LabelRequirement, LabelSelector};
pub use snapshot::{ListItems, Snapshot};
pub use source::memory::MemorySource;
pub use source::{Source, SourceError, SourceEvent, SourceItem, SourceList};
pub use watcher::{DEFAULT_CAPACITY, HubBuilder, Publisher, StartAt, WatchHub, WatchSpec, Watcher};
