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

fn create_sql(t: &Path) -> String {
    format!(
        "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}'",
        t.display()
    )
}

#[test]
fn create_load_query_explain() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    let create = create_sql(&t);
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

/// Runs `ooode` with `args`, writing its output to `out`; returns whether it succeeded and its
/// peak resident memory in bytes (from the kernel's accounting of the child).
fn ooode_peak_memory(args: &[&str], out: &Path) -> (bool, u64) {
    let file = std::fs::File::create(out).unwrap();
    // Reaped by wait4 below (for its resource usage), not by Child::wait.
    #[allow(clippy::zombie_processes)]
    let child = Command::new(env!("CARGO_BIN_EXE_ooode"))
        .args(args)
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("the ooode binary runs");
    let mut status = 0;
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: the child is ours and not yet reaped; wait4 fills `status` and `usage`.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, usage.as_mut_ptr()) };
    assert_eq!(pid, child.id() as i32, "wait4 failed");
    // SAFETY: wait4 succeeded, so `usage` is filled.
    let usage = unsafe { usage.assume_init() };
    let exited_ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    (exited_ok, usage.ru_maxrss as u64 * 1024)
}

/// An index join whose key matches a million rows of 200 bytes (200 MB of output), and one
/// with a million outer rows, forced (`always`), under `--memory-limit 64M`: they stream, and
/// the process stays far below the output's size (before ooode's memory was bounded the first
/// peaked at 1.47 GB), or they fail with DataFusion's resources-exhausted error; never does
/// one take the process down.
#[test]
fn a_million_matches_under_a_64_mib_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (big, one) = (dir.path().join("big"), dir.path().join("one"));
    let load = ooode(&[
        "-q",
        "-c",
        &format!(
            "COPY (SELECT 1 AS k, value AS id, repeat('x', 200) AS payload \
             FROM generate_series(1, 1000000)) TO '{}' STORED AS OOODE \
             OPTIONS ('ooode.clustering_key' 'id', 'ooode.indexes' 'k')",
            big.display()
        ),
        "-c",
        // The outer side has no index on k: the join can only probe `big`.
        &format!(
            "COPY (SELECT 1 AS c, 1 AS k) TO '{}' STORED AS OOODE \
             OPTIONS ('ooode.clustering_key' 'c')",
            one.display()
        ),
    ]);
    assert!(load.status.success(), "{}", text(&load));
    let out = dir.path().join("out.txt");
    let (ok, peak) = ooode_peak_memory(
        &[
            "-q",
            "--format",
            "csv",
            "--memory-limit",
            "64M",
            "-c",
            &format!(
                "CREATE EXTERNAL TABLE big STORED AS OOODE LOCATION '{}'",
                big.display()
            ),
            "-c",
            &format!(
                "CREATE EXTERNAL TABLE one STORED AS OOODE LOCATION '{}'",
                one.display()
            ),
            "-c",
            "SET ooode.index_join = 'always'",
            "-c",
            "EXPLAIN SELECT count(*) FROM one JOIN big ON one.k = big.k",
            "-c",
            "SELECT count(*) AS n, sum(length(payload)) AS bytes FROM one JOIN big ON one.k = big.k",
            // A million outer rows, each probing the clustering index: the outer side is
            // pulled only as probes finish.
            "-c",
            "SELECT count(*) AS pairs FROM big a JOIN big b ON a.id = b.id",
        ],
        &out,
    );
    let printed = std::fs::read_to_string(&out).unwrap();
    eprintln!("peak resident memory {} MiB\n{printed}", peak >> 20);
    assert!(printed.contains("IndexJoinExec"), "{printed}");
    if ok {
        assert!(printed.contains("1000000,200000000"), "{printed}");
        assert!(printed.contains("pairs\n1000000"), "{printed}");
    } else {
        assert!(printed.contains("Resources exhausted"), "{printed}");
    }
    assert!(
        peak < 320 << 20,
        "peak resident memory {} MiB under a 64 MiB limit",
        peak >> 20
    );
}

/// A process started with a low soft limit of open files (64) keeps inserting: every segment
/// adds page files the engines keep open, and ooode raises the soft limit to the hard one.
#[test]
fn many_inserts_under_a_low_open_file_limit() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    let mut sql = format!(
        "{};\nCREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}';\n",
        copy_sql(&t, "'ooode.clustering_key' 'id', 'ooode.indexes' 'grp'"),
        t.display()
    );
    for i in 0..40 {
        sql += &format!(
            "INSERT INTO t SELECT value AS id, value % 10 AS grp FROM generate_series({}, {});\n",
            10_000 + i * 10,
            10_009 + i * 10
        );
    }
    sql += "SET ooode.index_join = 'always';\nSELECT count(*) AS n FROM t WHERE grp = 3;\n";
    let script = dir.path().join("script.sql");
    std::fs::write(&script, sql).unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ulimit -Sn 64 && exec '{}' -q --format csv -f '{}'",
            env!("CARGO_BIN_EXE_ooode"),
            script.display()
        ))
        .output()
        .unwrap();
    let text = text(&out);
    assert!(out.status.success(), "{text}");
    // 200 rows with grp 3 loaded, 4 of each 10 inserted... 1 per insert of 10 values.
    assert!(text.contains("\n240\n"), "{text}");
}

/// `ooode compact DIR` merges a grown table's segments; the REPL reads statements and
/// backslash commands from stdin.
#[test]
fn compact_subcommand_and_repl() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    let create = create_sql(&t);
    let out = ooode(&[
        "-q",
        "-c",
        &copy_sql(&t, "'ooode.clustering_key' 'id', 'ooode.indexes' 'grp'"),
        "-c",
        &create,
        "-c",
        "INSERT INTO t VALUES (5000, 3), (1, 3)",
        "-c",
        "INSERT INTO t VALUES (7, 3)",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let out = ooode(&["compact", t.to_str().unwrap()]);
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(all.contains("3 segment(s) -> 1, 2003 rows"), "{all}");
    let out = ooode(&["compact", dir.path().join("nothing").to_str().unwrap()]);
    assert!(
        !out.status.success() && text(&out).contains("nothing"),
        "{}",
        text(&out)
    );
    // The REPL keeps its history in `.history` of the working directory: not the checkout's.
    let mut child = Command::new(env!("CARGO_BIN_EXE_ooode"))
        .args(["-q", "--format", "csv"])
        .current_dir(dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    let script = format!("{create};\n\\d\nSELECT count(*) AS n FROM t WHERE grp = 3;\n\\q\n");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(all.contains("n\n203\n"), "{all}");
    assert!(
        all.contains("table_name") && all.contains(",t,"),
        "\\d lists tables: {all}"
    );
}
