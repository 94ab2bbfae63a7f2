//! The limit row for the server's TLS cost: what rustls itself takes to seal watch frames of
//! the sizes the server sends (a 300 B bookmark, a 2.4 KiB pod event, 4 KiB and 16 KiB
//! records), through a `ServerConnection` in memory, with the crypto provider the server uses
//! (ring; TLS 1.3 as the server negotiates by default), next to the same bytes copied plainly.
//!
//! - `seal`: `writer().write_all(frame)` then `write_tls` into a reused buffer: what the
//!   server's side of a TLS watch pays per frame on top of the plaintext path.
//! - `seal_open`: the same, and the client reading the records back (decrypt, then read the
//!   plaintext out): both ends, as a loopback benchmark pays them on one machine.
//! - `copy`: the frame copied into a reused buffer, the plaintext path's own copy.
//!
//! With `--bench`, after criterion's groups, a summary prints µs per frame for each at each size
//! and the ratio of seal to copy, from a timed loop of its own (the fastest of five batches of
//! 64 MiB each), so that the end-to-end figure (server CPU per frame over TLS less over
//! plaintext) can be set against it: the target is that TLS adds at most 1.5× what rustls
//! itself takes to seal the same bytes. `cargo bench -p watchcache-bench --bench tls_seal`.

use std::hint::black_box;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use rustls::{ClientConnection, ServerConnection};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Frame sizes the server sends: a bookmark, a pod event, and 4 KiB and 16 KiB records (16 KiB
/// is the most plaintext one TLS record carries).
const SIZES: [(&str, usize); 4] = [
    ("bookmark_300B", 300),
    ("pod_2.4KiB", 2458),
    ("4KiB", 4096),
    ("16KiB", 16384),
];

/// A server and a client connection with the handshake done, in memory.
fn pair() -> (ServerConnection, ClientConnection) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("a certificate");
    let cert: CertificateDer<'static> = certified.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der()));
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .expect("a server config");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).expect("a root");
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut server = ServerConnection::new(Arc::new(server)).expect("a server connection");
    let mut client = ClientConnection::new(
        Arc::new(client),
        ServerName::try_from("localhost").expect("a name"),
    )
    .expect("a client connection");
    let mut wire = Vec::new();
    // A TLS 1.3 handshake is two flights and the tickets; bounded all the same.
    for _ in 0..8 {
        wire.clear();
        while client.wants_write() {
            client.write_tls(&mut wire).expect("client records");
        }
        feed_server(&mut server, &wire);
        wire.clear();
        while server.wants_write() {
            server.write_tls(&mut wire).expect("server records");
        }
        let mut plain = Vec::new();
        feed_client(&mut client, &wire, &mut plain);
        if !client.is_handshaking() && !server.is_handshaking() && !client.wants_write() {
            return (server, client);
        }
    }
    panic!("the in-memory handshake did not finish");
}

fn feed_server(server: &mut ServerConnection, mut records: &[u8]) {
    while !records.is_empty() {
        server.read_tls(&mut records).expect("read_tls");
        server.process_new_packets().expect("valid records");
    }
}

/// Decrypts `records` and appends the plaintext to `plain`.
fn feed_client(client: &mut ClientConnection, mut records: &[u8], plain: &mut Vec<u8>) {
    while !records.is_empty() {
        client.read_tls(&mut records).expect("read_tls");
        client.process_new_packets().expect("valid records");
        let mut buf = [0u8; 32 * 1024];
        loop {
            match client.reader().read(&mut buf) {
                Ok(0) => break,
                Ok(n) => plain.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("reading plaintext: {e}"),
            }
        }
    }
}

/// Seals `frame` into `wire` (cleared first).
fn seal(server: &mut ServerConnection, frame: &[u8], wire: &mut Vec<u8>) {
    wire.clear();
    server.writer().write_all(frame).expect("plaintext accepted");
    while server.wants_write() {
        server.write_tls(wire).expect("records");
    }
}

/// A watch frame of `size` bytes (its content does not matter to AES-GCM).
fn frame(size: usize) -> Vec<u8> {
    let mut f = br#"{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"#.to_vec();
    f.resize(size - 3, b'x');
    f.extend_from_slice(b"}}\n");
    f
}

fn seal_frames(c: &mut Criterion) {
    let mut group = c.benchmark_group("tls_seal");
    for (name, size) in SIZES {
        let frame = frame(size);
        group.throughput(Throughput::Bytes(size as u64));
        let (mut server, mut client) = pair();
        let mut wire = Vec::with_capacity(2 * size + 1024);
        // The records are the frame: the client reads back exactly what was sealed.
        let mut plain = Vec::with_capacity(2 * size);
        seal(&mut server, &frame, &mut wire);
        feed_client(&mut client, &wire, &mut plain);
        assert_eq!(plain, frame, "{name}: the client reads what the server sealed");
        assert!(
            wire.len() > size,
            "{name}: sealed records carry the frame and a tag"
        );
        group.bench_with_input(BenchmarkId::new("seal", name), &frame, |b, frame| {
            b.iter(|| {
                seal(&mut server, black_box(frame), &mut wire);
                black_box(&wire);
            })
        });
        // A fresh pair: the client never read the records sealed above.
        let (mut server, mut client) = pair();
        group.bench_with_input(BenchmarkId::new("seal_open", name), &frame, |b, frame| {
            b.iter(|| {
                seal(&mut server, black_box(frame), &mut wire);
                plain.clear();
                feed_client(&mut client, &wire, &mut plain);
                black_box(&plain);
            })
        });
        let mut out = Vec::with_capacity(2 * size);
        group.bench_with_input(BenchmarkId::new("copy", name), &frame, |b, frame| {
            b.iter(|| {
                out.clear();
                out.extend_from_slice(black_box(frame));
                black_box(&out);
            })
        });
    }
    group.finish();
}

/// The fastest per-frame time of five batches of `frames` calls of `f`.
fn per_frame(frames: usize, mut f: impl FnMut()) -> Duration {
    (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..frames {
                f();
            }
            start.elapsed() / frames as u32
        })
        .min()
        .unwrap_or_default()
}

/// The limit row: µs per frame sealed, sealed and opened, and copied, and seal ÷ copy.
fn summary() {
    let (server, _) = pair();
    let suite = server
        .negotiated_cipher_suite()
        .map_or_else(|| "?".to_owned(), |s| format!("{:?}", s.suite()));
    println!("\nrustls (ring provider, {suite}) sealing watch frames in memory, per frame:");
    println!(
        "{:>14} {:>11} {:>13} {:>11} {:>12} {:>13}",
        "frame", "seal", "seal+open", "copy", "seal ÷ copy", "seal MB/s"
    );
    for (name, size) in SIZES {
        let frame = frame(size);
        let frames = (64 << 20) / size;
        let (mut server, _) = pair();
        let mut wire = Vec::with_capacity(2 * size + 1024);
        let sealed = per_frame(frames, || {
            seal(&mut server, black_box(&frame), &mut wire);
            black_box(&wire);
        });
        let mut plain = Vec::with_capacity(2 * size);
        // A fresh pair: the client never read the records sealed above.
        let (mut server, mut client) = pair();
        let opened = per_frame(frames, || {
            seal(&mut server, black_box(&frame), &mut wire);
            plain.clear();
            feed_client(&mut client, &wire, &mut plain);
            black_box(&plain);
        });
        let mut out = Vec::with_capacity(2 * size);
        let copied = per_frame(frames, || {
            out.clear();
            out.extend_from_slice(black_box(&frame));
            black_box(&out);
        });
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "{name:>14} {:>8.3} µs {:>10.3} µs {:>8.3} µs {:>11.1}× {:>13.0}",
            us(sealed),
            us(opened),
            us(copied),
            sealed.as_secs_f64() / copied.as_secs_f64().max(1e-12),
            size as f64 / sealed.as_secs_f64().max(1e-12) / 1e6
        );
    }
}

criterion_group!(benches, seal_frames);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // Only when benchmarking: `cargo test --benches` runs each group once and is done.
    if std::env::args().any(|a| a == "--bench") {
        summary();
    }
}
