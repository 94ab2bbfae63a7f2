//! Events, as the apiserver validates them: every Event by the legacy rules (an Event with an
//! `eventTime` names who reported it, with what action and reason), and one written through
//! `events.k8s.io/v1` by the strict rules too (an `eventTime`, a `Normal` or `Warning` type, no
//! deprecated field set, a series that is one). Field paths are the core Event's, as the
//! apiserver validates its internal form, but for the reporting controller, named as the
//! request's version names it (`reportingComponent` through `v1`). Fields are compared as Go
//! compares structs: one at its zero value equals one left out.

use serde_json::{Map, Value};

use super::field::{Errors, Path};
use super::names;

/// The longest `reportingInstance`, `action` and `reason`.
const SHORT_LIMIT: usize = 128;
/// The longest message (an events.k8s.io Event's `note`).
const NOTE_LIMIT: usize = 1024;

/// How a version names the fields the two forms name differently.
struct Form {
    involved: &'static str,
    message: &'static str,
    reporting_controller: &'static str,
}

const CORE: Form = Form {
    involved: "involvedObject",
    message: "message",
    reporting_controller: "reportingComponent",
};

const EVENTS_V1: Form = Form {
    involved: "regarding",
    message: "note",
    reporting_controller: "reportingController",
};

fn text<'a>(o: &'a Map<String, Value>, field: &str) -> &'a str {
    o.get(field).and_then(Value::as_str).unwrap_or_default()
}

/// Whether a time field is set (Go's zero time, `null` or absent, is not).
fn set(o: &Map<String, Value>, field: &str) -> bool {
    !matches!(o.get(field), None | Some(Value::Null)) && o.get(field).and_then(Value::as_str) != Some("")
}

fn namespace(o: &Map<String, Value>) -> &str {
    o.get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn legacy(o: &Map<String, Value>, form: &Form, errors: &mut Errors) {
    let involved_ns = o
        .get(form.involved)
        .and_then(|i| i.get("namespace"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let ns = namespace(o);
    let mismatch = Path::new("involvedObject").child("namespace");
    if !set(o, "eventTime") {
        // An old-style Event: its namespace is its object's (or default, for old clients).
        let agrees = if involved_ns.is_empty() {
            ns.is_empty() || ns == "default"
        } else {
            ns == involved_ns
        };
        if !agrees {
            errors.invalid(&mismatch, involved_ns, "does not match event.namespace");
        }
        return;
    }
    if involved_ns.is_empty() && ns != "default" && ns != "kube-system" {
        errors.invalid(&mismatch, involved_ns, "does not match event.namespace");
    }
    let controller = text(o, form.reporting_controller);
    let controller_path = Path::new(form.reporting_controller);
    if controller.is_empty() {
        errors.required(&controller_path);
    }
    errors.invalid_each(&controller_path, controller, names::qualified_name(controller));
    for field in ["reportingInstance", "action", "reason"] {
        let value = text(o, field);
        if value.is_empty() {
            errors.required(&Path::new(field));
        }
        if value.len() > SHORT_LIMIT {
            errors.invalid(
                &Path::new(field),
                "",
                format!("can have at most {SHORT_LIMIT} characters"),
            );
        }
    }
    if text(o, form.message).len() > NOTE_LIMIT {
        errors.invalid(
            &Path::new("message"),
            "",
            format!("can have at most {NOTE_LIMIT} characters"),
        );
    }
}

fn series(o: &Map<String, Value>, errors: &mut Errors) {
    let Some(Value::Object(series)) = o.get("series") else {
        return;
    };
    if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
        errors.invalid(&Path::new("series.count"), "", "should be at least 2");
    }
    if !set(series, "lastObservedTime") {
        errors.required(&Path::new("series.lastObservedTime"));
    }
}

/// A core Event's fields (created or updated through `v1`).
pub(super) fn core(o: &Map<String, Value>, errors: &mut Errors) {
    legacy(o, &CORE, errors);
}

/// An events.k8s.io/v1 Event's legacy rules, which its updates are held to too.
pub(super) fn events_v1_legacy(o: &Map<String, Value>, errors: &mut Errors) {
    legacy(o, &EVENTS_V1, errors);
}

/// A new events.k8s.io/v1 Event's strict rules, beyond the legacy ones.
pub(super) fn events_v1(o: &Map<String, Value>, errors: &mut Errors) {
    series(o, errors);
    if !set(o, "eventTime") {
        errors.required(&Path::new("eventTime"));
    }
    let ty = text(o, "type");
    if ty != "Normal" && ty != "Warning" {
        errors.invalid(&Path::new("type"), "", format!("has invalid value: {ty}"));
    }
    for (field, named) in [
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
    ] {
        if set(o, field) {
            errors.invalid(&Path::new(named), "", "needs to be unset");
        }
    }
    if o.get("deprecatedCount").and_then(Value::as_i64).unwrap_or(0) != 0 {
        errors.invalid(&Path::new("count"), "", "needs to be unset");
    }
    let source = o.get("deprecatedSource");
    let source_set = ["component", "host"].iter().any(|f| {
        source
            .and_then(|s| s.get(*f))
            .and_then(Value::as_str)
            .is_some_and(|v| !v.is_empty())
    });
    if source_set {
        errors.invalid(&Path::new("source"), "", "needs to be unset");
    }
}

/// What an events.k8s.io/v1 update may not change (all but its series and metadata), and its
/// series when it changed; the legacy rules are [`events_v1_legacy`]'s.
pub(super) fn events_v1_update(o: &Map<String, Value>, old: &Map<String, Value>, errors: &mut Errors) {
    // A series changed is checked again.
    if o.get("series") != old.get("series") {
        series(o, errors);
    }
    // In the apiserver's order, `reason` twice as it checks it.
    for (field, named) in [
        ("regarding", "involvedObject"),
        ("reason", "reason"),
        ("note", "message"),
        ("deprecatedSource", "source"),
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
        ("deprecatedCount", "count"),
        ("reason", "reason"),
        ("type", "type"),
        ("eventTime", "eventTime"),
        ("action", "action"),
        ("related", "related"),
        ("reportingController", "reportingController"),
        ("reportingInstance", "reportingInstance"),
    ] {
        let changed = if field == "eventTime" {
            // Within a microsecond is the same time: clients truncate to microseconds when
            // they serialize, and some serialized nanoseconds.
            micros(o.get(field)) != micros(old.get(field))
        } else {
            !same(o.get(field), old.get(field))
        };
        if changed {
            errors.invalid(
                &Path::new(named),
                o.get(field).cloned().unwrap_or(Value::Null),
                "field is immutable",
            );
        }
    }
}

/// A time field to the microsecond, or its value as it is when it is no time.
fn micros(v: Option<&Value>) -> Result<i128, Option<&Value>> {
    v.and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_nanosecond().div_euclid(1000))
        .ok_or(v)
}

/// Whether `v` is Go's zero value of its field: absent, null, `false`, `0`, `""`, an empty
/// list, or an object of zero values.
fn zero(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => true,
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(m)) => m.values().all(|v| zero(Some(v))),
        Some(Value::Bool(true)) => false,
    }
}

/// Equal as Go's semantic equality compares the fields of a struct: a field at its zero value
/// equals one left out.
fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            x.keys().chain(y.keys()).all(|k| same(x.get(k), y.get(k)))
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(Some(p), Some(q)))
        }
        (Some(Value::Number(x)), Some(Value::Number(y))) => x.as_f64() == y.as_f64(),
        _ if zero(a) && zero(b) => true,
        _ => a == b,
    }
}
