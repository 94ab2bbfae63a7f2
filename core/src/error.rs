//! Error types of core: small hand-written enums, each with `Display` and `Error`.

use std::fmt;

use crate::rv::Revision;

/// A resourceVersion string that is not a revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RevisionError {
    /// The string was empty.
    Empty,
    /// The string held something other than decimal digits.
    NotANumber(String),
    /// The digits do not fit in 64 bits.
    OutOfRange(String),
}

impl fmt::Display for RevisionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RevisionError::Empty => f.write_str("resourceVersion is empty"),
            RevisionError::NotANumber(s) => {
                write!(f, "invalid resourceVersion {s:?}: not a decimal number")
            }
            RevisionError::OutOfRange(s) => {
                write!(f, "invalid resourceVersion {s:?}: out of range")
            }
        }
    }
}

impl std::error::Error for RevisionError {}

/// What was wrong with a label or field selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectorErrorKind {
    /// A token stood where it cannot (`a in b`, `=x`, `a,,b`).
    Unexpected {
        /// What the parser found.
        found: String,
        /// What it expected there.
        expected: &'static str,
    },
    /// A label key that is not a qualified name (`[prefix/]name`).
    InvalidKey(String),
    /// A label value that is not a valid label value.
    InvalidValue(String),
    /// `>` or `<` with a value that is not an integer.
    NotAnInteger(String),
    /// A field selector term without an operator.
    MissingOperator(String),
    /// A backslash followed by something other than `\`, `,` or `=`.
    InvalidEscape(String),
    /// A field that this resource cannot be selected by.
    UnsupportedField(String),
}

/// A label or field selector that could not be parsed or is not supported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorError {
    /// The selector as given.
    pub selector: String,
    /// What was wrong.
    pub kind: SelectorErrorKind,
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid selector {:?}: ", self.selector)?;
        match &self.kind {
            SelectorErrorKind::Unexpected { found, expected } => {
                write!(f, "found {found}, expected {expected}")
            }
            SelectorErrorKind::InvalidKey(k) => write!(f, "invalid label key {k:?}"),
            SelectorErrorKind::InvalidValue(v) => write!(f, "invalid label value {v:?}"),
            SelectorErrorKind::NotAnInteger(v) => write!(f, "{v:?} is not an integer"),
            SelectorErrorKind::MissingOperator(t) => {
                write!(f, "term {t:?} has no operator (=, ==, !=)")
            }
            SelectorErrorKind::InvalidEscape(t) => write!(f, "invalid escape sequence in {t:?}"),
            SelectorErrorKind::UnsupportedField(n) => {
                write!(f, "field label not supported: {n}")
            }
        }
    }
}

impl std::error::Error for SelectorError {}

/// A watcher asked for history the window no longer holds, or was lapped by the writer.
///
/// Over HTTP this is `410 Gone` with reason `Expired`; the client re-lists.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Expired {
    /// The revision the watcher asked to continue after.
    pub requested: Revision,
    /// The oldest revision a watch can start after now.
    pub oldest: Revision,
}

impl fmt::Display for Expired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "too old resource version: {} ({})",
            self.requested, self.oldest
        )
    }
}

impl std::error::Error for Expired {}

/// An event the publisher refused; the ring is unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublishError {
    /// Object events need a revision above the last published one; bookmarks one not below it.
    RevisionNotIncreasing {
        /// The last published revision.
        last: Revision,
        /// The revision of the refused event.
        got: Revision,
    },
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishError::RevisionNotIncreasing { last, got } => write!(
                f,
                "event revision {got} does not follow the last published revision {last}"
            ),
        }
    }
}

impl std::error::Error for PublishError {}

/// A configuration that cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// Ring capacities are powers of two, at least 2.
    CapacityNotPowerOfTwo(usize),
    /// A cache was built outside a tokio runtime (its reflector needs one).
    NoRuntime,
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::CapacityNotPowerOfTwo(n) => {
                write!(f, "ring capacity {n} is not a power of two of at least 2")
            }
            BuildError::NoRuntime => f.write_str("a cache must be built inside a tokio runtime"),
        }
    }
}

impl std::error::Error for BuildError {}

/// A watch that could not be started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchError {
    /// The requested start is older than the history window.
    Expired(Expired),
    /// The filter selects on a field this resource does not declare.
    Selector(SelectorError),
}

impl fmt::Display for WatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchError::Expired(e) => e.fmt(f),
            WatchError::Selector(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for WatchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WatchError::Expired(e) => Some(e),
            WatchError::Selector(e) => Some(e),
        }
    }
}

impl From<Expired> for WatchError {
    fn from(e: Expired) -> Self {
        WatchError::Expired(e)
    }
}

impl From<SelectorError> for WatchError {
    fn from(e: SelectorError) -> Self {
        WatchError::Selector(e)
    }
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
    UnsupportedFormat(crate::object::WireFormat),
    /// Encoding failed.
    Encode(String),
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::Decode(m) => write!(f, "cannot decode object: {m}"),
            CodecError::MissingName => f.write_str("object has no metadata.name"),
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

/// Why the cache could not serve a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheError {
    /// The requested revision is older than the history window (HTTP 410 `Expired`).
    Expired(Expired),
    /// The cache did not reach the requested revision in time (HTTP 504 with a
    /// `ResourceVersionTooLarge` cause and `retryAfterSeconds`).
    TooLargeResourceVersion {
        /// The requested revision.
        requested: Revision,
        /// The cache's revision.
        current: Revision,
    },
    /// The continue token is malformed, altered, or not for this resource (HTTP 400).
    InvalidContinue(String),
    /// The parameters contradict each other (HTTP 400).
    InvalidRequest(String),
    /// A selector could not be parsed or names an unsupported field (HTTP 400).
    Selector(SelectorError),
    /// The cache has not completed its first list (HTTP 429 with `Retry-After`).
    NotReady {
        /// When to try again.
        retry_after: std::time::Duration,
    },
    /// The source failed a request the cache had to make (a consistent read's revision).
    Source(crate::source::SourceError),
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheError::Expired(e) => e.fmt(f),
            CacheError::TooLargeResourceVersion { requested, current } => {
                write!(f, "Too large resource version: {requested}, current: {current}")
            }
            CacheError::InvalidContinue(m) => write!(f, "invalid continue token: {m}"),
            CacheError::InvalidRequest(m) => f.write_str(m),
            CacheError::Selector(e) => e.fmt(f),
            CacheError::NotReady { .. } => f.write_str("the watch cache is not initialized yet"),
            CacheError::Source(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CacheError {}
