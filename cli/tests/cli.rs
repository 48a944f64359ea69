//! The `ooode` binary as a user runs it: `-c` commands, output formats, and the errors a user
//! meets (each must say what is wrong and exit non-zero).

use std::path::Path;
use std::process::{Command, Output};

fn ooode(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ooode"))
        .args(args)
        .output()
        .expect("the ooode binary runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn copy_sql(dir: &Path, options: &str) -> String {
    format!(
        "COPY (SELECT value AS id, value % 10 AS grp FROM generate_series(1, 2000)) TO '{}' \
         STORED AS OOODE OPTIONS ({options})",
        dir.display()
    )
}

#[test]
fn create_load_query_explain() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    let create = format!(
        "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}'",
        t.display()
    );
    let out = ooode(&[
        "-q",
        "--format",
        "csv",
        "-c",
        &copy_sql(&t, "'ooode.clustering_key' 'id', 'ooode.indexes' 'grp'"),
        "-c",
        &create,
        "-c",
        "SET ooode.index_join = 'always'",
        "-c",
        "SELECT COUNT(*) AS n FROM t WHERE grp = 3",
        "-c",
        "EXPLAIN SELECT * FROM t WHERE id = 5",
    ]);
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(all.contains("n\n200\n"), "{all}");
    assert!(all.contains("IndexScanExec"), "{all}");
}

#[test]
fn banner_names_ooode_and_datafusion() {
    let out = ooode(&["-c", "SELECT 1"]);
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(
        all.contains("ooode v") && all.contains("DataFusion CLI v55"),
        "{all}"
    );
}

#[test]
fn errors_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let not_table = dir.path().join("plain");
    std::fs::create_dir_all(&not_table).unwrap();
    std::fs::write(not_table.join("data.csv"), "a\n1\n").unwrap();
    let cases: Vec<(String, Vec<&str>)> = vec![
        (
            format!(
                "CREATE EXTERNAL TABLE m STORED AS OOODE LOCATION '{}'",
                dir.path().join("missing").display()
            ),
            vec!["missing", "not an ooode table"],
        ),
        (
            format!(
                "CREATE EXTERNAL TABLE p STORED AS OOODE LOCATION '{}'",
                not_table.display()
            ),
            vec!["plain", "not an ooode table"],
        ),
        (
            copy_sql(&dir.path().join("u1"), "'ooode.bogus' 'x'"),
            vec!["ooode.bogus"],
        ),
        (
            copy_sql(&dir.path().join("u2"), "'ooode.indexes' 'nope'"),
            vec!["'nope'"],
        ),
        (
            "SET ooode.execution_mode = 'sideways'".to_string(),
            vec!["sideways", "in_order"],
        ),
    ];
    for (sql, wanted) in cases {
        let out = ooode(&["-q", "-c", &sql]);
        let all = text(&out);
        assert!(!out.status.success(), "{sql}: succeeded\n{all}");
        for w in wanted {
            assert!(all.contains(w), "{sql}: error does not mention {w}:\n{all}");
        }
    }
}
