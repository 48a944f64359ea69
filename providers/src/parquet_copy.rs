//! DataFusion's own Parquet scan of a table's columnar copies, described when the table is
//! scanned and built only if no index plan replaces the scan.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::config::TableParquetOptions;
use datafusion::common::stats::NdvFallback;
use datafusion::common::{Result, Statistics};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::CachedParquetFileReaderFactory;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchema;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::physical_expr::projection::ProjectionExprs;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::union::UnionExec;
use ooode::exec::ColumnarScan;

/// One columnar copy (of one segment) to scan.
pub(crate) struct CopyFile {
    pub meta: object_store::ObjectMeta,
    /// The whole file's statistics, from its footer.
    pub statistics: Arc<Statistics>,
    /// Where the scan reads it (its checking store registered in the session's runtime).
    pub store_url: ObjectStoreUrl,
}

/// The scan a ListingTable of the copies would plan (one file group per file, read with the
/// session's Parquet options and DataFusion's metadata cache), without listing or reading
/// them: their metadata and statistics are known.
pub(crate) struct ParquetCopyScan {
    runtime: Arc<RuntimeEnv>,
    table_schema: SchemaRef,
    files: Vec<CopyFile>,
    projection: Vec<usize>,
    limit: Option<usize>,
    options: TableParquetOptions,
    /// Each file's statistics projected as the built scan projects them.
    projected: Vec<Arc<Statistics>>,
    /// All files' together.
    total: Arc<Statistics>,
}

impl ParquetCopyScan {
    /// The scan of `files` (copies of a table of schema `table_schema`) producing columns
    /// `projection`, at most `limit` rows.
    pub fn new(
        runtime: Arc<RuntimeEnv>,
        options: TableParquetOptions,
        table_schema: SchemaRef,
        files: Vec<CopyFile>,
        projection: &[usize],
        limit: Option<usize>,
    ) -> Result<Self> {
        let exprs = ProjectionExprs::from_indices(projection, &table_schema);
        let output = table_schema.project(projection)?;
        let projected = files
            .iter()
            .map(|f| {
                exprs
                    .project_statistics(f.statistics.as_ref().clone(), &output)
                    .map(Arc::new)
            })
            .collect::<Result<Vec<_>>>()?;
        // As a union of the files' scans reports them.
        let total = match projected.as_slice() {
            [one] => one.clone(),
            more => Arc::new(Statistics::try_merge_iter_with_ndv_fallback(
                more.iter().map(|s| s.as_ref()),
                &output,
                NdvFallback::Sum,
            )?),
        };
        Ok(Self {
            runtime,
            table_schema,
            files,
            projection: projection.to_vec(),
            limit,
            options,
            projected,
            total,
        })
    }

    fn file_scan(&self, file: &CopyFile) -> Result<Arc<dyn ExecutionPlan>> {
        let stats = file.statistics.clone();
        let part = PartitionedFile::from(file.meta.clone()).with_statistics(stats.clone());
        let group = FileGroup::new(vec![part]).with_statistics(stats.clone());
        let store = self.runtime.object_store(&file.store_url)?;
        let metadata_cache = self.runtime.cache_manager.get_file_metadata_cache();
        let mut source = ParquetSource::new(TableSchema::from(self.table_schema.clone()))
            .with_table_parquet_options(self.options.clone())
            .with_parquet_file_reader_factory(Arc::new(CachedParquetFileReaderFactory::new(
                store,
                metadata_cache,
            )));
        if let Some(hint) = self.options.global.metadata_size_hint {
            source = source.with_metadata_size_hint(hint);
        }
        let config = FileScanConfigBuilder::new(file.store_url.clone(), Arc::new(source))
            .with_file_groups(vec![group])
            .with_statistics(stats.as_ref().clone())
            .with_projection_indices(Some(self.projection.clone()))?
            .with_limit(self.limit)
            .build();
        Ok(DataSourceExec::from_data_source(config))
    }
}

impl fmt::Debug for ParquetCopyScan {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("ParquetCopyScan")
            .field(
                "files",
                &self
                    .files
                    .iter()
                    .map(|f| &f.meta.location)
                    .collect::<Vec<_>>(),
            )
            .field("projection", &self.projection)
            .field("limit", &self.limit)
            .finish()
    }
}

impl ColumnarScan for ParquetCopyScan {
    fn partitions(&self) -> usize {
        self.files.len()
    }

    fn statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
        match partition {
            None => Ok(self.total.clone()),
            Some(i) => Ok(match self.projected.get(i) {
                Some(stats) => stats.clone(),
                None => Arc::new(Statistics::new_unknown(
                    &self.table_schema.project(&self.projection)?,
                )),
            }),
        }
    }

    fn build(&self) -> Result<Arc<dyn ExecutionPlan>> {
        let mut plans = self
            .files
            .iter()
            .map(|f| self.file_scan(f))
            .collect::<Result<Vec<_>>>()?;
        match plans.len() {
            1 => Ok(plans.remove(0)),
            _ => UnionExec::try_new(plans),
        }
    }
}
