//! INSERT INTO and INSERT OVERWRITE on ooode tables: segments, snapshots, concurrent writers,
//! against the same statements on DataFusion's in-memory table.

use std::path::Path;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::{SessionConfig, SessionContext};
use proptest::prelude::*;

async fn sql(ctx: &SessionContext, q: &str) -> datafusion::common::Result<String> {
    let batches = ctx.sql(q).await?.collect().await?;
    Ok(pretty_format_batches(&batches)?.to_string())
}

async fn ok(ctx: &SessionContext, q: &str) -> String {
    sql(ctx, q).await.unwrap_or_else(|e| panic!("{q}: {e}"))
}

fn context() -> SessionContext {
    ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2))
}

/// `m` (memory) and `t` (ooode, in `dir`, clustered on `k`, indexed on `grp`) with the same
/// first rows.
async fn twin_tables(ctx: &SessionContext, dir: &Path) {
    ok(
        ctx,
        "CREATE TABLE m AS SELECT CASE WHEN value % 101 = 0 THEN NULL ELSE value % 40 END AS k, \
         CAST(value % 7 AS INT) AS grp, \
         CASE WHEN value % 103 = 0 THEN NULL ELSE concat('first-', value) END AS name \
         FROM generate_series(1, 300)",
    )
    .await;
    ok(
        ctx,
        "CREATE TABLE o (k BIGINT, v VARCHAR) AS VALUES (3, 'a'), (12, 'b'), (NULL, 'c'), \
         (999, 'd'), (5, 'e'), (1, 'f')",
    )
    .await;
    ok(
        ctx,
        &format!(
            "COPY (SELECT * FROM m) TO '{}' STORED AS OOODE OPTIONS \
             ('ooode.clustering_key' 'k', 'ooode.indexes' 'grp', 'ooode.page_size' '4KiB')",
            dir.display()
        ),
    )
    .await;
    ok(
        ctx,
        &format!(
            "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}'",
            dir.display()
        ),
    )
    .await;
}

/// Rows an insert adds: `count` rows from `start`, keys modulo `keys` (duplicates), a NULL
/// key every `null_every` rows and a NULL name every 5th.
/// Inserts the rows of `query` into both twin tables (`t`, ooode, and `m`, in memory).
async fn insert_twins(ctx: &SessionContext, query: &str) {
    for table in ["t", "m"] {
        ok(ctx, &format!("INSERT INTO {table} {query}")).await;
    }
}

fn rows_sql(start: u64, count: u64, keys: u64, null_every: u64) -> String {
    format!(
        "SELECT CASE WHEN value % {null_every} = 0 THEN NULL ELSE value % {keys} END, \
         CAST(value % 7 AS INT), \
         CASE WHEN value % 5 = 0 THEN NULL ELSE concat('n-', value) END \
         FROM generate_series({start}, {})",
        start + count - 1
    )
}

const CHECKS: &[&str] = &[
    "SELECT count(*), sum(k), count(k), count(name), min(name), max(name) FROM {t}",
    "SELECT k, grp, name FROM {t} WHERE grp = 3 ORDER BY k NULLS FIRST, grp, name",
    "SELECT k, count(*) FROM {t} WHERE k BETWEEN 10 AND 14 GROUP BY k ORDER BY k",
    "SELECT count(*) FROM {t} WHERE k IS NULL",
    "SELECT o.v, count(*), sum({t}.grp) FROM o JOIN {t} ON o.k = {t}.k GROUP BY o.v ORDER BY o.v",
    "SELECT o.v, count(*), min({t}.name) FROM o JOIN {t} ON o.k = {t}.grp GROUP BY o.v \
     ORDER BY o.v",
];

/// Every check, on `t` and on `m`, with the columnar copy and the heap pages, index plans
/// always and auto, the buffer pool emptied before each: equal.
async fn assert_same(ctx: &SessionContext, step: &str) {
    for check in CHECKS {
        let want = ok(ctx, &check.replace("{t}", "m")).await;
        for (columnar, rule) in [("true", "auto"), ("false", "always"), ("false", "never")] {
            ok(ctx, &format!("SET ooode.columnar_scan = {columnar}")).await;
            ok(ctx, &format!("SET ooode.index_join = '{rule}'")).await;
            // Cold: every segment's pages are read, not found where an earlier check left them.
            ooode_providers::ooode_runtime(ctx).pool().clear();
            let got = ok(ctx, &check.replace("{t}", "t")).await;
            assert_eq!(
                got.replace("t.", "m."),
                want,
                "after {step}: {check} (columnar {columnar}, {rule})"
            );
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert {
        count: u64,
        keys: u64,
        null_every: u64,
    },
    Values,
    Overwrite {
        count: u64,
    },
    Compact,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..3000, 1u64..200, 2u64..50).prop_map(|(count, keys, null_every)| Op::Insert {
            count,
            keys,
            null_every
        }),
        2 => Just(Op::Values),
        1 => (0u64..500).prop_map(|count| Op::Overwrite { count }),
        1 => Just(Op::Compact),
    ]
}

async fn run_ops(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context();
    twin_tables(&ctx, &dir.path().join("t")).await;
    let mut next = 1000;
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Insert {
                count,
                keys,
                null_every,
            } => {
                let rows = rows_sql(next, count, keys, null_every);
                next += count;
                for t in ["t", "m"] {
                    ok(&ctx, &format!("INSERT INTO {t} {rows}")).await;
                }
            }
            Op::Values => {
                for t in ["t", "m"] {
                    let values = "(12, 3, 'v-a'), (NULL, 3, NULL), (12, 3, 'v-a'), (999, 1, 'v-b')";
                    let out = ok(&ctx, &format!("INSERT INTO {t} VALUES {values}")).await;
                    assert!(out.contains('4'), "{out}");
                }
            }
            Op::Overwrite { count } => {
                let rows = rows_sql(next, count, 60, 9);
                next += count;
                ok(&ctx, &format!("INSERT OVERWRITE t {rows}")).await;
                ok(&ctx, "DELETE FROM m").await;
                ok(&ctx, &format!("INSERT INTO m {rows}")).await;
            }
            Op::Compact => {
                let out = ok(&ctx, "SELECT segments_after FROM ooode_compact('t')").await;
                assert!(out.contains("| 1 "), "{out}");
            }
        }
        assert_same(&ctx, &format!("step {i} ({op:?})")).await;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Random inserts (small and large, duplicate and NULL keys) and overwrites: after every
    /// step the ooode table answers as the in-memory table does.
    #[test]
    fn inserts_match_an_in_memory_table(ops in proptest::collection::vec(op(), 1..5)) {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(run_ops(ops));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_sees_the_segments_of_when_it_was_planned() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context();
    twin_tables(&ctx, &dir.path().join("t")).await;
    let before = ctx
        .sql("SELECT count(*) FROM t")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    ok(&ctx, &format!("INSERT INTO t {}", rows_sql(1, 500, 50, 7))).await;
    let old = datafusion::physical_plan::collect(before, ctx.task_ctx())
        .await
        .unwrap();
    let old = pretty_format_batches(&old).unwrap().to_string();
    assert!(old.contains("| 300 "), "{old}");
    let new = ok(&ctx, "SELECT count(*) FROM t").await;
    assert!(new.contains("| 800 "), "{new}");
    // DELETE and UPDATE say what ooode does instead.
    let e = sql(&ctx, "DELETE FROM t WHERE k = 1").await.unwrap_err();
    assert!(e.to_string().contains("INSERT OVERWRITE"), "{e}");
    let e = sql(&ctx, "UPDATE t SET grp = 1").await.unwrap_err();
    assert!(
        e.to_string().contains("not supported on ooode tables"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_lose_no_row_and_readers_see_whole_commits() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context();
    twin_tables(&ctx, &dir.path().join("t")).await;
    let (writers, inserts, rows) = (8u64, 5u64, 100u64);
    let mut tasks = Vec::new();
    for w in 0..writers {
        let ctx = ctx.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..inserts {
                let start = 10_000 + (w * inserts + i) * rows;
                ok(
                    &ctx,
                    &format!("INSERT INTO t {}", rows_sql(start, rows, 97, 13)),
                )
                .await;
            }
        }));
    }
    for r in 0..8 {
        let ctx = ctx.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let out = ok(&ctx, "SELECT count(*) AS n FROM t").await;
                let n: u64 = out
                    .lines()
                    .nth(3)
                    .and_then(|l| l.trim_matches(|c| c == '|' || c == ' ').parse().ok())
                    .unwrap_or_else(|| panic!("reader {r}: {out}"));
                assert_eq!((n - 300) % rows, 0, "reader {r} saw part of a commit: {n}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let out = ok(&ctx, "SELECT count(*) AS n FROM t").await;
    let want = 300 + writers * inserts * rows;
    assert!(out.contains(&format!("| {want} ")), "{out}");
    let list = ooode::storage::segments::SegmentList::read(&dir.path().join("t")).unwrap();
    assert_eq!(list.segments.len() as u64, 1 + writers * inserts);
    assert_eq!(list.version, writers * inserts);
    // A second session opening the table reads every segment.
    let other = context();
    ok(
        &other,
        &format!(
            "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}'",
            dir.path().join("t").display()
        ),
    )
    .await;
    assert_eq!(ok(&other, "SELECT count(*) AS n FROM t").await, out);
}

/// Files under `dir` this process has open: (still there, removed).
fn open_files_under(dir: &Path) -> (Vec<String>, Vec<String>) {
    let dir = std::fs::canonicalize(dir).unwrap();
    let (mut live, mut deleted) = (vec![], vec![]);
    for fd in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(target) = std::fs::read_link(fd.path()) else {
            continue;
        };
        let text = target.to_string_lossy().into_owned();
        if text.starts_with(dir.to_string_lossy().as_ref()) {
            match text.ends_with(" (deleted)") {
                true => deleted.push(text),
                false => live.push(text),
            }
        }
    }
    (live, deleted)
}

fn segments(dir: &Path) -> ooode::storage::segments::SegmentList {
    ooode::storage::segments::SegmentList::read(dir).unwrap()
}

/// Compaction merges the segments into one (index plans then apply again); the old segments'
/// files go only once no plan has them open; `ooode.compact_segments` compacts after inserts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_merges_segments_and_waits_for_readers() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    let ctx = context();
    twin_tables(&ctx, &t).await;
    for i in 0..3 {
        insert_twins(&ctx, &rows_sql(1000 + i * 400, 400, 90, 11)).await;
    }
    assert_eq!(segments(&t).segments.len(), 4);
    // Index plans over the four segments: each probe looks its key up in every segment.
    ok(&ctx, "SET ooode.index_join = 'always'").await;
    let plan = ok(&ctx, "EXPLAIN SELECT k, name FROM t WHERE grp = 3").await;
    assert!(plan.contains("IndexScanExec"), "{plan}");
    let plan = ok(
        &ctx,
        "EXPLAIN SELECT o.v, t.name FROM o JOIN t ON o.k = t.k",
    )
    .await;
    assert!(plan.contains("IndexJoinExec"), "{plan}");
    assert_same(&ctx, "three inserts").await;
    // A plan made now holds the four segments open.
    let held = ctx
        .sql("SELECT count(*), sum(k) FROM t")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let report = ooode_providers::compact_table(&ctx, "t").await.unwrap();
    assert_eq!((report.segments_before, report.segments_after), (4, 1));
    assert_eq!((report.removed, report.kept), (0, 4), "{report:?}");
    assert_eq!(report.rows, 300 + 3 * 400);
    let old = datafusion::physical_plan::collect(held, ctx.task_ctx())
        .await
        .unwrap();
    let want = ok(&ctx, "SELECT count(*), sum(k) FROM m").await;
    assert_eq!(
        pretty_format_batches(&old)
            .unwrap()
            .to_string()
            .replace("t.", "m."),
        want
    );
    assert_same(&ctx, "compaction").await;
    // Nothing holds them now: the next compaction removes them, the bulk load's files too.
    let out = ok(&ctx, "SELECT * FROM ooode_compact('t')").await;
    assert!(out.contains("removed_segments"), "{out}");
    let list = segments(&t);
    assert!(list.retired.is_empty(), "{list:?}");
    assert_eq!(list.segments.len(), 1);
    assert!(!t.join("manifest.json").exists() && !t.join("heap.0.pages").exists());
    let dirs = std::fs::read_dir(&t)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().is_dir())
        .count();
    assert_eq!(dirs, 1);
    // The engines closed the removed files: no descriptor keeps their space.
    let (_, deleted) = open_files_under(&t);
    assert!(
        deleted.is_empty(),
        "descriptors on removed files: {deleted:?}"
    );
    assert_same(&ctx, "the second compaction").await;
    // One segment: the index rule plans index scans again.
    ok(&ctx, "SET ooode.index_join = 'always'").await;
    let plan = ok(&ctx, "EXPLAIN SELECT k, name FROM t WHERE grp = 3").await;
    assert!(plan.contains("IndexScanExec"), "{plan}");
    ok(&ctx, "SELECT k, name FROM t WHERE grp = 3").await;
    let (live, _) = open_files_under(&t);
    assert!(!live.is_empty(), "the index scan reads through open files");
    // A new session opens the compacted table.
    let other = context();
    ok(
        &other,
        &format!(
            "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}'",
            t.display()
        ),
    )
    .await;
    assert_eq!(
        ok(&other, "SELECT count(*), sum(k) FROM t").await,
        ok(&ctx, "SELECT count(*), sum(k) FROM t").await
    );
    // Automatic compaction past two segments.
    ok(&ctx, "SET ooode.compact_segments = 2").await;
    for i in 0..4 {
        insert_twins(&ctx, &rows_sql(9000 + i * 50, 50, 30, 7)).await;
        assert!(segments(&t).segments.len() <= 2, "after insert {i}");
    }
    assert_same(&ctx, "automatic compaction").await;
    let e = sql(&ctx, "SELECT * FROM ooode_compact('m')")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not an ooode table"), "{e}");
}

/// A compaction of more segments than the query has read permits, each read ahead by
/// several pages: finishes (the merge's reads do not hold permits while another segment is
/// consumed) and keeps every row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_of_many_segments_under_a_small_read_budget() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    let ctx = context();
    twin_tables(&ctx, &t).await;
    for i in 0..11 {
        insert_twins(&ctx, &rows_sql(2000 + i * 300, 300, 50, 13)).await;
    }
    assert_eq!(segments(&t).segments.len(), 12);
    ok(&ctx, "SET ooode.max_outstanding_io = 4").await;
    let report = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        ooode_providers::compact_table(&ctx, "t"),
    )
    .await
    .expect("the compaction finishes")
    .unwrap();
    assert_eq!((report.segments_before, report.segments_after), (12, 1));
    ok(&ctx, "SET ooode.max_outstanding_io = 256").await;
    assert_same(&ctx, "compacting 12 segments under 4 read permits").await;
}
