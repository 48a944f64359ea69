//! ooode tables behind the other URL schemes of DataFusion's object store registry, each
//! against a real server started on loopback by the test (S3 has its own file, `s3.rs`):
//!
//! - `http://`: a WebDAV server (wsgidav). HTTP has no multipart uploads, so `COPY` puts each
//!   file in one PUT, held under a memory reservation.
//! - `az://`: Azure Blob Storage's emulator (Azurite), with `'azure.use_emulator' 'true'`.
//!
//! Each time `COPY ... TO '<url>' STORED AS OOODE` loads every TPC-H table at SF 0.01 there,
//! `CREATE EXTERNAL TABLE ... LOCATION '<url>'` reads it back (every column equal) and the 22
//! queries return what stock DataFusion returns on Parquet files on the same server.
//!
//! `.ci/run` installs both servers (`pip install wsgidav cheroot`, `npm install -g azurite`);
//! without them the tests fail saying so. `gs://` has no server installable from the package
//! registries here, so it is not tested against one (see the README).

use std::sync::Arc;

use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool};
use datafusion::prelude::{SessionConfig, SessionContext};
use object_store::azure::MicrosoftAzureBuilder;
use object_store::http::HttpBuilder;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt};
use ooode_tpch::datagen::DataSet;
use ooode_tpch::servers;
use ooode_tpch::tables::TABLES;

mod support;
use support::stores::{
    check_every_column, check_queries, local_data, run, stock_on, table_options,
};

/// Copies every table to `<root>/ooode/<table>` (`root`: the store's URL, e.g.
/// `az://container`) with the store `options` (SQL, may be empty), opens it from there, and
/// checks the rows of every table and the 22 queries against stock DataFusion reading Parquet
/// files put into `store` (the same server). Returns the ooode session.
async fn check_tables_in(
    data: &DataSet,
    root: &str,
    options: &[&str],
    store: &Arc<dyn ObjectStore>,
) -> SessionContext {
    let ctx = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    for t in &TABLES {
        let src = format!("src_{}", t.name);
        let parquet = data.parquet_file(t.name);
        ctx.register_parquet(&src, parquet.to_str().unwrap(), Default::default())
            .await
            .unwrap();
        let url = format!("{root}/ooode/{}", t.name);
        let store_options = options.iter().map(|o| o.to_string());
        let copy: Vec<String> = table_options(t).into_iter().chain(store_options).collect();
        let copy = copy.join(", ");
        run(
            &ctx,
            &format!("COPY (SELECT * FROM {src}) TO '{url}' STORED AS OOODE OPTIONS ({copy})"),
        )
        .await;
        let open = match options.is_empty() {
            true => String::new(),
            false => format!("OPTIONS ({})", options.join(", ")),
        };
        run(
            &ctx,
            &format!(
                "CREATE EXTERNAL TABLE {} STORED AS OOODE LOCATION '{url}' {open}",
                t.name
            ),
        )
        .await;
    }
    assert!(
        store
            .head(&"ooode/orders/manifest.json".into())
            .await
            .is_ok(),
        "the table is on the server, manifest and all"
    );

    check_every_column(&ctx).await;
    let stock = stock_on(data, root, store).await;
    let modes = [
        ("out_of_order", "never"),
        ("out_of_order", "always"),
        ("out_of_order", "auto"),
    ];
    check_queries(&ctx, &stock, &modes).await;
    ctx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_on_an_http_server_equal_their_source_and_queries_equal_stock_datafusion() {
    let dir = tempfile::tempdir().unwrap();
    let data = local_data(&dir.path().join("local"));
    let server = servers::webdav(&dir.path().join("dav")).unwrap();
    let url = server.url.clone();
    let store: Arc<dyn ObjectStore> = Arc::new(
        HttpBuilder::new()
            .with_url(&url)
            .with_client_options(ClientOptions::new().with_allow_http(true))
            .build()
            .unwrap(),
    );

    // No options and nothing registered: ooode builds the HTTP store from the URL.
    check_tables_in(&data, &url, &[], &store).await;

    // Lineitem's heap (more than one part of a multipart upload) went in one PUT, whole.
    let local_heap = data.ooode_table("lineitem").join("heap.0.pages");
    let heap = store
        .head(&"ooode/lineitem/heap.0.pages".into())
        .await
        .unwrap();
    assert_eq!(heap.size, std::fs::metadata(&local_heap).unwrap().len());
    assert!(
        heap.size > 8 << 20,
        "larger than a part: {} bytes",
        heap.size
    );

    // Such a file is held in memory under a reservation: a pool too small for it refuses
    // the upload, and nothing is put.
    let small: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1 << 20));
    let object = "refused/heap.0.pages".into();
    let err = ooode_providers::upload::put_file(&store, &local_heap, &object, &small)
        .await
        .expect_err("a 1 MiB pool cannot hold the file");
    assert!(err.to_string().contains("Resources exhausted"), "{err}");
    assert!(matches!(
        store.head(&object).await,
        Err(object_store::Error::NotFound { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_in_azure_blob_storage_equal_their_source_and_queries_equal_stock_datafusion() {
    let dir = tempfile::tempdir().unwrap();
    let data = local_data(&dir.path().join("local"));
    let _server = servers::azurite(&dir.path().join("azurite"), "ctr").unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(
        MicrosoftAzureBuilder::new()
            .with_use_emulator(true)
            .with_container_name("ctr")
            .build()
            .unwrap(),
    );

    // The store is built from the statement's `azure.*` options, as datafusion-cli's are.
    let options = ["'azure.use_emulator' 'true'"];
    let ctx = check_tables_in(&data, "az://ctr", &options, &store).await;

    // A wrong key is a clear error naming the store, not a hang.
    let wrong = "'azure.use_emulator' 'true', 'azure.access_key' 'AAAA'";
    let err = ctx
        .sql(&format!(
            "CREATE EXTERNAL TABLE bad STORED AS OOODE LOCATION 'az://ctr/ooode/orders' \
             OPTIONS ({wrong})"
        ))
        .await
        .map(drop)
        .expect_err("a wrong key is refused");
    let text = err.to_string();
    assert!(
        text.contains("az://ctr") && text.contains("authenticate"),
        "{err}"
    );
}
