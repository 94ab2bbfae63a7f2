//! A Service's spec, as the apiserver validates it: its ports (required but for a headless or
//! ExternalName Service; each named when there are several, names unique DNS labels, port
//! numbers and target ports in range, a supported protocol, no port and protocol twice), its
//! type and its session affinity.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::field::{Errors, Path, go_quote};
use super::names;

/// Sorted, as the apiserver lists them.
const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];
const TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
const AFFINITIES: &[&str] = &["ClientIP", "None"];

fn text<'a>(object: &'a Map<String, Value>, field: &str) -> Option<&'a str> {
    object.get(field).and_then(Value::as_str)
}

/// A Service's spec, as written (defaulted: a port's protocol, its target port, the type and
/// the session affinity are set by then).
pub(super) fn validate(object: &Map<String, Value>, errors: &mut Errors) {
    let empty = Map::new();
    let spec = object.get("spec").and_then(Value::as_object).unwrap_or(&empty);
    let path = Path::new("spec");
    let ports_at = path.child("ports");
    let ports: Vec<&Map<String, Value>> = spec
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .collect();
    let headless = text(spec, "clusterIP") == Some("None");
    let ty = text(spec, "type").unwrap_or_default();
    if ports.is_empty() && !headless && ty != "ExternalName" {
        errors.required(&ports_at);
    }
    let mut names = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        service_port(port, ports.len() > 1, &mut names, &ports_at.index(i), errors);
    }
    match text(spec, "sessionAffinity") {
        None | Some("") => errors.required(&path.child("sessionAffinity")),
        Some(a) if !AFFINITIES.contains(&a) => {
            errors.not_supported(&path.child("sessionAffinity"), a, AFFINITIES)
        }
        Some(_) => {}
    }
    if !TYPES.contains(&ty) {
        errors.not_supported(&path.child("type"), ty, TYPES);
    }
    // One port per port number and protocol.
    let mut seen = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let number = port.get("port").and_then(Value::as_i64).unwrap_or_default();
        let protocol = text(port, "protocol").unwrap_or_default();
        if !seen.insert((number, protocol)) {
            // The apiserver names the duplicate by the Go value of its key.
            let printed = format!(
                "core.ServicePort{{Name:\"\", Protocol:{}, AppProtocol:(*string)(nil), Port:{number}, \
                 TargetPort:intstr.IntOrString{{Type:0, IntVal:0, StrVal:\"\"}}, NodePort:0}}",
                go_quote(protocol)
            );
            errors.duplicate(&ports_at.index(i), Value::Null);
            if let Some(last) = errors.last_mut() {
                last.printed = Some(printed);
            }
        }
    }
}

fn service_port(
    port: &Map<String, Value>,
    name_required: bool,
    names: &mut BTreeSet<String>,
    at: &Path,
    errors: &mut Errors,
) {
    match text(port, "name").filter(|n| !n.is_empty()) {
        None if name_required => errors.required(&at.child("name")),
        None => {}
        Some(name) => {
            errors.invalid_each(&at.child("name"), name, names::dns1123_label(name));
            if !names.insert(name.to_owned()) {
                errors.duplicate(&at.child("name"), name);
            }
        }
    }
    // A number of the wrong type is the value-type checks' to refuse.
    let number = port.get("port").and_then(Value::as_i64).unwrap_or_default();
    for m in names::port_number(number) {
        errors.invalid(&at.child("port"), number, m);
    }
    match text(port, "protocol") {
        None | Some("") => errors.required(&at.child("protocol")),
        Some(p) if !PROTOCOLS.contains(&p) => errors.not_supported(&at.child("protocol"), p, PROTOCOLS),
        Some(_) => {}
    }
    match port.get("targetPort") {
        Some(Value::Number(n)) => {
            let n = n.as_i64().unwrap_or_default();
            for m in names::port_number(n) {
                errors.invalid(&at.child("targetPort"), n, m);
            }
        }
        Some(Value::String(name)) => {
            let messages = names::port_name(name);
            if !messages.is_empty() {
                errors.invalid_each(&at.child("targetPort"), name, messages);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::field::{obj, shown};
    use super::*;

    fn service(spec: Value) -> Map<String, Value> {
        obj(json!({"metadata": {"name": "s"}, "spec": spec}))
    }

    #[test]
    fn a_services_ports_type_and_affinity() {
        let ok = service(json!({"type": "ClusterIP", "sessionAffinity": "None", "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": "dns"}]}));
        assert_eq!(shown(|e| validate(&ok, e)), Vec::<String>::new());
        let bad = service(json!({"type": "Cluster", "sessionAffinity": "Sticky", "ports": [
            {"port": 0, "protocol": "ICMP", "targetPort": 70000},
            {"name": "Web", "port": 80, "protocol": "TCP", "targetPort": "web_port"},
            {"name": "a", "port": 80, "protocol": "TCP", "targetPort": 80},
            {"name": "a", "port": 81, "protocol": "TCP", "targetPort": 81}]}));
        assert_eq!(
            shown(|e| validate(&bad, e)),
            [
                "spec.ports[0].name: Required value",
                "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                "spec.ports[0].targetPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.ports[1].name: Invalid value: \"Web\": a lowercase RFC 1123 label must consist of lower case \
                 alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. \
                 'my-name' or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                "spec.ports[1].targetPort: Invalid value: \"web_port\": must contain only alpha-numeric characters \
                 (a-z, 0-9), and hyphens (-)",
                "spec.ports[3].name: Duplicate value: \"a\"",
                "spec.sessionAffinity: Unsupported value: \"Sticky\": supported values: \"ClientIP\", \"None\"",
                "spec.type: Unsupported value: \"Cluster\": supported values: \"ClusterIP\", \"ExternalName\", \
                 \"LoadBalancer\", \"NodePort\"",
                "spec.ports[2]: Duplicate value: core.ServicePort{Name:\"\", Protocol:\"TCP\", \
                 AppProtocol:(*string)(nil), Port:80, TargetPort:intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}, \
                 NodePort:0}",
            ]
        );
        // Ports are required, but for a headless or an ExternalName Service.
        let none = service(json!({"type": "ClusterIP", "sessionAffinity": "None"}));
        assert_eq!(shown(|e| validate(&none, e)), ["spec.ports: Required value"]);
        let headless = service(json!({"type": "ClusterIP", "sessionAffinity": "None", "clusterIP": "None"}));
        assert_eq!(shown(|e| validate(&headless, e)), Vec::<String>::new());
    }
}
