//! The index join against DataFusion's hash join on the same rows: every kind, with and
//! without a join filter, NULL keys on both sides, duplicate keys on both sides, an empty
//! outer side, keys without matches; through a dense and a sparse (clustering) index; and a
//! key with thousands of matches streamed in batches of at most the batch size.

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::{JoinSide, JoinType, NullEquality, Result};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::execution::memory_pool::UnboundedMemoryPool;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, Column};
use datafusion::physical_plan::joins::utils::{ColumnIndex, JoinFilter};
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::SessionConfig;

use super::{IndexJoinExec, IndexJoinKind, InnerSide};
use crate::access::{OoodeRuntime, QueryIo};
use crate::config::{ExecutionMode, OoodeConfig};
use crate::storage::{LoadOptions, load_batches};

/// Inner rows: id 0..n (clustering key), k = id % 7 (NULL for every 10th row), w = id.
fn inner_batch(n: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Int64, true),
        Field::new("w", DataType::Int64, false),
        Field::new("s", DataType::Utf8, false),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(0..n)),
            Arc::new(Int64Array::from_iter(
                (0..n).map(|i| (i % 10 != 0).then_some(i % 7)),
            )),
            Arc::new(Int64Array::from_iter_values(0..n)),
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("row {i}")),
            )),
        ],
    )
    .unwrap()
}

/// Outer rows: keys with duplicates, NULLs, and keys the inner side lacks (7, 8, 5000).
fn outer_batches() -> Vec<RecordBatch> {
    let schema = outer_schema();
    let keys = [
        vec![Some(1), Some(1), None, Some(3), Some(7), Some(0)],
        vec![Some(8), Some(3), Some(3), None, Some(5000), Some(2)],
    ];
    keys.iter()
        .enumerate()
        .map(|(b, keys)| {
            let n = keys.len() as i64;
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from(keys.clone())),
                    Arc::new(Int64Array::from_iter_values(
                        (0..n).map(|i| (b as i64 * 6 + i) * 37),
                    )),
                ],
            )
            .unwrap()
        })
        .collect()
}

fn outer_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("ok", DataType::Int64, true),
        Field::new("x", DataType::Int64, false),
    ]))
}

fn text_rows(batches: &[RecordBatch]) -> Vec<String> {
    let opts = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for b in batches {
        let fmts: Vec<_> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        for r in 0..b.num_rows() {
            let row: Vec<String> = fmts.iter().map(|f| f.value(r).to_string()).collect();
            out.push(row.join("|"));
        }
    }
    out.sort();
    out
}

/// `outer.x < inner.w` (outer on the left of the hash join).
fn filter(inner_schema: &SchemaRef) -> JoinFilter {
    let schema = Arc::new(Schema::new(vec![
        Field::new("x", DataType::Int64, false),
        Field::new("w", DataType::Int64, false),
    ]));
    let expr: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
        Arc::new(Column::new("x", 0)),
        Operator::Lt,
        Arc::new(Column::new("w", 1)),
    ));
    let w = inner_schema.index_of("w").unwrap();
    JoinFilter::new(
        expr,
        vec![
            ColumnIndex {
                index: 1,
                side: JoinSide::Left,
            },
            ColumnIndex {
                index: w,
                side: JoinSide::Right,
            },
        ],
        schema,
    )
}

struct Fixture {
    _dir: tempfile::TempDir,
    /// The inner table's directory.
    path: std::path::PathBuf,
    inner: RecordBatch,
    runtime: Arc<OoodeRuntime>,
    table: Arc<crate::access::TableIo>,
}

fn fixture(rows: i64) -> Fixture {
    fixture_with(rows, &["k"])
}

/// The inner table of `rows` rows, clustered on "id", with a dense index on each of `indexed`.
fn fixture_with(rows: i64, indexed: &[&str]) -> Fixture {
    fixture_of(inner_batch(rows), indexed)
}

/// The inner table of rows `inner` (which has an "id" column), clustered on "id", with a
/// dense index on each of `indexed`.
fn fixture_of(inner: RecordBatch, indexed: &[&str]) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let options = LoadOptions {
        clustering_key: vec!["id".into()],
        indexes: indexed.iter().map(|c| vec![c.to_string()]).collect(),
        ..Default::default()
    };
    let path = dir.path().join("t");
    load_batches(
        &path,
        inner.schema(),
        [Ok::<_, String>(inner.clone())],
        options,
    )
    .unwrap();
    let runtime = Arc::new(OoodeRuntime::new(Arc::new(UnboundedMemoryPool::default())));
    let table = runtime
        .table(&path, ExecutionMode::OutOfOrder, false)
        .unwrap();
    Fixture {
        _dir: dir,
        path,
        inner,
        runtime,
        table,
    }
}

fn task(batch_size: usize) -> Arc<TaskContext> {
    Arc::new(
        TaskContext::default()
            .with_session_config(SessionConfig::new().with_batch_size(batch_size)),
    )
}

/// The inner table's columns: all of them (a string among them: probes decode pages), and
/// those of fixed width (probes read pages in place, unless a join filter needs them decoded).
const ALL_COLUMNS: &[usize] = &[0, 1, 2, 3];
const FIXED_COLUMNS: &[usize] = &[0, 1, 2];

/// The index join over `index` (keyed by the inner column `key`) and the hash join of the same
/// rows; returns both results.
async fn both(
    f: &Fixture,
    outer: Vec<RecordBatch>,
    key: &str,
    kind: IndexJoinKind,
    with_filter: bool,
    batch_size: usize,
) -> Result<(Vec<RecordBatch>, Vec<RecordBatch>)> {
    both_of(f, outer, key, (kind, with_filter), batch_size, ALL_COLUMNS).await
}

/// [`both`], the inner side reading the table's `columns` only.
async fn both_of(
    f: &Fixture,
    outer: Vec<RecordBatch>,
    key: &str,
    (kind, with_filter): (IndexJoinKind, bool),
    batch_size: usize,
    columns: &[usize],
) -> Result<(Vec<RecordBatch>, Vec<RecordBatch>)> {
    let index = index_on(&f.table, key);
    let inner_rows = f.inner.project(columns)?;
    let inner_schema = inner_rows.schema();
    let outer_exec = || {
        MemorySourceConfig::try_new_exec(std::slice::from_ref(&outer), outer_schema(), None)
            .unwrap() as Arc<dyn ExecutionPlan>
    };
    let join_filter = with_filter.then(|| filter(&inner_schema));
    let query = QueryIo::new(&f.runtime, &OoodeConfig::default());
    let inner = Arc::new(InnerSide::try_new(
        f.table.clone(),
        "t",
        index,
        1,
        columns.to_vec(),
        None,
        None,
    )?);
    // Without a predicate, pages are read in place exactly when every column is fixed-width.
    let fixed = (inner_schema.fields().iter())
        .all(|f| crate::storage::heap::readable_in_place(f.data_type()));
    assert_eq!(inner.in_place.is_some(), fixed);
    let index_join = IndexJoinExec::builder(
        outer_exec(),
        vec![Arc::new(Column::new("ok", 0))],
        inner,
        query,
    )
    .kind(kind)
    .filter(join_filter.clone(), JoinSide::Left)
    .build()?;
    let got = collect(Arc::new(index_join), task(batch_size)).await?;
    let join_type = match kind {
        IndexJoinKind::Inner => JoinType::Inner,
        IndexJoinKind::LeftOuter => JoinType::Left,
        IndexJoinKind::Semi => JoinType::LeftSemi,
        IndexJoinKind::Anti => JoinType::LeftAnti,
    };
    let inner_exec =
        MemorySourceConfig::try_new_exec(&[vec![inner_rows.clone()]], inner_schema.clone(), None)?;
    let on = vec![(
        Arc::new(Column::new("ok", 0)) as Arc<dyn PhysicalExpr>,
        Arc::new(Column::new(key, inner_schema.index_of(key)?)) as Arc<dyn PhysicalExpr>,
    )];
    let hash = HashJoinExec::try_new(
        outer_exec(),
        inner_exec,
        on,
        join_filter,
        &join_type,
        None,
        PartitionMode::CollectLeft,
        NullEquality::NullEqualsNothing,
        false,
    )?;
    let want = collect(Arc::new(hash), task(batch_size)).await?;
    Ok((got, want))
}

const KINDS: [IndexJoinKind; 4] = [
    IndexJoinKind::Inner,
    IndexJoinKind::LeftOuter,
    IndexJoinKind::Semi,
    IndexJoinKind::Anti,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_matches_the_hash_join() {
    let f = fixture(3000);
    for (key, columns) in ["k", "id"].into_iter().flat_map(|key| {
        [ALL_COLUMNS, FIXED_COLUMNS]
            .into_iter()
            .map(move |columns| (key, columns))
    }) {
        for kind in KINDS {
            for with_filter in [false, true] {
                for outer in [
                    outer_batches(),
                    vec![],
                    vec![RecordBatch::new_empty(outer_schema())],
                ] {
                    let empty = outer.iter().all(|b| b.num_rows() == 0);
                    let (got, want) = both_of(&f, outer, key, (kind, with_filter), 8192, columns)
                        .await
                        .unwrap();
                    assert_eq!(
                        text_rows(&got),
                        text_rows(&want),
                        "{kind:?} on {key}, columns {columns:?}, filter {with_filter}, \
                         empty outer {empty}"
                    );
                }
            }
        }
    }
}

/// Pages read in place hand out values of every fixed width (1, 3, 4, 8 and 16 bytes here,
/// nulls among them) as decoding them would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_of_every_fixed_width_read_in_place_match_the_hash_join() {
    use arrow::array::{Date32Array, Decimal128Array, FixedSizeBinaryArray, Int8Array};
    use arrow::array::{Int32Array, StringArray};
    let n = 3000i64;
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("tiny", DataType::Int8, true),
        Field::new("code", DataType::FixedSizeBinary(3), false),
        Field::new("qty", DataType::Int32, true),
        Field::new("day", DataType::Date32, false),
        Field::new("price", DataType::Decimal128(15, 2), true),
        Field::new("note", DataType::Utf8, false),
    ]));
    let nth = |i: i64, every: i64| i % every != 0;
    let inner = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(0..n)),
            Arc::new(Int8Array::from_iter(
                (0..n).map(|i| nth(i, 4).then_some(i as i8)),
            )),
            Arc::new(
                FixedSizeBinaryArray::try_from_iter(
                    (0..n).map(|i| (i as u32).to_le_bytes()[..3].to_vec()),
                )
                .unwrap(),
            ),
            Arc::new(Int32Array::from_iter(
                (0..n).map(|i| nth(i, 3).then_some(i as i32 * 5)),
            )),
            Arc::new(Date32Array::from_iter_values(
                (0..n).map(|i| 19_000 + i as i32),
            )),
            Arc::new(
                Decimal128Array::from_iter((0..n).map(|i| nth(i, 5).then_some(i as i128 * 101)))
                    .with_precision_and_scale(15, 2)
                    .unwrap(),
            ),
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("n{i}")),
            )),
        ],
    )
    .unwrap();
    let f = fixture_of(inner, &[]);
    for columns in [&[0, 1, 2, 3, 4, 5][..], &[5, 2, 0], &[0, 1, 2, 3, 4, 5, 6]] {
        for kind in KINDS {
            let (got, want) = both_of(&f, outer_batches(), "id", (kind, false), 8192, columns)
                .await
                .unwrap();
            assert!(!want.is_empty());
            assert_eq!(text_rows(&got), text_rows(&want), "{kind:?}, {columns:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_matches_stream_in_batches_of_the_batch_size() {
    // 20,000 inner rows: each k holds about 2,600 of them.
    let f = fixture(20_000);
    for (kind, columns) in [IndexJoinKind::Inner, IndexJoinKind::LeftOuter]
        .into_iter()
        .flat_map(|kind| [(kind, ALL_COLUMNS), (kind, FIXED_COLUMNS)])
    {
        let (got, want) = both_of(&f, outer_batches(), "k", (kind, false), 100, columns)
            .await
            .unwrap();
        assert!(
            got.iter().all(|b| b.num_rows() <= 100),
            "{kind:?}, {columns:?}: a batch of {} rows",
            got.iter().map(|b| b.num_rows()).max().unwrap_or(0)
        );
        assert!(
            got.len() > 100,
            "{kind:?}, {columns:?}: {} batches",
            got.len()
        );
        assert_eq!(text_rows(&got), text_rows(&want), "{kind:?}, {columns:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_inner_table_matches_nothing() {
    let f = fixture(0);
    for kind in KINDS {
        let (got, want) = both(&f, outer_batches(), "k", kind, false, 8192)
            .await
            .unwrap();
        assert_eq!(text_rows(&got), text_rows(&want), "{kind:?}");
    }
}

/// The position of `table`'s index whose first column is `column`.
fn index_on(table: &crate::access::TableIo, column: &str) -> usize {
    table
        .table()
        .indexes()
        .iter()
        .position(|i| i.meta.columns[0] == column)
        .unwrap()
}

/// An inner join of `outer` (key column "ok") with the fixture's table through its
/// clustering index on "id", read in `mode`, keeping inner rows that pass `predicate`.
fn join_on_id(
    f: &Fixture,
    mode: ExecutionMode,
    outer: &RecordBatch,
    predicate: Option<Arc<dyn PhysicalExpr>>,
) -> Arc<IndexJoinExec> {
    let table = f.runtime.table(&f.path, mode, false).unwrap();
    let index = index_on(&table, "id");
    let outer_exec =
        MemorySourceConfig::try_new_exec(&[vec![outer.clone()]], outer_schema(), None).unwrap();
    let inner = InnerSide::try_new(
        table,
        "t",
        index,
        1,
        (0..f.inner.num_columns()).collect(),
        predicate,
        None,
    )
    .unwrap();
    let config = OoodeConfig {
        execution_mode: mode,
        ..OoodeConfig::default()
    };
    let query = QueryIo::new(&f.runtime, &config);
    let join = IndexJoinExec::builder(
        outer_exec,
        vec![Arc::new(Column::new("ok", 0))],
        Arc::new(inner),
        query,
    )
    .build()
    .unwrap();
    Arc::new(join)
}

/// In order a probe may start two page fetches at most, so nearly every probe of a batch
/// finds the window full: its row ids, found from cached nodes, must wait for their turn,
/// not be thrown away and looked up again (which descended the tree twice more per probe).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_order_a_probe_descends_the_tree_once() {
    let f = fixture(3000);
    let probes = 400;
    let outer = RecordBatch::try_new(
        outer_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values((0..probes).map(|i| i * 7))),
            Arc::new(Int64Array::from_iter_values(0..probes)),
        ],
    )
    .unwrap();
    let join = || join_on_id(&f, ExecutionMode::InOrder, &outer, None);
    let height = f.table.table().indexes()[index_on(&f.table, "id")]
        .meta
        .tree
        .height as usize;
    // A first run reads every page the second one visits.
    let cold = collect(join(), task(256)).await.unwrap();
    let hot_join = join();
    let hot = collect(hot_join.clone(), task(256)).await.unwrap();
    let rows = |b: &[RecordBatch]| b.iter().map(|b| b.num_rows()).sum::<usize>();
    assert_eq!(
        rows(&hot),
        probes as usize,
        "every key 0, 7, 14, ... matches one row"
    );
    assert_eq!(text_rows(&hot), text_rows(&cold));
    let metrics = hot_join.metrics().unwrap();
    let hits = metrics
        .sum_by_name("buffer_hits")
        .map(|m| m.as_usize())
        .unwrap();
    // Each probe: its descent (`height` nodes), and heap pages, which consecutive probes
    // share (about 30 keys a page here): far fewer than one a probe. Looking the ids up
    // again visited twice the nodes (775 visits for these 400 probes, against 414).
    let probes = probes as usize;
    assert!(
        hits <= probes * height + probes / 2,
        "{hits} pages visited for {probes} probes of a tree of height {height}"
    );
    assert!(hits >= probes * height, "{hits} visits counted");
}

/// Hot (every page in the pool), probes whose pages hold no row passing the inner predicate
/// leave nothing to send and nothing in flight: the join must still resume its parked
/// probes (pages found in the pool are decoded without a task), in both modes.
#[tokio::test]
async fn hot_probes_that_find_no_rows_finish() {
    use datafusion::physical_expr::expressions::lit;
    let f = fixture(3000);
    let outer = RecordBatch::try_new(
        outer_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values((0..500).map(|i| i * 5))),
            Arc::new(Int64Array::from_iter_values(0..500)),
        ],
    )
    .unwrap();
    for mode in [ExecutionMode::InOrder, ExecutionMode::OutOfOrder] {
        // w = id: below 1000 the first 200 keys pass, the other 300 find pages of no row.
        let join = |bound: i64| {
            let predicate: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
                Arc::new(Column::new("w", 2)),
                Operator::Lt,
                lit(bound),
            ));
            join_on_id(&f, mode, &outer, Some(predicate))
        };
        let rows = |b: &[RecordBatch]| b.iter().map(|b| b.num_rows()).sum::<usize>();
        for bound in [1000, -1] {
            let cold = collect(join(bound), task(64)).await.unwrap();
            let hot = collect(join(bound), task(64)).await.unwrap();
            let expected = if bound > 0 { 200 } else { 0 };
            assert_eq!(rows(&cold), expected, "{mode:?}, w < {bound}");
            assert_eq!(text_rows(&hot), text_rows(&cold), "{mode:?}, w < {bound}");
        }
    }
}

/// An outer batch of `count` keys `first`, `first + step`, ... (the second column the same).
fn spread_keys(first: i64, step: i64, count: i64) -> RecordBatch {
    let keys: Vec<i64> = (0..count).map(|i| first + i * step).collect();
    RecordBatch::try_new(
        outer_schema(),
        vec![
            Arc::new(Int64Array::from(keys.clone())),
            Arc::new(Int64Array::from(keys)),
        ],
    )
    .unwrap()
}

/// The join of the outer partitions `outer` with `table` through its clustering index on
/// "id" (the inner side's columns id and w), under `query`.
fn join_partitions(
    table: &Arc<crate::access::TableIo>,
    outer: &[Vec<RecordBatch>],
    query: Arc<QueryIo>,
) -> Arc<IndexJoinExec> {
    let outer_exec = MemorySourceConfig::try_new_exec(outer, outer_schema(), None).unwrap();
    let index = index_on(table, "id");
    let inner = InnerSide::try_new(table.clone(), "t", index, 1, vec![0, 2], None, None);
    let keys = vec![Arc::new(Column::new("ok", 0)) as Arc<dyn PhysicalExpr>];
    let join = IndexJoinExec::builder(outer_exec, keys, Arc::new(inner.unwrap()), query);
    Arc::new(join.build().unwrap())
}

/// Two partitions of one query at its limit of reads in flight, down to one read: each
/// starts pages under the permits of its own reads once it holds its part of the limit, and
/// asks admission's queue below it; at every limit both finish, with every row, every
/// permit given back, and the pages whose permits were queued counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_at_the_query_limit_finish_and_give_every_permit_back() {
    if let Err(why) = crate::io::uring_available() {
        panic!("this test needs io_uring (reads into the join's inbox): {why}");
    }
    let f = fixture(60_000);
    // Two partitions of keys spread over the whole table: every heap page is read.
    let outer = vec![
        vec![spread_keys(0, 40, 1500)],
        vec![spread_keys(20, 40, 1500)],
    ];
    let table = (f.runtime)
        .table(&f.path, ExecutionMode::OutOfOrder, false)
        .unwrap();
    assert!(table.engine().starts_reads(), "the engine reads into sinks");
    for limit in [1, 2, 3, 32] {
        let config = OoodeConfig {
            max_outstanding_io: limit,
            ..OoodeConfig::default()
        };
        f.runtime.pool().clear();
        let measured = join_partitions(&table, &outer, QueryIo::new(&f.runtime, &config));
        // A stall (partitions each waiting for permits the other holds) fails, not hangs.
        let run = collect(measured.clone(), task(256));
        let got = tokio::time::timeout(std::time::Duration::from_secs(120), run)
            .await
            .unwrap_or_else(|_| panic!("limit {limit}: the join stalled"))
            .unwrap();
        let rows: usize = got.iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, 3000, "limit {limit}: each key matches one row");
        let metrics = measured.metrics().unwrap();
        let pages = metrics.sum_by_name("pages_read").unwrap().as_usize();
        let queued = metrics.sum_by_name("heap_permits_queued");
        assert!(pages >= 200, "limit {limit}: {pages} pages read");
        assert!(queued.is_some(), "the join counts its queued permits");
        let admission = f.runtime.admission();
        assert_eq!(admission.in_use(), 0, "limit {limit}: permits given back");
        assert_eq!(admission.waiting(), 0, "limit {limit}: nothing left queued");
    }
}

/// A heap page another request is reading when the join would read it (the pool answers
/// Busy): the join fetches it by a job that keeps the permit granted for it, joining that
/// read without asking admission again. At a limit of one read, the query's other page then
/// waits for that permit: nothing else is read until the other request's read ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_read_elsewhere_is_joined_under_the_permit_granted_for_it() {
    use crate::access::Counters;
    use crate::io::pool::Claim;
    use crate::io::{PageHint, metrics::IoMetrics};
    if let Err(why) = crate::io::uring_available() {
        panic!("this test needs io_uring (reads into the join's inbox): {why}");
    }
    let f = fixture(60_000);
    let table = (f.runtime)
        .table(&f.path, ExecutionMode::OutOfOrder, false)
        .unwrap();
    // Heap page 0 holds id 0: its bytes, read once, for the other request to deliver.
    let page = (table.heap_page(0, &Counters::one(IoMetrics::new())).await).unwrap();
    let last = table.heap_location(table.heap_pages() - 1).unwrap();
    assert_ne!(last.key, table.heap_location(0).unwrap().key);
    f.runtime.pool().clear();
    // The clustering index's nodes cached (a join on a middle id): the query's reads below
    // are then heap pages only.
    let warm = join_partitions(&table, &[vec![spread_keys(30_000, 1, 1)]], {
        QueryIo::new(&f.runtime, &OoodeConfig::default())
    });
    assert_eq!(collect(warm, task(64)).await.unwrap()[0].num_rows(), 1);
    let at = table.heap_location(0).unwrap();
    let claim = f.runtime.pool().claim(at.key, at.len, PageHint::Data);
    assert!(
        matches!(claim, Claim::Claimed),
        "the other request reads page 0"
    );
    let config = OoodeConfig {
        max_outstanding_io: 1,
        ..OoodeConfig::default()
    };
    let query = QueryIo::new(&f.runtime, &config);
    // Ids 0 (page 0) and the last one (the last page), in that order.
    let outer = vec![vec![spread_keys(0, 59_999, 2)]];
    let join = join_partitions(&table, &outer, query.clone());
    let run = tokio::spawn(collect(join, task(64)));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while query.permits_in_use() == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // Given time to read the last page, had the permit been let go.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(query.permits_in_use(), 1, "the job holds page 0's permit");
    assert_eq!(query.metrics.snapshot().reads, 0, "nothing read meanwhile");
    assert!(!run.is_finished());
    f.runtime.pool().finish_claim(at.key, Some(&page));
    let got = tokio::time::timeout(std::time::Duration::from_secs(30), run)
        .await
        .expect("the join finishes once page 0 is there")
        .unwrap()
        .unwrap();
    let rows: usize = got.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 2, "each id matches one row");
    assert_eq!(
        query.metrics.snapshot().reads,
        1,
        "the last page read, page 0 joined"
    );
    assert_eq!(query.permits_in_use(), 0, "permits given back");
    // Only the last page's request waited in admission's queue, once.
    assert_eq!(query.admission_waits().queued, 1);
}

/// Long queries taking turns (`ooode.max_long_queries = 1`) under a runtime-wide cap of a few
/// reads, four at once, each a join of two partitions from a cold pool: all finish with
/// every row and leave every permit given back. A liveness check of turns, permits and the
/// partitions' parts of the limit together; it does not reproduce the stall seen at 64
/// clients (tasks waiting for a turn holding the permits its holder needed): with the pages
/// started before the turn again, it still passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_queries_taking_turns_under_a_small_cap_all_finish() {
    let f = fixture(60_000);
    let config = OoodeConfig {
        max_long_queries: 1,
        max_outstanding_io: 8,
        max_outstanding_io_total: 6,
        short_query_reads: 0,
        ..OoodeConfig::default()
    };
    f.runtime.configure(&config);
    f.runtime.pool().clear();
    let table = (f.runtime)
        .table(&f.path, ExecutionMode::OutOfOrder, false)
        .unwrap();
    let runs = (0..4).map(|q| {
        let outer = [spread_keys(q, 97, 600), spread_keys(q + 48, 97, 600)].map(|b| vec![b]);
        let query = QueryIo::new(&f.runtime, &config);
        // Long, whatever the optimizer would have estimated: its tasks take turns.
        query.set_estimated_reads(1_000_000);
        collect(join_partitions(&table, &outer, query), task(64))
    });
    let all = futures::future::join_all(runs);
    let results = tokio::time::timeout(std::time::Duration::from_secs(120), all)
        .await
        .expect("four long queries taking turns stalled");
    for (q, got) in results.into_iter().enumerate() {
        let rows: usize = got.unwrap().iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, 1200, "query {q}: each key matches one row");
    }
    let admission = f.runtime.admission();
    assert_eq!(admission.in_use(), 0, "permits given back");
    assert_eq!(admission.waiting(), 0, "nothing left queued");
}

/// Probes whose keys share a dense index's leaf, from a cold pool: one probe's walk reads
/// the leaf while the others wait for it and then look their keys up from it, reading rows
/// from the heap or, index-only, from the leaf's keys. Both give the hash join's rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_sharing_a_leaf_read_it_once_and_match_the_hash_join() {
    let f = fixture_with(30_000, &["k", "w"]);
    let index = index_on(&f.table, "w");
    // Keys three apart (hundreds a leaf), each twice, with NULLs and keys no row has.
    let keys: Vec<Option<i64>> = (0..4000)
        .map(|i| match i % 50 {
            0 => None,
            1 => Some(1_000_000 + i),
            _ => Some(i / 2 * 3),
        })
        .collect();
    let n = keys.len() as i64;
    let outer = RecordBatch::try_new(
        outer_schema(),
        vec![
            Arc::new(Int64Array::from(keys)),
            Arc::new(Int64Array::from_iter_values(0..n)),
        ],
    )
    .unwrap();
    // All columns (heap fetches), and w alone (the index's keys: index-only).
    for columns in [vec![0, 1, 2, 3], vec![2]] {
        let inner = InnerSide::try_new(f.table.clone(), "t", index, 1, columns.clone(), None, None)
            .unwrap();
        let index_only = inner.keys.is_some();
        assert_eq!(index_only, columns.len() == 1, "columns {columns:?}");
        let query = QueryIo::new(&f.runtime, &OoodeConfig::default());
        let outer_exec = || {
            MemorySourceConfig::try_new_exec(&[vec![outer.clone()]], outer_schema(), None).unwrap()
                as Arc<dyn ExecutionPlan>
        };
        let keys = vec![Arc::new(Column::new("ok", 0)) as Arc<dyn PhysicalExpr>];
        let join = IndexJoinExec::builder(outer_exec(), keys, Arc::new(inner), query);
        f.runtime.pool().clear();
        let got = collect(Arc::new(join.build().unwrap()), task(256))
            .await
            .unwrap();
        let projected = f.inner.project(&columns).unwrap();
        let w = projected.schema().index_of("w").unwrap();
        let inner_exec =
            MemorySourceConfig::try_new_exec(&[vec![projected.clone()]], projected.schema(), None)
                .unwrap();
        let on = vec![(
            Arc::new(Column::new("ok", 0)) as Arc<dyn PhysicalExpr>,
            Arc::new(Column::new("w", w)) as Arc<dyn PhysicalExpr>,
        )];
        let hash = HashJoinExec::try_new(
            outer_exec(),
            inner_exec,
            on,
            None,
            &JoinType::Inner,
            None,
            PartitionMode::CollectLeft,
            NullEquality::NullEqualsNothing,
            false,
        )
        .unwrap();
        let want = collect(Arc::new(hash), task(256)).await.unwrap();
        let rows: usize = want.iter().map(|b| b.num_rows()).sum();
        assert_eq!(
            rows, 3840,
            "every key but the NULLs and the missing ones, once"
        );
        assert_eq!(
            text_rows(&got),
            text_rows(&want),
            "index-only: {index_only}"
        );
    }
}

/// A clustered page's run of a key, found by value for integer keys and by encoded rows for
/// the others, against every row checked one by one.
#[test]
fn key_runs_equal_a_row_by_row_check() {
    use crate::storage::KeyEncoder;
    use arrow::array::{ArrayRef, Int32Array};
    let sorted: Vec<i64> = vec![-5, -5, 0, 3, 3, 3, 8, 12, 12, 40];
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(sorted.clone())),
        Arc::new(Int32Array::from_iter_values(
            sorted.iter().map(|&v| v as i32),
        )),
        // Strings sort as bytes: zero-padded numbers keep the order.
        Arc::new(StringArray::from_iter_values(
            sorted.iter().map(|&v| format!("{:04}", v + 100)),
        )),
    ];
    for column in columns {
        let field = Arc::new(Field::new("k", column.data_type().clone(), false));
        let encoder = KeyEncoder::new(&[field]).unwrap();
        let keys: Vec<Vec<u8>> = (0..column.len())
            .map(|row| {
                encoder
                    .encode_row(std::slice::from_ref(&column), row)
                    .unwrap()
            })
            .collect();
        let probes = [
            keys[0].clone(),
            keys[3].clone(),
            keys[9].clone(),
            // Between, before and after the page's keys: empty runs.
            encode_one(&encoder, &column, 5),
            encode_one(&encoder, &column, -50),
            encode_one(&encoder, &column, 99),
        ];
        for probe in probes {
            let run = super::inner_page::key_run(&encoder, std::slice::from_ref(&column), &probe)
                .unwrap();
            let expected: Vec<usize> = (0..keys.len()).filter(|&r| keys[r] == probe).collect();
            let found: Vec<usize> = run.clone().collect();
            assert_eq!(found, expected, "{:?} probe {probe:?}", column.data_type());
        }
    }
}

/// The key `value` would have in a column of `like`'s type (as the test above writes them).
fn encode_one(
    encoder: &crate::storage::KeyEncoder,
    like: &arrow::array::ArrayRef,
    value: i64,
) -> Vec<u8> {
    use arrow::array::{ArrayRef, Int32Array};
    let one: ArrayRef = match like.data_type() {
        DataType::Int64 => Arc::new(Int64Array::from(vec![value])),
        DataType::Int32 => Arc::new(Int32Array::from(vec![value as i32])),
        _ => Arc::new(StringArray::from(vec![format!("{:04}", value + 100)])),
    };
    encoder.encode_row(&[one], 0).unwrap()
}
