//! Names for objects created with `metadata.generateName`, as the apiserver's name generator
//! makes them: the prefix, cut so that the name fits in 63 characters, then five characters
//! of an alphabet without vowels (no word is spelled by chance) and without the digits that
//! read as letters; a create whose generated name is taken draws another.

/// The apiserver's alphabet for generated suffixes.
const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The length of a generated suffix.
const SUFFIX: usize = 5;

/// The longest prefix kept: a name of at most 63 characters, the longest DNS label.
const MAX_PREFIX: usize = 63 - SUFFIX;

/// How many names a create draws before it gives up on a prefix whose names are taken, as
/// the apiserver (for a million names under one prefix, eight draws all collide less than
/// once in a thousand creates).
pub(crate) const ATTEMPTS: usize = 8;

/// The prefix a create's `body` asks its name to be generated from: its `generateName`, when
/// it names itself no other way.
pub(crate) fn prefix_of(body: &serde_json::Value) -> Option<&str> {
    let meta = body.get("metadata")?;
    let named = meta
        .get("name")
        .and_then(serde_json::Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let prefix = meta.get("generateName")?.as_str()?;
    (!named && !prefix.is_empty()).then_some(prefix)
}

/// A name for `prefix`: the prefix cut to [`MAX_PREFIX`] bytes (at a character boundary; a
/// prefix that long with other than ASCII is no valid name anyway), and a random suffix.
pub(crate) fn generate(prefix: &str) -> String {
    let mut cut = prefix.len().min(MAX_PREFIX);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut name = String::with_capacity(cut + SUFFIX);
    name.push_str(&prefix[..cut]);
    name.extend((0..SUFFIX).map(|_| char::from(ALPHABET[fastrand::usize(..ALPHABET.len())])));
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_the_prefix_and_draw_from_the_alphabet() {
        for _ in 0..200 {
            let name = generate("web-");
            let suffix = name.strip_prefix("web-").unwrap();
            assert_eq!(suffix.len(), SUFFIX);
            assert!(suffix.bytes().all(|b| ALPHABET.contains(&b)), "{name}");
        }
    }

    #[test]
    fn long_prefixes_are_cut_to_fit_a_label() {
        let name = generate(&"a".repeat(100));
        assert_eq!(name.len(), 63);
        assert!(name.starts_with(&"a".repeat(58)));
        // Not through a character: a prefix that long is refused as a name anyway, not a panic.
        let name = generate(&format!("{}é", "a".repeat(57)));
        assert_eq!(name.len(), 57 + SUFFIX);
    }
}
