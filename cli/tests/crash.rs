//! Crash safety of inserts and compactions: an `ooode` process running them is killed
//! (SIGKILL) at random moments, 50 times. Each time the table then opens, every page and
//! block passes its checksum, and it holds exactly the rows of the inserts that returned
//! before the kill, plus possibly the one in flight: never part of one.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const TRIALS: u64 = 50;
/// Rows per insert: an odd number, so that a printed count is recognisable.
const BATCH: u64 = 1777;
const FIRST: u64 = 1000;

fn ooode(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ooode"))
        .args(args)
        .output()
        .expect("the ooode binary runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "ooode {args:?} failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn insert_sql(batch: u64) -> String {
    let start = batch * 10_000;
    format!(
        "INSERT INTO t SELECT value AS id, {batch} AS batch, CAST(value % 10 AS INT) AS grp \
         FROM generate_series({start}, {})",
        start + BATCH - 1
    )
}

/// `batch,count` lines of the table, read through the columnar copy, the heap pages, and
/// an index scan (all must agree).
fn batches(t: &Path) -> Vec<(u64, u64)> {
    let create = format!(
        "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}'",
        t.display()
    );
    let q = "SELECT batch, count(*) FROM t GROUP BY batch ORDER BY batch";
    let grp = "SELECT batch, count(*) FROM t WHERE grp >= 0 GROUP BY batch ORDER BY batch";
    let out = ooode(&[
        "-q",
        "--format",
        "csv",
        "-c",
        &create,
        "-c",
        q,
        "-c",
        "SET ooode.columnar_scan = false",
        "-c",
        q,
        "-c",
        "SET ooode.index_join = 'always'",
        "-c",
        grp,
    ]);
    let mut parts = out.split("batch,").skip(1).map(|part| {
        part.lines()
            .skip(1)
            .filter_map(|l| {
                let (b, n) = l.split_once(',')?;
                Some((b.parse().ok()?, n.parse().ok()?))
            })
            .collect::<Vec<(u64, u64)>>()
    });
    let columnar = parts.next().expect("columnar result");
    let heap = parts.next().expect("heap result");
    let indexed = parts.next().expect("index scan result");
    assert_eq!(columnar, heap, "{out}");
    assert_eq!(columnar, indexed, "{out}");
    columnar
}

#[test]
fn killed_inserts_and_compactions_leave_whole_commits() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    ooode(&[
        "-q",
        "-c",
        &format!(
            "COPY (SELECT value AS id, 0 AS batch, CAST(value % 10 AS INT) AS grp \
             FROM generate_series(1, {FIRST})) TO '{}' STORED AS OOODE OPTIONS \
             ('ooode.clustering_key' 'id', 'ooode.indexes' 'grp', 'ooode.page_size' '4KiB')",
            t.display()
        ),
    ]);
    let mut committed: Vec<u64> = vec![0];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut random = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut in_flight_landed, mut compactions_started, mut killed_compacting) = (0, 0, 0);
    for trial in 1..=TRIALS {
        // Inserts of batches trial*100+1, +2, ... with a compaction after every third.
        let script = dir.path().join("script.sql");
        let mut sql = format!(
            "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}';\n",
            t.display()
        );
        let planned: Vec<u64> = (1..=12).map(|i| trial * 100 + i).collect();
        for (i, b) in planned.iter().enumerate() {
            sql += &format!("{};\n", insert_sql(*b));
            if i % 3 == 2 {
                sql += "SELECT segments_after FROM ooode_compact('t');\n";
            }
        }
        std::fs::write(&script, sql).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_ooode"))
            .args(["-q", "--format", "csv", "-f"])
            .arg(&script)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut inserts, mut compactions) = (0usize, 0usize);
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                match line.trim() {
                    l if l == BATCH.to_string() => inserts += 1,
                    "segments_after" => compactions += 1,
                    _ => {}
                }
            }
            (inserts, compactions)
        });
        std::thread::sleep(Duration::from_millis(100 + random(1200)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let (returned, compactions) = reader.join().unwrap();
        compactions_started += compactions;
        // The script runs three inserts, then a compaction, and so on.
        if returned > 0 && returned % 3 == 0 && compactions < returned / 3 {
            killed_compacting += 1;
        }
        let found = batches(&t);
        let mut want: Vec<u64> = committed.clone();
        want.extend(&planned[..returned]);
        let ids: Vec<u64> = found.iter().map(|(b, _)| *b).collect();
        let with_next = {
            let mut w = want.clone();
            if let Some(next) = planned.get(returned) {
                w.push(*next);
            }
            w
        };
        assert!(
            ids == want || ids == with_next,
            "trial {trial}: {returned} inserts returned; found batches {ids:?}, want {want:?}"
        );
        if ids == with_next && ids != want {
            in_flight_landed += 1;
        }
        for (b, n) in &found {
            let expected = if *b == 0 { FIRST } else { BATCH };
            assert_eq!(*n, expected, "trial {trial}: batch {b} is partial");
        }
        committed = ids;
    }
    println!(
        "{TRIALS} kills: {} inserts committed in all, {in_flight_landed} kills after an \
         insert's commit and before its answer, {killed_compacting} during a compaction, \
         {compactions_started} compactions finished",
        committed.len() - 1
    );
    assert!(
        committed.len() > 1,
        "some inserts committed before the kills"
    );
}
