//! The `watchcache` binary's secure defaults: plaintext on an address other than loopback is
//! refused at start with exit code 2 and a message saying what to add, unless the flag naming
//! the risk is given; `--cert-dir` serves TLS and says which kubeconfig to use.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// Starts `serve` with `args` and returns the line announcing where it serves, then stops it.
fn serving_line(args: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_watchcache"))
        .arg("serve")
        .args(args)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut all = String::new();
    let mut announced = false;
    let mut line = String::new();
    while !announced && stderr.read_line(&mut line).unwrap_or(0) > 0 {
        announced = line.starts_with("watchcache: serving on");
        all.push_str(&line);
        line.clear();
    }
    if announced {
        stderr.read_line(&mut all).expect("stderr");
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(announced, "the server exited early: {all}");
    all
}

#[test]
fn plaintext_on_an_address_other_than_loopback_is_refused_with_exit_code_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_watchcache"))
        .args(["serve", "--addr", "0.0.0.0:0"])
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for what in [
        "--tls-cert-file",
        "--tls-private-key-file",
        "--cert-dir",
        "--insecure-serve-plaintext-on-non-loopback",
    ] {
        assert!(stderr.contains(what), "the refusal names {what}: {stderr}");
    }
    let line = serving_line(&[
        "--addr",
        "0.0.0.0:0",
        "--insecure-serve-plaintext-on-non-loopback",
    ]);
    assert!(line.contains("serving on http://0.0.0.0:"), "{line}");
}

#[test]
fn cert_dir_serves_tls_on_any_address_and_names_the_kubeconfig() {
    let dir = std::env::temp_dir().join(format!("watchcache-binary-cert-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let line = serving_line(&["--addr", "0.0.0.0:0", "--cert-dir", dir.to_str().unwrap()]);
    assert!(line.contains("serving on https://0.0.0.0:"), "{line}");
    assert!(
        line.contains(&format!(
            "kubectl --kubeconfig {}",
            dir.join("admin.kubeconfig").display()
        )),
        "{line}"
    );
    assert!(dir.join("admin.kubeconfig").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
