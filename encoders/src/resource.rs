//! What the encoders need to know about a resource: its kinds and API version.

/// The type information written into frames, bookmarks and list bodies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceInfo {
    /// The plural resource name, `pods`.
    pub resource: String,
    /// The object kind, `Pod`.
    pub kind: String,
    /// The list kind, `PodList`.
    pub list_kind: String,
    /// The API version, `v1`.
    pub api_version: String,
    /// The OpenAPI definition of the kind (`io.k8s.api.core.v1.Pod`) when it has a protobuf
    /// message ([`protobuf::has_message`](crate::protobuf::has_message)).
    pub protobuf: Option<&'static str>,
}

impl ResourceInfo {
    /// Info for `resource` of `kind` in `api_version`; the list kind is `kind + "List"`.
    pub fn new(resource: &str, kind: &str, api_version: &str) -> Self {
        ResourceInfo {
            resource: resource.to_owned(),
            kind: kind.to_owned(),
            list_kind: format!("{kind}List"),
            api_version: api_version.to_owned(),
            protobuf: None,
        }
    }

    /// The same, served in protobuf too as message `definition`.
    pub fn with_protobuf(mut self, definition: &'static str) -> Self {
        self.protobuf = Some(definition);
        self
    }
}
