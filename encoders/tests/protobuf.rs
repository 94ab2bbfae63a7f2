//! JSON ↔ protobuf transcoding, checked both ways and against an independent decoder: the
//! prost types of the k8s-pb crate, generated from the published `.proto` files.

use bytes::BytesMut;
use k8s_pb::api::core::v1 as pb;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pbmeta;
use prost::Message as _;
use serde_json::{Map, Value, json};
use watchcache_core::{Codec, Revision, WireFormat};
use watchcache_encoders::JsonCodec;
use watchcache_encoders::protobuf::{self, Envelope};

const POD: &str = "io.k8s.api.core.v1.Pod";

/// A pod with every kind of field the workload generator writes, and the special types.
fn pod() -> Value {
    let env: Vec<Value> = (0..3)
        .map(|e| json!({"name": format!("ENV_{e}"), "value": format!("v{e}")}))
        .collect();
    json!({
        "metadata": {
            "name": "web-000001",
            "namespace": "ns-1",
            "uid": "5f0c6d2e-0001-4a8b-9c3d-000000000001",
            "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2026-11-29T07:00:00Z",
            "deletionTimestamp": "2026-11-29T08:00:01Z",
            "deletionGracePeriodSeconds": 30,
            "labels": {"app": "web", "tier": "frontend"},
            "annotations": {"note": "x".repeat(300), "empty": ""},
            "finalizers": ["example.com/a", "example.com/b"],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u-1", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{
                "manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
                "time": "2026-11-29T07:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}},
            }],
        },
        "spec": {
            "nodeName": "node-1",
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": false,
            "securityContext": {"runAsUser": 0, "supplementalGroups": [1000, -1]},
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "containers": [{
                "name": "app",
                "image": "registry.example.com/team/app:1.2.3",
                "args": ["--flag", ""],
                "ports": [{"containerPort": 8080, "protocol": "TCP"}, {"containerPort": 9090, "name": "metrics"}],
                "env": env,
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": "metrics"}},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/config"}],
            }],
            "volumes": [
                {"name": "config", "configMap": {"name": "web-config", "defaultMode": 420}},
                {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},
            ],
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 300}],
        },
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "podIPs": [{"ip": "10.0.0.1"}],
            "startTime": "2026-11-29T07:00:02Z",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-29T07:00:03Z"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "i", "imageID": "", "state": {"running": {"startedAt": "2026-11-29T07:00:04Z"}}}],
        },
    })
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

/// JSON leaves out empty strings once through protobuf (see the transcoder's docs).
fn without_empty_strings(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| v.as_str() != Some(""))
                .map(|(k, v)| (k.clone(), without_empty_strings(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_empty_strings).collect()),
        other => other.clone(),
    }
}

#[test]
fn a_pod_goes_to_protobuf_and_back_unchanged() {
    let json = pod();
    let bytes = protobuf::encode_json(POD, &object(json.clone())).unwrap();
    let back = protobuf::decode_json(POD, &bytes).unwrap();
    // Map values keep their empty strings; other empty strings are left out.
    let mut expected = without_empty_strings(&json);
    expected["metadata"]["annotations"]["empty"] = json!("");
    expected["spec"]["containers"][0]["args"] = json!(["--flag", ""]);
    assert_eq!(Value::Object(back), expected);
}

#[test]
fn prost_types_generated_from_the_published_protos_read_what_we_write() {
    let bytes = protobuf::encode_json(POD, &object(pod())).unwrap();
    let p = pb::Pod::decode(bytes.as_slice()).unwrap();
    let meta = p.metadata.unwrap();
    assert_eq!(meta.name.as_deref(), Some("web-000001"));
    assert_eq!(meta.resource_version.as_deref(), Some("42"));
    assert_eq!(meta.generation, Some(3));
    assert_eq!(meta.labels["app"], "web");
    let created = meta.creation_timestamp.unwrap();
    assert_eq!(created.seconds, Some(1_795_935_600));
    assert_eq!(meta.finalizers, ["example.com/a", "example.com/b"]);
    assert_eq!(meta.owner_references[0].controller, Some(true));
    let fields = meta.managed_fields[0]
        .fields_v1
        .as_ref()
        .unwrap()
        .raw
        .as_deref()
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(fields).unwrap(),
        json!({"f:metadata": {"f:labels": {"f:app": {}}}})
    );

    let spec = p.spec.unwrap();
    assert_eq!(spec.termination_grace_period_seconds, Some(0));
    assert_eq!(spec.automount_service_account_token, Some(false));
    let sc = spec.security_context.unwrap();
    assert_eq!(sc.run_as_user, Some(0));
    assert_eq!(sc.supplemental_groups, [1000, -1]);
    let c = &spec.containers[0];
    assert_eq!(c.args, ["--flag", ""]);
    assert_eq!(c.ports[0].container_port, Some(8080));
    let resources = c.resources.as_ref().unwrap();
    assert_eq!(resources.requests["cpu"].string.as_deref(), Some("100m"));
    let liveness = c.liveness_probe.as_ref().unwrap().handler.as_ref().unwrap();
    let port = liveness.http_get.as_ref().unwrap().port.as_ref().unwrap();
    assert_eq!((port.r#type, port.int_val), (Some(0), Some(8080)));
    let readiness = c.readiness_probe.as_ref().unwrap().handler.as_ref().unwrap();
    let port = readiness.http_get.as_ref().unwrap().port.as_ref().unwrap();
    assert_eq!((port.r#type, port.str_val.as_deref()), (Some(1), Some("metrics")));
    let source = spec.volumes[0].volume_source.as_ref().unwrap();
    let cm = source.config_map.as_ref().unwrap();
    assert_eq!(
        cm.local_object_reference.as_ref().unwrap().name.as_deref(),
        Some("web-config")
    );
    assert_eq!(cm.default_mode, Some(420));
    let size = spec.volumes[1]
        .volume_source
        .as_ref()
        .unwrap()
        .empty_dir
        .as_ref()
        .unwrap();
    assert_eq!(size.size_limit.as_ref().unwrap().string.as_deref(), Some("1Gi"));

    let status = p.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(status.container_statuses[0].restart_count, Some(0));
}

#[test]
fn what_go_clients_write_reads_as_the_json_they_mean() {
    // A Go client writes every non-pointer field, empty strings and zero times included.
    let ns = pb::Namespace {
        metadata: Some(pbmeta::ObjectMeta {
            name: Some("team-a".into()),
            generate_name: Some(String::new()),
            namespace: Some(String::new()),
            uid: Some(String::new()),
            resource_version: Some(String::new()),
            generation: Some(0),
            creation_timestamp: Some(pbmeta::Time::default()),
            labels: [("a".to_owned(), "b".to_owned())].into(),
            ..Default::default()
        }),
        spec: Some(pb::NamespaceSpec::default()),
        status: Some(pb::NamespaceStatus {
            phase: Some(String::new()),
            ..Default::default()
        }),
    };
    let back = protobuf::decode_json("io.k8s.api.core.v1.Namespace", &ns.encode_to_vec()).unwrap();
    assert_eq!(
        Value::Object(back),
        json!({"metadata": {"name": "team-a", "generation": 0, "labels": {"a": "b"}}, "spec": {}, "status": {}})
    );

    let secret = pb::Secret {
        metadata: Some(pbmeta::ObjectMeta {
            name: Some("s".into()),
            ..Default::default()
        }),
        data: [("key".to_owned(), vec![0u8, 1, 2, 255])].into(),
        r#type: Some("Opaque".into()),
        ..Default::default()
    };
    let back = protobuf::decode_json("io.k8s.api.core.v1.Secret", &secret.encode_to_vec()).unwrap();
    assert_eq!(
        Value::Object(back.clone()),
        json!({"metadata": {"name": "s"}, "data": {"key": "AAEC/w=="}, "type": "Opaque"})
    );
    // And back to the same bytes.
    let again = protobuf::encode_json("io.k8s.api.core.v1.Secret", &back).unwrap();
    assert_eq!(pb::Secret::decode(again.as_slice()).unwrap().data, secret.data);
}

#[test]
fn rbac_objects_encode_as_the_published_messages_and_back() {
    let role = json!({
        "metadata": {"name": "system:aggregate-to-view", "labels": {"rbac.example/view": "true"}},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"rbac.example/view": "true"}}]},
        "rules": [
            {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "pods/status"], "resourceNames": ["a"]},
            {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/api/*"]},
        ],
    });
    let def = "io.k8s.api.rbac.v1.ClusterRole";
    let bytes = protobuf::encode_json(def, &object(role.clone())).unwrap();
    let p = k8s_pb::api::rbac::v1::ClusterRole::decode(bytes.as_slice()).unwrap();
    assert_eq!(p.rules[1].non_resource_ur_ls, ["/healthz", "/api/*"]);
    assert_eq!(p.rules[0].resource_names, ["a"]);
    let selector = &p.aggregation_rule.unwrap().cluster_role_selectors[0];
    assert_eq!(selector.match_labels["rbac.example/view"], "true");
    assert_eq!(Value::Object(protobuf::decode_json(def, &bytes).unwrap()), role);

    let binding = json!({
        "metadata": {"name": "b", "namespace": "ns"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [
            {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
            {"kind": "ServiceAccount", "name": "default", "namespace": "ns"},
        ],
    });
    let def = "io.k8s.api.rbac.v1.RoleBinding";
    let bytes = protobuf::encode_json(def, &object(binding.clone())).unwrap();
    let p = k8s_pb::api::rbac::v1::RoleBinding::decode(bytes.as_slice()).unwrap();
    assert_eq!(p.role_ref.unwrap().name.as_deref(), Some("view"));
    assert_eq!(p.subjects[1].namespace.as_deref(), Some("ns"));
    assert_eq!(
        Value::Object(protobuf::decode_json(def, &bytes).unwrap()),
        binding
    );
}

#[test]
fn micro_times_keep_microseconds_and_times_keep_seconds() {
    let lease = json!({
        "metadata": {"name": "l", "namespace": "kube-system"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": "2026-11-29T07:00:00.123456Z", "acquireTime": "2026-11-29T07:00:00.000000Z"},
    });
    let def = "io.k8s.api.coordination.v1.Lease";
    let bytes = protobuf::encode_json(def, &object(lease.clone())).unwrap();
    let p = k8s_pb::api::coordination::v1::Lease::decode(bytes.as_slice()).unwrap();
    let renew = p.spec.unwrap().renew_time.unwrap();
    assert_eq!(
        (renew.seconds, renew.nanos),
        (Some(1_795_935_600), Some(123_456_000))
    );
    assert_eq!(Value::Object(protobuf::decode_json(def, &bytes).unwrap()), lease);

    // A time given with an offset reads back in UTC; seconds precision drops the fraction.
    let pod = json!({"metadata": {"name": "p", "creationTimestamp": "2026-11-29T09:00:00.75+02:00"}});
    let bytes = protobuf::encode_json(POD, &object(pod)).unwrap();
    let back = protobuf::decode_json(POD, &bytes).unwrap();
    assert_eq!(back["metadata"]["creationTimestamp"], "2026-11-29T07:00:00Z");
}

#[test]
fn the_envelope_and_the_watch_frame_are_what_prost_reads() {
    let raw = protobuf::encode_json(POD, &object(pod())).unwrap();
    let body = protobuf::envelope("v1", "Pod", &raw);
    assert_eq!(body.len(), protobuf::envelope_len("v1", "Pod", raw.len()));
    assert_eq!(&body[..4], b"k8s\0");
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(&body[4..]).unwrap();
    let tm = unknown.type_meta.unwrap();
    assert_eq!(
        (tm.api_version.as_deref(), tm.kind.as_deref()),
        (Some("v1"), Some("Pod"))
    );
    assert_eq!(unknown.raw.as_deref(), Some(raw.as_slice()));
    assert_eq!(
        (
            unknown.content_encoding.as_deref(),
            unknown.content_type.as_deref()
        ),
        (Some(""), Some(""))
    );
    assert_eq!(
        protobuf::open_envelope(&body).unwrap(),
        Envelope {
            api_version: "v1".into(),
            kind: "Pod".into(),
            raw: &raw
        }
    );

    let mut frame = BytesMut::new();
    protobuf::write_watch_frame("ADDED", "v1", "Pod", &raw, &mut frame);
    let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(len, frame.len() - 4);
    let event = pbmeta::WatchEvent::decode(&frame[4..]).unwrap();
    assert_eq!(event.r#type.as_deref(), Some("ADDED"));
    assert_eq!(event.object.unwrap().raw.unwrap(), body);
}

#[test]
fn the_codec_encodes_once_and_restamps_without_re_encoding() {
    let codec = JsonCodec::new(true, &[]).with_protobuf(POD);
    let mut json = pod();
    json["apiVersion"] = json!("v1");
    json["kind"] = json!("Pod");
    let version = codec
        .decode(&serde_json::to_vec(&json).unwrap(), Revision::new(7))
        .unwrap();
    let first = version.encoding(WireFormat::Protobuf, &codec).unwrap();
    let again = version.encoding(WireFormat::Protobuf, &codec).unwrap();
    assert_eq!(
        first.bytes().as_ptr(),
        again.bytes().as_ptr(),
        "made once, then shared"
    );
    assert_eq!(&first.bytes()[first.revision_at().unwrap()], b"7");

    for revision in [7u64, 8, 10, 123_456_789, u64::MAX] {
        let mut out = BytesMut::new();
        protobuf::write_restamped(first, Revision::new(7), Revision::new(revision), &mut out);
        assert_eq!(
            out.len(),
            protobuf::restamped_len(first, Revision::new(7), Revision::new(revision))
        );
        let mut expected = pod();
        expected["metadata"]["resourceVersion"] = json!(revision.to_string());
        let direct = protobuf::encode_json_text(POD, &serde_json::to_vec(&expected).unwrap()).unwrap();
        assert_eq!(out.as_ref(), direct.as_slice(), "revision {revision}");
    }
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let bytes = protobuf::encode_json(POD, &object(pod())).unwrap();
    for cut in [1, 2, 7, bytes.len() / 2, bytes.len() - 1] {
        assert!(protobuf::decode_json(POD, &bytes[..cut]).is_err(), "cut at {cut}");
    }
    assert!(
        protobuf::decode_json(
            POD,
            &[0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        )
        .is_err()
    );
    assert!(protobuf::open_envelope(b"{\"kind\":\"Pod\"}").is_err());
    for bad in [
        json!({"metadata": {"name": 5}}),
        json!({"metadata": {"generation": "x"}}),
        json!({"metadata": {"labels": ["a"]}}),
        json!({"metadata": {"creationTimestamp": "yesterday"}}),
        json!({"spec": {"containers": {"name": "a"}}}),
        json!({"spec": {"containers": [{"ports": [{"containerPort": 1e20}]}]}}),
    ] {
        assert!(protobuf::encode_json(POD, &object(bad.clone())).is_err(), "{bad}");
    }
    assert!(protobuf::encode_json("io.k8s.api.example.v1.Nothing", &Map::new()).is_err());
}

#[test]
fn nodes_events_config_maps_and_secrets_round_trip() {
    let cases = [
        (
            "io.k8s.api.core.v1.Node",
            json!({
                "metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1", "node-role.kubernetes.io/control-plane": ""}},
                "spec": {"podCIDR": "10.0.1.0/24", "podCIDRs": ["10.0.1.0/24"], "unschedulable": true,
                         "taints": [{"key": "k", "value": "v", "effect": "NoSchedule", "timeAdded": "2026-11-29T07:00:00Z"}]},
                "status": {
                    "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                    "allocatable": {"cpu": "7800m", "memory": "31Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-29T07:00:00Z", "lastTransitionTime": "2026-11-29T06:00:00Z", "reason": "KubeletReady", "message": "kubelet is posting ready status"}],
                    "addresses": [{"type": "InternalIP", "address": "192.0.2.1"}, {"type": "Hostname", "address": "node-1"}],
                    "nodeInfo": {"kubeletVersion": "v1.33.0", "containerRuntimeVersion": "containerd://2.0.0", "machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6.1", "osImage": "Debian", "kubeProxyVersion": "v1.33.0", "operatingSystem": "linux", "architecture": "amd64"},
                    "images": [{"names": ["nginx:1.27"], "sizeBytes": 70_000_000i64}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                },
            }),
        ),
        (
            "io.k8s.api.core.v1.Event",
            json!({
                "metadata": {"name": "web.1", "namespace": "ns"},
                "involvedObject": {"kind": "Pod", "namespace": "ns", "name": "web", "uid": "u", "apiVersion": "v1", "resourceVersion": "7", "fieldPath": "spec.containers{app}"},
                "reason": "Pulled", "message": "Container image pulled", "type": "Normal", "count": 3,
                "source": {"component": "kubelet", "host": "node-1"},
                "firstTimestamp": "2026-11-29T07:00:00Z", "lastTimestamp": "2026-11-29T07:05:00Z",
                "eventTime": "2026-11-29T07:00:00.123456Z", "reportingComponent": "kubelet", "reportingInstance": "node-1",
                "series": {"count": 2, "lastObservedTime": "2026-11-29T07:05:00.000001Z"},
            }),
        ),
        (
            "io.k8s.api.core.v1.ConfigMap",
            json!({"metadata": {"name": "c", "namespace": "ns"}, "data": {"a": "1", "multi": "line\nline"}, "binaryData": {"b": "AP8="}, "immutable": false}),
        ),
        (
            "io.k8s.api.core.v1.Secret",
            json!({"metadata": {"name": "s", "namespace": "ns"}, "type": "kubernetes.io/tls", "data": {"tls.crt": "LS0t", "tls.key": ""}, "stringData": {"x": "y"}}),
        ),
    ];
    for (def, json) in cases {
        let bytes = protobuf::encode_json(def, &object(json.clone())).unwrap();
        assert_eq!(
            Value::Object(protobuf::decode_json(def, &bytes).unwrap()),
            json,
            "{def}"
        );
    }
}

#[test]
fn the_json_text_is_read_in_any_key_order_and_refused_when_it_does_not_fit() {
    let sorted = br#"{"metadata":{"labels":{"a":"1","b":"2"},"name":"n"},"spec":{"nodeName":"x"}}"#;
    let shuffled =
        br#"{"spec":{"nodeName":"x"},"kind":"Pod","metadata":{"name":"n","labels":{"b":"2","a":"1"}}}"#;
    let one = protobuf::encode_json_text(POD, sorted).unwrap();
    let other = protobuf::encode_json_text(POD, shuffled).unwrap();
    assert_eq!(one.len(), other.len());
    assert_eq!(
        protobuf::decode_json(POD, &one).unwrap(),
        protobuf::decode_json(POD, &other).unwrap()
    );
    // Escapes in keys and values.
    let escaped = br#"{"metadata":{"na\u006de":"n","labels":{"k8s.io\/app":"a\"b"}}}"#;
    let back = protobuf::decode_json(POD, &protobuf::encode_json_text(POD, escaped).unwrap()).unwrap();
    assert_eq!(
        Value::Object(back),
        json!({"metadata": {"name": "n", "labels": {"k8s.io/app": "a\"b"}}})
    );
    for bad in [
        &br#"{"metadata": {"name": 5}}"#[..],
        br#"{"metadata": {"labels": ["a"]}}"#,
        br#"{"spec": {"containers": [{"ports": [{"containerPort": 1.5}]}]}}"#,
        br#"{"metadata": {"creationTimestamp": "yesterday"}}"#,
        br#"[1]"#,
        br#"null"#,
        br#"{"metadata": {}} trailing"#,
    ] {
        assert!(
            protobuf::encode_json_text(POD, bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn a_null_map_value_or_list_element_reads_as_its_zero_value_in_json_and_in_protobuf() {
    let cases = [
        (
            "io.k8s.api.core.v1.ConfigMap",
            json!({"metadata": {"name": "c", "namespace": "n", "labels": {"l": null, "m": "1"}, "finalizers": ["a", null]},
                   "data": {"a": null, "b": "x"}, "binaryData": {"z": null}}),
            json!({"metadata": {"name": "c", "namespace": "n", "labels": {"l": "", "m": "1"}, "finalizers": ["a", ""]},
                   "data": {"a": "", "b": "x"}, "binaryData": {"z": ""}}),
        ),
        (
            POD,
            json!({"metadata": {"name": "p", "namespace": "n", "annotations": {"a": null}},
                   "spec": {"containers": [null, {"name": "c", "args": [null], "resources": {"limits": {"cpu": null}}}],
                            "nodeSelector": {"k": null}}}),
            json!({"metadata": {"name": "p", "namespace": "n", "annotations": {"a": ""}},
                   "spec": {"containers": [{}, {"name": "c", "args": [""], "resources": {"limits": {"cpu": ""}}}],
                            "nodeSelector": {"k": ""}}}),
        ),
    ];
    for (definition, written, as_go_reads_it) in cases {
        let text = serde_json::to_vec(&written).unwrap();
        // The transcoder writes the zero values...
        let pb = protobuf::decode_json(
            definition,
            &protobuf::encode_json_text(definition, &text).unwrap(),
        )
        .unwrap();
        assert_eq!(
            without_empty_strings(&Value::Object(pb.clone())),
            without_empty_strings(&as_go_reads_it),
            "{definition}"
        );
        for (path, want) in [
            ("/data/a", json!("")),
            ("/metadata/labels/l", json!("")),
            ("/spec/nodeSelector/k", json!("")),
        ] {
            if let Some(want_here) = as_go_reads_it.pointer(path) {
                assert_eq!(
                    Value::Object(pb.clone()).pointer(path),
                    Some(want_here),
                    "{definition} {path}"
                );
                assert_eq!(want_here, &want);
            }
        }
        // ...and the codec reads the JSON as Go does, so both encodings agree.
        let codec = JsonCodec::new(true, &[]).with_protobuf(definition);
        let version = codec.decode(&text, Revision::new(3)).unwrap();
        let mut json: Value =
            serde_json::from_slice(version.encoded(WireFormat::Json).unwrap().bytes()).unwrap();
        json["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        assert_eq!(json, as_go_reads_it, "{definition}");
        let from_codec = version.encoding(WireFormat::Protobuf, &codec).unwrap();
        let mut back = Value::Object(protobuf::decode_json(definition, from_codec.bytes()).unwrap());
        back["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        assert_eq!(
            without_empty_strings(&back),
            without_empty_strings(&json),
            "{definition}"
        );
        assert_eq!(back.pointer("/data/a"), json.pointer("/data/a"), "{definition}");
    }
}
