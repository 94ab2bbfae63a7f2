//! Events as the writer publishes them, and deliveries as one watcher sees them.
//!
//! An [`Event`] is what happened to the store: it is published once into the ring and read
//! by every watcher. A [`Delivery`] is what one watcher receives after its filter has been
//! applied with the apiserver's transition rules (see [`Filter::deliver`](crate::Filter::deliver)):
//! the same event may be ADDED for one watcher, MODIFIED for another and DELETED for a third.

use crate::object::ObjectVersion;
use crate::rv::Revision;
use std::sync::Arc;

/// A change to the store, or a bookmark.
#[derive(Clone, Debug)]
pub enum Event {
    /// An object was created.
    Added {
        /// The new object version; its revision is the event's.
        object: Arc<ObjectVersion>,
    },
    /// An object was updated.
    Modified {
        /// The new object version; its revision is the event's.
        object: Arc<ObjectVersion>,
        /// The version it replaced.
        prev: Arc<ObjectVersion>,
    },
    /// An object was deleted.
    Deleted {
        /// The revision of the deletion.
        revision: Revision,
        /// The object's last state; it is delivered stamped with `revision`.
        prev: Arc<ObjectVersion>,
    },
    /// No change: the store has reached `revision`.
    Bookmark {
        /// The revision every watcher has now seen all events up to.
        revision: Revision,
    },
}

impl Event {
    /// The revision of the write this event reports (or the bookmark's revision).
    pub fn revision(&self) -> Revision {
        match self {
            Event::Added { object } | Event::Modified { object, .. } => object.revision(),
            Event::Deleted { revision, .. } | Event::Bookmark { revision } => *revision,
        }
    }

    /// The current state: the new version, or for a deletion the last state.
    pub fn object(&self) -> Option<&Arc<ObjectVersion>> {
        match self {
            Event::Added { object } | Event::Modified { object, .. } => Some(object),
            Event::Deleted { prev, .. } => Some(prev),
            Event::Bookmark { .. } => None,
        }
    }

    /// The previous version, for updates and deletions.
    pub fn prev(&self) -> Option<&Arc<ObjectVersion>> {
        match self {
            Event::Modified { prev, .. } | Event::Deleted { prev, .. } => Some(prev),
            Event::Added { .. } | Event::Bookmark { .. } => None,
        }
    }

    /// The event's type as the apiserver names it.
    pub fn kind(&self) -> EventKind {
        match self {
            Event::Added { .. } => EventKind::Added,
            Event::Modified { .. } => EventKind::Modified,
            Event::Deleted { .. } => EventKind::Deleted,
            Event::Bookmark { .. } => EventKind::Bookmark,
        }
    }
}

/// The type of a watch event, as in `{"type":"ADDED",…}`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// `ADDED`
    Added,
    /// `MODIFIED`
    Modified,
    /// `DELETED`
    Deleted,
    /// `BOOKMARK`
    Bookmark,
}

impl EventKind {
    /// The wire name: `ADDED`, `MODIFIED`, `DELETED` or `BOOKMARK`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Added => "ADDED",
            EventKind::Modified => "MODIFIED",
            EventKind::Deleted => "DELETED",
            EventKind::Bookmark => "BOOKMARK",
        }
    }
}

/// One event as one watcher receives it, borrowed from the ring.
///
/// `object` is delivered stamped with `revision`, which differs from `object.revision()` for
/// deletions and selector exits (the previous version at the new revision), as the apiserver
/// does. Encoders stamp it without re-encoding (see [`Encoding::revision_at`](crate::Encoding::revision_at)).
#[derive(Copy, Clone, Debug)]
pub struct Delivery<'a> {
    /// The event type for this watcher.
    pub kind: EventKind,
    /// The revision to stamp on the object (the event's revision).
    pub revision: Revision,
    /// The object, `None` for bookmarks.
    pub object: Option<&'a Arc<ObjectVersion>>,
    /// Whether this bookmark marks the end of the initial events of a watch that asked for
    /// them (`k8s.io/initial-events-end: "true"` on the wire).
    pub initial_events_end: bool,
}

impl Delivery<'_> {
    /// An owned copy (reference counts only, never the object's bytes).
    pub fn to_owned(&self) -> WatchEvent {
        WatchEvent {
            kind: self.kind,
            revision: self.revision,
            object: self.object.cloned(),
            initial_events_end: self.initial_events_end,
        }
    }
}

/// One event as one watcher receives it, owned: what [`Watcher`](crate::Watcher) yields as a
/// `Stream`. See [`Delivery`].
#[derive(Clone, Debug)]
pub struct WatchEvent {
    /// The event type for this watcher.
    pub kind: EventKind,
    /// The revision to stamp on the object.
    pub revision: Revision,
    /// The object, `None` for bookmarks.
    pub object: Option<Arc<ObjectVersion>>,
    /// Whether this bookmark ends the initial events; see [`Delivery::initial_events_end`].
    pub initial_events_end: bool,
}
