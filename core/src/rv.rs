//! `Revision`: the numeric form of a Kubernetes `resourceVersion`, and `RevisionError`, why a
//! string is not one.
//!
//! Kubernetes treats resourceVersion as opaque on the wire, but every apiserver backed by
//! etcd encodes the store's global revision as a decimal `u64`, and the cache relies on
//! that ordering. Parsing follows the apiserver's `strconv.ParseUint(s, 10, 64)`: decimal
//! digits only (leading zeros allowed), no sign, no spaces.

use std::fmt;
use std::str::FromStr;

/// A resourceVersion: the revision of the write that produced an object version or event.
///
/// `Revision::ZERO` is the apiserver's "any" version (`resourceVersion=0`).
///
/// ```
/// use watchcache_core::Revision;
///
/// let rv: Revision = "42".parse()?;
/// assert_eq!(rv.get(), 42);
/// assert_eq!(rv.to_string(), "42");
/// assert!("-1".parse::<Revision>().is_err());
/// assert!("".parse::<Revision>().is_err());
/// # Ok::<(), watchcache_core::RevisionError>(())
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Revision(u64);

impl Revision {
    /// The revision `0`: "any version" in requests, "before every write" in the store.
    pub const ZERO: Revision = Revision(0);

    /// Wraps a raw revision number.
    pub const fn new(value: u64) -> Self {
        Revision(value)
    }

    /// The raw revision number.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The revision after this one (saturating at the largest).
    pub const fn successor(self) -> Self {
        Revision(self.0.saturating_add(1))
    }

    /// Parses a resourceVersion string; the same as `s.parse()`.
    pub fn parse(s: &str) -> Result<Self, RevisionError> {
        s.parse()
    }
}

impl From<u64> for Revision {
    fn from(value: u64) -> Self {
        Revision(value)
    }
}

impl FromStr for Revision {
    type Err = RevisionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(RevisionError::Empty);
        }
        // `u64::from_str` accepts a leading '+', which the apiserver rejects.
        if !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(RevisionError::NotANumber(s.to_owned()));
        }
        s.parse::<u64>()
            .map(Revision)
            .map_err(|_| RevisionError::OutOfRange(s.to_owned()))
    }
}

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

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_decimal_revisions_and_prints_them_back() {
        for (s, v) in [("0", 0), ("1", 1), ("007", 7), ("18446744073709551615", u64::MAX)] {
            let rv: Revision = s.parse().unwrap();
            assert_eq!(rv.get(), v);
        }
        assert_eq!(Revision::new(12345).to_string(), "12345");
    }

    #[test]
    fn rejects_malformed_revisions_with_typed_errors() {
        assert_eq!(Revision::parse(""), Err(RevisionError::Empty));
        for s in ["+1", "-1", " 1", "1 ", "abc", "1.5", "0x10", "١"] {
            assert_eq!(
                Revision::parse(s),
                Err(RevisionError::NotANumber(s.to_owned())),
                "{s:?}"
            );
        }
        let too_big = "18446744073709551616";
        assert_eq!(
            Revision::parse(too_big),
            Err(RevisionError::OutOfRange(too_big.to_owned()))
        );
    }

    #[test]
    fn orders_numerically() {
        assert!(Revision::parse("9").unwrap() < Revision::parse("10").unwrap());
    }
}
