//! `OoodeTable`: an ooode table as a DataFusion TableProvider.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::stats::Precision;
use datafusion::common::{Result, Statistics};
use datafusion::datasource::TableType;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use ooode::exec::context::to_df;
use ooode::exec::{OoodeConfig, OoodeRuntime, OoodeScanExec, QueryIo};
use ooode::storage::Table;

/// A table stored in the ooode format.
///
/// Scans read heap pages through the I/O layer; the ooode optimizer rule turns scans with
/// selective predicates into index scans and hash joins into index nested-loop joins. Filters
/// are reported `Inexact`: DataFusion keeps its FilterExec, which the rule folds into an index
/// scan where an index applies.
#[derive(Debug)]
pub struct OoodeTable {
    dir: PathBuf,
    name: String,
    schema: SchemaRef,
    rows: u64,
}

impl OoodeTable {
    /// Opens the table in `dir` (checking its manifest and files).
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let table = Table::open(&dir).map_err(to_df)?;
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string());
        Ok(Self {
            schema: table.schema().clone(),
            rows: table.manifest().row_count,
            dir,
            name,
        })
    }

    /// Table directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// DataFusion's own Parquet scan of the table's columnar copy.
    async fn parquet_scan(
        &self,
        state: &dyn Session,
        file: &Path,
        projection: &[usize],
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        use datafusion::datasource::file_format::parquet::ParquetFormat;
        use datafusion::datasource::listing::{
            ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
        };
        let absolute = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
        let url = ListingTableUrl::parse(absolute.to_string_lossy())?;
        let options =
            ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
        let config = ListingTableConfig::new(url)
            .with_listing_options(options)
            .with_schema(self.schema.clone());
        // The session's statistics cache, as for a registered Parquet table: without it every
        // query re-reads the footer to compute statistics (0.8 ms of planning at SF 1).
        let listing = ListingTable::try_new(config)?
            .with_cache(state.runtime_env().cache_manager.get_file_statistic_cache());
        let projection = projection.to_vec();
        listing.scan(state, Some(&projection), filters, limit).await
    }
}

/// The session's ooode settings (defaults if the extension is not registered).
pub fn ooode_config(state: &dyn Session) -> OoodeConfig {
    state
        .config_options()
        .extensions
        .get::<OoodeConfig>()
        .cloned()
        .unwrap_or_default()
}

#[async_trait]
impl TableProvider for OoodeTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let config = ooode_config(state);
        let runtime = OoodeRuntime::get(&config);
        let table = runtime.table(&self.dir, config.execution_mode, config.direct_io)?;
        let projection = projection
            .cloned()
            .unwrap_or_else(|| (0..self.schema.fields().len()).collect());
        let partitions = match config.execution_mode {
            ooode::exec::ExecutionMode::InOrder => 1,
            ooode::exec::ExecutionMode::OutOfOrder => state.config().target_partitions(),
        };
        let columnar_file = table.table().manifest().columnar.clone();
        let scan = OoodeScanExec::new(
            table,
            self.name.clone(),
            projection.clone(),
            partitions,
            QueryIo::new(&config),
        )?;
        match columnar_file {
            Some(file) if config.columnar_scan => {
                let parquet = self
                    .parquet_scan(state, &self.dir.join(file), &projection, filters, limit)
                    .await?;
                Ok(Arc::new(scan.with_columnar(parquet)))
            }
            _ => Ok(Arc::new(scan)),
        }
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    fn statistics(&self) -> Option<Statistics> {
        let mut stats = Statistics::new_unknown(&self.schema);
        stats.num_rows = Precision::Exact(self.rows as usize);
        Some(stats)
    }
}
