//! Static bearer tokens: kube-apiserver's `--token-auth-file`, a CSV file of
//! `token,user,uid[,"group1,group2"]` lines (columns past the fourth are ignored).
//!
//! The file is read once, at start; a file that does not read as that CSV refuses the start,
//! as the apiserver refuses it. As there: blank lines are skipped, a line with an empty token
//! is skipped, and of two lines with one token the later wins (both with a warning).
//!
//! Lookup does not compare a presented token with the stored ones byte by byte in a way its
//! timing could reveal: tokens are filed by a SipHash under a key drawn at start (std's
//! `RandomState`), so which bucket a guess lands in says nothing an attacker can use, and the
//! few tokens in that bucket are compared in constant time (`subtle`).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use subtle::ConstantTimeEq;

use super::UserInfo;

/// Why a token file was refused.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// The file could not be read.
    #[error("cannot read the token file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not CSV (a stray quote, say).
    #[error("token file {path}: {source}")]
    Csv {
        /// The file.
        path: PathBuf,
        /// Where and why.
        source: csv::Error,
    },
    /// A line has fewer than the three columns every line needs.
    #[error(
        "token file {path}, line {line}: needs at least 3 columns (token, user name, user uid), found {found}"
    )]
    Columns {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: u64,
        /// How many columns it has.
        found: usize,
    },
}

/// The tokens whose keyed hash is one value, each with its user.
type Bucket = Vec<(Box<[u8]>, Arc<UserInfo>)>;

/// The tokens of a token file, each with its user.
pub struct TokenFile {
    hasher: std::collections::hash_map::RandomState,
    by_hash: HashMap<u64, Bucket>,
    len: usize,
}

impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens.
        f.debug_struct("TokenFile").field("tokens", &self.len).finish()
    }
}

impl TokenFile {
    /// Reads and parses `path`.
    pub fn read(path: &Path) -> Result<TokenFile, TokenFileError> {
        let text = std::fs::read(path).map_err(|source| TokenFileError::Read {
            path: path.to_owned(),
            source,
        })?;
        TokenFile::parse(&text, path)
    }

    /// Parses the CSV `text` (`path` names it in errors and warnings).
    pub fn parse(text: &[u8], path: &Path) -> Result<TokenFile, TokenFileError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(text);
        let mut file = TokenFile {
            hasher: Default::default(),
            by_hash: HashMap::new(),
            len: 0,
        };
        for record in reader.records() {
            let record = record.map_err(|source| TokenFileError::Csv {
                path: path.to_owned(),
                source,
            })?;
            let line = record.position().map_or(0, csv::Position::line);
            if record.len() < 3 {
                return Err(TokenFileError::Columns {
                    path: path.to_owned(),
                    line,
                    found: record.len(),
                });
            }
            let token = &record[0];
            if token.is_empty() {
                tracing::warn!(path = %path.display(), line, "an empty token in the token file: line skipped");
                continue;
            }
            let groups = record
                .get(3)
                .map(|g| {
                    g.split(',')
                        .filter(|g| !g.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            let user = Arc::new(UserInfo::authenticated(&record[1], &record[2], groups));
            if file.insert(token.as_bytes(), user) {
                tracing::warn!(path = %path.display(), line, "a token given twice in the token file: the later line holds");
            }
        }
        Ok(file)
    }

    /// Files `token` for `user`; whether it replaced an earlier line's.
    fn insert(&mut self, token: &[u8], user: Arc<UserInfo>) -> bool {
        let bucket = self.by_hash.entry(self.hasher.hash_one(token)).or_default();
        if let Some(slot) = bucket.iter_mut().find(|(t, _)| bool::from(t.ct_eq(token))) {
            slot.1 = user;
            return true;
        }
        bucket.push((token.into(), user));
        self.len += 1;
        false
    }

    /// The user of `token`, if it is in the file.
    pub fn user(&self, token: &str) -> Option<Arc<UserInfo>> {
        let bucket = self.by_hash.get(&self.hasher.hash_one(token.as_bytes()))?;
        let mut found = None;
        // Every candidate is compared, so the time does not say which one matched.
        for (t, user) in bucket {
            if bool::from(t.ct_eq(token.as_bytes())) {
                found = Some(user);
            }
        }
        found.cloned()
    }

    /// How many tokens the file holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the file holds no token.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<TokenFile, TokenFileError> {
        TokenFile::parse(text.as_bytes(), Path::new("tokens.csv"))
    }

    #[test]
    fn a_token_file_gives_each_token_its_user_and_groups() {
        let file = parse(
            "t-alice,alice,1001,\"dev,ops\"\n\
             \n\
             t-bob,bob,1002\n\
             t-carol,carol,1003,admins,ignored,columns\n\
             ,nobody,0\n\
             t-bob,robert,1004,\n",
        )
        .unwrap();
        assert_eq!(file.len(), 3);
        let alice = file.user("t-alice").unwrap();
        assert_eq!((alice.name.as_str(), alice.uid.as_str()), ("alice", "1001"));
        assert_eq!(alice.groups, ["dev", "ops", "system:authenticated"]);
        // The later line of a token given twice holds; an empty groups column is no group.
        let bob = file.user("t-bob").unwrap();
        assert_eq!(
            (bob.name.as_str(), bob.groups.as_slice()),
            ("robert", &["system:authenticated".to_owned()][..])
        );
        assert_eq!(
            file.user("t-carol").unwrap().groups,
            ["admins", "system:authenticated"]
        );
        assert!(file.user("t-alic").is_none());
        assert!(file.user("").is_none());
        assert!(file.user("t-alice ").is_none());
        assert!(!format!("{file:?}").contains("t-alice"), "Debug shows no token");
    }

    #[test]
    fn a_malformed_token_file_is_refused_naming_the_line() {
        let e = parse("t1,alice,1\nt2,bob\n").err().unwrap();
        assert!(
            matches!(
                e,
                TokenFileError::Columns {
                    line: 2,
                    found: 2,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("line 2"), "{e}");
        let e = parse("t1,\"alice,1\n").err().unwrap();
        assert!(
            matches!(e, TokenFileError::Csv { .. }) || matches!(e, TokenFileError::Columns { .. }),
            "{e}"
        );
        let e = TokenFile::read(Path::new("/nonexistent/tokens.csv"))
            .err()
            .unwrap();
        assert!(e.to_string().contains("/nonexistent/tokens.csv"), "{e}");
    }

    #[test]
    fn an_empty_token_file_holds_no_token() {
        let file = parse("").unwrap();
        assert!(file.is_empty());
        assert!(file.user("anything").is_none());
    }
}
