//! A field's validation error as the apiserver reports it: its type (the cause's `reason`), its
//! path (`spec.containers[0].image`), the value it refused and why; and the message each
//! renders to, as apimachinery's `field.Error` renders it (`Invalid value: "x": why`).

use std::fmt;

use serde_json::Value;

/// The type of a field error: the Status cause's `reason`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A value that is needed is missing.
    Required,
    /// A value is malformed or out of range.
    Invalid,
    /// A value is not one of the values allowed.
    NotSupported,
    /// A value that must be unique is not.
    Duplicate,
    /// A value that is valid is not allowed here or now.
    Forbidden,
    /// A value is too long (the value itself is not repeated).
    TooLong,
    /// A value is not of its field's type.
    TypeInvalid,
    /// A list or map has too many entries.
    TooMany,
}

impl ErrorKind {
    /// The cause's `reason`.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorKind::Required => "FieldValueRequired",
            ErrorKind::Invalid => "FieldValueInvalid",
            ErrorKind::NotSupported => "FieldValueNotSupported",
            ErrorKind::Duplicate => "FieldValueDuplicate",
            ErrorKind::Forbidden => "FieldValueForbidden",
            ErrorKind::TooLong => "FieldValueTooLong",
            ErrorKind::TypeInvalid => "FieldValueTypeInvalid",
            ErrorKind::TooMany => "FieldValueTooMany",
        }
    }

    fn label(self) -> &'static str {
        match self {
            ErrorKind::Required => "Required value",
            ErrorKind::Invalid => "Invalid value",
            ErrorKind::NotSupported => "Unsupported value",
            ErrorKind::Duplicate => "Duplicate value",
            ErrorKind::Forbidden => "Forbidden",
            ErrorKind::TooLong => "Too long",
            ErrorKind::TypeInvalid => "Invalid value",
            ErrorKind::TooMany => "Too many",
        }
    }

    /// Whether the message names the refused value.
    fn shows_value(self) -> bool {
        matches!(
            self,
            ErrorKind::Invalid
                | ErrorKind::NotSupported
                | ErrorKind::Duplicate
                | ErrorKind::TypeInvalid
                | ErrorKind::TooMany
        )
    }
}

/// One refused field.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// What is wrong: the cause's reason.
    pub kind: ErrorKind,
    /// The path, as the apiserver writes it.
    pub field: String,
    /// The refused value (a string or a number), shown for the kinds that show it.
    pub value: Value,
    /// How Go prints the refused value when it is a struct or a list
    /// (`rbac.RoleRef{APIGroup:"…", Kind:"…", Name:"…"}`), shown rather than `value`.
    pub printed: Option<String>,
    /// Why, when there is more to say.
    pub detail: String,
}

impl FieldError {
    /// The message without the field: the cause's `message` (`Invalid value: "x": why`).
    pub fn body(&self) -> String {
        let mut s = self.kind.label().to_owned();
        if self.kind.shows_value() {
            s.push_str(": ");
            match &self.printed {
                Some(printed) => s.push_str(printed),
                None => s.push_str(&go_value(&self.value)),
            }
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    /// `field: body`, as the Status message lists each.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// A value as Go's validation prints it: a string quoted (`%q`), a number as it is.
fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        // apimachinery prints a nil value as the string "null".
        Value::Null => "\"null\"".to_owned(),
        other => other.to_string(),
    }
}

/// `s` quoted as Go's `%q` quotes it: escapes for quotes, backslashes and control characters.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The errors a validation collects, in order.
#[derive(Debug, Default)]
pub(crate) struct Errors(Vec<FieldError>);

impl Errors {
    pub(crate) fn push(&mut self, kind: ErrorKind, field: &Path, value: Value, detail: impl Into<String>) {
        self.0.push(FieldError {
            kind,
            field: field.0.clone(),
            value,
            printed: None,
            detail: detail.into(),
        });
    }

    pub(crate) fn required(&mut self, field: &Path) {
        self.push(ErrorKind::Required, field, Value::Null, "");
    }

    /// Required, saying why.
    pub(crate) fn required_because(&mut self, field: &Path, why: impl Into<String>) {
        self.push(ErrorKind::Required, field, Value::Null, why);
    }

    /// Invalid, the value a struct or a list that Go prints as `printed`.
    pub(crate) fn invalid_printed(
        &mut self,
        field: &Path,
        value: Value,
        printed: String,
        why: impl Into<String>,
    ) {
        self.invalid(field, value, why);
        if let Some(last) = self.0.last_mut() {
            last.printed = Some(printed);
        }
    }

    pub(crate) fn invalid(&mut self, field: &Path, value: impl Into<Value>, why: impl Into<String>) {
        self.push(ErrorKind::Invalid, field, value.into(), why);
    }

    /// Not one of `supported`, which the message lists quoted, in the order given.
    pub(crate) fn not_supported(&mut self, field: &Path, value: impl Into<Value>, supported: &[&str]) {
        let listed: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
        let detail = format!("supported values: {}", listed.join(", "));
        self.push(ErrorKind::NotSupported, field, value.into(), detail);
    }

    pub(crate) fn duplicate(&mut self, field: &Path, value: impl Into<Value>) {
        self.push(ErrorKind::Duplicate, field, value.into(), "");
    }

    pub(crate) fn forbidden(&mut self, field: &Path, why: impl Into<String>) {
        self.push(ErrorKind::Forbidden, field, Value::Null, why);
    }

    /// Longer than `max` bytes.
    pub(crate) fn too_long(&mut self, field: &Path, max: usize) {
        let unit = if max == 1 { "byte" } else { "bytes" };
        self.push(
            ErrorKind::TooLong,
            field,
            Value::Null,
            format!("may not be more than {max} {unit}"),
        );
    }

    /// One `invalid` per message, as the apiserver reports each message of a format check.
    pub(crate) fn invalid_each(&mut self, field: &Path, value: &str, messages: Vec<String>) {
        for m in messages {
            self.invalid(field, value, m);
        }
    }

    /// Adds an error found elsewhere.
    pub(crate) fn push_error(&mut self, e: FieldError) {
        self.0.push(e);
    }

    /// The last error collected, to amend.
    pub(crate) fn last_mut(&mut self) -> Option<&mut FieldError> {
        self.0.last_mut()
    }

    /// Forgets the errors collected after the first `len`.
    pub(crate) fn truncate(&mut self, len: usize) {
        self.0.truncate(len);
    }

    /// The errors collected so far.
    pub(crate) fn list(&self) -> &[FieldError] {
        &self.0
    }

    /// The errors collected, in order.
    pub(crate) fn into_vec(self) -> Vec<FieldError> {
        self.0
    }

    pub(crate) fn into_result(self) -> Result<(), super::Refusal> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(super::Refusal::Invalid(self.0))
        }
    }
}

/// A field path as the apiserver writes it: `spec.containers[0].resources.limits[cpu]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Path(pub(crate) String);

impl Path {
    pub(crate) fn new(root: &str) -> Path {
        Path(root.to_owned())
    }

    pub(crate) fn child(&self, name: &str) -> Path {
        if self.0.is_empty() {
            Path(name.to_owned())
        } else {
            Path(format!("{}.{name}", self.0))
        }
    }

    pub(crate) fn index(&self, i: usize) -> Path {
        Path(format!("{}[{i}]", self.0))
    }

    pub(crate) fn key(&self, key: &str) -> Path {
        Path(format!("{}[{key}]", self.0))
    }
}

/// What a check reports, each error as apimachinery prints it (for the checks' own tests).
#[cfg(test)]
pub(super) fn shown(f: impl FnOnce(&mut Errors)) -> Vec<String> {
    let mut e = Errors::default();
    f(&mut e);
    match e.into_result() {
        Ok(()) => Vec::new(),
        Err(super::Refusal::Invalid(list)) => list.iter().map(ToString::to_string).collect(),
        Err(other) => panic!("{other:?}"),
    }
}

/// A JSON object written with `json!` (for the checks' own tests).
#[cfg(test)]
pub(super) fn obj(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    v.as_object().cloned().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn messages_render_as_apimachinery_renders_them() {
        let mut e = Errors::default();
        let p = Path::new("spec").child("containers").index(0);
        e.required(&p.child("image"));
        e.invalid(
            &p.child("ports").index(0).child("containerPort"),
            70000,
            "must be between 1 and 65535, inclusive",
        );
        e.not_supported(
            &Path::new("spec").child("restartPolicy"),
            "Sometimes",
            &["Always", "OnFailure", "Never"],
        );
        e.duplicate(&p.child("name"), "app");
        e.forbidden(&Path::new("metadata").child("finalizers"), "no");
        e.too_long(&Path::new("metadata").child("annotations"), 262144);
        e.invalid(&Path::new("data").key("a b"), "a \"b\"", "why");
        let shown: Vec<String> = e.0.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "spec.containers[0].image: Required value",
                "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
                "spec.containers[0].name: Duplicate value: \"app\"",
                "metadata.finalizers: Forbidden: no",
                "metadata.annotations: Too long: may not be more than 262144 bytes",
                "data[a b]: Invalid value: \"a \\\"b\\\"\": why",
            ]
        );
        assert_eq!(e.0[0].kind.reason(), "FieldValueRequired");
        assert_eq!(e.0[1].value, json!(70000));
    }
}
