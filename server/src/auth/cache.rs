//! [`DecisionCache`]: authorization decisions by request attributes, under one policy
//! version, in a bounded space.
//!
//! Two generations: new decisions go to the young
//! map; when it is full (half the capacity), it becomes the old map and the old one is
//! dropped whole. A hit in the old map moves its entry to the young one, so decisions in use
//! survive the turnover. Every operation is O(1) and the cache never holds more than its
//! capacity, without the bookkeeping an LRU list needs. A lookup or insert under another
//! policy version than the cache's empties it: decisions outlive no policy change.

use std::collections::HashMap;
use std::sync::Mutex;

use super::{Attributes, Decision};

/// Cached decisions under one policy version.
#[derive(Debug)]
pub(crate) struct DecisionCache {
    inner: Mutex<Generations>,
    /// Entries per generation: half the capacity.
    half: usize,
}

#[derive(Debug, Default)]
struct Generations {
    version: u64,
    young: HashMap<Attributes, Decision>,
    old: HashMap<Attributes, Decision>,
}

impl Generations {
    /// Empties the cache if it holds another version's decisions.
    fn at(&mut self, version: u64) {
        if self.version != version {
            self.version = version;
            self.young.clear();
            self.old.clear();
        }
    }

    fn insert(&mut self, key: Attributes, decision: Decision, half: usize) {
        if self.young.len() >= half {
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(key, decision);
    }
}

impl DecisionCache {
    /// A cache of at most `capacity` decisions (at least 2).
    pub(crate) fn new(capacity: usize) -> Self {
        DecisionCache {
            inner: Mutex::new(Generations::default()),
            half: (capacity / 2).max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        // A panic while holding the lock leaves the maps as they were: still a valid cache.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The decision on `key` under policy `version`, if cached.
    pub(crate) fn get(&self, version: u64, key: &Attributes) -> Option<Decision> {
        let mut g = self.lock();
        g.at(version);
        if let Some(d) = g.young.get(key) {
            return Some(d.clone());
        }
        let (key, d) = g.old.remove_entry(key)?;
        g.insert(key, d.clone(), self.half);
        Some(d)
    }

    /// Caches `decision` on `key` under policy `version`.
    pub(crate) fn insert(&self, version: u64, key: Attributes, decision: Decision) {
        let mut g = self.lock();
        g.at(version);
        g.insert(key, decision, self.half);
    }

    /// How many decisions it holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let g = self.lock();
        g.young.len() + g.old.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::auth::UserInfo;

    fn key(i: usize) -> Attributes {
        crate::auth::request::attributes(
            Arc::new(UserInfo::anonymous()),
            "GET",
            &format!("/api/v1/namespaces/ns/pods/p{i}"),
            None,
        )
        .unwrap()
    }

    #[test]
    fn the_cache_stays_within_its_capacity_and_keeps_what_is_used() {
        let cache = DecisionCache::new(10);
        let hot = key(0);
        cache.insert(1, hot.clone(), Decision::Allow("hot".into()));
        for i in 1..100 {
            cache.insert(1, key(i), Decision::Deny(String::new()));
            assert!(cache.len() <= 10);
            // Used all along, the hot entry survives every turnover.
            assert_eq!(cache.get(1, &hot), Some(Decision::Allow("hot".into())), "{i}");
        }
        assert_eq!(cache.get(1, &key(1)), None, "a cold entry is gone");
        assert_eq!(cache.get(1, &key(99)), Some(Decision::Deny(String::new())));
    }

    #[test]
    fn another_policy_version_empties_the_cache() {
        let cache = DecisionCache::new(10);
        cache.insert(1, key(1), Decision::Allow(String::new()));
        assert!(cache.get(1, &key(1)).is_some());
        assert_eq!(cache.get(2, &key(1)), None);
        assert_eq!(cache.len(), 0);
        cache.insert(2, key(1), Decision::Deny(String::new()));
        assert_eq!(cache.get(2, &key(1)), Some(Decision::Deny(String::new())));
    }
}
