//! `ShardLookupJoinExec`: an index nested-loop join whose inner side is a sharded table.
//!
//! For each batch of outer rows it sends the distinct join keys to the workers holding the
//! inner shards (only to the shard of each key when the table is sharded on the join key; to
//! every shard otherwise), each worker probes its shards' index out of order and returns the
//! matching rows, and the batch is joined with them here. Lookups of several batches are in
//! flight at once. Keys go out and matching rows come back: nothing else of the inner table
//! moves. Where the outer rows' stage runs on the worker that holds a key's shard (two
//! tables sharded alike on the join key), the lookup stays in the process.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{concat_batches, take};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result, Statistics};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties,
};
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};

use crate::scan::{Probe, ShardScanSpec};
use crate::shard_map::ShardEntry;
use crate::worker::LocalShards;

/// Outer batches whose lookups are in flight at once, per partition.
const BATCHES_IN_FLIGHT: usize = 8;

/// Which rows a lookup join produces (the outer input is the preserved side).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LookupKind {
    /// Matching pairs.
    #[default]
    Inner,
    /// Outer rows with at least one match (outer columns only).
    Semi,
    /// Outer rows without a match (outer columns only).
    Anti,
    /// Matching pairs, and outer rows without a match padded with nulls.
    LeftOuter,
}

impl LookupKind {
    /// Whether the output has the inner columns.
    fn has_inner(self) -> bool {
        matches!(self, LookupKind::Inner | LookupKind::LeftOuter)
    }
}

/// What the join is, apart from its outer input: shipped by the codec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LookupJoin {
    /// The inner table's rows wanted (projection and filter as its scan had them).
    pub inner: ShardScanSpec,
    /// Column of the outer input holding the join key.
    pub outer_key: usize,
    /// Table column of the inner side's join key (leads an index).
    pub inner_key: usize,
    /// Position of the join key in the inner output.
    pub inner_key_output: usize,
    /// Inner rows per key (estimated from the table's statistics), for the row estimate.
    #[serde(default = "one")]
    pub fanout: f64,
    /// Which rows it produces.
    #[serde(default)]
    pub kind: LookupKind,
}

fn one() -> f64 {
    1.0
}

impl LookupJoin {
    /// Whether each key's rows are all in one shard (the table is sharded on the key alone).
    fn routed_by_key(&self) -> bool {
        self.inner.distribution_key == [self.inner_key]
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct ShardLookupJoinExec {
    outer: Arc<dyn ExecutionPlan>,
    join: LookupJoin,
    /// What a pair (outer row, inner row of its key) must also satisfy to match, over the
    /// outer columns then the inner ones.
    condition: Option<Arc<dyn PhysicalExpr>>,
    inner_schema: SchemaRef,
    schema: SchemaRef,
    local: Option<Arc<LocalShards>>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

/// What the lookups of one partition sent and received.
#[derive(Debug, Clone)]
struct LookupMetrics {
    /// Lookups sent (one per shard asked, per outer batch).
    lookups: Count,
    /// Of them, answered in this process (the shard is local).
    local_lookups: Count,
    /// Distinct keys sent.
    keys: Count,
    /// Inner rows received.
    rows: Count,
    /// Bytes of the inner rows received (Arrow memory size).
    bytes: Count,
}

impl LookupMetrics {
    fn new(metrics: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        let counter = |name: &'static str| MetricBuilder::new(metrics).counter(name, partition);
        Self {
            lookups: counter("lookups"),
            local_lookups: counter("local_lookups"),
            keys: counter("lookup_keys"),
            rows: counter("lookup_rows"),
            bytes: counter("lookup_bytes"),
        }
    }
}

impl ShardLookupJoinExec {
    /// The join of `outer` with the lookups of `join`; `local` is a worker's own shards.
    pub fn try_new(
        outer: Arc<dyn ExecutionPlan>,
        join: LookupJoin,
        local: Option<Arc<LocalShards>>,
    ) -> Result<Self> {
        let inner_schema = join.inner.output_schema()?;
        let inner_fields: Vec<Arc<Field>> = match join.kind {
            LookupKind::Inner => inner_schema.fields().iter().cloned().collect(),
            LookupKind::LeftOuter => inner_schema
                .fields()
                .iter()
                .map(|f| Arc::new(f.as_ref().clone().with_nullable(true)))
                .collect(),
            LookupKind::Semi | LookupKind::Anti => vec![],
        };
        if join.outer_key >= outer.schema().fields().len()
            || join.inner_key >= join.inner.columns.len()
            || join.inner.projection.get(join.inner_key_output) != Some(&join.inner_key)
        {
            return Err(DataFusionError::Execution(format!(
                "a shard lookup join's key columns ({}, {}, {}) do not fit its inputs",
                join.outer_key, join.inner_key, join.inner_key_output
            )));
        }
        let fields: Vec<Arc<Field>> = outer
            .schema()
            .fields()
            .iter()
            .cloned()
            .chain(inner_fields)
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(outer.output_partitioning().partition_count()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(Self {
            outer,
            join,
            condition: None,
            inner_schema,
            schema,
            local,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// The same join, whose pairs match only where `condition` (over the outer columns,
    /// then the inner ones) holds too.
    pub fn with_condition(mut self, condition: Option<Arc<dyn PhysicalExpr>>) -> Self {
        self.condition = condition;
        self
    }

    /// What a pair must also satisfy, if anything.
    pub fn condition(&self) -> Option<&Arc<dyn PhysicalExpr>> {
        self.condition.as_ref()
    }

    /// The schema of the pairs a condition is evaluated on: the outer columns, then the
    /// inner ones.
    pub fn pair_schema(&self) -> SchemaRef {
        let fields: Vec<Arc<Field>> = self
            .outer
            .schema()
            .fields()
            .iter()
            .chain(self.inner_schema.fields().iter())
            .cloned()
            .collect();
        Arc::new(Schema::new(fields))
    }

    /// The join.
    pub fn join(&self) -> &LookupJoin {
        &self.join
    }

    /// The outer input.
    pub fn outer(&self) -> &Arc<dyn ExecutionPlan> {
        &self.outer
    }
}

impl DisplayAs for ShardLookupJoinExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let inner = &self.join.inner;
        let key = inner
            .columns
            .get(self.join.inner_key)
            .map_or("?", |c| c.name.as_str());
        let outer_key = self
            .outer
            .schema()
            .field(self.join.outer_key)
            .name()
            .clone();
        write!(
            f,
            "ShardLookupJoinExec: {:?} {outer_key} = {}.{key}, shards={}, lookups={}",
            self.join.kind,
            inner.table,
            inner.shards.len(),
            if self.join.routed_by_key() {
                "to the key's shard"
            } else {
                "to every shard"
            }
        )?;
        if let Some(filter) = &inner.filter_text {
            write!(f, ", inner filter={filter}")?;
        }
        if let Some(condition) = &self.condition {
            write!(f, ", condition={condition}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for ShardLookupJoinExec {
    fn name(&self) -> &str {
        "ShardLookupJoinExec"
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
        match &self.condition {
            Some(c) => f(c),
            None => Ok(TreeNodeRecursion::Continue),
        }
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        vec![ChildStats::At(partition)]
    }

    /// About `fanout` inner rows for each outer row.
    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        let mut stats = Statistics::new_unknown(&self.schema);
        if let Some(outer) = input_stats.first()
            && let Some(&rows) = outer.num_rows.get_value()
        {
            stats.num_rows = Precision::Inexact((rows as f64 * self.join.fanout).ceil() as usize);
        }
        Ok(Arc::new(stats))
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(
            Self::try_new(children.remove(0), self.join.clone(), self.local.clone())?
                .with_condition(self.condition.clone()),
        ))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let outer = self.outer.execute(partition, context.clone())?;
        let lookups = Arc::new(Lookups {
            condition: self.condition.clone().map(|c| (c, self.pair_schema())),
            join: self.join.clone(),
            inner_schema: self.inner_schema.clone(),
            schema: self.schema.clone(),
            local: self.local.clone(),
            config: context.session_config().clone(),
            metrics: LookupMetrics::new(&self.metrics, partition),
            memory: context.memory_pool().clone(),
        });
        let batch_size = context.session_config().batch_size();
        let joined = outer
            .map(move |batch| {
                let lookups = lookups.clone();
                async move { lookups.join_batch(batch?).await }
            })
            .buffered(BATCHES_IN_FLIGHT)
            .map_ok(move |b| {
                // Output in batch-size pieces: a key can match many rows.
                let pieces: Vec<Result<RecordBatch>> = (0..b.num_rows())
                    .step_by(batch_size.max(1))
                    .map(|at| Ok(b.slice(at, batch_size.min(b.num_rows() - at))))
                    .collect();
                futures::stream::iter(pieces)
            })
            .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            joined,
        )))
    }
}

/// What every batch's lookups need.
struct Lookups {
    join: LookupJoin,
    /// A pair's condition and the schema of the pairs it reads.
    condition: Option<(Arc<dyn PhysicalExpr>, SchemaRef)>,
    inner_schema: SchemaRef,
    schema: SchemaRef,
    local: Option<Arc<LocalShards>>,
    config: datafusion::prelude::SessionConfig,
    metrics: LookupMetrics,
    /// The query's memory pool: a batch's fetched rows and output are reserved in it.
    memory: Arc<dyn MemoryPool>,
}

impl Lookups {
    /// The rows of `outer` joined with their inner matches.
    async fn join_batch(&self, outer: RecordBatch) -> Result<RecordBatch> {
        let key = outer.column(self.join.outer_key).clone();
        let converter = RowConverter::new(vec![SortField::new(key.data_type().clone())])?;
        let outer_rows = converter.convert_columns(std::slice::from_ref(&key))?;
        // Distinct non-null keys.
        let mut seen = HashMap::new();
        let mut firsts = Vec::new();
        for i in 0..outer.num_rows() {
            if key.is_valid(i) && seen.insert(outer_rows.row(i), ()).is_none() {
                firsts.push(i as u32);
            }
        }
        let inner = if firsts.is_empty() {
            RecordBatch::new_empty(self.inner_schema.clone())
        } else {
            let keys = take(&key, &UInt32Array::from(firsts), None)?;
            self.metrics.keys.add(keys.len());
            self.fetch(keys).await?
        };
        // The fetched rows, and below the output, count against the query's memory limit
        // while this batch is joined (released when it is handed on).
        let reservation = MemoryConsumer::new("ShardLookupJoinExec").register(&self.memory);
        reservation.try_grow(inner.get_array_memory_size())?;
        // Inner rows by key, then every outer row's matches.
        let inner_key = inner.column(self.join.inner_key_output).clone();
        let inner_rows = converter.convert_columns(&[inner_key])?;
        let mut by_key: HashMap<_, Vec<u32>> = HashMap::new();
        for j in 0..inner.num_rows() {
            by_key.entry(inner_rows.row(j)).or_default().push(j as u32);
        }
        // Every outer row's candidates (its key's inner rows), kept where the condition holds.
        let (mut pair_outer, mut pair_inner) = (Vec::new(), Vec::new());
        for i in 0..outer.num_rows() {
            if !key.is_valid(i) {
                continue;
            }
            for &j in by_key
                .get(&outer_rows.row(i))
                .map_or(&[][..], |m| m.as_slice())
            {
                pair_outer.push(i as u32);
                pair_inner.push(j);
            }
        }
        if let Some((condition, pair_schema)) = &self.condition {
            let (po, pi) = (UInt32Array::from(pair_outer), UInt32Array::from(pair_inner));
            let columns = outer
                .columns()
                .iter()
                .map(|c| take(c, &po, None))
                .chain(inner.columns().iter().map(|c| take(c, &pi, None)))
                .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
            let pairs = RecordBatch::try_new_with_options(
                pair_schema.clone(),
                columns,
                &datafusion::arrow::record_batch::RecordBatchOptions::new()
                    .with_row_count(Some(po.len())),
            )?;
            let holds = condition.evaluate(&pairs)?.into_array(pairs.num_rows())?;
            let holds =
                datafusion::arrow::array::AsArray::as_boolean_opt(&holds).ok_or_else(|| {
                    DataFusionError::Execution("a lookup join's condition is not boolean".into())
                })?;
            let kept: Vec<usize> = (0..po.len())
                .filter(|&p| datafusion::arrow::array::Array::is_valid(holds, p) && holds.value(p))
                .collect();
            pair_outer = kept.iter().map(|&p| po.value(p)).collect();
            pair_inner = kept.iter().map(|&p| pi.value(p)).collect();
        }
        // Output rows as (outer row, inner row or none for a padded / semi / anti row).
        let kind = self.join.kind;
        let (mut outer_idx, mut inner_idx) = (Vec::new(), Vec::<Option<u32>>::new());
        let mut next_pair = 0;
        for i in 0..outer.num_rows() {
            let first = next_pair;
            while next_pair < pair_outer.len() && pair_outer[next_pair] == i as u32 {
                next_pair += 1;
            }
            let matches = &pair_inner[first..next_pair];
            match kind {
                LookupKind::Inner | LookupKind::LeftOuter => {
                    for &j in matches {
                        outer_idx.push(i as u32);
                        inner_idx.push(Some(j));
                    }
                    if matches.is_empty() && kind == LookupKind::LeftOuter {
                        outer_idx.push(i as u32);
                        inner_idx.push(None);
                    }
                }
                LookupKind::Semi if !matches.is_empty() => outer_idx.push(i as u32),
                LookupKind::Anti if matches.is_empty() => outer_idx.push(i as u32),
                LookupKind::Semi | LookupKind::Anti => {}
            }
        }
        let outer_idx = UInt32Array::from(outer_idx);
        let inner_idx = UInt32Array::from(inner_idx);
        let inner_columns: &[ArrayRef] = match kind.has_inner() {
            true => inner.columns(),
            false => &[],
        };
        let columns = outer
            .columns()
            .iter()
            .map(|c| take(c, &outer_idx, None))
            .chain(inner_columns.iter().map(|c| take(c, &inner_idx, None)))
            .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
        let output = RecordBatch::try_new(self.schema.clone(), columns)?;
        reservation.try_grow(output.get_array_memory_size())?;
        Ok(output)
    }

    /// The inner rows whose key is one of `keys`, from every shard that can hold them.
    async fn fetch(&self, keys: ArrayRef) -> Result<RecordBatch> {
        let spec = &self.join.inner;
        // Shard -> the keys it is asked for.
        let mut asks: Vec<(Vec<ShardEntry>, ArrayRef)> = Vec::new();
        if self.join.routed_by_key() {
            let ids = crate::hash::shard_of_rows(std::slice::from_ref(&keys), spec.shard_count)?;
            let mut rows_of: HashMap<u32, Vec<u32>> = HashMap::new();
            for (row, id) in ids.into_iter().enumerate() {
                rows_of.entry(id).or_default().push(row as u32);
            }
            for (id, rows) in rows_of {
                let Some(shard) = spec.shards.iter().find(|s| s.shard == id) else {
                    continue; // not a shard of this scan: no rows of it wanted
                };
                asks.push((
                    vec![shard.clone()],
                    take(&keys, &UInt32Array::from(rows), None)?,
                ));
            }
        } else {
            for shard in &spec.shards {
                asks.push((vec![shard.clone()], keys.clone()));
            }
        }
        let field = Field::new("key", keys.data_type().clone(), true);
        let key_schema = Arc::new(Schema::new(vec![field]));
        let calls = asks.into_iter().map(|(shards, keys)| {
            let key_schema = key_schema.clone();
            async move {
                let batch = RecordBatch::try_new(key_schema, vec![keys])?;
                let mut ask = spec.with_shards(shards.clone());
                ask.probe = Some(Probe::new(self.join.inner_key, &batch)?);
                self.read(ask).await
            }
        });
        let parts: Vec<Vec<RecordBatch>> = futures::future::try_join_all(calls).await?;
        let parts: Vec<RecordBatch> = parts.into_iter().flatten().collect();
        Ok(concat_batches(&self.inner_schema, &parts)?)
    }

    /// One lookup: here when this process holds the shards, else from their worker.
    async fn read(&self, ask: ShardScanSpec) -> Result<Vec<RecordBatch>> {
        let shard = ask
            .shards
            .first()
            .ok_or_else(|| DataFusionError::Internal("a lookup of no shard".into()))?;
        self.metrics.lookups.add(1);
        let stream = match &self.local {
            Some(local) if local.holds(&ask.table_id, shard.shard) => {
                self.metrics.local_lookups.add(1);
                local.scan(&ask, self.config.clone()).await?
            }
            _ => crate::client::fetch(&shard.worker.clone(), &ask).await?,
        };
        let schema = self.inner_schema.clone();
        let metrics = self.metrics.clone();
        stream
            .map(move |b| {
                let b = b?;
                metrics.rows.add(b.num_rows());
                metrics.bytes.add(b.get_array_memory_size());
                Ok(RecordBatch::try_new(schema.clone(), b.columns().to_vec())?)
            })
            .try_collect()
            .await
    }
}
