//! `ShardScanExec`: reads shards of a sharded table, each on the worker that holds it.
//!
//! The coordinator plans one over all shards; the distributed planner splits it into one
//! variant per worker and routes each there (see [`crate::session`]). Executed where its
//! shards are local, it plans the shard's own ooode scan with the pushed filters (so ooode's
//! index rule picks index scans on the worker); a shard held elsewhere (a stage run on the
//! coordinator, as with one worker) is read from its worker with an Arrow Flight `DoGet`.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result, Statistics};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use datafusion::prelude::SessionConfig;
use futures::{StreamExt, TryStreamExt};
use ooode::storage::manifest::ColumnDef;
use serde::{Deserialize, Serialize};

use crate::shard_map::ShardEntry;
use crate::worker::LocalShards;

/// What a shard scan reads: the plan node's content, shipped to workers by the codec and in
/// `DoGet` tickets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardScanSpec {
    /// The table as the coordinator knows it (its directory), for messages.
    pub table: String,
    /// Directory name of the table in the workers' data directories.
    pub table_id: String,
    /// The table's columns.
    pub columns: Vec<ColumnDef>,
    /// The shards read, each with its worker.
    pub shards: Vec<ShardEntry>,
    /// Table columns output, in order.
    pub projection: Vec<usize>,
    /// Conjunction of the pushed filters, unqualified, as datafusion-proto bytes. DataFusion
    /// applies them again above (they are pushed as inexact): here they choose index scans.
    pub filter: Option<Vec<u8>>,
    /// The filter as text, for EXPLAIN.
    pub filter_text: Option<String>,
    /// At most this many rows are needed (a hint: a limit above still applies).
    pub limit: Option<usize>,
    /// The coordinator's `ooode.*` settings, applied where the shards are read.
    pub settings: Vec<(String, String)>,
    /// Filters the table was given, and how many of them are in `filter` (the rest could not
    /// be serialized): equal, `filter` is the whole predicate above the scan.
    #[serde(default)]
    pub filters_pushed: usize,
    /// See `filters_pushed`.
    #[serde(default)]
    pub filters_shipped: usize,
    /// Table columns that lead an index (clustering or secondary): lookups by them probe it.
    #[serde(default)]
    pub lookup_columns: Vec<usize>,
    /// The clustering key's first column: a key's rows there are neighbours on few pages.
    #[serde(default)]
    pub clustering_first: Option<usize>,
    /// Table columns whose hash picks a row's shard.
    #[serde(default)]
    pub distribution_key: Vec<usize>,
    /// Shards of the whole table (the hash's modulus).
    #[serde(default)]
    pub shard_count: u32,
    /// Rows of the whole table.
    #[serde(default)]
    pub table_rows: u64,
    /// Pages a full scan of the whole table reads (its shards' columnar copies, in pages,
    /// or their heaps); 0: unknown (a shard map written before they were counted).
    #[serde(default)]
    pub scan_pages: u64,
    /// Only the rows whose `column` equals one of `keys` (a lookup join's probe).
    #[serde(default)]
    pub probe: Option<Probe>,
}

/// A lookup: the rows whose table column `column` holds one of the keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// The table column.
    pub column: usize,
    /// The keys, one column, as an Arrow IPC stream (sent after the JSON, not in it).
    #[serde(skip)]
    pub keys: Vec<u8>,
}

impl Probe {
    /// A probe of `column` for the values of `keys` (one column).
    pub fn new(column: usize, keys: &RecordBatch) -> Result<Self> {
        let mut bytes = Vec::new();
        {
            let mut w =
                datafusion::arrow::ipc::writer::StreamWriter::try_new(&mut bytes, &keys.schema())?;
            w.write(keys)?;
            w.finish()?;
        }
        Ok(Self {
            column,
            keys: bytes,
        })
    }

    /// The keys.
    pub fn keys(&self) -> Result<RecordBatch> {
        let reader =
            datafusion::arrow::ipc::reader::StreamReader::try_new(self.keys.as_slice(), None)?;
        let schema = reader.schema();
        let batches = reader.collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(datafusion::arrow::compute::concat_batches(
            &schema, &batches,
        )?)
    }
}

impl ShardScanSpec {
    /// The same scan restricted to `shards`.
    pub fn with_shards(&self, shards: Vec<ShardEntry>) -> Self {
        Self {
            shards,
            ..self.clone()
        }
    }

    /// Encoded for the wire (codec, `DoGet` ticket): the length of the JSON document (u32,
    /// little-endian), the document, then a probe's keys.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let json = serde_json::to_vec(self)
            .map_err(|e| DataFusionError::Internal(format!("encode a shard scan: {e}")))?;
        let keys = self.probe.as_ref().map_or(&[][..], |p| p.keys.as_slice());
        let mut out = Vec::with_capacity(4 + json.len() + keys.len());
        out.extend((json.len() as u32).to_le_bytes());
        out.extend(json);
        out.extend(keys);
        Ok(out)
    }

    /// Decoded from [`Self::encode`]'s bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let bad = |why: String| DataFusionError::Execution(format!("not a shard scan: {why}"));
        let (len, rest) = bytes
            .split_first_chunk::<4>()
            .ok_or_else(|| bad("too short".into()))?;
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() < len {
            return Err(bad(format!("{} bytes, the header says {len}", rest.len())));
        }
        let (json, keys) = rest.split_at(len);
        let mut spec: ShardScanSpec =
            serde_json::from_slice(json).map_err(|e| bad(e.to_string()))?;
        if let Some(p) = &mut spec.probe {
            p.keys = keys.to_vec();
        }
        Ok(spec)
    }

    /// The projected output schema.
    pub fn output_schema(&self) -> Result<SchemaRef> {
        let table = self.table_schema()?;
        Ok(Arc::new(table.project(&self.projection)?))
    }

    /// The table's schema.
    pub fn table_schema(&self) -> Result<SchemaRef> {
        crate::shard_map::schema_of(&self.columns)
    }

    /// The filter, decoded against the functions of `ctx`.
    pub fn filter_expr(&self, ctx: &TaskContext) -> Result<Option<Expr>> {
        use datafusion_proto::bytes::Serializeable;
        self.filter
            .as_ref()
            .map(|b| Expr::from_bytes_with_ctx(b, ctx))
            .transpose()
    }
}

/// Reads shards of a sharded table (see the module docs).
#[derive(Debug, Clone)]
pub struct ShardScanExec {
    spec: ShardScanSpec,
    schema: SchemaRef,
    /// The shards of this process, on a worker.
    local: Option<Arc<LocalShards>>,
    properties: Arc<PlanProperties>,
    /// What the coordinator knows of the rows read (from the shard map, under the filter).
    statistics: Option<Arc<Statistics>>,
    /// The same for the projected columns of the whole table (no filter): rows per key.
    table_statistics: Option<Arc<Statistics>>,
}

impl ShardScanExec {
    /// A scan of `spec`; `local` is the worker's own shards, if this process is a worker.
    pub fn try_new(spec: ShardScanSpec, local: Option<Arc<LocalShards>>) -> Result<Self> {
        let schema = spec.output_schema()?;
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(Self {
            spec,
            schema,
            local,
            properties,
            statistics: None,
            table_statistics: None,
        })
    }

    /// The same scan, whose output is described by `statistics`.
    pub fn with_statistics(mut self, statistics: Statistics) -> Self {
        self.statistics = Some(Arc::new(statistics));
        self
    }

    /// The same scan, over a table whose projected columns `statistics` describes (before
    /// the scan's filter).
    pub fn with_table_statistics(mut self, statistics: Statistics) -> Self {
        self.table_statistics = Some(Arc::new(statistics));
        self
    }

    /// The statistics of the projected columns of the whole table, if known.
    pub fn table_statistics(&self) -> Option<&Statistics> {
        self.table_statistics.as_deref()
    }

    /// What it reads.
    pub fn spec(&self) -> &ShardScanSpec {
        &self.spec
    }
}

impl DisplayAs for ShardScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let shards: Vec<String> = self
            .spec
            .shards
            .iter()
            .map(|s| format!("{}@{}", s.shard, s.worker))
            .collect();
        let columns: Vec<&str> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        write!(
            f,
            "ShardScanExec: table={}, shards=[{}], projection=[{}]",
            self.spec.table,
            shards.join(", "),
            columns.join(", ")
        )?;
        if let Some(filter) = &self.spec.filter_text {
            write!(f, ", filter={filter}")?;
        }
        if let Some(limit) = self.spec.limit {
            write!(f, ", limit={limit}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for ShardScanExec {
    fn name(&self) -> &str {
        "ShardScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        match (&self.statistics, args.partition()) {
            (Some(s), None | Some(0)) => Ok(s.clone()),
            _ => Ok(Arc::new(Statistics::new_unknown(&self.schema))),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "ShardScanExec has one partition, asked for {partition}"
            )));
        }
        let spec = self.spec.clone();
        let local = self.local.clone();
        let schema = self.schema.clone();
        let config = context.session_config().clone();
        let stream = futures::stream::once(async move { read_shards(spec, local, config).await })
            .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream.map(move |b| b.and_then(|b| conform(&schema, b))),
        )))
    }
}

/// The batch with `schema` as its schema (a worker's plan may name fields with other
/// metadata or qualifiers).
fn conform(schema: &SchemaRef, batch: RecordBatch) -> Result<RecordBatch> {
    if batch.schema() == *schema {
        return Ok(batch);
    }
    Ok(RecordBatch::try_new(
        schema.clone(),
        batch.columns().to_vec(),
    )?)
}

/// All rows of the spec's shards: the local ones read here, the others from their workers,
/// all at once.
async fn read_shards(
    spec: ShardScanSpec,
    local: Option<Arc<LocalShards>>,
    config: SessionConfig,
) -> Result<futures::stream::BoxStream<'static, Result<RecordBatch>>> {
    let (here, elsewhere): (Vec<ShardEntry>, Vec<ShardEntry>) =
        spec.shards.iter().cloned().partition(|s| {
            local
                .as_ref()
                .is_some_and(|l| l.holds(&spec.table_id, s.shard))
        });
    let mut streams = Vec::new();
    if let Some(local) = &local
        && !here.is_empty()
    {
        streams.push(local.scan(&spec.with_shards(here), config).await?);
    }
    let mut by_worker: Vec<(String, Vec<ShardEntry>)> = Vec::new();
    for s in elsewhere {
        match by_worker.iter_mut().find(|(w, _)| *w == s.worker) {
            Some((_, list)) => list.push(s),
            None => by_worker.push((s.worker.clone(), vec![s])),
        }
    }
    for (worker, shards) in by_worker {
        streams.push(crate::client::fetch(&worker, &spec.with_shards(shards)).await?);
    }
    Ok(futures::stream::select_all(streams).boxed())
}
