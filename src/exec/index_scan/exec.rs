//! `IndexScanExec`: the plan node of an index scan.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, Statistics};
use datafusion::execution::TaskContext;
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{
    Boundedness, ChildrenPropertiesMode, EmissionType, EvaluationType, ReplaceChildrenOptions,
    SchedulingType,
};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};

use super::stream::{Pages, ScanWork, run};
use crate::access::index_only::IndexColumns;
use crate::access::plan_time::{ReadAhead, ScanEstimate};
use crate::access::steps::Columns;
use crate::access::{QueryIo, TableIo};
use crate::exec::ONE_PIPELINE_ROWS;
use crate::exec::metrics::{NodeMetrics, Published};
use crate::io::IoMetrics;
use crate::storage::btree::KeyRange;

/// Reads the rows of a table whose index key lies in some ranges, then filters them.
#[derive(Debug, Clone)]
pub struct IndexScanExec {
    table: Arc<TableIo>,
    name: String,
    index: usize,
    ranges: Vec<KeyRange>,
    ranges_text: String,
    read_columns: Vec<usize>,
    predicate: Arc<dyn PhysicalExpr>,
    output: Option<Vec<usize>>,
    schema: SchemaRef,
    estimate: ScanEstimate,
    query: Arc<QueryIo>,
    level: usize,
    io: Arc<IoMetrics>,
    /// A read-ahead of this scan's pages started while it was planned; it stops when the last
    /// copy of the plan holding it is dropped.
    read_ahead: Option<Arc<ReadAhead>>,
    /// Set when the index's keys hold every column read (and `ooode.index_only_scans` is
    /// on): the scan reads leaves only.
    index_only: Option<Arc<IndexColumns>>,
    metrics: ExecutionPlanMetricsSet,
    /// Registered once: EXPLAIN ANALYZE sums same-named metrics over registrations.
    node_metrics: Arc<std::sync::OnceLock<NodeMetrics>>,
    properties: Arc<PlanProperties>,
}

/// Builds an [`IndexScanExec`].
#[derive(Debug)]
pub struct IndexScanBuilder {
    table: Arc<TableIo>,
    index: usize,
    ranges: Vec<KeyRange>,
    query: Arc<QueryIo>,
    name: Option<String>,
    ranges_text: Option<String>,
    read_columns: Option<Vec<usize>>,
    predicate: Option<Arc<dyn PhysicalExpr>>,
    output: Option<Vec<usize>>,
    estimate: Option<ScanEstimate>,
    io: Option<Arc<IoMetrics>>,
    read_ahead: Option<Arc<ReadAhead>>,
}

impl IndexScanBuilder {
    /// Name shown in plans (default: the table's directory name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// How the ranges are shown in plans.
    pub fn ranges_text(mut self, text: impl Into<String>) -> Self {
        self.ranges_text = Some(text.into());
        self
    }

    /// Table columns read (default: all).
    pub fn read_columns(mut self, columns: Vec<usize>) -> Self {
        self.read_columns = Some(columns);
        self
    }

    /// Rows kept: where `predicate` (over the columns read) holds (default: all).
    pub fn predicate(mut self, predicate: Arc<dyn PhysicalExpr>) -> Self {
        self.predicate = Some(predicate);
        self
    }

    /// Columns produced, as positions among the columns read (default: all).
    pub fn output(mut self, output: Option<Vec<usize>>) -> Self {
        self.output = output;
        self
    }

    /// What the optimizer expects the scan to cost (feeds statistics and later decisions).
    pub fn estimate(mut self, estimate: ScanEstimate) -> Self {
        self.estimate = Some(estimate);
        self
    }

    /// Counts reads in `io` (the counters of the scan it replaces, which may have read ahead
    /// while the query was planned: EXPLAIN ANALYZE then shows those reads too).
    pub fn io(mut self, io: Arc<IoMetrics>) -> Self {
        self.io = Some(io);
        self
    }

    /// Keeps a read-ahead of the scan's pages alive as long as the scan.
    pub fn read_ahead(mut self, read_ahead: Option<Arc<ReadAhead>>) -> Self {
        self.read_ahead = read_ahead;
        self
    }

    /// The scan.
    pub fn build(self) -> Result<IndexScanExec> {
        let t = self.table.table();
        let read_columns = self
            .read_columns
            .unwrap_or_else(|| (0..t.schema().fields().len()).collect());
        let read_schema = t.schema().project(&read_columns)?;
        let schema = Arc::new(match &self.output {
            Some(cols) => read_schema.project(cols)?,
            None => read_schema,
        });
        let properties = Arc::new(
            PlanProperties::new(
                EquivalenceProperties::new(schema.clone()),
                Partitioning::UnknownPartitioning(1),
                EmissionType::Incremental,
                Boundedness::Bounded,
            )
            // Its work runs as a task of its own from `execute` on, and hands batches over a
            // channel, which takes part in tokio's cooperative budget (as RepartitionExec's do).
            .with_evaluation_type(EvaluationType::Eager)
            .with_scheduling_type(SchedulingType::Cooperative),
        );
        let index_only = match self.query.config().index_only_scans {
            true => IndexColumns::new(
                &self.table,
                self.index,
                &Columns::new(&self.table, read_columns.clone())?,
            )?
            .map(Arc::new),
            false => None,
        };
        let name = self.name.unwrap_or_else(|| {
            t.dir()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        Ok(IndexScanExec {
            name,
            index: self.index,
            ranges_text: self
                .ranges_text
                .unwrap_or_else(|| format!("{} ranges", self.ranges.len())),
            ranges: self.ranges,
            read_columns,
            predicate: self
                .predicate
                .unwrap_or_else(|| datafusion::physical_expr::expressions::lit(true)),
            output: self.output,
            schema,
            estimate: self.estimate.unwrap_or(ScanEstimate {
                rows: usize::MAX,
                pages: usize::MAX,
            }),
            query: self.query,
            level: 0,
            io: self.io.unwrap_or_default(),
            read_ahead: self.read_ahead,
            index_only,
            metrics: ExecutionPlanMetricsSet::new(),
            node_metrics: Default::default(),
            properties,
            table: self.table,
        })
    }
}

impl IndexScanExec {
    /// A scan of the `index`-th index of `table` over key `ranges`, reading under `query`.
    pub fn builder(
        table: Arc<TableIo>,
        index: usize,
        ranges: Vec<KeyRange>,
        query: Arc<QueryIo>,
    ) -> IndexScanBuilder {
        IndexScanBuilder {
            table,
            index,
            ranges,
            query,
            name: None,
            ranges_text: None,
            read_columns: None,
            predicate: None,
            output: None,
            estimate: None,
            io: None,
            read_ahead: None,
        }
    }

    /// The same scan reading at priority `level` within its query (higher: served first).
    pub fn with_level(&self, level: usize) -> Self {
        Self {
            level,
            ..self.clone()
        }
    }

    /// The read-ahead of this scan's pages started while it was planned, if any.
    pub fn read_ahead(&self) -> Option<&Arc<ReadAhead>> {
        self.read_ahead.as_ref()
    }

    /// Whether it reads the index's leaves only (its keys hold every column read).
    pub fn is_index_only(&self) -> bool {
        self.index_only.is_some()
    }

    /// Its priority within its query.
    pub fn level(&self) -> usize {
        self.level
    }

    /// The query budget the scan reads under.
    pub fn query(&self) -> &Arc<QueryIo> {
        &self.query
    }

    /// The node's I/O counters.
    pub fn io_metrics(&self) -> &Arc<IoMetrics> {
        &self.io
    }

    /// What the optimizer expected the scan to cost.
    pub fn estimate(&self) -> ScanEstimate {
        self.estimate
    }

    /// Whether the scan is estimated small enough to run as one pipeline
    /// ([`ONE_PIPELINE_ROWS`]).
    pub fn one_pipeline(&self) -> bool {
        self.estimate.rows <= ONE_PIPELINE_ROWS
    }

    /// The table read.
    pub fn table(&self) -> &Arc<TableIo> {
        &self.table
    }

    /// Name shown in plans.
    pub fn table_name(&self) -> &str {
        &self.name
    }

    /// Table columns read.
    pub fn read_columns(&self) -> &[usize] {
        &self.read_columns
    }

    /// The residual predicate over the columns read.
    pub fn predicate(&self) -> &Arc<dyn PhysicalExpr> {
        &self.predicate
    }

    /// Columns produced (positions among the columns read; None: all).
    pub fn output(&self) -> Option<&[usize]> {
        self.output.as_deref()
    }

    /// The index read (position in the table's manifest).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The key ranges read.
    pub fn ranges(&self) -> &[KeyRange] {
        &self.ranges
    }

    /// How the ranges are shown in plans.
    pub fn ranges_text(&self) -> &str {
        &self.ranges_text
    }
}

impl IndexScanExec {
    /// Distinct counts of the output columns the indexes count (their first columns, counted
    /// at load), for the rows the scan keeps. Without them DataFusion takes each join key's
    /// rows as its distinct values: customer (1,566 keys) joined with their orders (14,892
    /// rows, 1,000 customers) was estimated at 1,566 rows, and the index rule, trusting it,
    /// looked lineitem up ten times more often than it had weighed.
    fn add_distinct_counts(&self, stats: &mut Statistics) {
        let table = self.table.table();
        let total = self.table.row_count().max(1) as f64;
        let rows = self.estimate.rows.min(self.table.row_count() as usize);
        let scanned = table.indexes()[self.index].meta.columns.first();
        for idx in table.indexes() {
            let Some(first) = idx.meta.columns.first() else {
                continue;
            };
            let Ok(col) = table.schema().index_of(first) else {
                continue;
            };
            let distinct = (0..self.table.segments())
                .filter_map(|part| self.table.segment(part))
                .filter_map(|t| t.indexes().iter().find(|i| i.meta.name == idx.meta.name))
                .map(|i| i.meta.distinct_first)
                .max()
                .unwrap_or(0) as f64;
            if distinct == 0.0 {
                continue;
            }
            let kept = if Some(first) == scanned {
                // The ranges select by this column: its values in them, in proportion.
                distinct * rows as f64 / total
            } else {
                // Rows drawn from `distinct` values: expected distinct ones among them.
                distinct * (1.0 - (1.0 - 1.0 / distinct).powf(rows as f64))
            };
            let kept = Precision::Inexact((kept.ceil() as usize).clamp(1, rows.max(1)));
            let positions = self
                .read_columns
                .iter()
                .enumerate()
                .filter(|(_, c)| **c == col);
            for (read_pos, _) in positions {
                let out_pos = match &self.output {
                    Some(cols) => cols.iter().position(|&c| c == read_pos),
                    None => Some(read_pos),
                };
                if let Some(cs) = out_pos.and_then(|p| stats.column_statistics.get_mut(p)) {
                    cs.distinct_count = kept;
                }
            }
        }
    }
}

impl DisplayAs for IndexScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let idx = &self.table.table().indexes()[self.index].meta;
        if let DisplayFormatType::TreeRender = t {
            return write!(
                f,
                "table={}\nindex={}({}){}\nranges={}\nmode={}",
                self.name,
                idx.name,
                idx.columns.join(", "),
                if self.is_index_only() {
                    "\nindex_only"
                } else {
                    ""
                },
                self.ranges_text,
                self.query.mode
            );
        }
        write!(
            f,
            "IndexScanExec: table={}, index={}({}){}, ranges={}, predicate={}, mode={}",
            self.name,
            idx.name,
            idx.columns.join(", "),
            if self.is_index_only() {
                ", index_only"
            } else {
                ""
            },
            self.ranges_text,
            self.predicate,
            self.query.mode
        )
    }
}

impl ExecutionPlan for IndexScanExec {
    fn name(&self) -> &str {
        "IndexScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        f(&self.predicate)
    }

    fn replace_children(
        self: Arc<Self>,
        _: Vec<Arc<dyn ExecutionPlan>>,
        _: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let node = self
            .node_metrics
            .get_or_init(|| NodeMetrics::new(&self.metrics, self.io.clone()))
            .clone();
        node.add_probes(self.ranges.len());
        let limit = self.query.limit();
        let (steps, inline) =
            crate::exec::node_steps(&self.query, &self.io, &self.table, self.level);
        let work = ScanWork {
            table: self.table.clone(),
            pages: Pages::Index {
                index: self.index,
                sparse: self.table.table().indexes()[self.index].meta.is_sparse(),
                ranges: self.ranges.clone(),
                keys: self.index_only.clone(),
            },
            read_columns: self.read_columns.clone(),
            predicate: Some(self.predicate.clone()),
            output: self.output.clone(),
            steps,
            max_fetches: (2 * limit).clamp(2, 8192),
            out_bytes: crate::exec::OUTPUT_BYTES,
            batch_rows: context.session_config().batch_size().clamp(1, 256),
            memory: MemoryConsumer::new(format!("IndexScanExec[{partition}]"))
                .register(context.memory_pool()),
        };
        let stream = crate::exec::partition_stream(
            self.schema.clone(),
            self.query.clone(),
            inline,
            move |tx, turn| run(work, tx, turn),
        );
        Ok(Box::pin(
            datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                self.schema.clone(),
                Published::new(stream, node),
            ),
        ))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        let mut stats = Statistics::new_unknown(&self.schema);
        stats.num_rows = Precision::Inexact(self.estimate.rows);
        self.add_distinct_counts(&mut stats);
        Ok(Arc::new(stats))
    }
}
