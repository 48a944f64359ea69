//! `OoodeScanExec`: reads every heap page of a table, split into page ranges per partition,
//! with a window of reads in flight per partition.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::common::config::ConfigOptions;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, Statistics};
use datafusion::execution::TaskContext;
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{
    Boundedness, ChildrenPropertiesMode, EmissionType, ReplaceChildrenOptions,
};
use datafusion::physical_plan::filter_pushdown::{FilterDescription, FilterPushdownPhase};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};

use crate::access::plan_time::{PlanCounts, PlanReads, ReadAhead};
use crate::access::{QueryIo, TableIo};
use crate::exec::index_scan::stream::{Pages, ScanWork, run};
use crate::exec::metrics::{NodeMetrics, Published};
use crate::io::IoMetrics;

/// A scan of a table's Parquet copy, described but not yet built: DataFusion's rules that run
/// before the index rule see its partitions and statistics, and it is built (by the index
/// rule, or when executed) only where no index plan replaces the ooode scan. Most scans of a
/// selective query are replaced, and building one is a tenth of planning such a query.
pub trait ColumnarScan: fmt::Debug + Send + Sync {
    /// The built scan's output partitions (before DataFusion repartitions it).
    fn partitions(&self) -> usize;
    /// The built scan's statistics: of its whole output (None) or of one partition.
    fn statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>>;
    /// Builds the scan.
    fn build(&self) -> Result<Arc<dyn ExecutionPlan>>;
}

/// What an [`OoodeScanExec`] reads.
#[derive(Debug, Clone)]
enum Reads {
    /// The heap's pages, through admission.
    Heap,
    /// The Parquet copy, through a scan built when first needed (one scan for all of the
    /// node's partitions: a file scan's partitions share its state).
    Described {
        scan: Arc<dyn ColumnarScan>,
        built: Arc<std::sync::OnceLock<Arc<dyn ExecutionPlan>>>,
    },
    /// The Parquet copy, through this scan (its child).
    Built(Arc<dyn ExecutionPlan>),
}

impl Reads {
    /// The Parquet scan that does the reading (None: it reads the heap), built now if it is
    /// only described. Built once per node: a file scan's partitions share its state, and
    /// partitions executed at once, each building it, all use the first one kept.
    fn columnar_plan(&self) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        match self {
            Reads::Heap => Ok(None),
            Reads::Built(plan) => Ok(Some(plan.clone())),
            Reads::Described { scan, built } => Ok(Some(match built.get() {
                Some(plan) => plan.clone(),
                None => {
                    let plan = scan.build()?;
                    built.get_or_init(|| plan).clone()
                }
            })),
        }
    }
}

/// Plan properties of a scan producing `schema` in `partitions` partitions, in no order.
fn unordered_properties(schema: &SchemaRef, partitions: usize) -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(schema.clone()),
        Partitioning::UnknownPartitioning(partitions),
        EmissionType::Incremental,
        Boundedness::Bounded,
    ))
}

/// Reads a whole ooode table.
#[derive(Debug, Clone)]
pub struct OoodeScanExec {
    table: Arc<TableIo>,
    name: String,
    projection: Vec<usize>,
    schema: SchemaRef,
    query: Arc<QueryIo>,
    io: Arc<IoMetrics>,
    metrics: ExecutionPlanMetricsSet,
    /// Registered once: EXPLAIN ANALYZE sums same-named metrics over registrations.
    node_metrics: Arc<std::sync::OnceLock<NodeMetrics>>,
    properties: Arc<PlanProperties>,
    /// What it reads.
    reads: Reads,
    /// Range counts made and a read-ahead started while it was planned (the index scan that
    /// replaces this node takes the read-ahead over).
    plan_reads: Arc<PlanReads>,
    /// Page ranges read in parallel when it reads the heap.
    heap_partitions: usize,
}

impl OoodeScanExec {
    /// A scan of `table` (shown as `name`) producing columns `projection`, in `partitions`
    /// page ranges.
    pub fn new(
        table: Arc<TableIo>,
        name: impl Into<String>,
        projection: Vec<usize>,
        partitions: usize,
        query: Arc<QueryIo>,
    ) -> Result<Self> {
        let schema = Arc::new(table.table().schema().project(&projection)?);
        let pages = table.heap_pages() as usize;
        let partitions = partitions.clamp(1, pages.max(1));
        let properties = unordered_properties(&schema, partitions);
        Ok(Self {
            table,
            name: name.into(),
            projection,
            schema,
            query,
            io: IoMetrics::new(),
            metrics: ExecutionPlanMetricsSet::new(),
            node_metrics: Default::default(),
            properties,
            reads: Reads::Heap,
            plan_reads: Default::default(),
            heap_partitions: partitions,
        })
    }

    /// Distinct counts the indexes know (the first column of each index, counted at load)
    /// for the projected columns that have none; Parquet footers carry none.
    fn add_index_distinct_counts(&self, stats: &mut Statistics) {
        let table = self.table.table();
        for idx in table.indexes() {
            let Ok(col) = table.schema().index_of(&idx.meta.columns[0]) else {
                continue;
            };
            let Some(pos) = self.projection.iter().position(|&c| c == col) else {
                continue;
            };
            if let Some(cs) = stats.column_statistics.get_mut(pos)
                && idx.meta.distinct_first > 0
                && cs.distinct_count == Precision::Absent
            {
                cs.distinct_count = Precision::Inexact(idx.meta.distinct_first as usize);
            }
        }
    }

    /// The same scan reading through `columnar`, a scan of the table's Parquet copy producing
    /// the same columns (index plans that replace this node still read the heap).
    pub fn with_columnar(self, columnar: Arc<dyn ExecutionPlan>) -> Self {
        Self {
            properties: columnar.properties().clone(),
            reads: Reads::Built(columnar),
            ..self
        }
    }

    /// The same scan reading through the Parquet copy's `scan`, built only when needed
    /// ([`Self::build_columnar`], or when executed).
    pub fn with_columnar_scan(self, scan: Arc<dyn ColumnarScan>) -> Self {
        Self {
            properties: unordered_properties(&self.schema, scan.partitions().max(1)),
            reads: Reads::Described {
                scan,
                built: Default::default(),
            },
            ..self
        }
    }

    /// The same scan with its Parquet copy's scan built and made its child (None: it has
    /// none to build). The index rule calls this for the scans it keeps, so that DataFusion's
    /// later rules (repartitioning, dynamic filters) work on the Parquet scan.
    pub fn build_columnar(&self) -> Result<Option<Self>> {
        match &self.reads {
            Reads::Described { .. } => Ok(self
                .reads
                .columnar_plan()?
                .map(|columnar| self.clone().with_columnar(columnar))),
            Reads::Heap | Reads::Built(_) => Ok(None),
        }
    }

    /// The same scan holding what was read for it while it was planned (a read-ahead stops
    /// when the plan is dropped).
    pub fn with_plan_reads(self, plan_reads: PlanReads) -> Self {
        Self {
            plan_reads: Arc::new(plan_reads),
            ..self
        }
    }

    /// The read-ahead started for this table while the query was planned.
    pub fn read_ahead(&self) -> Option<&Arc<ReadAhead>> {
        self.plan_reads.read_ahead.as_ref()
    }

    /// The range counts made for this table's index scans while the query was planned.
    pub fn plan_counts(&self) -> &PlanCounts {
        &self.plan_reads.counts
    }

    /// Whether it reads the table's Parquet copy (not the heap's pages, through admission).
    pub fn is_columnar(&self) -> bool {
        !matches!(self.reads, Reads::Heap)
    }

    /// The table.
    pub fn table(&self) -> &Arc<TableIo> {
        &self.table
    }

    /// Name shown in plans.
    pub fn table_name(&self) -> &str {
        &self.name
    }

    /// Table columns produced, in order.
    pub fn projection(&self) -> &[usize] {
        &self.projection
    }

    /// The scan's I/O counters (its reads, and those read ahead for an index scan of it).
    pub fn io_metrics(&self) -> &Arc<IoMetrics> {
        &self.io
    }

    /// The query budget this scan reads under.
    pub fn query(&self) -> &Arc<QueryIo> {
        &self.query
    }

    /// Page ranges read in parallel when it reads the heap.
    pub fn heap_partitions(&self) -> usize {
        self.heap_partitions
    }

    /// The scan of the table's Parquet copy that does the reading, if built.
    pub fn columnar(&self) -> Option<&Arc<dyn ExecutionPlan>> {
        match &self.reads {
            Reads::Built(plan) => Some(plan),
            Reads::Heap | Reads::Described { .. } => None,
        }
    }

    /// The same scan reading under another query budget.
    pub fn with_query(&self, query: Arc<QueryIo>) -> Self {
        Self {
            query,
            ..self.clone()
        }
    }
}

impl DisplayAs for OoodeScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let reads = if self.is_columnar() {
            "parquet copy"
        } else {
            "heap"
        };
        if let DisplayFormatType::TreeRender = t {
            return write!(f, "table={}\nreads={reads}", self.name);
        }
        let cols: Vec<_> = self
            .schema
            .fields()
            .iter()
            .map(|c| c.name().as_str())
            .collect();
        write!(
            f,
            "OoodeScanExec: table={}, pages={}, projection=[{}], reads={}",
            self.name,
            self.table.heap_pages(),
            cols.join(", "),
            reads
        )
    }
}

impl ExecutionPlan for OoodeScanExec {
    fn name(&self) -> &str {
        "OoodeScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    /// The Parquet copy's scan, when it does the reading, is a child so that DataFusion's
    /// dynamic filters (hash join build sides, TopK) reach it as they reach a stock scan.
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.columnar().into_iter().collect()
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false; self.children().len()]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true; self.children().len()]
    }

    fn gather_filters_for_pushdown(
        &self,
        phase: FilterPushdownPhase,
        parent_filters: Vec<Arc<dyn PhysicalExpr>>,
        _config: &ConfigOptions,
    ) -> Result<FilterDescription> {
        // Static filters stay above (the optimizer rule turns FilterExec + scan into index
        // scans); only the dynamic filters of the Post phase pass to the Parquet scan.
        match phase {
            FilterPushdownPhase::Post => {
                FilterDescription::from_children(parent_filters, &self.children())
            }
            FilterPushdownPhase::Pre => Ok(FilterDescription::all_unsupported(
                &parent_filters,
                &self.children(),
            )),
        }
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match (children.into_iter().next(), &self.reads) {
            (Some(child), Reads::Built(_)) => {
                Ok(Arc::new(self.as_ref().clone().with_columnar(child)))
            }
            _ => Ok(self),
        }
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
        if let Some(columnar) = self.reads.columnar_plan()? {
            return columnar.execute(partition, context);
        }
        let parts = self.properties.partitioning.partition_count() as u64;
        let pages = self.table.heap_pages();
        let (start, end) = (
            pages * partition as u64 / parts,
            pages * (partition as u64 + 1) / parts,
        );
        let node = self
            .node_metrics
            .get_or_init(|| NodeMetrics::new(&self.metrics, self.io.clone()))
            .clone();
        let limit = self.query.limit();
        let (steps, inline) = crate::exec::node_steps(&self.query, &self.io, &self.table, 0);
        let work = ScanWork {
            table: self.table.clone(),
            pages: Pages::Range(start..end),
            read_columns: self.projection.clone(),
            predicate: None,
            output: None,
            steps,
            max_fetches: limit.clamp(1, 64),
            out_bytes: crate::exec::OUTPUT_BYTES,
            batch_rows: context.session_config().batch_size().max(1),
            memory: MemoryConsumer::new(format!("OoodeScanExec[{partition}]"))
                .register(context.memory_pool()),
        };
        let stream = crate::exec::partition_stream(
            self.schema.clone(),
            self.query.clone(),
            inline,
            move |tx, turn| run(work, tx, turn),
        );
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            Published::new(stream, node),
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        // A Parquet child reports its own metrics.
        Some(self.metrics.clone_inner())
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        self.children()
            .iter()
            .map(|_| ChildStats::At(partition))
            .collect()
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        // Reading through the Parquet copy, DataFusion sees what it sees for a stock Parquet
        // scan (row count, sizes, column min/max/nulls from the footer), so where no index
        // plan is chosen it plans the same joins as over Parquet.
        let mut stats = match (input_stats.first(), &self.reads) {
            (Some(child), _) => child.as_ref().clone(),
            (None, Reads::Described { scan, .. }) => {
                scan.statistics(args.partition())?.as_ref().clone()
            }
            (None, _) => {
                let rows = self.table.row_count() as usize;
                let parts = self.properties.partitioning.partition_count();
                let mut stats = Statistics::new_unknown(&self.schema);
                stats.num_rows = match args.partition() {
                    None => Precision::Exact(rows),
                    Some(_) => Precision::Inexact(rows / parts),
                };
                stats
            }
        };
        if args.partition().is_none() {
            self.add_index_distinct_counts(&mut stats);
        }
        Ok(Arc::new(stats))
    }
}
