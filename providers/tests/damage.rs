//! Damage anywhere in a table's files (heap, indexes, columnar copy and its checksums,
//! manifest; of both segments of a table that grew by an insert, and its segment list): bit
//! flips, zeroed runs, truncation, over many random trials. Every query either
//! answers exactly as on the intact table or fails with an error; never a wrong answer, a
//! panic or a hang.

use std::path::{Path, PathBuf};
use std::time::Duration;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::{SessionConfig, SessionContext};
use ooode::access::OoodeRuntime;

/// Trials; `OOODE_DAMAGE_TRIALS` overrides (the default keeps the test near half a minute).
const TRIALS: usize = 2000;

async fn sql(ctx: &SessionContext, q: &str) -> datafusion::common::Result<String> {
    let batches = ctx.sql(q).await?.collect().await?;
    Ok(pretty_format_batches(&batches)?.to_string())
}

/// The queries and the settings they run under: full scans through the columnar copy and
/// through the heap pages, an index scan on the secondary index, a clustering-key range.
const QUERIES: &[(&str, &str)] = &[
    (
        "true",
        "SELECT count(*), sum(amount), count(name), min(name) FROM t",
    ),
    ("false", "SELECT count(*), sum(amount), max(name) FROM t"),
    ("false", "SELECT count(*), sum(amount) FROM t WHERE grp = 7"),
    (
        "false",
        "SELECT id, name FROM t WHERE id BETWEEN 5000 AND 5040 ORDER BY id",
    ),
];

/// A small xorshift generator: the trials are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Debug)]
enum Damage {
    Flip { at: u64, mask: u8 },
    Zero { at: u64, len: u64 },
    Truncate { to: u64 },
}

fn damage(rng: &mut Rng, len: u64) -> Damage {
    match rng.below(3) {
        0 => Damage::Flip {
            at: rng.below(len),
            mask: 1 << rng.below(8),
        },
        1 => Damage::Zero {
            at: rng.below(len),
            len: 1 + rng.below(4096),
        },
        _ => Damage::Truncate { to: rng.below(len) },
    }
}

fn apply(path: &Path, intact: &[u8], d: &Damage) {
    let mut bytes = intact.to_vec();
    match *d {
        Damage::Flip { at, mask } => bytes[at as usize] ^= mask,
        Damage::Zero { at, len } => {
            let end = (at + len).min(bytes.len() as u64) as usize;
            bytes[at as usize..end].fill(0);
        }
        Damage::Truncate { to } => bytes.truncate(to as usize),
    }
    std::fs::write(path, bytes).unwrap();
}

/// The table's files, its segments' too; not the lock and pin files (empty, locked only).
fn table_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            out.extend(table_files(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

async fn run_query(ctx: &SessionContext, columnar: &str, q: &str) -> Result<String, String> {
    let set = format!("SET ooode.columnar_scan = {columnar}");
    sql(ctx, &set).await.map_err(|e| e.to_string())?;
    match tokio::time::timeout(Duration::from_secs(60), sql(ctx, q)).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => panic!("query hung: {q}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_tables_answer_right_or_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    let ctx = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    sql(
        &ctx,
        "CREATE TABLE src AS SELECT value AS id, CAST(value % 50 AS INT) AS grp, \
         CASE WHEN value % 9 = 0 THEN NULL ELSE concat('name-', value) END AS name, \
         CAST(value AS DOUBLE) * 0.25 AS amount FROM generate_series(1, 20000)",
    )
    .await
    .unwrap();
    sql(
        &ctx,
        &format!(
            "COPY (SELECT * FROM src) TO '{}' STORED AS OOODE OPTIONS \
             ('ooode.clustering_key' 'id', 'ooode.indexes' 'grp', 'ooode.page_size' '4KiB')",
            t.display()
        ),
    )
    .await
    .unwrap();
    sql(&ctx, "SET ooode.index_join = 'always'").await.unwrap();
    let create = format!(
        "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}'",
        t.display()
    );
    sql(&ctx, &create).await.unwrap();
    // A second segment (an insert), so its files and the segment list are damaged too.
    let inserted = "SELECT * FROM src WHERE id % 10 = 0";
    sql(&ctx, &format!("INSERT INTO t {inserted}"))
        .await
        .unwrap();
    sql(
        &ctx,
        &format!("CREATE VIEW both_rows AS SELECT * FROM src UNION ALL {inserted}"),
    )
    .await
    .unwrap();
    // The answers, from the intact table, checked against the source.
    let mut want = Vec::new();
    for (columnar, q) in QUERIES {
        let got = run_query(&ctx, columnar, q).await.unwrap();
        assert_eq!(
            got,
            sql(&ctx, &q.replace(" FROM t", " FROM both_rows t"))
                .await
                .unwrap(),
            "{q}"
        );
        want.push(got);
    }
    let files: Vec<(PathBuf, Vec<u8>)> = table_files(&t)
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    let names: Vec<String> = files
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for wanted in [
        "manifest.json",
        "columns.parquet",
        "columns.parquet.sums",
        "segments.json",
    ] {
        assert!(names.iter().any(|n| n == wanted), "{names:?}");
    }
    let trials = std::env::var("OOODE_DAMAGE_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(TRIALS);
    let runtime = ooode_providers::ooode_runtime(&ctx);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut failed, mut answered) = (0usize, 0usize);
    for trial in 0..trials {
        let (path, intact) = &files[rng.below(files.len() as u64) as usize];
        let d = damage(&mut rng, intact.len() as u64);
        apply(path, intact, &d);
        let what = format!("trial {trial}: {} {d:?}", path.display());
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let clear = |e: &str| !e.contains("panic") && e.contains(&name);
        sql(&ctx, "DROP TABLE t").await.unwrap();
        OoodeRuntime::forget_table_everywhere(&t);
        runtime.pool().clear();
        if let Err(e) = sql(&ctx, &create).await {
            let e = e.to_string();
            assert!(clear(&e), "{what}: not a clear error: {e}");
            failed += QUERIES.len();
            // Queries below run on a table that is not there: skip them.
            std::fs::write(path, intact).unwrap();
            sql(&ctx, &create).await.unwrap();
            continue;
        }
        for ((columnar, q), want) in QUERIES.iter().zip(&want) {
            match run_query(&ctx, columnar, q).await {
                Ok(got) => {
                    assert_eq!(&got, want, "{what}: a wrong answer to {q}");
                    answered += 1;
                }
                Err(e) => {
                    assert!(clear(&e), "{what}: {q}: not a clear error: {e}");
                    failed += 1;
                }
            }
        }
        std::fs::write(path, intact).unwrap();
    }
    println!("{trials} trials: {answered} queries answered right, {failed} failed cleanly");
    assert!(
        failed > 0 && answered > 0,
        "the damage was seen and sometimes harmless"
    );
}
