//! The tables in object storage: the Fig. 4 sweep and Q3'...Q17' with the ooode tables and the
//! Parquet files in a local S3 server behind an injected latency per request (default 20 ms
//! with jitter) that both engines pay, ooode (out of order, in order, `auto`) next to stock
//! DataFusion on Parquet in the same bucket.
//!
//! ```text
//!   <data root>/s3/tpch/{ooode/<table>/..., parquet/<table>.parquet}   (uploaded once, PUT)
//!   ooode-tpch s3-server (child process) ──sleep(latency)──> s3s-fs
//!   cold: ooode's pool emptied (its B+tree tops and sparse indexes stay, as DataFusion keeps
//!         Parquet footers); hot: the query ran just before
//! ```

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use object_store::ObjectStore;

use crate::datagen::DataSet;
use crate::fig4::{Fig4Report, fig4_sql};
use crate::paper::PaperReport;
use crate::runner::{Contexts, run_sql, timed_rows};
use crate::s3::{Latency, S3Server, ServerStats};
use crate::tables::TABLES;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const BUCKET: &str = "tpch";

/// Requests and bytes one cold run of a Fig. 4 point cost an engine.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Requests {
    /// Customers selected.
    pub n: u64,
    /// "ooode auto" or "datafusion parquet".
    pub engine: String,
    /// Seconds of that run.
    pub secs: f64,
    /// Requests and response bytes the server saw.
    pub served: ServerStats,
}

/// A Fig. 4 point with the local flash cache warm: ooode's pool emptied, every page it needs
/// in the disk cache (filled by a run just before).
#[derive(Debug, Clone, serde::Serialize)]
pub struct WarmDisk {
    /// Customers selected.
    pub n: u64,
    /// "ooode out_of_order", "ooode in_order", "ooode auto".
    pub engine: String,
    /// Seconds (None: past the limit).
    pub secs: Option<f64>,
    /// Requests the server saw in that run.
    pub requests: u64,
}

/// What the object storage benchmark measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RemoteReport {
    /// Scale factor.
    pub sf: f64,
    /// Injected latency per request.
    pub latency_ms: f64,
    /// Its jitter.
    pub jitter_ms: f64,
    /// Time limit of one run, seconds.
    pub limit_secs: f64,
    /// The Fig. 4 sweep.
    pub fig4: Fig4Report,
    /// Requests per cold run, `auto` vs stock DataFusion.
    pub requests: Vec<Requests>,
    /// Q3' ... Q17'.
    pub paper: PaperReport,
    /// The Fig. 4 sweep with the disk cache warm.
    pub warm_disk: Vec<WarmDisk>,
}

/// Puts the data set's tables into the bucket unless the same ones are there.
async fn upload(data: &DataSet, store: &Arc<dyn ObjectStore>) -> Result<(), BoxError> {
    use object_store::ObjectStoreExt;
    // S3 takes multipart uploads: nothing is held in memory whole.
    let memory: Arc<dyn datafusion::execution::memory_pool::MemoryPool> =
        Arc::new(datafusion::execution::memory_pool::UnboundedMemoryPool::default());
    for t in &TABLES {
        let local = data.ooode_table(t.name);
        let prefix = object_store::path::Path::from(format!("ooode/{}", t.name));
        let manifest = std::fs::read(local.join("manifest.json"))?;
        let there = match store.get(&prefix.clone().join("manifest.json")).await {
            Ok(got) => got.bytes().await.ok(),
            Err(_) => None,
        };
        if there.as_deref() != Some(&manifest[..]) {
            eprintln!("uploading {} (ooode)", t.name);
            let url = format!("s3://{BUCKET}/ooode/{}", t.name);
            ooode_providers::upload::upload_table(&local, store, &url, &prefix, true, &memory)
                .await?;
        }
        let parquet = data.parquet_file(t.name);
        let object = object_store::path::Path::from(format!("parquet/{}.parquet", t.name));
        let size = std::fs::metadata(&parquet)?.len();
        if store.head(&object).await.map(|m| m.size).ok() != Some(size) {
            eprintln!("uploading {} (Parquet)", t.name);
            ooode_providers::upload::put_file(store, &parquet, &object, &memory).await?;
        }
    }
    Ok(())
}

/// Both engines on the bucket's tables.
async fn contexts(server: &S3Server) -> Result<Contexts, BoxError> {
    let stock = SessionContext::new();
    let url = ObjectStoreUrl::parse(format!("s3://{BUCKET}"))?;
    stock.register_object_store(url.as_ref(), server.store(BUCKET)?);
    let ooode = ooode_providers::ooode_context(SessionConfig::new());
    // Reads in flight: the defaults (256 per query and in all). 1024 was slower here (4.8 s
    // against 2.0 s at 1 % of SF 0.1): client and server share two cores, and each request
    // costs both CPU (signing, HTTP, s3s-fs's checks), so more connections only queue longer.
    for t in &TABLES {
        stock
            .register_parquet(
                t.name,
                &format!("s3://{BUCKET}/parquet/{}.parquet", t.name),
                ParquetReadOptions::default(),
            )
            .await?;
        let sql = format!(
            "CREATE EXTERNAL TABLE {} STORED AS OOODE LOCATION 's3://{BUCKET}/ooode/{}' \
             OPTIONS ({})",
            t.name,
            t.name,
            server.sql_options()
        );
        ooode.sql(&sql).await?.collect().await?;
    }
    // A first read makes the object store engine, whose reads are drawn over time.
    run_sql(&ooode, &fig4_sql(1)).await?;
    let sampled = ooode_providers::ooode_runtime(&ooode)
        .engines()
        .into_iter()
        .find(|e| e.name() == "object_store")
        .ok_or("no object store engine after a query")?
        .metrics()
        .clone();
    Ok(Contexts {
        stock,
        ooode,
        // Stock DataFusion keeps no data pages; its Parquet metadata stays, as ooode's does.
        stock_cold: Box::new(|| true),
        sampled,
        fio_file: None,
    })
}

/// Requests and bytes of one cold run of each Fig. 4 point, `auto` vs stock DataFusion.
async fn requests(
    server: &S3Server,
    c: &Contexts,
    ns: &[u64],
    limit: Duration,
) -> Result<Vec<Requests>, BoxError> {
    run_sql(&c.ooode, "SET ooode.execution_mode = 'out_of_order'").await?;
    run_sql(&c.ooode, "SET ooode.index_join = 'auto'").await?;
    let pool = ooode_providers::ooode_runtime(&c.ooode).pool().clone();
    let mut out = Vec::new();
    for &n in ns {
        for (engine, ctx) in [("ooode auto", &c.ooode), ("datafusion parquet", &c.stock)] {
            pool.clear();
            let before = server.stats()?;
            let (secs, _) = timed_rows(ctx, &fig4_sql(n), limit).await?;
            let served = server.stats()?.since(&before);
            if let Some(secs) = secs {
                out.push(Requests {
                    n,
                    engine: engine.into(),
                    secs,
                    served,
                });
            }
        }
    }
    Ok(out)
}

/// Each Fig. 4 point by each ooode engine with the disk cache (in `cache_dir`) warm.
async fn warm_disk(
    server: &S3Server,
    c: &Contexts,
    ns: &[u64],
    limit: Duration,
    cache_dir: &Path,
) -> Result<Vec<WarmDisk>, BoxError> {
    let ctx = &c.ooode;
    run_sql(
        ctx,
        &format!("SET ooode.disk_cache_path = '{}'", cache_dir.display()),
    )
    .await?;
    run_sql(ctx, "SET ooode.disk_cache_bytes = '8GiB'").await?;
    let runtime = ooode_providers::ooode_runtime(ctx);
    let mut out = Vec::new();
    for &n in ns {
        for (engine, mode, rule) in [
            ("ooode out_of_order", "out_of_order", "always"),
            ("ooode in_order", "in_order", "always"),
            ("ooode auto", "out_of_order", "auto"),
        ] {
            run_sql(ctx, &format!("SET ooode.execution_mode = '{mode}'")).await?;
            run_sql(ctx, &format!("SET ooode.index_join = '{rule}'")).await?;
            let sql = fig4_sql(n);
            // Fill the cache: out of order (in order may not finish within the limit).
            run_sql(ctx, "SET ooode.execution_mode = 'out_of_order'").await?;
            runtime.pool().clear();
            timed_rows(ctx, &sql, limit).await?;
            run_sql(ctx, &format!("SET ooode.execution_mode = '{mode}'")).await?;
            settle(&runtime).await;
            runtime.pool().clear();
            let before = server.stats()?;
            let (secs, _) = timed_rows(ctx, &sql, limit).await?;
            let requests = server.stats()?.since(&before).requests;
            eprintln!(
                "N={n:<6} warm disk {engine:<20} {}",
                secs.map(|s| format!("{s:.3}s"))
                    .unwrap_or_else(|| "timeout".into())
            );
            out.push(WarmDisk {
                n,
                engine: engine.into(),
                secs,
                requests,
            });
        }
    }
    run_sql(ctx, "SET ooode.disk_cache_path = ''").await?;
    Ok(out)
}

/// Waits for the disk cache's background writes.
async fn settle(runtime: &ooode::access::OoodeRuntime) {
    let Some(cache) = runtime.disk_cache() else {
        return;
    };
    let (mut last, mut same) = (u64::MAX, 0);
    while same < 5 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let pages = cache.stats().pages;
        same = if pages == last { same + 1 } else { 0 };
        last = pages;
    }
}

/// Runs the benchmark over `data` (loaded locally) with `latency`; progress on stderr.
pub fn run(data: &DataSet, latency: Latency, limit: Duration) -> Result<RemoteReport, BoxError> {
    let exe = std::env::current_exe()?;
    let server = S3Server::spawn(&exe, &data.root.join("s3"), latency)?;
    server.create_bucket(BUCKET)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let store = server.store(BUCKET)?;
    runtime.block_on(upload(data, &store))?;
    let c = runtime.block_on(contexts(&server))?;
    let customers = crate::tables::expected_rows("customer", data.sf).unwrap_or(150_000);
    let ns: Vec<u64> = [1, 15, 150, 1500, 15000]
        .into_iter()
        .filter(|&n| n * 10 <= customers)
        .collect();
    eprintln!(
        "== object storage ({} ms ± {} ms per request): Fig. 4 sweep, N = {ns:?}",
        latency.mean_ms, latency.jitter_ms
    );
    let fig4 = runtime.block_on(crate::fig4::run_with(&c, customers as f64, &ns, limit, &[]))?;
    let requests = runtime.block_on(requests(&server, &c, &ns, limit))?;
    eprintln!("== object storage: Q3'...Q17'");
    let queries_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("queries/paper");
    let queries = crate::paper::load_queries(&queries_dir, data.sf)?;
    let paper = runtime.block_on(crate::paper::run_with(&c, &queries, limit))?;
    eprintln!("== object storage: Fig. 4 with the local disk cache warm");
    let cache_dir = data.root.join("s3-cache");
    let warm_disk = runtime.block_on(warm_disk(&server, &c, &ns, limit, &cache_dir))?;
    Ok(RemoteReport {
        sf: data.sf,
        latency_ms: latency.mean_ms,
        jitter_ms: latency.jitter_ms,
        limit_secs: limit.as_secs_f64(),
        fig4,
        requests,
        paper,
        warm_disk,
    })
}

/// The report's tables.
pub fn format_report(r: &RemoteReport) -> String {
    let mut out = format!(
        "Tables in a local S3 server, {} ms ± {} ms per request, TPC-H SF {} (cold: ooode's \
         pool emptied; runs past {} s marked timeout)\nFig. 4 query:\n{}",
        r.latency_ms,
        r.jitter_ms,
        r.sf,
        r.limit_secs,
        crate::fig4::format_points(&r.fig4.points)
    );
    out += "Requests of one cold run (ooode auto vs stock DataFusion on Parquet):\n";
    out += &format!(
        "{:>6} {:<20} {:>9} {:>9} {:>12} {:>10}\n",
        "N", "engine", "secs", "requests", "bytes", "req/s"
    );
    for q in &r.requests {
        out += &format!(
            "{:>6} {:<20} {:>9.3} {:>9} {:>12} {:>10.0}\n",
            q.n,
            q.engine,
            q.secs,
            q.served.requests,
            q.served.bytes,
            q.served.requests as f64 / q.secs.max(1e-9)
        );
    }
    out += "Fig. 4, cold / warm disk cache / hot, seconds (requests of the warm run):\n";
    for w in &r.warm_disk {
        let get = |cache: &str| {
            r.fig4
                .points
                .iter()
                .find(|p| p.n == w.n && p.engine == w.engine && p.cache == cache)
                .and_then(|p| p.secs)
        };
        let f = |s: Option<f64>| {
            s.map(|s| format!("{s:.3}"))
                .unwrap_or_else(|| "timeout".into())
        };
        out += &format!(
            "{:>6} {:<20} {:>9} {:>9} ({:>5}) {:>9}\n",
            w.n,
            w.engine,
            f(get("cold")),
            f(w.secs),
            w.requests,
            f(get("hot"))
        );
    }
    out += &format!("Q3'...Q17':\n{}", crate::paper::format_report(&r.paper));
    out
}

/// Writes `remote.json` and plots into `dir`; returns the files written.
pub fn write(r: &RemoteReport, dir: &Path) -> Result<Vec<String>, BoxError> {
    let mut files = crate::report::ReportDir::create(dir)?;
    files.put("remote.json", serde_json::to_string_pretty(r)?)?;
    files.put(
        "remote_fig5_time_vs_selectivity.svg",
        crate::report::fig5(&r.fig4, "cold"),
    )?;
    files.put(
        "remote_fig5_time_vs_selectivity_hot.svg",
        crate::report::fig5(&r.fig4, "hot"),
    )?;
    files.put(
        "remote_fig7_speedup_per_query.svg",
        crate::report::fig7(&r.paper),
    )?;
    // The warm-disk runs as Fig. 4 points of their own cache state, drawn like the others.
    let customers = r
        .fig4
        .points
        .iter()
        .find(|p| p.n > 0)
        .map_or(1.0, |p| p.n as f64 / p.selectivity);
    let warm = Fig4Report {
        points: r
            .warm_disk
            .iter()
            .map(|w| crate::fig4::Fig4Point {
                n: w.n,
                selectivity: w.n as f64 / customers,
                engine: w.engine.clone(),
                cache: "warm disk".into(),
                secs: w.secs,
                pages_read: None,
                fio_qd1_beside: None,
                planning: None,
                result: Vec::new(),
            })
            .collect(),
        io_samples: Vec::new(),
    };
    files.put(
        "remote_fig5_time_vs_selectivity_warm_disk.svg",
        crate::report::fig5(&warm, "warm disk"),
    )?;
    Ok(files.written)
}
