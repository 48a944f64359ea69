//! `IndexJoinExec`: the plan node of the index nested-loop join.

use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{JoinSide, Result, Statistics, internal_err};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{
    Boundedness, ChildrenPropertiesMode, EmissionType, EvaluationType, ReplaceChildrenOptions,
    SchedulingType,
};
use datafusion::physical_plan::joins::utils::JoinFilter;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};

use datafusion::execution::memory_pool::MemoryConsumer;

use super::inner_page::InPlaceColumns;
use super::output::OutputSpec;
use super::stream::{JoinWork, Limits, run};
use crate::access::index_only::IndexColumns;
use crate::access::steps::Columns;
use crate::access::{QueryIo, TableIo, to_df};
use crate::exec::ONE_PIPELINE_ROWS;
use crate::exec::metrics::{NodeMetrics, Published};
use crate::io::IoMetrics;
use crate::storage::KeyEncoder;

/// Which rows the join produces (the outer input is the preserved side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexJoinKind {
    /// Matching pairs.
    Inner,
    /// Outer rows with at least one match.
    Semi,
    /// Outer rows without a match.
    Anti,
    /// Matching pairs, and outer rows without a match padded with nulls.
    LeftOuter,
}

/// The indexed inner side of the join: an ooode table, an index whose leading columns are the
/// join key, and what the replaced scan did (columns, predicate, projection).
#[derive(Debug)]
pub struct InnerSide {
    /// The table.
    pub table: Arc<TableIo>,
    /// Name shown in plans.
    pub name: String,
    /// Index used (position in the manifest).
    pub index: usize,
    /// Whether the index is sparse (clustering).
    pub sparse: bool,
    /// Encoder of the join key: the index's first key columns.
    pub encoder: KeyEncoder,
    /// Table columns decoded from each heap page.
    pub decode_columns: Columns,
    /// Positions of the key columns within `decode_columns`.
    pub key_positions: Vec<usize>,
    /// How many of `decode_columns` are the scan's: they come first (the join key's columns
    /// not among them follow).
    pub read_width: usize,
    /// Schema of the scan's columns (the first `read_width` decoded), built once: a page's
    /// view of them then makes no schema of its own.
    pub read_schema: SchemaRef,
    /// Predicate of the replaced scan, over its columns.
    pub predicate: Option<Arc<dyn PhysicalExpr>>,
    /// Projection after the predicate (indices into the scan's columns).
    pub output: Option<Vec<usize>>,
    /// Schema of the inner rows the join sees.
    pub output_schema: SchemaRef,
    /// Set when the index's keys hold every column decoded: probes can then read leaves only
    /// (when `ooode.index_only_scans` is on).
    pub keys: Option<Arc<IndexColumns>>,
    /// Set when probes can take their rows from heap pages where they lie, undecoded (see
    /// `InPlaceColumns`).
    pub in_place: Option<InPlaceColumns>,
}

impl InnerSide {
    /// Table columns of the scan it stands for (the join key's columns may be decoded too).
    pub fn read_columns(&self) -> &[usize] {
        &self.decode_columns.indices[..self.read_width]
    }

    /// The inner side over the `index`-th index of `table`, keyed by its first `key_len`
    /// columns, standing for a scan of `read_columns` with `predicate` and `output` projection.
    pub fn try_new(
        table: Arc<TableIo>,
        name: impl Into<String>,
        index: usize,
        key_len: usize,
        read_columns: Vec<usize>,
        predicate: Option<Arc<dyn PhysicalExpr>>,
        output: Option<Vec<usize>>,
    ) -> Result<Self> {
        let t = table.table();
        let meta = &t.indexes()[index].meta;
        if key_len == 0 || key_len > meta.columns.len() {
            return internal_err!("join key of {key_len} columns on index {}", meta.name);
        }
        let key_cols = meta.columns[..key_len]
            .iter()
            .map(|c| t.schema().index_of(c))
            .collect::<Result<Vec<_>, _>>()?;
        let mut decode_columns = read_columns.clone();
        let key_positions = key_cols
            .iter()
            .map(|&c| match decode_columns.iter().position(|&d| d == c) {
                Some(p) => p,
                None => {
                    decode_columns.push(c);
                    decode_columns.len() - 1
                }
            })
            .collect();
        let fields: Vec<_> = key_cols
            .iter()
            .map(|&c| t.schema().fields()[c].clone())
            .collect();
        let encoder = KeyEncoder::new(&fields).map_err(to_df)?;
        let read_schema = Arc::new(t.schema().project(&read_columns)?);
        let output_schema = match &output {
            Some(cols) => Arc::new(read_schema.project(cols)?),
            None => read_schema.clone(),
        };
        let in_place = InPlaceColumns::plan(
            t.schema(),
            &read_columns,
            output.as_deref(),
            predicate.is_some(),
            meta.is_sparse().then_some(key_cols.as_slice()),
        );
        let decode_columns = Columns::new(&table, decode_columns)?;
        let keys = IndexColumns::new(&table, index, &decode_columns)?.map(Arc::new);
        Ok(Self {
            in_place,
            sparse: meta.is_sparse(),
            read_width: read_columns.len(),
            decode_columns,
            keys,
            table,
            name: name.into(),
            index,
            encoder,
            key_positions,
            predicate,
            output,
            read_schema,
            output_schema,
        })
    }
}

/// For each row of the outer input, finds the inner rows with the same key through an index,
/// with many lookups and page reads in flight at once.
#[derive(Debug, Clone)]
pub struct IndexJoinExec {
    outer: Arc<dyn ExecutionPlan>,
    outer_keys: Vec<Arc<dyn PhysicalExpr>>,
    inner: Arc<InnerSide>,
    kind: IndexJoinKind,
    filter: Option<JoinFilter>,
    outer_side: JoinSide,
    schema: SchemaRef,
    estimated_rows: Option<usize>,
    query: Arc<QueryIo>,
    /// Probes read the index's leaves only (see [`InnerSide::keys`]).
    index_only: bool,
    level: usize,
    io: Arc<IoMetrics>,
    metrics: ExecutionPlanMetricsSet,
    /// Registered once: EXPLAIN ANALYZE sums same-named metrics over registrations.
    node_metrics: Arc<std::sync::OnceLock<NodeMetrics>>,
    properties: Arc<PlanProperties>,
}

/// Builds an [`IndexJoinExec`].
#[derive(Debug)]
pub struct IndexJoinBuilder {
    outer: Arc<dyn ExecutionPlan>,
    outer_keys: Vec<Arc<dyn PhysicalExpr>>,
    inner: Arc<InnerSide>,
    query: Arc<QueryIo>,
    kind: IndexJoinKind,
    filter: Option<JoinFilter>,
    outer_side: JoinSide,
    estimated_rows: Option<usize>,
}

impl IndexJoinBuilder {
    /// Which rows the join produces (default: inner).
    pub fn kind(mut self, kind: IndexJoinKind) -> Self {
        self.kind = kind;
        self
    }

    /// The original join's filter, in which the outer input was `outer_side`.
    pub fn filter(mut self, filter: Option<JoinFilter>, outer_side: JoinSide) -> Self {
        self.filter = filter;
        self.outer_side = outer_side;
        self
    }

    /// Rows the optimizer expects (statistics; small joins run as one pipeline).
    pub fn estimated_rows(mut self, rows: Option<usize>) -> Self {
        self.estimated_rows = rows;
        self
    }

    /// The join.
    pub fn build(self) -> Result<IndexJoinExec> {
        IndexJoinExec::new(self)
    }
}

impl IndexJoinExec {
    /// A join of `outer` (keys `outer_keys`) with `inner`, reading under `query`. Output
    /// columns: the outer input's, then (inner and left outer joins) the inner side's.
    pub fn builder(
        outer: Arc<dyn ExecutionPlan>,
        outer_keys: Vec<Arc<dyn PhysicalExpr>>,
        inner: Arc<InnerSide>,
        query: Arc<QueryIo>,
    ) -> IndexJoinBuilder {
        IndexJoinBuilder {
            outer,
            outer_keys,
            inner,
            query,
            kind: IndexJoinKind::Inner,
            filter: None,
            outer_side: JoinSide::Left,
            estimated_rows: None,
        }
    }

    fn new(b: IndexJoinBuilder) -> Result<Self> {
        let IndexJoinBuilder {
            outer,
            outer_keys,
            inner,
            query,
            kind,
            filter,
            outer_side,
            estimated_rows,
        } = b;
        if outer_keys.len() != inner.encoder.columns() {
            return internal_err!(
                "{} join keys for an index key of {}",
                outer_keys.len(),
                inner.encoder.columns()
            );
        }
        let mut fields: Vec<Arc<Field>> = outer.schema().fields().iter().cloned().collect();
        match kind {
            IndexJoinKind::Inner => fields.extend(inner.output_schema.fields().iter().cloned()),
            IndexJoinKind::LeftOuter => fields.extend(
                inner
                    .output_schema
                    .fields()
                    .iter()
                    .map(|f| Arc::new(f.as_ref().clone().with_nullable(true))),
            ),
            IndexJoinKind::Semi | IndexJoinKind::Anti => {}
        }
        let schema = Arc::new(Schema::new(fields));
        let properties = Arc::new(
            PlanProperties::new(
                EquivalenceProperties::new(schema.clone()),
                Partitioning::UnknownPartitioning(
                    outer.properties().partitioning.partition_count(),
                ),
                EmissionType::Incremental,
                Boundedness::Bounded,
            )
            // Its work runs as a task of its own from `execute` on, and hands batches over a
            // channel, which takes part in tokio's cooperative budget (as RepartitionExec's do).
            .with_evaluation_type(EvaluationType::Eager)
            .with_scheduling_type(SchedulingType::Cooperative),
        );
        Ok(Self {
            index_only: inner.keys.is_some() && query.config().index_only_scans,
            outer,
            outer_keys,
            inner,
            kind,
            filter,
            outer_side,
            schema,
            estimated_rows,
            query,
            level: 0,
            io: IoMetrics::new(),
            metrics: ExecutionPlanMetricsSet::new(),
            node_metrics: Default::default(),
            properties,
        })
    }

    /// The same join reading at priority `level` within its query (higher: served first).
    pub fn with_level(&self, level: usize) -> Self {
        Self {
            level,
            ..self.clone()
        }
    }

    /// Whether its probes read the index's leaves only.
    pub fn is_index_only(&self) -> bool {
        self.index_only
    }

    /// Its priority within its query.
    pub fn level(&self) -> usize {
        self.level
    }

    /// The node's I/O counters (all partitions).
    pub fn io_metrics(&self) -> &Arc<IoMetrics> {
        &self.io
    }

    /// The query budget and counters this join reads under.
    pub fn query(&self) -> &Arc<QueryIo> {
        &self.query
    }

    /// The outer input.
    pub fn outer(&self) -> &Arc<dyn ExecutionPlan> {
        &self.outer
    }

    /// The outer input's key expressions.
    pub fn outer_keys(&self) -> &[Arc<dyn PhysicalExpr>] {
        &self.outer_keys
    }

    /// The indexed inner side.
    pub fn inner(&self) -> &Arc<InnerSide> {
        &self.inner
    }

    /// Which rows it produces.
    pub fn kind(&self) -> IndexJoinKind {
        self.kind
    }

    /// The original join's filter, and the side the outer input had in it.
    pub fn filter(&self) -> (Option<&JoinFilter>, JoinSide) {
        (self.filter.as_ref(), self.outer_side)
    }

    /// Rows the optimizer expected.
    pub fn estimated_rows(&self) -> Option<usize> {
        self.estimated_rows
    }
}

impl DisplayAs for IndexJoinExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let meta = &self.inner.table.table().indexes()[self.inner.index].meta;
        let keys: Vec<String> = self.outer_keys.iter().map(|k| k.to_string()).collect();
        if let DisplayFormatType::TreeRender = t {
            return write!(
                f,
                "kind={:?}\nouter_keys={}\ninner={}\nindex={}({}){}\nmode={}",
                self.kind,
                keys.join(", "),
                self.inner.name,
                meta.name,
                meta.columns[..self.inner.encoder.columns()].join(", "),
                if self.index_only { "\nindex_only" } else { "" },
                self.query.mode
            );
        }
        write!(
            f,
            "IndexJoinExec: kind={:?}, outer_keys=[{}], inner={} index={}({})",
            self.kind,
            keys.join(", "),
            self.inner.name,
            meta.name,
            meta.columns[..self.inner.encoder.columns()].join(", "),
        )?;
        if self.index_only {
            write!(f, ", index_only")?;
        }
        if let Some(p) = &self.inner.predicate {
            write!(f, ", inner_predicate={p}")?;
        }
        if let Some(filter) = &self.filter {
            write!(f, ", filter={}", filter.expression())?;
        }
        write!(f, ", mode={}", self.query.mode)
    }
}

impl ExecutionPlan for IndexJoinExec {
    fn name(&self) -> &str {
        "IndexJoinExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.outer]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        for k in &self.outer_keys {
            if f(k)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        if let Some(filter) = &self.filter {
            return f(filter.expression());
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [outer] = <[_; 1]>::try_from(children).map_err(|_| {
            datafusion::common::DataFusionError::Internal("IndexJoinExec has one child".into())
        })?;
        // An outer side with the same properties (schema, partitioning, orderings) changes
        // none of the join's: its own are kept, as DataFusion's nodes keep theirs, so that the
        // nodes above are not recomputed either (planning a point lookup rebuilds this node
        // once per rule that rewrites below it).
        if options.children_properties == ChildrenPropertiesMode::Keep {
            return Ok(Arc::new(Self {
                outer,
                metrics: ExecutionPlanMetricsSet::new(),
                node_metrics: Default::default(),
                ..self.as_ref().clone()
            }));
        }
        let mut join = IndexJoinExec::builder(
            outer,
            self.outer_keys.clone(),
            self.inner.clone(),
            self.query.clone(),
        )
        .kind(self.kind)
        .filter(self.filter.clone(), self.outer_side)
        .estimated_rows(self.estimated_rows)
        .build()?;
        join.level = self.level;
        join.io = self.io.clone();
        Ok(Arc::new(join))
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
        let outer = self.outer.execute(partition, context.clone())?;
        let node = self
            .node_metrics
            .get_or_init(|| NodeMetrics::for_join(&self.metrics, self.io.clone()))
            .clone();
        let limit = self.query.limit();
        let batch_size = context.session_config().batch_size().max(1);
        let (steps, inline) =
            crate::exec::node_steps(&self.query, &self.io, &self.inner.table, self.level);
        let work = JoinWork {
            outer,
            outer_keys: self.outer_keys.clone(),
            inner: self.inner.clone(),
            keys: self.index_only.then(|| self.inner.keys.clone()).flatten(),
            output: OutputSpec {
                kind: self.kind,
                schema: self.schema.clone(),
                filter: self.filter.clone(),
                outer_side: self.outer_side,
            },
            steps,
            node: node.clone(),
            limits: Limits {
                max_probes: (4 * limit).clamp(4, 16384),
                max_fetches: (2 * limit).clamp(2, 8192),
                // Small output batches let the next join of a chain start early (its probes
                // then overlap this join's); DataFusion's batch size caps them.
                batch_rows: batch_size.min(256),
                out_bytes: crate::exec::OUTPUT_BYTES,
            },
            memory: MemoryConsumer::new(format!("IndexJoinExec[{partition}]"))
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
        Some(self.metrics.clone_inner())
    }

    /// Spreading the outer input over partitions lets several cores decode the inner pages,
    /// but every partition adds tasks and hand-offs between threads to each read's path; for
    /// a point query's few rows one pipeline is faster.
    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![
            self.estimated_rows
                .is_none_or(|rows| rows > ONE_PIPELINE_ROWS),
        ]
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        vec![ChildStats::At(partition)]
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        let mut stats = Statistics::new_unknown(&self.schema);
        stats.num_rows = match (self.estimated_rows, input_stats.first().map(|s| s.num_rows)) {
            (Some(n), _) => Precision::Inexact(n),
            (None, Some(n)) => n.to_inexact(),
            _ => Precision::Absent,
        };
        Ok(Arc::new(stats))
    }
}
