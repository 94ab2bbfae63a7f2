//! The string formats the apiserver's validation checks, each returning its messages (none
//! when the value is valid) in apimachinery's words: qualified names (label and annotation
//! keys, finalizers), label values, DNS labels and subdomains, port names, the keys of a
//! ConfigMap's or a Secret's data, and environment variable names. The formats are matched by hand; the messages quote the
//! regular expressions the apiserver matches them with.

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', \
     and must start and end with an alphanumeric character";
const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
     and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
     '-' or '.', and must start and end with an alphanumeric character";
const CONFIG_KEY_FMT: &str = "[-._a-zA-Z0-9]+";
const CONFIG_KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'";
const ENV_VAR_NAME_MSG: &str =
    "a valid environment variable name must consist only of printable ASCII characters other than '='";

/// Whether `value` can be a path segment, as RBAC object names (and roles named in bindings)
/// must be: not `.` or `..`, without `/` or `%`.
pub fn path_segment(value: &str) -> Vec<String> {
    if let Some(which) = [".", ".."].into_iter().find(|n| *n == value) {
        return vec![format!("may not be '{which}'")];
    }
    ["/", "%"]
        .into_iter()
        .filter(|c| value.contains(c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

/// A message for a value longer than `max`.
pub(crate) fn max_len(max: usize) -> String {
    format!("must be no more than {max} characters")
}

/// A message for a value that does not match `fmt`, with examples, as apimachinery writes it.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}'")).collect();
    format!(
        "{msg} (e.g. {}, regex used for validation is '{fmt}')",
        examples.join(" or ")
    )
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn is_qualified_name_format(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: &u8| c.is_ascii_alphanumeric();
    !b.is_empty()
        && b.first().is_some_and(edge)
        && b.last().is_some_and(edge)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, without its length limit.
fn is_dns1123_label_format(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.first().is_some_and(edge)
        && b.last().is_some_and(edge)
        && b.iter().all(|c| edge(c) || *c == b'-')
}

/// Labels joined by dots, without the length limit.
fn is_dns1123_subdomain_format(s: &str) -> bool {
    s.split('.').all(is_dns1123_label_format)
}

/// A qualified name: a label key, an annotation key (lowercased first), a finalizer.
pub(crate) fn qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_MSG,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len(63)));
    }
    if !is_qualified_name_format(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// A label's value: empty, or a qualified name's format, of at most 63 characters.
pub(crate) fn label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len(63));
    }
    if !value.is_empty() && !is_qualified_name_format(value) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// An RFC 1123 label (a container's name).
pub(crate) fn dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len(63));
    }
    if !is_dns1123_label_format(value) {
        if is_dns1123_subdomain_format(value) {
            errs.push("must not contain dots".to_owned());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// An RFC 1123 subdomain (a node's name, a label key's prefix).
pub(crate) fn dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 253 {
        errs.push(max_len(253));
    }
    if !is_dns1123_subdomain_format(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// An IANA service name (a port's name).
pub(crate) fn port_name(port: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if port.len() > 15 {
        errs.push(max_len(15));
    }
    if port.is_empty()
        || !port
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_owned());
    }
    if !port.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_owned());
    }
    if port.contains("--") {
        errs.push("must not contain consecutive hyphens".to_owned());
    }
    if port.starts_with('-') || port.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_owned());
    }
    errs
}

/// A key of a ConfigMap's or a Secret's data (a file name when mounted).
pub(crate) fn config_key(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 253 {
        errs.push(max_len(253));
    }
    let format = !value.is_empty()
        && value
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'));
    if !format {
        errs.push(regex_error(
            CONFIG_KEY_MSG,
            CONFIG_KEY_FMT,
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    match value {
        "." => errs.push("must not be '.'".to_owned()),
        ".." => errs.push("must not be '..'".to_owned()),
        v if v.starts_with("..") => errs.push("must not start with '..'".to_owned()),
        _ => {}
    }
    errs
}

/// An environment variable's name (or an `envFrom` prefix), by the rule the apiserver applies
/// since its `RelaxedEnvironmentVariableValidation` gate went on by default (1.32, the version
/// served here): any printable ASCII (the space included) but `=`, which ends a name in an
/// environment. Whether it is empty is the caller's to say (a required name, an optional prefix).
pub(crate) fn env_var_name(value: &str) -> Vec<String> {
    if value.bytes().all(|c| (b' '..=b'~').contains(&c) && c != b'=') {
        Vec::new()
    } else {
        vec![ENV_VAR_NAME_MSG.to_owned()]
    }
}

/// A port number, 1 to 65535.
pub(crate) fn port_number(port: i64) -> Vec<String> {
    if (1..=65535).contains(&port) {
        Vec::new()
    } else {
        vec!["must be between 1 and 65535, inclusive".to_owned()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        for ok in ["a", "app", "example.com/app", "A.b_c-d", "k8s.io/x"] {
            assert!(qualified_name(ok).is_empty(), "{ok}");
        }
        assert_eq!(
            qualified_name("-bad"),
            [
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an \
                 alphanumeric character (e.g. 'MyName' or 'my.name' or '123-abc', regex used for validation is \
                 '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            ]
        );
        assert_eq!(qualified_name("/x"), ["prefix part must be non-empty"]);
        assert!(qualified_name("Example.com/x")[0].starts_with("prefix part a lowercase RFC 1123 subdomain"));
        assert!(qualified_name("a/b/c")[0].starts_with("a qualified name must consist"));
        assert_eq!(
            qualified_name(&"x".repeat(64)),
            ["name part must be no more than 63 characters"]
        );
    }

    #[test]
    fn values_labels_and_keys() {
        assert!(label_value("").is_empty());
        assert!(label_value("my_value").is_empty());
        assert_eq!(
            label_value(&"v".repeat(64)),
            ["must be no more than 63 characters"]
        );
        assert_eq!(label_value("a b").len(), 1);
        assert!(dns1123_label("app-1").is_empty());
        assert_eq!(dns1123_label("a.b"), ["must not contain dots"]);
        assert!(dns1123_label("App")[0].starts_with("a lowercase RFC 1123 label"));
        assert!(dns1123_subdomain("node-1.example").is_empty());
        assert!(port_name("http").is_empty());
        assert_eq!(
            port_name("a-very-long-port-name"),
            ["must be no more than 15 characters"]
        );
        assert_eq!(port_name("80"), ["must contain at least one letter (a-z)"]);
        assert!(config_key("key.name").is_empty());
        assert_eq!(config_key(".."), ["must not be '..'"]);
        assert_eq!(config_key("..a"), ["must not start with '..'"]);
        assert_eq!(config_key("a b").len(), 1);
        assert_eq!(port_number(0).len(), 1);
        assert!(port_number(65535).is_empty());
    }
}
