//! The SQL shell: a DataFusion session with ooode registered, driven by datafusion-cli's
//! REPL and statement runner (its library API), so backslash commands, formats and object
//! store options work as in datafusion-cli.

use std::num::NonZeroUsize;
use std::sync::Arc;

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::memory_pool::{
    FairSpillPool, GreedyMemoryPool, MemoryPool, TrackConsumersPool,
};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::ExplainFormat;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_cli::catalog::DynamicObjectStoreCatalog;
use datafusion_cli::exec;
use datafusion_cli::functions::ParquetMetadataFunc;
use datafusion_cli::object_storage::instrumented::InstrumentedObjectStoreRegistry;
use datafusion_cli::print_options::PrintOptions;

use crate::args::{MemoryPoolKind, ShellArgs};
use crate::stores::ShellStores;

/// Memory consumers named when a query runs out of memory.
const TOP_CONSUMERS: usize = 3;

/// The session the shell runs statements in.
pub async fn session(args: &ShellArgs) -> Result<(SessionContext, PrintOptions)> {
    let mut config = SessionConfig::from_env()?.with_information_schema(true);
    if let Some(rows) = args.batch_size {
        config = config.with_batch_size(rows as usize);
    }
    let options = config.options_mut();
    // A shell shows NULL as NULL, and plans as trees unless the environment says otherwise.
    if std::env::var_os("DATAFUSION_FORMAT_NULL").is_none() {
        options.format.null = "NULL".into();
    }
    if std::env::var_os("DATAFUSION_EXPLAIN_FORMAT").is_none() {
        options.explain.format = ExplainFormat::Tree;
    }
    let registry = Arc::new(InstrumentedObjectStoreRegistry::new());
    let stores = Arc::new(ShellStores::new(registry.clone()));
    let mut runtime = RuntimeEnvBuilder::new().with_object_store_registry(stores);
    if let Some(limit) = args.memory_limit {
        let top = NonZeroUsize::new(TOP_CONSUMERS).expect("not zero");
        let pool: Arc<dyn MemoryPool> = match args.memory_pool {
            MemoryPoolKind::Greedy => {
                Arc::new(TrackConsumersPool::new(GreedyMemoryPool::new(limit), top))
            }
            MemoryPoolKind::Fair => {
                Arc::new(TrackConsumersPool::new(FairSpillPool::new(limit), top))
            }
        };
        runtime = runtime.with_memory_pool(pool);
    }
    let builder = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime.build_arc()?)
        .with_default_features();
    let state = match args.workers.as_slice() {
        [] => ooode_providers::with_ooode(builder),
        workers => ooode_distributed::with_ooode_distributed(builder, workers)?,
    }
    .build();
    // `SELECT * FROM 'file.parquet'` and `'s3://...'` work as in datafusion-cli.
    let ctx = SessionContext::new_with_state(state).enable_url_table();
    ctx.register_catalog_list(Arc::new(DynamicObjectStoreCatalog::new(
        ctx.state().catalog_list().clone(),
        ctx.state_weak_ref(),
    )));
    ctx.register_udtf("parquet_metadata", Arc::new(ParquetMetadataFunc {}));
    let print = PrintOptions {
        format: args.format,
        quiet: args.quiet,
        maxrows: args.maxrows,
        color: args.color,
        instrumented_registry: registry,
    };
    Ok((ctx, print))
}

/// Runs the shell: the statements of `-f` files, then of `-c`, or the REPL when neither is
/// given.
pub async fn run(args: ShellArgs) -> Result<()> {
    if let Some(dir) = &args.data_path {
        std::env::set_current_dir(dir)
            .map_err(|e| DataFusionError::Execution(format!("data path {}: {e}", dir.display())))?;
    }
    let (ctx, mut print) = session(&args).await?;
    if !args.quiet {
        println!(
            "ooode v{} (DataFusion CLI v{})",
            env!("CARGO_PKG_VERSION"),
            datafusion_cli::DATAFUSION_CLI_VERSION
        );
    }
    if args.commands.is_empty() && args.files.is_empty() {
        return exec::exec_from_repl(&ctx, &mut print)
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)));
    }
    if !args.files.is_empty() {
        let files = args
            .files
            .iter()
            .map(|f| f.to_string_lossy().into_owned())
            .collect();
        exec::exec_from_files(&ctx, files, &print).await?;
    }
    if !args.commands.is_empty() {
        exec::exec_from_commands(&ctx, args.commands, &print).await?;
    }
    Ok(())
}
