//! Kubernetes name rules, checked in one place: what label-key prefixes, object names and
//! namespaces must look like (apimachinery's `IsDNS1123Subdomain` and `IsDNS1123Label`).

/// The longest DNS-1123 subdomain.
const DNS1123_SUBDOMAIN_MAX: usize = 253;

/// The longest DNS-1123 label.
const DNS1123_LABEL_MAX: usize = 63;

/// Whether `s` is a DNS-1123 label: 1 to 63 lowercase alphanumerics and `-`, starting and
/// ending alphanumeric (apimachinery's `IsDNS1123Label`; what namespace names must be).
///
/// ```
/// use watchcache_core::is_dns1123_label;
///
/// assert!(is_dns1123_label("kube-system"));
/// for bad in ["", "Kube", "a.b", "a/b", "-a", "a-"] {
///     assert!(!is_dns1123_label(bad), "{bad:?}");
/// }
/// ```
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= DNS1123_LABEL_MAX && is_label_part(s)
}

/// One dot-free part: non-empty lowercase alphanumerics and `-`, alphanumeric at both ends.
fn is_label_part(part: &str) -> bool {
    !part.is_empty()
        && part
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !part.starts_with('-')
        && !part.ends_with('-')
}

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
    !s.is_empty() && s.len() <= DNS1123_SUBDOMAIN_MAX && s.split('.').all(is_label_part)
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

    #[test]
    fn labels_are_short_dot_free_subdomains() {
        assert!(is_dns1123_label("a"));
        assert!(is_dns1123_label(&"a".repeat(63)));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        for bad in ["", "a.b", "A", "a_b", "a-", "-a", "a/b"] {
            assert!(!is_dns1123_label(bad), "{bad:?}");
        }
    }
}
