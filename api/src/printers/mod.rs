//! Printers: the columns `kubectl get` shows for each kind, and each object's cells, computed
//! as the apiserver's printers compute them (its `meta.k8s.io` Table output).
//!
//! A kind's declaration carries its [`Printer`]: the column definitions, and either a rule per
//! column ([`Cell`]) or one function that makes the whole row (the kinds whose cells share
//! work, a Pod's READY, STATUS and RESTARTS). Columns with priority 1 are the ones `-o wide`
//! adds. No HTTP here: the server wraps rows into Tables.

mod apps;
mod core;
mod other;

use std::time::{Duration, SystemTime};

use serde_json::{Map, Value, json};

pub(crate) use self::apps::*;
pub(crate) use self::core::*;
pub(crate) use self::other::*;

/// One column of a kind's Table.
#[derive(Clone, Debug)]
pub struct Column {
    /// Its header (`Name`, `Ready`).
    pub name: String,
    /// Its OpenAPI type: `string`, `integer`, `number`, `boolean` or `date`.
    pub kind: String,
    /// Its OpenAPI format (`name` for the name column), or empty.
    pub format: String,
    /// 0: always shown; 1: shown by `-o wide` only.
    pub priority: u8,
    /// What it shows.
    pub description: String,
    /// How its cell is made, when the printer has no row function.
    pub cell: Cell,
}

/// How one cell is made from an object.
#[derive(Clone, Debug)]
pub enum Cell {
    /// `metadata.name`.
    Name,
    /// How long ago `metadata.creationTimestamp` was, as kubectl prints ages (`5m30s`).
    Age,
    /// The value at a dotted path (`spec.replicas`), as it is; empty when unset.
    Path(String),
    /// A function of the object and the time now.
    Fn(fn(&Value, SystemTime) -> Value),
    /// The first value a JSONPath (Kubernetes' form, `.status.conditions[?(@.type=="Ready")].status`)
    /// finds, or null: a CRD's `additionalPrinterColumns`.
    JsonPath(String),
    /// Made by the printer's row function.
    Row,
}

/// A kind's columns and how its cells are made.
#[derive(Clone, Debug, Default)]
pub struct Printer {
    /// The columns, in order.
    pub columns: Vec<Column>,
    /// Makes every cell of a row at once, when given (then the columns' own rules are not
    /// used).
    pub row: Option<fn(&Value, SystemTime) -> Vec<Value>>,
}

impl Printer {
    /// The printer of a kind with no printer of its own: Name and Age, as the apiserver's
    /// default Table.
    pub fn default_columns() -> Printer {
        Printer {
            columns: vec![name(), age()],
            row: None,
        }
    }

    /// A printer with a rule per column.
    pub fn of(columns: Vec<Column>) -> Printer {
        Printer { columns, row: None }
    }

    /// A printer whose row function makes every cell.
    pub fn rows(columns: Vec<Column>, row: fn(&Value, SystemTime) -> Vec<Value>) -> Printer {
        Printer {
            columns,
            row: Some(row),
        }
    }

    /// The `columnDefinitions` of a Table.
    pub fn column_definitions(&self) -> Value {
        Value::Array(
            self.columns
                .iter()
                .map(|c| {
                    json!({"name": c.name, "type": c.kind, "format": c.format, "description": c.description, "priority": c.priority})
                })
                .collect(),
        )
    }

    /// The cells of `object`'s row as of `now`.
    pub fn cells(&self, object: &Value, now: SystemTime) -> Vec<Value> {
        if let Some(row) = self.row {
            return row(object, now);
        }
        self.columns
            .iter()
            .map(|c| match &c.cell {
                Cell::Name => json!(s(object, &["metadata", "name"]).unwrap_or_default()),
                Cell::Age => json!(age_of(object, now)),
                Cell::Path(path) => {
                    let path: Vec<&str> = path.split('.').collect();
                    at(object, &path).cloned().unwrap_or_else(|| json!(""))
                }
                Cell::Fn(f) => f(object, now),
                Cell::JsonPath(path) => json_path(object, path),
                Cell::Row => Value::Null,
            })
            .collect()
    }
}

fn column(name: &str, kind: &str, format: &str, priority: u8, description: &str, cell: Cell) -> Column {
    Column {
        name: name.to_owned(),
        kind: kind.to_owned(),
        format: format.to_owned(),
        priority,
        description: description.to_owned(),
        cell,
    }
}

/// The Name column.
pub fn name() -> Column {
    column(
        "Name",
        "string",
        "name",
        0,
        "Name must be unique within a namespace. It is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically.",
        Cell::Name,
    )
}

/// The Age column.
pub fn age() -> Column {
    column(
        "Age",
        "string",
        "",
        0,
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
        Cell::Age,
    )
}

/// A string column shown always, made by `f`.
pub fn col(name: &str, description: &str, f: fn(&Value, SystemTime) -> Value) -> Column {
    column(name, "string", "", 0, description, Cell::Fn(f))
}

/// An integer column shown always, made by `f`.
pub fn int_col(name: &str, description: &str, f: fn(&Value, SystemTime) -> Value) -> Column {
    column(name, "integer", "", 0, description, Cell::Fn(f))
}

/// A string column `-o wide` adds, made by `f`.
pub fn wide(name: &str, description: &str, f: fn(&Value, SystemTime) -> Value) -> Column {
    column(name, "string", "", 1, description, Cell::Fn(f))
}

/// A column whose cell the printer's row function makes.
pub fn row_col(name: &str, kind: &str, priority: u8, description: &str) -> Column {
    column(name, kind, "", priority, description, Cell::Row)
}

/// A column from a JSONPath-like dotted path, as a CRD's `additionalPrinterColumns` declare.
pub fn path_col(name: &str, kind: &str, format: &str, priority: u8, description: &str, path: &str) -> Column {
    column(
        name,
        kind,
        format,
        priority,
        description,
        Cell::Path(path.to_owned()),
    )
}

/// The first value `path` (Kubernetes' JSONPath form, without `$` or braces) finds in
/// `object`, or null.
fn json_path(object: &Value, path: &str) -> Value {
    use jsonpath_rust::JsonPath;
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let path = if path.starts_with('$') {
        path.to_owned()
    } else {
        format!("${path}")
    };
    match object.query(&path) {
        Ok(found) => found.first().map_or(Value::Null, |v| (*v).clone()),
        Err(_) => Value::Null,
    }
}

pub(crate) fn s<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path).and_then(Value::as_str)
}

pub(crate) fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

pub(crate) fn int(v: &Value, path: &[&str]) -> i64 {
    at(v, path).and_then(Value::as_i64).unwrap_or(0)
}

pub(crate) fn list<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    at(v, path).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

pub(crate) fn or_none(v: Option<&str>) -> String {
    v.filter(|s| !s.is_empty()).unwrap_or("<none>").to_owned()
}

pub(crate) fn count(v: &Value, fields: &[&str]) -> usize {
    fields
        .iter()
        .map(|f| v.get(*f).and_then(Value::as_object).map_or(0, Map::len))
        .sum()
}

/// The object's name cell.
pub(crate) fn name_of(o: &Value) -> Value {
    json!(s(o, &["metadata", "name"]).unwrap_or_default())
}

/// The object's age cell.
pub(crate) fn age_of(o: &Value, now: SystemTime) -> String {
    age_since(s(o, &["metadata", "creationTimestamp"]), now)
}

/// A label map as `a=b,c=d` (keys in order), or `<none>`.
pub(crate) fn labels(v: Option<&Value>) -> String {
    match v.and_then(Value::as_object) {
        Some(m) if !m.is_empty() => label_pairs(m).join(","),
        _ => "<none>".into(),
    }
}

/// A label map's `key=value` pairs, in order.
fn label_pairs(m: &Map<String, Value>) -> Vec<String> {
    let mut pairs: Vec<String> = m
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    pairs.sort();
    pairs
}

/// A label selector as the apiserver writes one as text (a Scale's `status.selector`, a
/// Table's Selector column): a `LabelSelector` (`matchLabels` and `matchExpressions`), a label
/// map (a ReplicationController's `spec.selector`), or a string as it is; empty when it selects
/// by nothing.
pub fn selector_text(v: &Value) -> String {
    let m = match v {
        Value::String(s) => return s.clone(),
        Value::Object(m) => m,
        _ => return String::new(),
    };
    if !m.contains_key("matchLabels") && !m.contains_key("matchExpressions") {
        return label_pairs(m).join(",");
    }
    let mut parts = m
        .get("matchLabels")
        .and_then(Value::as_object)
        .map(label_pairs)
        .unwrap_or_default();
    for e in m
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = s(e, &["key"]).unwrap_or_default();
        let values: Vec<&str> = list(e, &["values"]).iter().filter_map(Value::as_str).collect();
        parts.push(match s(e, &["operator"]).unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other}"),
        });
    }
    parts.join(",")
}

/// A label selector as a Table cell: [`selector_text`], or `<none>`.
pub(crate) fn selector(v: Option<&Value>) -> String {
    match v.map(selector_text) {
        Some(text) if !text.is_empty() => text,
        _ => "<none>".into(),
    }
}

/// The containers' names and images of a pod template at `path` (`spec.template`):
/// `(names, images)`, each joined by `,`.
pub(crate) fn containers_and_images(o: &Value, template: &[&str]) -> (String, String) {
    let mut path: Vec<&str> = template.to_vec();
    path.extend(["spec", "containers"]);
    let containers = list(o, &path);
    let names: Vec<&str> = containers.iter().filter_map(|c| s(c, &["name"])).collect();
    let images: Vec<&str> = containers.iter().filter_map(|c| s(c, &["image"])).collect();
    (names.join(","), images.join(","))
}

/// A timestamp as the apiserver prints a date column: RFC 3339 in UTC, to the second.
pub(crate) fn date(timestamp: Option<&str>) -> String {
    match timestamp.and_then(|t| humantime::parse_rfc3339_weak(t).ok()) {
        Some(t) => humantime::format_rfc3339_seconds(t).to_string(),
        None => "<unknown>".into(),
    }
}

/// The AGE cell: how long ago `timestamp` was, or `<unknown>`.
pub fn age_since(timestamp: Option<&str>, now: SystemTime) -> String {
    let Some(then) = timestamp.and_then(|t| humantime::parse_rfc3339_weak(t).ok()) else {
        return "<unknown>".into();
    };
    match now.duration_since(then) {
        Ok(d) => human(d),
        // A clock a little behind the writer's: up to a second reads as now.
        Err(e) if e.duration() < Duration::from_secs(2) => "0s".into(),
        Err(_) => "<invalid>".into(),
    }
}

/// A duration as kubectl shows ages: the two largest units while they are informative
/// (`90s`, `5m30s`, `3h15m`, `2d4h`, `1y20d`), one unit beyond.
pub fn human(d: Duration) -> String {
    let secs = d.as_secs();
    let (minutes, hours, days) = (secs / 60, secs / 3600, secs / 86_400);
    let pair = |a: u64, ua: &str, b: u64, ub: &str| {
        if b == 0 {
            format!("{a}{ua}")
        } else {
            format!("{a}{ua}{b}{ub}")
        }
    };
    if secs < 120 {
        format!("{secs}s")
    } else if minutes < 10 {
        pair(minutes, "m", secs % 60, "s")
    } else if minutes < 180 {
        format!("{minutes}m")
    } else if hours < 8 {
        pair(hours, "h", minutes % 60, "m")
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        pair(days, "d", hours % 24, "h")
    } else if days < 365 * 2 {
        format!("{days}d")
    } else if days < 365 * 8 {
        pair(days / 365, "y", days % 365, "d")
    } else {
        format!("{}y", days / 365)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (150, "2m30s"),
            (300, "5m"),
            (3600, "60m"),
            (3 * 3600 + 900, "3h15m"),
            (10 * 3600, "10h"),
            (50 * 3600, "2d2h"),
            (72 * 3600, "3d"),
            (30 * 86_400, "30d"),
            (800 * 86_400, "2y70d"),
            (3000 * 86_400, "8y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human(Duration::from_secs(secs)), want, "{secs}s");
        }
    }

    #[test]
    fn rbac_rows_show_the_role_and_each_kind_of_subject() {
        let now = humantime::parse_rfc3339("2026-01-01T01:00:00Z").unwrap();
        let binding = json!({
            "metadata": {"name": "b", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [
                {"kind": "User", "name": "alice"},
                {"kind": "Group", "name": "devs"},
                {"kind": "User", "name": "bob"},
                {"kind": "ServiceAccount", "name": "default", "namespace": "ns"},
            ],
        });
        assert_eq!(
            super::core::binding().cells(&binding, now),
            [
                json!("b"),
                json!("ClusterRole/view"),
                json!("60m"),
                json!("alice, bob"),
                json!("devs"),
                json!("ns/default")
            ]
        );
        assert_eq!(super::core::binding().columns.len(), 6);
        let role =
            json!({"metadata": {"name": "system:basic-user", "creationTimestamp": "2026-01-01T00:00:00Z"}});
        assert_eq!(
            created().cells(&role, now),
            [json!("system:basic-user"), json!("2026-01-01T00:00:00Z")]
        );
        assert_eq!(created().column_definitions()[1]["type"], "date");
    }

    fn pod_row(status: Value, deleting: bool) -> Vec<Value> {
        let mut pod = json!({
            "metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
            "status": status,
        });
        if deleting {
            pod["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:01:00Z");
        }
        let now = humantime::parse_rfc3339("2026-01-01T00:05:00Z").unwrap();
        super::core::pod().cells(&pod, now)
    }

    #[test]
    fn pod_rows_follow_the_apiservers_status_rules() {
        let running = json!({"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [
            {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}},
             "lastState": {"terminated": {"finishedAt": "2026-01-01T00:03:00Z"}}},
            {"name": "b", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
        ]});
        let cells = pod_row(running, false);
        assert_eq!(
            cells[..5],
            [
                json!("p"),
                json!("1/2"),
                json!("CrashLoopBackOff"),
                json!("2 (2m ago)"),
                json!("5m")
            ]
        );
        assert_eq!(
            cells[5..],
            [json!("10.0.0.1"), json!("n1"), json!("<none>"), json!("<none>")]
        );
        assert_eq!(pod_row(json!({"phase": "Running"}), true)[2], "Terminating");
        assert_eq!(pod_row(json!({"phase": "Pending"}), false)[1], "0/2");
        let init = json!({"phase": "Pending", "initContainerStatuses": [
            {"name": "i", "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]});
        assert_eq!(pod_row(init, false)[2], "Init:0/0");
        let exited = json!({"phase": "Running", "containerStatuses": [
            {"name": "a", "restartCount": 0, "state": {"terminated": {"exitCode": 3}}}]});
        assert_eq!(pod_row(exited, false)[2], "ExitCode:3");
    }

    #[test]
    fn node_rows_show_readiness_roles_and_addresses() {
        let node = json!({
            "metadata": {"name": "n", "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "edge"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "InternalIP", "address": "10.1.1.1"}],
                       "nodeInfo": {"kubeletVersion": "v1.32.0"}}
        });
        let cells = super::core::node().cells(&node, SystemTime::now());
        assert_eq!(cells[1], "Ready,SchedulingDisabled");
        assert_eq!(cells[2], "control-plane,edge");
        assert_eq!(cells[3], "<unknown>");
        assert_eq!(cells[4], "v1.32.0");
        assert_eq!(cells[5], "10.1.1.1");
        assert_eq!(cells[6], "<none>");
        assert_eq!(cells[7], "<unknown>");
    }
}

#[cfg(test)]
mod bounded {
    use super::*;

    #[test]
    fn an_endpoints_cell_is_made_from_three_addresses_whatever_the_object_holds() {
        let addresses: Vec<Value> = (0..20_000)
            .map(|i| json!({"ip": format!("10.0.{}.{}", i / 256, i % 256)}))
            .collect();
        let ports: Vec<Value> = (0..20_000).map(|p| json!({"port": p})).collect();
        let o = json!({"metadata": {"name": "e"}, "subsets": [{"addresses": addresses, "ports": ports}]});
        let cells = super::core::endpoints().cells(&o, SystemTime::now());
        assert_eq!(cells[1], "10.0.0.0:0,10.0.0.1:0,10.0.0.2:0 + 399999997 more...");
    }
}
