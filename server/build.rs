//! Stamps the build with its commit and date for `/version` (`gitCommit`, `buildDate`), as
//! the apiserver's `-ldflags` do: `WATCHCACHE_GIT_COMMIT` is `git rev-parse HEAD` of the
//! repository this crate is in, and `WATCHCACHE_BUILD_DATE` is `SOURCE_DATE_EPOCH` when set
//! (reproducible builds), else the commit's date, as RFC 3339 in UTC. Never fails: without
//! git, or from a tarball, both are `unknown`.

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

/// `seconds` since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`; the date by Howard Hinnant's
/// `civil_from_days` (days since 1970-01-01 to a proleptic Gregorian date).
fn rfc3339(seconds: i64) -> String {
    let (days, secs) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

fn main() {
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    println!("cargo:rerun-if-changed=build.rs");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    // Only this project's own repository: a tarball unpacked inside another repository (a
    // vendor directory) must not take that one's commit.
    let workspace = manifest.parent().and_then(|p| p.canonicalize().ok());
    let top =
        git(&manifest, &["rev-parse", "--show-toplevel"]).and_then(|t| PathBuf::from(t).canonicalize().ok());
    let ours = top.is_some() && top == workspace;
    let commit = if ours {
        git(&manifest, &["rev-parse", "HEAD"])
    } else {
        None
    };
    if ours {
        // Rebuilt when HEAD moves: HEAD itself (a checkout) and the branch it names (a commit).
        if let Some(head) = git(
            &manifest,
            &["rev-parse", "--path-format=absolute", "--git-path", "HEAD"],
        ) {
            println!("cargo:rerun-if-changed={head}");
        }
        // A path that does not exist would rerun this script at every build: a packed branch
        // is watched through `packed-refs`.
        let branch = git(&manifest, &["symbolic-ref", "-q", "HEAD"]);
        for r in branch.iter().map(String::as_str).chain(["packed-refs"]) {
            if let Some(path) = git(
                &manifest,
                &["rev-parse", "--path-format=absolute", "--git-path", r],
            ) && Path::new(&path).exists()
            {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .or_else(|| {
            commit
                .as_ref()
                .and_then(|_| git(&manifest, &["show", "-s", "--format=%ct", "HEAD"]))
                .and_then(|s| s.parse().ok())
        });
    println!(
        "cargo:rustc-env=WATCHCACHE_GIT_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
    println!(
        "cargo:rustc-env=WATCHCACHE_BUILD_DATE={}",
        epoch.map(rfc3339).unwrap_or_else(|| "unknown".to_owned())
    );
}
