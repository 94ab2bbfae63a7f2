//! Continue tokens: opaque, URL-safe, validated.
//!
//! The shape is the apiserver's (`storage.EncodeContinue`): unpadded URL-safe base64 of
//! `{"v":"meta.k8s.io/v1","rv":N,"start":"<key>\u0000"}`, where `start` is the key after the
//! last one returned, relative to the resource. Two fields are added: `"r"`, the resource the
//! token was minted for, and `"t"`, a SipHash-2-4 tag (128 bits, a keyed PRF) over the rest,
//! keyed with the store's signing key ([`Source::signing_key`](crate::Source::signing_key)):
//! every cache over one store, a restarted server or another replica, verifies the tokens of
//! the others. A token that was edited, truncated, or minted for another resource or over
//! another store is refused with a reason, never read outside its resource.

use std::hash::Hasher;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::object::ObjectKey;
use crate::rv::Revision;
use crate::source::{parse_storage_key, storage_key};

const VERSION: &str = "meta.k8s.io/v1";

/// Mints and checks the continue tokens of one cache.
#[derive(Debug)]
pub(crate) struct Tokens {
    resource: String,
    key: [u8; 16],
}

/// What a valid token names: a snapshot revision and the key the page starts after.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Continue {
    pub(crate) revision: Revision,
    pub(crate) after: ObjectKey,
}

/// The key relative to the resource's prefix, as the apiserver writes it into `start`.
fn relative(key: &ObjectKey) -> String {
    storage_key("", key)
}

impl Tokens {
    /// Tokens of `resource`, signed with the store's `key`.
    pub(crate) fn new(resource: &str, key: [u8; 16]) -> Self {
        Tokens {
            resource: resource.to_owned(),
            key,
        }
    }

    fn tag(&self, revision: u64, start: &str) -> String {
        let mut mac = siphasher::sip128::SipHasher24::new_with_key(&self.key);
        // Length-prefixed fields: no two (resource, start) pairs feed the same bytes.
        for field in [self.resource.as_bytes(), start.as_bytes()] {
            mac.write_u64(field.len() as u64);
            mac.write(field);
        }
        mac.write_u64(revision);
        format!("{:032x}", siphasher::sip128::Hasher128::finish128(&mac).as_u128())
    }

    /// A token for the page after `last`, in the snapshot at `revision`.
    pub(crate) fn encode(&self, revision: Revision, last: &ObjectKey) -> String {
        let start = format!("{}\u{0}", relative(last));
        let json = serde_json::json!({
            "v": VERSION,
            "rv": revision.get(),
            "start": start,
            "r": self.resource,
            "t": self.tag(revision.get(), &start),
        });
        URL_SAFE_NO_PAD.encode(json.to_string())
    }

    /// Checks a token; the error says what was wrong.
    pub(crate) fn decode(&self, token: &str) -> Result<Continue, String> {
        let raw = URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|_| "not base64".to_owned())?;
        let value: serde_json::Value =
            serde_json::from_slice(&raw).map_err(|_| "not a continue token".to_owned())?;
        let field = |name: &str| value.get(name);
        if field("v").and_then(|v| v.as_str()) != Some(VERSION) {
            return Err(format!("unsupported continue token version (expected {VERSION})"));
        }
        let revision = field("rv")
            .and_then(|v| v.as_u64())
            .filter(|&rv| rv > 0)
            .ok_or("no resource version")?;
        let start = field("start").and_then(|v| v.as_str()).ok_or("no start key")?;
        if field("r").and_then(|v| v.as_str()) != Some(self.resource.as_str()) {
            return Err(format!("the token is not for {}", self.resource));
        }
        if field("t").and_then(|v| v.as_str()) != Some(self.tag(revision, start).as_str()) {
            return Err("the token was not issued by this server or has been altered".to_owned());
        }
        let last = start.strip_suffix('\u{0}').ok_or("malformed start key")?;
        let after = parse_storage_key("", last).ok_or("malformed start key")?;
        Ok(Continue {
            revision: Revision::new(revision),
            after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 16] = [7; 16];

    #[test]
    fn a_token_round_trips_and_is_url_safe() {
        let t = Tokens::new("pods", KEY);
        for key in [ObjectKey::new("default", "web-0"), ObjectKey::cluster("node-1")] {
            let token = t.encode(Revision::new(42), &key);
            assert!(
                token
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "{token}"
            );
            assert_eq!(
                t.decode(&token),
                Ok(Continue {
                    revision: Revision::new(42),
                    after: key
                })
            );
        }
    }

    #[test]
    fn the_token_has_the_apiserver_shape() {
        let t = Tokens::new("pods", KEY);
        let token = t.encode(Revision::new(7), &ObjectKey::new("ns", "a"));
        let json: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(token).unwrap()).unwrap();
        assert_eq!(json["v"], "meta.k8s.io/v1");
        assert_eq!(json["rv"], 7);
        assert_eq!(json["start"], "ns/a\u{0}");
    }

    #[test]
    fn tampered_foreign_and_malformed_tokens_are_refused() {
        let pods = Tokens::new("pods", KEY);
        let token = pods.encode(Revision::new(7), &ObjectKey::new("ns", "a"));
        assert!(
            Tokens::new("configmaps", KEY).decode(&token).is_err(),
            "another resource"
        );
        assert!(
            Tokens::new("pods", [9; 16]).decode(&token).is_err(),
            "another store's key"
        );
        assert!(
            Tokens::new("pods", KEY).decode(&token).is_ok(),
            "the same store's key, anywhere"
        );
        let mut json: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&token).unwrap()).unwrap();
        json["rv"] = 8.into();
        assert!(
            pods.decode(&URL_SAFE_NO_PAD.encode(json.to_string())).is_err(),
            "edited revision"
        );
        json["rv"] = 7.into();
        json["start"] = "zz/z\u{0}".into();
        assert!(
            pods.decode(&URL_SAFE_NO_PAD.encode(json.to_string())).is_err(),
            "edited key"
        );
        for bad in ["", "!!!", "e30", &token[..token.len() / 2], "bm90IGpzb24"] {
            assert!(pods.decode(bad).is_err(), "{bad:?}");
        }
    }
}
