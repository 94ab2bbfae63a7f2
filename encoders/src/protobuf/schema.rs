//! The shape of the generated schema (`generated.rs`): messages, their fields and their types.

/// A protobuf message of the Kubernetes API.
#[derive(Debug)]
pub(crate) struct Message {
    /// The OpenAPI definition name, `io.k8s.api.core.v1.Pod`.
    pub(crate) name: &'static str,
    /// In field-number order, as the `.proto` declares them.
    pub(crate) fields: &'static [Field],
}

/// One field of a message.
#[derive(Debug)]
pub(crate) struct Field {
    /// The JSON name.
    pub(crate) json: &'static str,
    /// The field number.
    pub(crate) tag: u32,
    /// The type of a value (of each element when `repeated`).
    pub(crate) ty: Type,
    /// A list in JSON.
    pub(crate) repeated: bool,
    /// A Go struct embedded with `json:",inline"`: a message field in protobuf, its fields the
    /// parent's own in JSON (`Volume.volumeSource`, `Probe.handler`).
    pub(crate) inline: bool,
}

/// What a field holds. The messages whose JSON form is not their fields are types of their own.
#[derive(Debug)]
pub(crate) enum Type {
    Str,
    Bool,
    I32,
    I64,
    /// base64 in JSON.
    Bytes,
    /// Another message, by index in `MESSAGES`.
    Msg(u16),
    /// A map from strings to values of this type (an object in JSON).
    Map(&'static Type),
    /// `metav1.Time`: `{seconds, nanos}`, an RFC 3339 string with seconds in JSON.
    Time,
    /// `metav1.MicroTime`: `{seconds, nanos}`, an RFC 3339 string with microseconds in JSON.
    MicroTime,
    /// `metav1.FieldsV1`: `{Raw}` holding JSON, that JSON inline.
    FieldsV1,
    /// `intstr.IntOrString`: `{type, intVal, strVal}`, a number or a string in JSON.
    IntOrString,
    /// `resource.Quantity`: `{string}`, the string in JSON.
    Quantity,
    /// `runtime.RawExtension`: `{raw}` holding JSON, that JSON inline.
    RawExtension,
}

pub(crate) use super::generated::MESSAGES;

/// The message of OpenAPI definition `name`.
pub(crate) fn message(name: &str) -> Option<&'static Message> {
    MESSAGES.iter().find(|m| m.name == name)
}

impl Message {
    /// The field numbered `tag`.
    pub(crate) fn field_by_tag(&self, tag: u32) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.tag == tag)
    }
}
