//! Stamps the runner with its commit for `--version`: `WATCHCACHE_GIT_COMMIT` is `git rev-parse
//! HEAD` of the repository this crate is in, as `server/build.rs` makes it for `/version`.
//! Never fails: without git, or from a tarball, it is `unknown`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    // Only this project's own repository, not one a tarball was unpacked into.
    let workspace = manifest.parent().and_then(|p| p.canonicalize().ok());
    let top =
        git(&manifest, &["rev-parse", "--show-toplevel"]).and_then(|t| PathBuf::from(t).canonicalize().ok());
    let commit = if top.is_some() && top == workspace {
        // Rebuilt when HEAD moves: HEAD itself (a checkout) and the branch it names (a commit);
        // a path that does not exist would rerun this script at every build.
        let branch = git(&manifest, &["symbolic-ref", "-q", "HEAD"]);
        for r in ["HEAD"]
            .into_iter()
            .chain(branch.as_deref())
            .chain(["packed-refs"])
        {
            if let Some(path) = git(
                &manifest,
                &["rev-parse", "--path-format=absolute", "--git-path", r],
            ) && Path::new(&path).exists()
            {
                println!("cargo:rerun-if-changed={path}");
            }
        }
        git(&manifest, &["rev-parse", "HEAD"])
    } else {
        None
    };
    println!(
        "cargo:rustc-env=WATCHCACHE_GIT_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
}
