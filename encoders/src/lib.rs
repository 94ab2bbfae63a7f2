//! Encoders for watchcache: every response is assembled from shared, pre-encoded pieces.
//!
//! # Why
//!
//! Encoding is where apiservers spend their memory. kube-apiserver shares an encoding only
//! during live dispatch; history replays, initial events and every LIST item are encoded again
//! per request. Here an object version is encoded once, at ingestion, by [`JsonCodec`], and:
//!
//! * a watch frame is a constant prefix, the shared object bytes (with the resourceVersion
//!   restamped in place when the event's revision differs, without re-encoding) and a constant
//!   suffix ([`FrameEncoder`]);
//! * a LIST body is a header, the shared items joined by commas and a footer, handed out in
//!   bounded chunks ([`StreamingList`]), so the extra memory of a LIST in flight is one chunk
//!   whatever the size of the collection; [`encode_list`] builds the same bytes in one buffer,
//!   as the baseline;
//! * errors are `metav1.Status` bodies with the apiserver's codes and reasons ([`Status`]).
//!
//! Protobuf ([`protobuf`]) is made from the JSON, once per object version, when first asked
//! for: every GET, LIST item and watch frame in protobuf then shares it, as they share the JSON.

#![warn(missing_docs)]
#![doc(test(attr(deny(warnings))))]

mod frame;
mod json;
mod list;
pub mod protobuf;
mod resource;
mod status;
mod write;

pub use frame::FrameEncoder;
pub use json::JsonCodec;
pub use list::{DEFAULT_CHUNK_SIZE, ListHeader, StreamingList, encode_list, encode_protobuf_list};
pub use resource::ResourceInfo;
pub use status::Status;
