//! `IndexScanExec`: the plan node of an index scan.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, Statistics};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{
    Boundedness, ChildrenPropertiesMode, EmissionType, EvaluationType, ReplaceChildrenOptions,
    SchedulingType,
};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};

use super::stream::{ScanPages, ScanWork, run};
use crate::exec::ONE_PIPELINE_ROWS;
use crate::exec::context::QueryIo;
use crate::exec::metrics::{NodeMetrics, Published};
use crate::io::{IoMetrics, TableIo};
use crate::storage::btree::KeyRange;

/// What the optimizer expects an index scan to cost, from exact B+tree range counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanEstimate {
    /// Rows found in the ranges (before the residual predicate).
    pub rows: usize,
    /// Page reads: index nodes and heap pages.
    pub pages: usize,
}

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
    io: Arc<IoMetrics>,
    metrics: ExecutionPlanMetricsSet,
    /// Registered once: EXPLAIN ANALYZE sums same-named metrics over registrations.
    node_metrics: Arc<std::sync::OnceLock<NodeMetrics>>,
    properties: Arc<PlanProperties>,
}

impl IndexScanExec {
    /// An index scan of the `index`-th index of `table` over `ranges` (described by
    /// `ranges_text` in plans), reading table columns `read_columns`, keeping rows where
    /// `predicate` (over those columns) holds, and producing the columns `output` of them (all
    /// when None). `estimate` feeds the statistics and the optimizer's later decisions.
    #[allow(clippy::too_many_arguments)]
    pub fn try_new(
        table: Arc<TableIo>,
        name: impl Into<String>,
        index: usize,
        ranges: Vec<KeyRange>,
        ranges_text: String,
        read_columns: Vec<usize>,
        predicate: Arc<dyn PhysicalExpr>,
        output: Option<Vec<usize>>,
        estimate: ScanEstimate,
        query: Arc<QueryIo>,
    ) -> Result<Self> {
        let read_schema = table.table().schema().project(&read_columns)?;
        let schema = Arc::new(match &output {
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
        Ok(Self {
            table,
            name: name.into(),
            index,
            ranges,
            ranges_text,
            read_columns,
            predicate,
            output,
            schema,
            estimate,
            query,
            io: IoMetrics::new(),
            metrics: ExecutionPlanMetricsSet::new(),
            node_metrics: Default::default(),
            properties,
        })
    }

    /// The same scan, counting its reads in `io` (the counters of the scan it replaces, which
    /// may have read ahead while the query was planned: EXPLAIN ANALYZE then shows those
    /// reads too).
    pub fn with_io(self, io: Arc<IoMetrics>) -> Self {
        Self { io, ..self }
    }

    fn work(&self) -> ScanWork {
        ScanWork {
            pages: Arc::new(ScanPages {
                table: self.table.clone(),
                index: self.index,
                ranges: self.ranges.clone(),
                query: self.query.clone(),
                node_io: self.io.clone(),
            }),
            sparse: self.table.table().indexes()[self.index].meta.is_sparse(),
            read_columns: self.read_columns.clone(),
            predicate: self.predicate.clone(),
            output: self.output.clone(),
        }
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

    /// What the scan stands for: table, name, columns read, predicate, output projection.
    #[allow(clippy::type_complexity)]
    pub fn as_table_read_parts(
        &self,
    ) -> (
        Arc<TableIo>,
        String,
        Vec<usize>,
        Arc<dyn PhysicalExpr>,
        Option<Vec<usize>>,
    ) {
        (
            self.table.clone(),
            self.name.clone(),
            self.read_columns.clone(),
            self.predicate.clone(),
            self.output.clone(),
        )
    }
}

impl DisplayAs for IndexScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let idx = &self.table.table().indexes()[self.index].meta;
        if let DisplayFormatType::TreeRender = t {
            return write!(
                f,
                "table={}\nindex={}({})\nranges={}\nmode={}",
                self.name,
                idx.name,
                idx.columns.join(", "),
                self.ranges_text,
                self.query.mode
            );
        }
        write!(
            f,
            "IndexScanExec: table={}, index={}({}), ranges={}, predicate={}, mode={}",
            self.name,
            idx.name,
            idx.columns.join(", "),
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
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let node = self
            .node_metrics
            .get_or_init(|| NodeMetrics::new(&self.metrics, self.io.clone()))
            .clone();
        let work = self.work();
        let mut builder = RecordBatchReceiverStreamBuilder::new(self.schema.clone(), 4);
        let tx = builder.tx();
        builder.spawn(run(work, node.clone(), tx));
        let stream = builder.build();
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
        Ok(Arc::new(stats))
    }
}
