//! Index-only scans and joins: a query that needs only an index's key columns reads them from
//! the index's leaves. Results equal stock DataFusion's and the heap reads' (NULL keys,
//! strings with zero bytes, duplicate keys, every join kind, a second segment), the plans
//! say so, and with every heap page damaged the index-only plans still answer while a heap
//! read fails.

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::{SessionConfig, SessionContext};

async fn sql(ctx: &SessionContext, q: &str) -> datafusion::common::Result<String> {
    let batches = ctx.sql(q).await?.collect().await?;
    Ok(pretty_format_batches(&batches)?.to_string())
}

/// Queries over `{t}`: each names its columns in ORDER BY, so results compare as text.
const QUERIES: [&str; 9] = [
    "SELECT id, k FROM {t} WHERE k BETWEEN 10 AND 60 ORDER BY id",
    "SELECT count(*) FROM {t} WHERE k < 100",
    "SELECT s, k FROM {t} WHERE s >= 'n1' AND s < 'n2' ORDER BY s, k",
    "SELECT o.x, t.id FROM probe o JOIN {t} t ON o.x = t.k ORDER BY o.x, t.id",
    "SELECT o.x, t.id FROM probe o JOIN {t} t ON o.x = t.k AND t.id > 2500 ORDER BY o.x, t.id",
    "SELECT o.x, t.id FROM probe o LEFT JOIN {t} t ON o.x = t.k ORDER BY o.x, t.id",
    "SELECT o.x FROM probe o WHERE EXISTS (SELECT 1 FROM {t} t WHERE t.k = o.x) ORDER BY o.x",
    "SELECT o.x FROM probe o WHERE NOT EXISTS (SELECT 1 FROM {t} t WHERE t.k = o.x) \
     ORDER BY o.x",
    "SELECT o.name, t.k FROM names o JOIN {t} t ON o.name = t.s ORDER BY o.name, t.k",
];

/// `src`: ids 1..=5000, `k` = id % 211 (NULL every 13th row), `s` a string with a zero
/// byte (NULL every 17th), `v` a column no index holds; `probe` and `names`: outer keys with
/// duplicates, NULLs and misses.
async fn context() -> SessionContext {
    let ctx = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    let src = "CREATE TABLE src AS SELECT value AS id, \
               CASE WHEN value % 13 = 0 THEN NULL ELSE value % 211 END AS k, \
               CASE WHEN value % 17 = 0 THEN NULL ELSE concat('n', value % 300, chr(0), 'z') END AS s, \
               value * 3 AS v FROM generate_series(1, 5000)";
    sql(&ctx, src).await.unwrap();
    sql(
        &ctx,
        "CREATE TABLE probe AS SELECT * FROM (VALUES (5), (5), (60), (NULL), (300), (0), (210)) \
         AS p(x)",
    )
    .await
    .unwrap();
    sql(
        &ctx,
        "CREATE TABLE names AS SELECT * FROM (VALUES (concat('n7', chr(0), 'z')), ('n7'), \
         (concat('n150', chr(0), 'z')), (NULL)) AS p(name)",
    )
    .await
    .unwrap();
    ctx
}

async fn answers(ctx: &SessionContext, table: &str) -> Vec<String> {
    let mut out = Vec::new();
    for q in QUERIES {
        let q = q.replace("{t}", table);
        out.push(sql(ctx, &q).await.unwrap_or_else(|e| panic!("{q}: {e}")));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_only_plans_answer_as_the_heap_does_and_read_no_heap_page() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context().await;
    let path = dir.path().join("t");
    sql(
        &ctx,
        &format!(
            "COPY (SELECT * FROM src WHERE id <= 4000) TO '{}' STORED AS OOODE OPTIONS \
             ('ooode.clustering_key' 'id', 'ooode.indexes' 'k,id;s,k', 'ooode.page_size' '4KiB')",
            path.display()
        ),
    )
    .await
    .unwrap();
    sql(
        &ctx,
        &format!(
            "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{}'",
            path.display()
        ),
    )
    .await
    .unwrap();
    // A composite index keeps its first column's distinct values (statistics for joins).
    let table = ooode::storage::Table::open(&path).unwrap();
    let by_k = table
        .indexes()
        .iter()
        .find(|i| i.meta.columns == ["k", "id"])
        .unwrap();
    let distinct = sql(
        &ctx,
        "SELECT count(DISTINCT k) + 1 AS n FROM src WHERE id <= 4000",
    )
    .await
    .unwrap();
    assert!(
        distinct.contains(&format!("| {} ", by_k.meta.distinct_first)),
        "{} distinct (NULL counted) vs {distinct}",
        by_k.meta.distinct_first
    );
    // A second segment: index-only reads walk both trees.
    sql(&ctx, "INSERT INTO t SELECT * FROM src WHERE id > 4000")
        .await
        .unwrap();
    sql(&ctx, "SET ooode.index_join = 'always'").await.unwrap();

    let want = answers(&ctx, "src").await;
    for only in [true, false] {
        sql(&ctx, &format!("SET ooode.index_only_scans = {only}"))
            .await
            .unwrap();
        let got = answers(&ctx, "t").await;
        for ((q, g), w) in QUERIES.iter().zip(&got).zip(&want) {
            assert_eq!(g, w, "index_only_scans = {only}: {q}");
        }
        for (q, node) in [
            (QUERIES[0], "IndexScanExec"),
            (QUERIES[2], "IndexScanExec"),
            (QUERIES[3], "IndexJoinExec"),
            (QUERIES[8], "IndexJoinExec"),
        ] {
            let plan = sql(&ctx, &format!("EXPLAIN {}", q.replace("{t}", "t")))
                .await
                .unwrap();
            let line = plan
                .lines()
                .find(|l| l.contains(node))
                .unwrap_or_else(|| panic!("no {node} in {plan}"));
            assert_eq!(line.contains("index_only"), only, "{line}");
        }
    }
    assert!(want[3].contains("| 210"), "a key that matches: {}", want[3]);

    // Every heap page damaged, the pool emptied: index-only plans never read the heap.
    sql(&ctx, "SET ooode.index_only_scans = true")
        .await
        .unwrap();
    let mut heaps = vec![path.join("heap.0.pages")];
    for entry in std::fs::read_dir(&path).unwrap() {
        heaps.push(entry.unwrap().path().join("heap.0.pages"));
    }
    let mut damaged = 0;
    for heap in heaps.iter().filter(|h| h.exists()) {
        let mut bytes = std::fs::read(heap).unwrap();
        for page in 0..bytes.len() / 4096 {
            bytes[page * 4096 + 2000] ^= 0x5A;
        }
        std::fs::write(heap, bytes).unwrap();
        damaged += 1;
    }
    assert_eq!(damaged, 2, "the heaps of both segments: {heaps:?}");
    ooode_providers::ooode_runtime(&ctx).pool().clear();
    let got = answers(&ctx, "t").await;
    assert_eq!(got, want, "index-only plans over a damaged heap");
    let err = sql(&ctx, "SELECT id, v FROM t WHERE k = 7")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("heap.0.pages") && err.contains("checksum"),
        "{err}"
    );
}
