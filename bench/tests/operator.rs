//! The `operator` scenario at a small size: its operator reconciles every custom resource into
//! its children, and sees each spec change come back through its StatefulSet informer, with no
//! failed write. (Its figures are the runner's; here only that it measures what it says.)

use watchcache_bench::operator::{Params, run};

#[test]
fn the_operator_reconciles_every_resource_and_sees_every_change_through_its_children() {
    let p = Params {
        crs: vec![40],
        cr_bytes: 512,
        concurrency: 2,
        change_rate: 20.0,
        seconds: 1.0,
    };
    let rows = run(&p, &|_| {}).expect("the scenario runs");
    let row = &rows[0];
    assert_eq!(row["crs"], 40);
    assert_eq!(row["errors"], 0, "{row}");
    assert_eq!(row["changes"], 20, "{row}");
    assert_eq!(row["changes_seen"], 20, "{row}");
    assert_eq!(row["children_seen"], 20, "{row}");
    // Each resource reconciled at least once, and each change once more (changes to the same
    // resource may be reconciled together).
    let reconciles = row["reconciles"].as_u64().unwrap();
    assert!((40..=60).contains(&reconciles), "{row}");
    // Three children per resource, each seen by its informer at least once.
    assert!(row["child_events"].as_u64().unwrap() >= 120, "{row}");
    assert!(row["cr_json_bytes"].as_f64().unwrap() > 512.0, "{row}");
}
