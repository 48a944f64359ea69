//! One build for everything: the main job (`cargo run --release -p ooode-tpch`), the CLI
//! (`cargo install --path cli`) and the tests resolve the same features for every crate they
//! share, so the second of them reuses the first's DataFusion instead of compiling it again
//! (35 minutes here). The `ooode-workspace-hack` crate (made by `cargo hakari generate`)
//! keeps it so; this test fails when a dependency change breaks it, and says which crates
//! differ.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Each crate of `package`'s build (`name version` -> features), from `cargo tree`.
fn features(package: Option<&str>) -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(&root)
        .args(["tree", "--locked", "--prefix", "none", "-f", "{p}|{f}"]);
    match package {
        Some(p) => cmd.args(["-p", p, "-e", "normal,build"]),
        None => cmd.args(["--workspace", "-e", "normal,build,dev"]),
    };
    let out = cmd.output().expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let line = line.trim_end_matches(" (*)");
            let (crate_, features) = line.split_once('|')?;
            // Workspace members are named with their path, which is not a feature.
            let crate_ = crate_.split(" (").next().unwrap_or(crate_);
            Some((crate_.to_string(), features.to_string()))
        })
        .collect()
}

#[test]
fn the_main_job_the_cli_and_the_tests_share_one_build() {
    let tpch = features(Some("ooode-tpch"));
    let cli = features(Some("ooode-cli"));
    let tests = features(None);
    assert!(
        cli.keys().any(|k| k.starts_with("datafusion ")),
        "the CLI builds DataFusion: {cli:?}"
    );
    for (name, other) in [("the CLI", &cli), ("the tests", &tests)] {
        let differ: Vec<String> = tpch
            .iter()
            .filter_map(|(k, f)| match other.get(k) {
                Some(g) if g != f => Some(format!("{k}: [{f}] against [{g}]")),
                _ => None,
            })
            .collect();
        assert!(
            differ.is_empty(),
            "the main job and {name} build these crates with other features (run `cargo \
             hakari generate`):\n{}",
            differ.join("\n")
        );
    }
}
