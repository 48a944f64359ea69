//! Checks shared by the tests of tables in object storage (`s3.rs`, `object_stores.rs`): a
//! table read back from a store equals its source, and the 22 TPC-H queries on ooode equal
//! stock DataFusion's on Parquet files on the same server.

use std::path::Path;
use std::sync::Arc;

use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use indicatif::ProgressBar;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use ooode_tpch::datagen::{DataSet, load_options, load_table};
use ooode_tpch::runner::query_rows;
use ooode_tpch::tables::{TABLES, TpchTable};

/// The scale factor of the stores' tests.
pub const SF: f64 = 0.01;

/// TPC-H at [`SF`] loaded under `dir`: the source of the copies and stock DataFusion's Parquet
/// files.
pub fn local_data(dir: &Path) -> DataSet {
    let data = DataSet::new(dir, SF);
    for t in &TABLES {
        load_table(&data, t, load_options(t), &ProgressBar::hidden()).unwrap();
    }
    data
}

/// `COPY ... STORED AS OOODE` options of `t`: its clustering key and indexes.
pub fn table_options(t: &TpchTable) -> Vec<String> {
    let mut options = vec![format!(
        "'ooode.clustering_key' '{}'",
        t.clustering_key.join(",")
    )];
    if !t.indexes.is_empty() {
        let indexes: Vec<String> = t.indexes.iter().map(|cols| cols.join(",")).collect();
        options.push(format!("'ooode.indexes' '{}'", indexes.join(";")));
    }
    options
}

/// Runs one statement (its options may hold `;`).
pub async fn run(ctx: &SessionContext, sql: &str) {
    let df = ctx.sql(sql).await.unwrap_or_else(|e| panic!("{e}\n{sql}"));
    df.collect().await.unwrap_or_else(|e| panic!("{e}\n{sql}"));
}

/// The rows of `sql`, as text.
pub async fn rows(ctx: &SessionContext, sql: &str) -> Vec<String> {
    query_rows(ctx, sql)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{sql}"))
}

/// TPC-H query `n`.
pub fn query(n: usize) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("queries/q{n}.sql"));
    std::fs::read_to_string(path).unwrap()
}

/// Every column of every TPC-H table of `ctx` equals `src_<table>`'s, through the columnar
/// copy and through the heap pages.
pub async fn check_every_column(ctx: &SessionContext) {
    for t in &TABLES {
        let want = rows(ctx, &format!("SELECT * FROM src_{}", t.name)).await;
        assert!(!want.is_empty(), "{} has rows", t.name);
        for columnar in ["true", "false"] {
            run(ctx, &format!("SET ooode.columnar_scan = {columnar}")).await;
            let got = rows(ctx, &format!("SELECT * FROM {}", t.name)).await;
            assert!(
                got == want,
                "{} differs (columnar_scan = {columnar})",
                t.name
            );
        }
    }
    run(ctx, "SET ooode.columnar_scan = true").await;
}

/// Stock DataFusion over the data set's Parquet files, put into `store` (the store of URL
/// `root`, e.g. `s3://bucket`) under `parquet/`.
pub async fn stock_on(data: &DataSet, root: &str, store: &Arc<dyn ObjectStore>) -> SessionContext {
    let stock = SessionContext::new();
    let url = ObjectStoreUrl::parse(root).unwrap();
    stock.register_object_store(url.as_ref(), store.clone());
    for t in &TABLES {
        let object = format!("parquet/{}.parquet", t.name);
        let bytes = std::fs::read(data.parquet_file(t.name)).unwrap();
        store
            .put(&object.as_str().into(), PutPayload::from(bytes))
            .await
            .unwrap();
        let location = format!("{root}/{object}");
        stock
            .register_parquet(t.name, &location, ParquetReadOptions::default())
            .await
            .unwrap();
    }
    stock
}

/// Pages the object store engines of `ctx`'s runtime have fetched (GETs).
pub fn object_gets(ctx: &SessionContext) -> u64 {
    ooode_providers::ooode_runtime(ctx)
        .engines()
        .iter()
        .filter(|e| e.name() == "object_store")
        .map(|e| e.metrics().snapshot().reads)
        .sum()
}

/// The 22 queries on `ctx` in every `(execution_mode, index_join)` of `modes` equal `stock`'s,
/// and the index plans among them read pages from the store.
pub async fn check_queries(ctx: &SessionContext, stock: &SessionContext, modes: &[(&str, &str)]) {
    let before = object_gets(ctx);
    for n in 1..=22 {
        let sql = query(n);
        let want = rows(stock, &sql).await;
        for (mode, rule) in modes {
            run(ctx, &format!("SET ooode.execution_mode = '{mode}'")).await;
            run(ctx, &format!("SET ooode.index_join = '{rule}'")).await;
            let got = rows(ctx, &sql).await;
            assert!(got == want, "q{n} differs ({mode}, index_join = {rule})");
        }
    }
    assert!(
        object_gets(ctx) > before,
        "index plans read pages from the store"
    );
}
