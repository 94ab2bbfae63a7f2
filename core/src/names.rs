//! Kubernetes name rules, checked in one place: what label-key prefixes and object names must
//! look like (apimachinery's `validation.IsDNS1123Subdomain`).

/// The longest DNS-1123 subdomain.
const DNS1123_SUBDOMAIN_MAX: usize = 253;

/// Whether `s` is a DNS-1123 subdomain: at most 253 characters, dot-separated parts of
/// lowercase alphanumerics and `-`, each part non-empty and starting and ending alphanumeric.
///
/// ```
/// use watchcache_core::is_dns1123_subdomain;
///
/// assert!(is_dns1123_subdomain("web-0.example"));
/// for bad in ["", "Web", "a/b", "-a", "a.", "a..b"] {
///     assert!(!is_dns1123_subdomain(bad), "{bad:?}");
/// }
/// ```
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= DNS1123_SUBDOMAIN_MAX
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomains_are_bounded_lowercase_dotted_parts() {
        assert!(is_dns1123_subdomain("a"));
        assert!(is_dns1123_subdomain("kubernetes.io"));
        assert!(is_dns1123_subdomain(&"a".repeat(253)));
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
        for bad in ["", "A", "a_b", "a-", ".a", "a b", "ä"] {
            assert!(!is_dns1123_subdomain(bad), "{bad:?}");
        }
    }
}
