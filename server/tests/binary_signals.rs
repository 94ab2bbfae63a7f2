//! The `watchcache` binary: `serve` listens, answers, and on SIGTERM or SIGINT ends open
//! watches cleanly (the chunked body is terminated, not cut) and exits 0; a flag with a value
//! it cannot serve with is refused at start with exit code 2, as is a malformed
//! `--token-auth-file`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

fn serve_and_signal(signal: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_watchcache"))
        .args(["serve", "--addr", "127.0.0.1:0", "--seed-pods", "3"])
        .env("RUST_LOG", "warn")
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    // It prints where it listens.
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).expect("stderr") > 0,
            "the server exited early"
        );
        if let Some(rest) = line.trim().strip_prefix("watchcache: serving on http://") {
            break rest.to_owned();
        }
    };
    let mut watch = TcpStream::connect(&addr).expect("connects");
    watch.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        watch,
        "GET /api/v1/pods?watch=1&resourceVersion=0 HTTP/1.1\r\nHost: {addr}\r\n\r\n"
    )
    .unwrap();
    // Wait until the initial events have arrived, then signal.
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while got.windows(5).filter(|w| w == b"ADDED").count() < 3 {
        let n = watch.read(&mut buf).expect("reads the watch");
        assert!(n > 0, "the watch ended early");
        got.extend_from_slice(&buf[..n]);
    }
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    // The watch ends cleanly: the last chunk of a chunked body, then the connection closes.
    loop {
        let n = watch.read(&mut buf).expect("reads to the end");
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got[..40.min(got.len())])
    );
    assert!(
        got.ends_with(b"0\r\n\r\n"),
        "the body was terminated, not cut: {:?}",
        String::from_utf8_lossy(&got[got.len().saturating_sub(300)..])
    );
    assert!(
        !String::from_utf8_lossy(&got).contains("\"ERROR\""),
        "a clean end, not an error"
    );
    let exit = child.wait().expect("the server exits");
    assert!(exit.success(), "{signal}: exited with {exit}");
}

#[test]
fn sigterm_ends_watches_cleanly_and_exits_zero() {
    serve_and_signal("-TERM");
}

#[test]
fn sigint_ends_watches_cleanly_and_exits_zero() {
    serve_and_signal("-INT");
}

#[test]
fn invalid_flags_are_refused_at_start_with_exit_code_2() {
    for (flag, value) in [
        ("--bookmark-interval", "1e-10"),
        ("--fresh-timeout", "1e30"),
        ("--churn", "NaN"),
        ("--history", "3"),
        ("--max-watchers", "0"),
        ("--seed-pods", "99999999"),
        ("--authorization-mode", "Webhook"),
        ("--anonymous-auth", "maybe"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_watchcache"))
            .args(["serve", "--addr", "127.0.0.1:0", flag, value])
            .output()
            .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(
            stderr.contains(flag),
            "{flag} {value}: the error names the flag: {stderr}"
        );
    }
}

#[test]
fn a_malformed_token_file_is_refused_at_start_with_exit_code_2() {
    let dir = std::env::temp_dir();
    let bad = dir.join(format!("watchcache-binary-tokens-{}.csv", std::process::id()));
    std::fs::write(&bad, "t1,alice,1001\nt2,bob\n").unwrap();
    let missing = dir.join("watchcache-no-such-token-file.csv");
    for (file, says) in [(&bad, "line 2"), (&missing, "cannot read")] {
        let out = Command::new(env!("CARGO_BIN_EXE_watchcache"))
            .args(["serve", "--addr", "127.0.0.1:0", "--token-auth-file"])
            .arg(file)
            .output()
            .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {stderr}", file.display());
        assert!(stderr.contains(says), "{}: {stderr}", file.display());
    }
    let _ = std::fs::remove_file(&bad);
}
