//! Writing one watch frame: assembled from the shared encoded bytes (what every watcher of
//! the ring does), assembled with the resourceVersion restamped (DELETED events, selector
//! exits), and re-encoded from a decoded object (what a design without encode-once does per
//! watcher); in JSON, and in protobuf (`encode_frame_protobuf`); and a metadata-only frame
//! from the shared metadata part against one read out of the whole frame per watcher
//! (`encode_frame_metadata`). Throughput in object bytes.

use std::hint::black_box;
use std::sync::Arc;

use bytes::BytesMut;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use watchcache_bench::objects;
use watchcache_core::{Codec, Delivery, EventKind, ObjectVersion, Revision, WireFormat};
use watchcache_encoders::{FrameEncoder, ResourceInfo, protobuf};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A frame from the shared encoding at the object's own revision, and restamped with another.
fn shared_and_restamped(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    frames: &FrameEncoder,
    object: &Arc<ObjectVersion>,
    bytes: usize,
    out: &mut BytesMut,
) {
    let mut frame = |revision: u64| {
        out.clear();
        let d = Delivery {
            kind: EventKind::Modified,
            revision: Revision::new(revision),
            object: Some(object),
            initial_events_end: false,
        };
        frames.write(&d, out).unwrap();
        black_box(&out[..]);
    };
    group.bench_function(BenchmarkId::new("shared_bytes", bytes), |b| {
        b.iter(|| frame(1_000))
    });
    group.bench_function(BenchmarkId::new("restamped", bytes), |b| {
        b.iter(|| frame(1_234_567))
    });
}

fn frames(c: &mut Criterion) {
    let mut group = c.benchmark_group("encode_frame");
    let codec = objects::codec();
    let frames = FrameEncoder::new(ResourceInfo::new("pods", "Pod", "v1"), codec.clone());
    for kib in [1usize, 4, 16] {
        let bytes = kib * 1024;
        let object = objects::object_version(&codec, 7, bytes, 1_000);
        let value: serde_json::Value = serde_json::from_slice(&objects::pod_json(7, bytes)).unwrap();
        group.throughput(Throughput::Bytes(bytes as u64));
        let mut out = BytesMut::with_capacity(4 * bytes);
        shared_and_restamped(&mut group, &frames, &object, bytes, &mut out);
        group.bench_function(BenchmarkId::new("re_encode_value", kib * 1024), |b| {
            b.iter(|| {
                use bytes::BufMut;
                out.clear();
                out.put_slice(br#"{"type":"MODIFIED","object":"#);
                serde_json::to_writer((&mut out).writer(), &value).unwrap();
                out.put_slice(b"}\n");
                black_box(&out[..]);
            })
        });
        group.bench_function(BenchmarkId::new("deep_copy_and_re_encode", kib * 1024), |b| {
            b.iter(|| {
                use bytes::BufMut;
                let copy = value.clone();
                out.clear();
                out.put_slice(br#"{"type":"MODIFIED","object":"#);
                serde_json::to_writer((&mut out).writer(), &copy).unwrap();
                out.put_slice(b"}\n");
                black_box(&out[..]);
            })
        });
    }
    group.finish();
}

/// The same for protobuf frames: from the version's protobuf encoding (made once, on the
/// first protobuf read), restamped, and encoded again per watcher from the decoded object.
fn protobuf_frames(c: &mut Criterion) {
    let mut group = c.benchmark_group("encode_frame_protobuf");
    let codec = objects::codec();
    let info = ResourceInfo::new("pods", "Pod", "v1").with_protobuf(objects::POD_MESSAGE);
    let frames = FrameEncoder::new(info, codec.clone()).protobuf().unwrap();
    for kib in [1usize, 4, 16] {
        let bytes = kib * 1024;
        let object = objects::object_version(&codec, 7, bytes, 1_000);
        let value: serde_json::Value = serde_json::from_slice(&objects::pod_json(7, bytes)).unwrap();
        let value = value.as_object().unwrap().clone();
        let pb_len = protobuf::encode_json(objects::POD_MESSAGE, &value).unwrap().len();
        group.throughput(Throughput::Bytes(pb_len as u64));
        let mut out = BytesMut::with_capacity(4 * bytes);
        shared_and_restamped(&mut group, &frames, &object, bytes, &mut out);
        // The one protobuf encoding a version gets, made from its JSON by the codec.
        group.bench_function(BenchmarkId::new("transcode_from_json", kib * 1024), |b| {
            b.iter(|| black_box(codec.encode(&object, WireFormat::Protobuf).unwrap()))
        });
        group.bench_function(BenchmarkId::new("re_encode_value", kib * 1024), |b| {
            b.iter(|| {
                out.clear();
                let raw = protobuf::encode_json(objects::POD_MESSAGE, &value).unwrap();
                protobuf::write_watch_frame("MODIFIED", "v1", "Pod", &raw, &mut out);
                black_box(&out[..]);
            })
        });
    }
    group.finish();
}

/// A metadata-only watch frame (`as=PartialObjectMetadata`): copied from the metadata part
/// the codec recorded in the shared JSON (once per version), against the whole frame written
/// and its metadata read back out of it per watcher (what this server did before). Restamped
/// with another revision, as a DELETED event is. Throughput in object bytes.
fn metadata_frames(c: &mut Criterion) {
    use bytes::BufMut;
    use std::collections::BTreeMap;

    let mut group = c.benchmark_group("encode_frame_metadata");
    let codec = objects::codec();
    let frames = FrameEncoder::new(ResourceInfo::new("pods", "Pod", "v1"), codec.clone());
    const HEAD: &[u8] = br#"{"type":"DELETED","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":"#;
    for kib in [1usize, 4, 16] {
        let bytes = kib * 1024;
        let object = objects::object_version(&codec, 7, bytes, 1_000);
        let revision = Revision::new(1_234_567);
        group.throughput(Throughput::Bytes(bytes as u64));
        let mut out = BytesMut::with_capacity(4 * bytes);
        let mut scratch = BytesMut::with_capacity(4 * bytes);
        group.bench_function(BenchmarkId::new("shared_metadata_part", bytes), |b| {
            b.iter(|| {
                out.clear();
                out.put_slice(HEAD);
                assert!(frames.write_metadata(&object, revision, &mut out).unwrap());
                out.put_slice(b"}}\n");
                black_box(&out[..]);
            })
        });
        group.bench_function(BenchmarkId::new("read_out_per_watcher", bytes), |b| {
            b.iter(|| {
                scratch.clear();
                let d = Delivery {
                    kind: EventKind::Deleted,
                    revision,
                    object: Some(&object),
                    initial_events_end: false,
                };
                frames.write(&d, &mut scratch).unwrap();
                let frame: BTreeMap<&str, &serde_json::value::RawValue> =
                    serde_json::from_slice(&scratch).unwrap();
                let whole: BTreeMap<&str, &serde_json::value::RawValue> =
                    serde_json::from_str(frame["object"].get()).unwrap();
                out.clear();
                out.put_slice(HEAD);
                out.put_slice(whole["metadata"].get().as_bytes());
                out.put_slice(b"}}\n");
                black_box(&out[..]);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, frames, protobuf_frames, metadata_frames);
criterion_main!(benches);
