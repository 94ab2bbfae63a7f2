//! Object versions: one immutable version of one object, decoded once and encoded at most
//! once per wire format, shared by every watcher, LIST and GET as `Arc<ObjectVersion>`.
//!
//! This is the apiserver's `cachingObject` idea (`caching_object.go`) applied everywhere: the
//! apiserver shares an encoding only during live dispatch, we share it for replays, initial
//! events and LIST items too. How objects are decoded and encoded belongs to the embedder,
//! through [`Codec`]; core keeps only what filtering needs (key, labels, selectable fields)
//! and the encoded bytes.

use std::cmp::Ordering;
use std::fmt;
use std::ops::Range;
use std::sync::OnceLock;

use bytes::Bytes;

use crate::rv::Revision;

/// The wire formats an object version can be encoded in.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum WireFormat {
    /// `application/json`.
    Json,
    /// `application/vnd.kubernetes.protobuf`.
    Protobuf,
}

impl WireFormat {
    pub(crate) const COUNT: usize = 2;

    pub(crate) fn index(self) -> usize {
        match self {
            WireFormat::Json => 0,
            WireFormat::Protobuf => 1,
        }
    }
}

/// An object's identity: namespace ("" for cluster-scoped objects) and name.
///
/// Keys order as etcd orders the apiserver's keys: by the bytes of `<ns>/<name>` (of `<name>`
/// for cluster-scoped objects), so LIST results come in the apiserver's order. Namespace `a-b`
/// sorts before `a/…`, since `-` is below `/`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    namespace: Box<str>,
    name: Box<str>,
}

impl ObjectKey {
    /// A key in `namespace` ("" for cluster-scoped objects).
    pub fn new(namespace: impl Into<Box<str>>, name: impl Into<Box<str>>) -> Self {
        ObjectKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A cluster-scoped key.
    pub fn cluster(name: impl Into<Box<str>>) -> Self {
        ObjectKey::new("", name)
    }

    /// The namespace, "" for cluster-scoped objects.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl ObjectKey {
    /// The bytes keys are ordered by: `<ns>/<name>`, or `<name>` when cluster-scoped.
    fn ordered_bytes(&self) -> impl Iterator<Item = u8> + '_ {
        let separator = (!self.namespace.is_empty()).then_some(b'/');
        self.namespace.bytes().chain(separator).chain(self.name.bytes())
    }

    /// How this key's ordered bytes compare with `prefix`, and whether they start with it: a
    /// namespace's keys are those starting with `<ns>/`, one contiguous run in key order.
    pub(crate) fn cmp_prefix(&self, prefix: &[u8]) -> (Ordering, bool) {
        let starts = self.ordered_bytes().take(prefix.len()).eq(prefix.iter().copied());
        (self.ordered_bytes().cmp(prefix.iter().copied()), starts)
    }
}

impl Ord for ObjectKey {
    fn cmp(&self, other: &Self) -> Ordering {
        let bytes = if self.namespace == other.namespace {
            self.name.cmp(&other.name)
        } else {
            self.ordered_bytes().cmp(other.ordered_bytes())
        };
        // Two keys with the same bytes (a `/` inside a namespace or name, which valid keys
        // never have) still order, consistently with `Eq`.
        bytes.then_with(|| (&self.namespace, &self.name).cmp(&(&other.namespace, &other.name)))
    }
}

impl PartialOrd for ObjectKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// One encoding of an object version.
///
/// Besides the bytes, an encoding may record where parts of them sit, so that writers reuse
/// the shared bytes rather than decode them: the resourceVersion value (to stamp another
/// revision) and, in JSON, the `metadata` object (what a metadata-only client reads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoding {
    bytes: Bytes,
    revision_at: Option<Span>,
    length_at: Option<Span>,
    metadata_at: Option<Span>,
}

/// A range of an encoding's bytes, kept in 32 bits a side: an encoding is far below 4 GiB
/// (etcd refuses values above 1.5 MiB by default), and every stored version carries up to
/// three of these per encoding.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
}

impl Span {
    /// `range` as a span of an encoding of `len` bytes.
    ///
    /// # Panics
    ///
    /// If `range` does not lie within `len` bytes, or `len` is 4 GiB or more (a codec bug).
    fn within(range: Range<usize>, len: usize, what: &str) -> Span {
        assert!(
            range.start <= range.end && range.end <= len,
            "{what} range {range:?} outside an encoding of {len} bytes"
        );
        let (Ok(start), Ok(end)) = (u32::try_from(range.start), u32::try_from(range.end)) else {
            panic!("{what} range {range:?} past 4 GiB");
        };
        Span { start, end }
    }

    fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }
}

impl Encoding {
    /// An encoding whose bytes do not expose the resourceVersion for restamping.
    pub fn new(bytes: Bytes) -> Self {
        Encoding {
            bytes,
            revision_at: None,
            length_at: None,
            metadata_at: None,
        }
    }

    /// An encoding that records where the resourceVersion value sits inside `bytes`, so that
    /// a writer can stamp another revision (a DELETED event, a selector exit) by writing
    /// `bytes[..start]`, the new value, `bytes[end..]`, without re-encoding.
    ///
    /// # Panics
    ///
    /// If `revision_at` does not lie within `bytes`, or reaches 4 GiB (a codec bug).
    pub fn with_revision_at(bytes: Bytes, revision_at: Range<usize>) -> Self {
        let revision_at = Span::within(revision_at, bytes.len(), "revision");
        Encoding {
            revision_at: Some(revision_at),
            ..Encoding::new(bytes)
        }
    }

    /// An encoding whose resourceVersion sits inside a length-prefixed message (protobuf's
    /// `metadata`): besides the value, a writer that stamps another revision rewrites the
    /// prefix at `length_at`, so it still needs no re-encoding.
    ///
    /// # Panics
    ///
    /// If either range does not lie within `bytes`, or `length_at` does not come first (a
    /// codec bug).
    pub fn with_nested_revision_at(bytes: Bytes, revision_at: Range<usize>, length_at: Range<usize>) -> Self {
        assert!(
            length_at.start <= length_at.end && length_at.end <= revision_at.start,
            "length prefix {length_at:?} does not precede the revision at {revision_at:?}"
        );
        let length_at = Span::within(length_at, bytes.len(), "length prefix");
        Encoding {
            length_at: Some(length_at),
            ..Encoding::with_revision_at(bytes, revision_at)
        }
    }

    /// The same encoding, recording where the object's `metadata` value sits in its bytes (a
    /// JSON object, braces included): a metadata-only read (`PartialObjectMetadata`) copies
    /// that part of the shared bytes, never parsing the object. If the encoding records the
    /// resourceVersion too, it must lie within the metadata.
    ///
    /// # Panics
    ///
    /// If `metadata_at` does not lie within the bytes, or does not hold the recorded
    /// resourceVersion (a codec bug).
    pub fn with_metadata_at(mut self, metadata_at: Range<usize>) -> Self {
        let span = Span::within(metadata_at, self.bytes.len(), "metadata");
        if let Some(at) = self.revision_at {
            assert!(
                span.start <= at.start && at.end <= span.end,
                "metadata range {:?} does not hold the revision at {:?}",
                span.range(),
                at.range()
            );
        }
        self.metadata_at = Some(span);
        self
    }

    /// The encoded bytes, shared.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Where the resourceVersion value sits in [`bytes`](Self::bytes), if the codec said.
    pub fn revision_at(&self) -> Option<Range<usize>> {
        self.revision_at.map(Span::range)
    }

    /// Where the length prefix of the message holding the resourceVersion sits, for
    /// encodings made with [`with_nested_revision_at`](Self::with_nested_revision_at).
    pub fn length_at(&self) -> Option<Range<usize>> {
        self.length_at.map(Span::range)
    }

    /// Where the object's `metadata` value sits in [`bytes`](Self::bytes), if the codec said
    /// ([`with_metadata_at`](Self::with_metadata_at)).
    pub fn metadata_at(&self) -> Option<Range<usize>> {
        self.metadata_at.map(Span::range)
    }
}

/// How an embedder's objects are decoded from the source and encoded for clients.
///
/// `decode` runs once per object version, on ingestion; `encode` runs at most once per
/// version and wire format, the first time that format is asked for (it may start from an
/// encoding the version already has).
pub trait Codec: Send + Sync {
    /// Decodes one object version read from the source at `revision`.
    fn decode(&self, raw: &[u8], revision: Revision) -> Result<ObjectVersion, CodecError>;

    /// Encodes `object` in `format`.
    fn encode(&self, object: &ObjectVersion, format: WireFormat) -> Result<Encoding, CodecError>;
}

/// A codec could not decode or encode an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodecError {
    /// The source bytes are not a valid object.
    Decode(String),
    /// The object has no `metadata.name`.
    MissingName,
    /// The object's namespace is not the one its key or resource requires.
    WrongNamespace {
        /// The namespace that was expected ("" for cluster-scoped resources).
        expected: String,
        /// The namespace the object carries.
        found: String,
    },
    /// The codec does not produce this wire format.
    UnsupportedFormat(WireFormat),
    /// Encoding failed.
    Encode(String),
    /// The object's stored value does not decode (a corrupt object, as KEP-3926 names it):
    /// the cache holds its key and revision, but nothing to encode. Reads that would include
    /// it fail naming it, until it is written again or deleted.
    Corrupt {
        /// The storage key of the value.
        key: String,
        /// Why the value does not decode.
        reason: String,
    },
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::Decode(m) => write!(f, "cannot decode object: {m}"),
            CodecError::MissingName => f.write_str("object has no metadata.name"),
            CodecError::Corrupt { key, reason } => write!(f, "corrupt object at {key}: {reason}"),
            CodecError::WrongNamespace { expected, found } => write!(
                f,
                "object namespace {found:?} does not match the expected namespace {expected:?}"
            ),
            CodecError::UnsupportedFormat(w) => write!(f, "wire format {w:?} is not supported"),
            CodecError::Encode(m) => write!(f, "cannot encode object: {m}"),
        }
    }
}

impl std::error::Error for CodecError {}

/// One version of one object: key, revision, labels, selectable fields and its encodings.
///
/// Immutable once built; shared as `Arc<ObjectVersion>`. Encodings are computed at most once.
///
/// ```
/// use bytes::Bytes;
/// use watchcache_core::{Encoding, ObjectKey, ObjectVersion, Revision, WireFormat};
///
/// let pod = ObjectVersion::builder(ObjectKey::new("default", "web-0"), Revision::new(7))
///     .label("app", "web")
///     .field("spec.nodeName", "node-1")
///     .encoding(WireFormat::Json, Encoding::new(Bytes::from_static(b"{}")))
///     .build();
/// assert_eq!(pod.label("app"), Some("web"));
/// assert_eq!(pod.field("metadata.namespace"), Some("default"));
/// assert_eq!(pod.field("spec.nodeName"), Some("node-1"));
/// assert_eq!(pod.encoded(WireFormat::Json).unwrap().bytes().as_ref(), b"{}");
/// ```
pub struct ObjectVersion {
    key: ObjectKey,
    revision: Revision,
    /// Sorted by key, keys unique.
    labels: Box<[(Box<str>, Box<str>)]>,
    /// Sorted by field name, names unique.
    fields: Box<[(Box<str>, Box<str>)]>,
    encodings: [OnceLock<Result<Encoding, Box<CodecError>>>; WireFormat::COUNT],
}

impl ObjectVersion {
    /// Starts building a version of the object `key` at `revision`.
    pub fn builder(key: ObjectKey, revision: Revision) -> ObjectVersionBuilder {
        ObjectVersionBuilder {
            key,
            revision,
            labels: Vec::new(),
            fields: Vec::new(),
            encodings: Vec::new(),
        }
    }

    /// A corrupt object: the version at `revision` of the key `key`, whose stored value (at
    /// `storage_key`) does not decode, for `reason`. It has no labels, no fields and no
    /// encoding: asking for one is [`CodecError::Corrupt`].
    pub fn corrupt(key: ObjectKey, revision: Revision, storage_key: &str, reason: &str) -> ObjectVersion {
        let error = || {
            Err(Box::new(CodecError::Corrupt {
                key: storage_key.to_owned(),
                reason: reason.to_owned(),
            }))
        };
        ObjectVersion {
            key,
            revision,
            labels: Box::default(),
            fields: Box::default(),
            encodings: std::array::from_fn(|_| OnceLock::from(error())),
        }
    }

    /// For a corrupt object ([`ObjectVersion::corrupt`]), its storage key and why its value
    /// does not decode.
    pub fn corruption(&self) -> Option<(&str, &str)> {
        match self.encodings[0].get() {
            Some(Err(e)) => match &**e {
                CodecError::Corrupt { key, reason } => Some((key, reason)),
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether this is a corrupt object ([`ObjectVersion::corrupt`]).
    pub fn is_corrupt(&self) -> bool {
        self.corruption().is_some()
    }

    /// The object's key.
    pub fn key(&self) -> &ObjectKey {
        &self.key
    }

    /// The revision of the write that produced this version (its resourceVersion).
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// A label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        lookup(&self.labels, key)
    }

    /// All labels, sorted by key.
    pub fn labels(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        self.labels.iter().map(|(k, v)| (&**k, &**v))
    }

    /// A selectable field's value: `metadata.name` and `metadata.namespace` always, and the
    /// fields the codec extracted.
    pub fn field(&self, name: &str) -> Option<&str> {
        match name {
            "metadata.name" => Some(self.key.name()),
            "metadata.namespace" => Some(self.key.namespace()),
            _ => lookup(&self.fields, name),
        }
    }

    /// The encoding in `format` if it has been computed.
    pub fn encoded(&self, format: WireFormat) -> Option<&Encoding> {
        match self.encodings[format.index()].get() {
            Some(Ok(encoding)) => Some(encoding),
            _ => None,
        }
    }

    /// The encoding in `format`, computed by `codec` on first use and shared afterwards.
    ///
    /// Encoding is deterministic, so a failure is remembered too: the codec is asked at most
    /// once per version and format, even when several threads ask at once.
    pub fn encoding(&self, format: WireFormat, codec: &dyn Codec) -> Result<&Encoding, CodecError> {
        self.encodings[format.index()]
            .get_or_init(|| codec.encode(self, format).map_err(Box::new))
            .as_ref()
            .map_err(|e| (**e).clone())
    }

    /// Heap bytes this version holds, its encodings included: what keeping it alive costs.
    pub fn retained_bytes(&self) -> usize {
        self.metadata_heap_bytes()
            + self
                .encodings
                .iter()
                .filter_map(|e| e.get().and_then(|e| e.as_ref().ok()))
                .map(|e| e.bytes().len())
                .sum::<usize>()
    }

    /// Heap bytes this version holds beyond its encodings' shared buffers: the struct itself,
    /// key, labels and fields. Used to report memory per stored object.
    pub fn metadata_heap_bytes(&self) -> usize {
        let strs = |pairs: &[(Box<str>, Box<str>)]| -> usize {
            pairs.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() + std::mem::size_of_val(pairs)
        };
        std::mem::size_of::<Self>()
            + self.key.namespace.len()
            + self.key.name.len()
            + strs(&self.labels)
            + strs(&self.fields)
    }
}

impl fmt::Debug for ObjectVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectVersion")
            .field("key", &self.key)
            .field("revision", &self.revision)
            .field("labels", &self.labels)
            .field("fields", &self.fields)
            .finish_non_exhaustive()
    }
}

fn lookup<'a>(pairs: &'a [(Box<str>, Box<str>)], key: &str) -> Option<&'a str> {
    pairs
        .binary_search_by(|(k, _)| (**k).cmp(key))
        .ok()
        .map(|i| &*pairs[i].1)
}

fn sorted_unique(mut pairs: Vec<(Box<str>, Box<str>)>) -> Box<[(Box<str>, Box<str>)]> {
    // Stable sort, then keep the last value given for a key.
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out: Vec<(Box<str>, Box<str>)> = Vec::with_capacity(pairs.len());
    for pair in pairs {
        match out.last_mut() {
            Some(last) if last.0.cmp(&pair.0) == Ordering::Equal => *last = pair,
            _ => out.push(pair),
        }
    }
    out.into_boxed_slice()
}

/// Builds an [`ObjectVersion`]; see [`ObjectVersion::builder`].
#[derive(Debug)]
pub struct ObjectVersionBuilder {
    key: ObjectKey,
    revision: Revision,
    labels: Vec<(Box<str>, Box<str>)>,
    fields: Vec<(Box<str>, Box<str>)>,
    encodings: Vec<(WireFormat, Encoding)>,
}

impl ObjectVersionBuilder {
    /// Adds a label; a later value for the same key wins.
    pub fn label(mut self, key: impl Into<Box<str>>, value: impl Into<Box<str>>) -> Self {
        self.labels.push((key.into(), value.into()));
        self
    }

    /// Adds labels; a later value for the same key wins.
    pub fn labels<K, V>(mut self, labels: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<Box<str>>,
        V: Into<Box<str>>,
    {
        self.labels
            .extend(labels.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Adds a selectable field such as `spec.nodeName`. `metadata.name` and
    /// `metadata.namespace` come from the key and need not be added.
    pub fn field(mut self, name: impl Into<Box<str>>, value: impl Into<Box<str>>) -> Self {
        self.fields.push((name.into(), value.into()));
        self
    }

    /// Sets an encoding computed at ingestion (the codec's primary format).
    pub fn encoding(mut self, format: WireFormat, encoding: Encoding) -> Self {
        self.encodings.push((format, encoding));
        self
    }

    /// Builds the immutable version.
    pub fn build(self) -> ObjectVersion {
        let encodings: [OnceLock<Result<Encoding, Box<CodecError>>>; WireFormat::COUNT] = Default::default();
        for (format, encoding) in self.encodings {
            // A later encoding for the same format is ignored: the first one set wins.
            let _ = encodings[format.index()].set(Ok(encoding));
        }
        ObjectVersion {
            key: self.key,
            revision: self.revision,
            labels: sorted_unique(self.labels),
            fields: sorted_unique(self.fields),
            encodings,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A trivial codec: JSON is given at ingestion, "protobuf" is the JSON reversed.
    struct Reverse {
        calls: AtomicUsize,
    }

    impl Codec for Reverse {
        fn decode(&self, raw: &[u8], revision: Revision) -> Result<ObjectVersion, CodecError> {
            let text = std::str::from_utf8(raw).map_err(|e| CodecError::Decode(e.to_string()))?;
            let (ns, name) = text.split_once('/').ok_or(CodecError::MissingName)?;
            Ok(ObjectVersion::builder(ObjectKey::new(ns, name), revision)
                .encoding(WireFormat::Json, Encoding::new(Bytes::copy_from_slice(raw)))
                .build())
        }

        fn encode(&self, object: &ObjectVersion, format: WireFormat) -> Result<Encoding, CodecError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            match format {
                WireFormat::Json => Err(CodecError::UnsupportedFormat(format)),
                WireFormat::Protobuf => {
                    let json = object
                        .encoded(WireFormat::Json)
                        .ok_or(CodecError::Encode("no json".into()))?;
                    let mut v = json.bytes().to_vec();
                    v.reverse();
                    Ok(Encoding::new(Bytes::from(v)))
                }
            }
        }
    }

    #[test]
    fn labels_and_fields_are_looked_up_by_name_and_last_value_wins() {
        let v = ObjectVersion::builder(ObjectKey::new("ns", "a"), Revision::new(3))
            .label("b", "1")
            .label("a", "2")
            .label("b", "3")
            .field("spec.nodeName", "n1")
            .build();
        assert_eq!(v.label("a"), Some("2"));
        assert_eq!(v.label("b"), Some("3"));
        assert_eq!(v.label("c"), None);
        assert_eq!(v.labels().collect::<Vec<_>>(), vec![("a", "2"), ("b", "3")]);
        assert_eq!(v.field("metadata.name"), Some("a"));
        assert_eq!(v.field("metadata.namespace"), Some("ns"));
        assert_eq!(v.field("spec.nodeName"), Some("n1"));
        assert_eq!(v.field("status.phase"), None);
    }

    #[test]
    fn an_encoding_is_computed_once_however_many_threads_ask() {
        let codec = Arc::new(Reverse {
            calls: AtomicUsize::new(0),
        });
        let v = Arc::new(codec.decode(b"ns/abc", Revision::new(1)).unwrap());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (codec, v) = (codec.clone(), v.clone());
                std::thread::spawn(move || v.encoding(WireFormat::Protobuf, &*codec).unwrap().bytes().clone())
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap().as_ref(), b"cba/sn");
        }
        assert_eq!(codec.calls.load(Ordering::SeqCst), 1);
        // The shared bytes are the same allocation every time.
        let a = v
            .encoding(WireFormat::Protobuf, &*codec)
            .unwrap()
            .bytes()
            .as_ptr();
        let b = v.encoded(WireFormat::Protobuf).unwrap().bytes().as_ptr();
        assert_eq!(a, b);
    }

    #[test]
    fn an_encoding_failure_is_a_typed_error_and_is_remembered() {
        let codec = Reverse {
            calls: AtomicUsize::new(0),
        };
        let v = ObjectVersion::builder(ObjectKey::cluster("n"), Revision::new(1)).build();
        for _ in 0..3 {
            assert_eq!(
                v.encoding(WireFormat::Json, &codec),
                Err(CodecError::UnsupportedFormat(WireFormat::Json))
            );
        }
        assert_eq!(codec.calls.load(Ordering::SeqCst), 1);
        assert!(v.encoded(WireFormat::Json).is_none());
        assert_eq!(
            codec.decode(b"no-slash", Revision::new(1)).unwrap_err(),
            CodecError::MissingName
        );
    }

    #[test]
    #[should_panic(expected = "outside an encoding")]
    fn a_revision_range_outside_the_bytes_is_a_codec_bug() {
        let _ = Encoding::with_revision_at(Bytes::from_static(b"abc"), 2..5);
    }

    #[test]
    fn an_encoding_records_its_parts_in_compact_spans() {
        let bytes = Bytes::from_static(br#"{"metadata":{"resourceVersion":"7"},"x":1}"#);
        let e = Encoding::with_revision_at(bytes.clone(), 32..33).with_metadata_at(12..35);
        assert_eq!(&e.bytes()[e.revision_at().unwrap()], b"7");
        assert_eq!(
            &e.bytes()[e.metadata_at().unwrap()],
            br#"{"resourceVersion":"7"}"#
        );
        assert_eq!(e.length_at(), None);
        assert_eq!(Encoding::new(bytes).metadata_at(), None);
        // Three recorded parts cost less than the two full ranges they replaced.
        assert!(
            std::mem::size_of::<Encoding>() <= 72,
            "{}",
            std::mem::size_of::<Encoding>()
        );
    }

    #[test]
    #[should_panic(expected = "does not hold the revision")]
    fn a_metadata_range_that_misses_the_revision_is_a_codec_bug() {
        let bytes = Bytes::from_static(br#"{"metadata":{"resourceVersion":"7"},"x":1}"#);
        let _ = Encoding::with_revision_at(bytes, 32..33).with_metadata_at(0..10);
    }

    #[test]
    #[should_panic(expected = "outside an encoding")]
    fn a_metadata_range_outside_the_bytes_is_a_codec_bug() {
        let _ = Encoding::new(Bytes::from_static(b"{}")).with_metadata_at(0..3);
    }

    #[test]
    fn keys_order_by_the_bytes_of_namespace_slash_name_as_etcd_does() {
        let mut keys = [
            ObjectKey::new("b", "a"),
            ObjectKey::new("a", "z"),
            ObjectKey::new("a-b", "a"),
            ObjectKey::new("a", "b"),
            ObjectKey::new("a.b", "a"),
            ObjectKey::new("a0", "a"),
        ];
        keys.sort();
        let strings: Vec<String> = keys.iter().map(ToString::to_string).collect();
        // '-' (0x2d) and '.' (0x2e) sort below '/' (0x2f), '0' (0x30) above it.
        assert_eq!(strings, ["a-b/a", "a.b/a", "a/b", "a/z", "a0/a", "b/a"]);
        let mut by_string = strings.clone();
        by_string.sort();
        assert_eq!(strings, by_string, "the order of the key strings");
        assert_eq!(ObjectKey::cluster("n1").to_string(), "n1");
        assert!(ObjectKey::cluster("a-b") < ObjectKey::cluster("a.b"));
        // Keys whose strings collide still order consistently with Eq.
        let (x, y) = (ObjectKey::new("a", "b/c"), ObjectKey::new("a/b", "c"));
        assert_ne!(x.cmp(&y), std::cmp::Ordering::Equal);
        assert_eq!(x.cmp(&y), y.cmp(&x).reverse());
    }
}
