//! The runner explains itself: `--version` names the crate's version and the commit, and each
//! scenario's `--help` names every design it runs (taken from the designs' own lists where the
//! library has them), so a design added without a word in the help fails here.

use std::process::Command;

use watchcache_bench::{authz, cluster, fanout, idle, list, vs_etcd};

fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_watchcache-bench"))
        .args(args)
        .output()
        .expect("the runner starts");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn version_names_the_crate_version_and_the_commit() {
    let text = run(&["--version"]);
    assert!(
        text.starts_with(&format!(
            "watchcache-bench {} (commit ",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
    // A commit is 40 hex digits, or `unknown` when built outside a git checkout.
    let commit = text
        .trim()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .trim_end_matches(')');
    assert!(
        commit == "unknown" || (commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{text}"
    );
}

#[test]
fn each_scenarios_help_names_its_designs_and_columns() {
    let names = |v: Vec<&'static str>| v.into_iter().map(str::to_owned).collect::<Vec<_>>();
    let scenarios: Vec<(&str, Vec<String>)> = vec![
        (
            "fanout",
            names(fanout::Design::ALL.iter().map(|d| d.name()).collect()),
        ),
        (
            "cluster",
            names(cluster::DESIGNS.iter().map(|d| d.name()).collect()),
        ),
        (
            "list",
            names(list::Design::ALL.iter().map(|d| d.name()).collect()),
        ),
        (
            "watchers",
            names(idle::Design::ALL.iter().map(|d| d.name()).collect()),
        ),
        (
            "authz",
            names(authz::Design::ALL.iter().map(|d| d.name()).collect()),
        ),
        ("http", names(vec!["h1", "h2", "h1-tls", "h2-tls"])),
        ("kubelets", names(vec!["h1", "h2", "h1-tls", "h2-tls"])),
        ("snapshots", names(vec!["pinned", "retention_0", "no_list"])),
        ("proof", names(vec!["old_proof", "fence"])),
        ("etcd", names(vec!["sync", "follow", "restart"])),
        ("slow-watchers", names(vec!["catch_up", "relist"])),
        ("patch", names(vec!["finalizers", "per doubling"])),
        ("operator", names(vec!["heap/CR", "to child"])),
        (
            "vs-etcd",
            names(vs_etcd::Design::ALL.iter().map(|d| d.name()).collect()),
        ),
        ("soak", names(vec!["open fds", "open watches"])),
        (
            "transport-memory",
            names(vec![
                "tls_h1_idle_connection",
                "tls_h2_idle_connection",
                "h2_idle_watch_stream",
                "h2_event_writes",
            ]),
        ),
    ];
    for (scenario, designs) in scenarios {
        let help = run(&[scenario, "--help"]);
        assert!(help.contains("Columns"), "{scenario}: no columns\n{help}");
        for d in designs {
            assert!(help.contains(&d), "{scenario}: {d} is not in the help\n{help}");
        }
    }
}
