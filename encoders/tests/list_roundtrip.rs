//! Streaming bodies equal buffered ones byte for byte, parse back into the expected lists,
//! and come in chunks no larger than asked.

use std::sync::Arc;

use futures_util::StreamExt;
use serde_json::{Value, json};
use watchcache_core::{Codec, ListItems, Revision, Snapshot};
use watchcache_encoders::{
    JsonCodec, ListHeader, ResourceInfo, StreamingList, encode_list, encode_protobuf_list,
};

fn pod(i: usize, pad: usize) -> Vec<u8> {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": format!("p{i:05}"), "namespace": "ns", "labels": {"app": "web"}},
        "spec": {"nodeName": "n1", "pad": "x".repeat(pad)},
    })
    .to_string()
    .into_bytes()
}

fn items(n: usize, pad: usize, codec: &JsonCodec) -> ListItems {
    let objects = (0..n)
        .map(|i| Arc::new(codec.decode(&pod(i, pad), Revision::new(i as u64 + 1)).unwrap()))
        .collect();
    ListItems::all(Arc::new(Snapshot::new(Revision::new(n as u64 + 1), objects)))
}

/// The whole body, checking that no chunk is empty or over `chunk`; and how many chunks.
async fn drain(body: &mut StreamingList, chunk: usize) -> (Vec<u8>, usize) {
    let mut streamed = Vec::new();
    let mut chunks = 0;
    while let Some(c) = body.next().await {
        let c = c.unwrap();
        assert!(
            !c.is_empty() && c.len() <= chunk,
            "chunk of {} with limit {chunk}",
            c.len()
        );
        streamed.extend_from_slice(&c);
        chunks += 1;
    }
    (streamed, chunks)
}

/// A header with only a revision, and one with every field (a revision of 7 digits).
fn headers() -> [ListHeader; 2] {
    [
        ListHeader {
            revision: Revision::new(77),
            continue_token: None,
            remaining_item_count: None,
        },
        ListHeader {
            revision: Revision::new(1_000_077),
            continue_token: Some("tok-en_1".into()),
            remaining_item_count: Some(12),
        },
    ]
}

fn info() -> ResourceInfo {
    ResourceInfo::new("pods", "Pod", "v1")
}

#[tokio::test]
async fn streaming_equals_buffered_byte_for_byte() {
    let codec = Arc::new(JsonCodec::new(true, &["spec.nodeName"]));
    let headers = headers();
    // 0, 1 and many items; items smaller and larger than a chunk; chunks of 1 byte to 64 KiB.
    for (n, pad) in [(0, 0), (1, 10), (1, 100_000), (200, 50), (20, 9_000)] {
        for header in &headers {
            let buffered = encode_list(&info(), header, items(n, pad, &codec), &*codec).unwrap();
            for chunk in [1usize, 7, 4096, 65536] {
                if chunk == 1 && buffered.len() > 300_000 {
                    continue;
                }
                let mut body =
                    StreamingList::new(&info(), header, items(n, pad, &codec), codec.clone(), chunk);
                let (streamed, chunks) = drain(&mut body, chunk).await;
                assert_eq!(streamed, buffered, "{n} items of pad {pad}, chunk {chunk}");
                assert_eq!(
                    chunks,
                    buffered.len().div_ceil(chunk),
                    "every chunk but the last is full"
                );
                assert!(body.next().await.is_none(), "the stream stays ended");
            }
        }
    }
}

#[test]
fn bodies_parse_back_into_the_expected_list() {
    let codec = JsonCodec::new(true, &[]);
    let header = ListHeader {
        revision: Revision::new(5),
        continue_token: Some("abc".into()),
        remaining_item_count: Some(3),
    };
    let body: Value =
        serde_json::from_slice(&encode_list(&info(), &header, items(3, 5, &codec), &codec).unwrap()).unwrap();
    assert_eq!(body["kind"], "PodList");
    assert_eq!(body["apiVersion"], "v1");
    assert_eq!(
        body["metadata"],
        json!({"resourceVersion": "5", "continue": "abc", "remainingItemCount": 3})
    );
    let names: Vec<&str> = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["p00000", "p00001", "p00002"]);
    assert_eq!(body["items"][1]["metadata"]["resourceVersion"], "2");

    let empty = ListHeader {
        revision: Revision::new(9),
        ..Default::default()
    };
    let raw = encode_list(&info(), &empty, items(0, 0, &codec), &codec).unwrap();
    assert_eq!(
        raw,
        br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9"},"items":[]}"#
    );
}

fn pb_pod(i: usize, pad: usize) -> Vec<u8> {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": format!("p{i:05}"), "namespace": "ns", "annotations": {"pad": "x".repeat(pad)}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
    })
    .to_string()
    .into_bytes()
}

#[tokio::test]
async fn streaming_protobuf_equals_buffered_and_prost_reads_it() {
    use prost::Message as _;
    let codec = Arc::new(JsonCodec::new(true, &[]).with_protobuf("io.k8s.api.core.v1.Pod"));
    let pb_items = |n: usize, pad: usize| {
        let objects = (0..n)
            .map(|i| {
                Arc::new(
                    codec
                        .decode(&pb_pod(i, pad), Revision::new(i as u64 + 1))
                        .unwrap(),
                )
            })
            .collect();
        ListItems::all(Arc::new(Snapshot::new(Revision::new(n as u64 + 1), objects)))
    };
    let headers = headers();
    // 0, 1 and many items; items smaller and larger than a chunk (and than 2^14 and 2^21
    // bytes, where their length prefixes grow); chunks of 1 byte to 64 KiB.
    for (n, pad) in [
        (0, 0),
        (1, 10),
        (1, 100_000),
        (1, 2_100_000),
        (200, 50),
        (20, 9_000),
    ] {
        for header in &headers {
            let buffered = encode_protobuf_list(&info(), header, pb_items(n, pad), &*codec).unwrap();
            for chunk in [1usize, 2, 7, 4096, 65536] {
                if chunk < 4096 && buffered.len() > 300_000 {
                    continue;
                }
                let mut body =
                    StreamingList::protobuf(&info(), header, pb_items(n, pad), codec.clone(), chunk).unwrap();
                let (streamed, chunks) = drain(&mut body, chunk).await;
                assert!(streamed == buffered, "n={n} pad={pad} chunk={chunk}");
                assert_eq!(
                    chunks,
                    buffered.len().div_ceil(chunk),
                    "every chunk but the last is full"
                );
                assert!(body.next().await.is_none(), "the stream stays ended");
            }
            let envelope = watchcache_encoders::protobuf::open_envelope(&buffered).unwrap();
            assert_eq!(
                (envelope.api_version.as_str(), envelope.kind.as_str()),
                ("v1", "PodList")
            );
            let list = k8s_pb::api::core::v1::PodList::decode(envelope.raw).unwrap();
            let meta = list.metadata.unwrap();
            assert_eq!(meta.resource_version, Some(header.revision.to_string()));
            assert_eq!(
                meta.r#continue.as_deref(),
                Some(header.continue_token.as_deref().unwrap_or(""))
            );
            assert_eq!(
                meta.remaining_item_count,
                header.remaining_item_count.map(|n| n as i64)
            );
            assert_eq!(list.items.len(), n);
            for (i, item) in list.items.iter().enumerate() {
                let m = item.metadata.as_ref().unwrap();
                assert_eq!(m.name.as_deref(), Some(format!("p{i:05}").as_str()));
                assert_eq!(m.annotations["pad"].len(), pad);
                assert_eq!(m.resource_version, Some((i + 1).to_string()));
            }
        }
    }
}
