//! ooode's one-node plan nodes on the wire: `OoodeScanExec`, `IndexScanExec` and
//! `IndexJoinExec`, for a stage that runs them on a worker.
//!
//! A node names its table by where it lives and by the segments the coordinator planned
//! with (each with its manifest's checksum); the worker opens exactly those, through its own
//! runtime (its buffer pool, its engines, its disk cache), and fails with a clear error when
//! it sees other ones. A table in object storage is read by every worker with the store its
//! environment gives (`AWS_*`, ...), as datafusion-cli builds stores; the coordinator's
//! credentials never travel. A table in a local directory is found only by a worker with the
//! same files (the planner refuses to ship one: see [`crate::planner`]).
//!
//! Encoding: a JSON header, then length-prefixed protobuf blobs for the physical expressions
//! (encoded by the plan's own converter, so user functions travel as elsewhere in the plan).

use std::collections::HashMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, JoinSide, Result};
use datafusion::config::{ConfigExtension, ExtensionOptions};
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::{SessionState, SessionStateBuilder, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::joins::utils::{ColumnIndex, JoinFilter};
use datafusion::prelude::SessionConfig;
use datafusion_proto::physical_plan::{
    PhysicalExtensionCodec, PhysicalPlanDecodeContext, PhysicalProtoConverterExtension,
};
use datafusion_proto::protobuf;
use ooode::access::{OoodeRuntime, QueryIo, TableIo, to_df};
use ooode::config::OoodeConfig;
use ooode::exec::{IndexJoinExec, IndexJoinKind, IndexScanExec, InnerSide, OoodeScanExec};
use ooode::storage::btree::KeyRange;
use ooode::storage::segments::SEGMENTS_FILE;
use ooode_providers::OoodeTable;
use parking_lot::Mutex;
use prost::Message;
use serde::{Deserialize, Serialize};

/// Tags of the one-node nodes (after those of [`crate::codec`]).
pub(crate) const OOODE_SCAN: u8 = 3;
pub(crate) const INDEX_SCAN: u8 = 4;
pub(crate) const INDEX_JOIN: u8 = 5;

/// Where a node's table lives and which segments the coordinator planned with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct TableRef {
    /// The table's URL when it lives in object storage.
    remote_url: Option<String>,
    /// Each segment's directory (in object storage: its URL), in the table's order.
    segments: Vec<String>,
    /// Each segment's manifest checksum: the worker must see the same segments.
    checksums: Vec<u32>,
}

impl TableRef {
    fn of(table: &TableIo) -> Self {
        let segments: Vec<_> = (0..table.segments())
            .filter_map(|part| table.segment(part))
            .collect();
        Self {
            remote_url: table.remote_url().map(|u| u.to_string_lossy().into_owned()),
            segments: segments
                .iter()
                .map(|s| s.dir().to_string_lossy().into_owned())
                .collect(),
            checksums: segments.iter().map(|s| s.manifest().checksum).collect(),
        }
    }

    /// What errors call the table.
    fn shown(&self) -> String {
        match &self.remote_url {
            Some(url) => url.clone(),
            None => self.segments.first().cloned().unwrap_or_default(),
        }
    }

    /// The directory a local table's provider opens: the one holding the segment list, or the
    /// one segment itself.
    fn local_root(&self) -> PathBuf {
        let first = PathBuf::from(self.segments.first().cloned().unwrap_or_default());
        if first.join(SEGMENTS_FILE).exists() {
            return first;
        }
        match first.parent() {
            Some(parent) if parent.join(SEGMENTS_FILE).exists() => parent.to_path_buf(),
            _ => first,
        }
    }
}

fn checksums_of(tables: &[Arc<TableIo>]) -> Vec<u32> {
    tables
        .iter()
        .map(|t| t.table().manifest().checksum)
        .collect()
}

/// A key range's bound on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum WireBound {
    Included(Vec<u8>),
    Excluded(Vec<u8>),
    Unbounded,
}

impl WireBound {
    fn of(b: &Bound<Vec<u8>>) -> Self {
        match b {
            Bound::Included(k) => Self::Included(k.clone()),
            Bound::Excluded(k) => Self::Excluded(k.clone()),
            Bound::Unbounded => Self::Unbounded,
        }
    }

    fn bound(self) -> Bound<Vec<u8>> {
        match self {
            Self::Included(k) => Bound::Included(k),
            Self::Excluded(k) => Bound::Excluded(k),
            Self::Unbounded => Bound::Unbounded,
        }
    }
}

/// An `OoodeScanExec` (its Parquet scan, if any, travels as its child).
#[derive(Debug, Serialize, Deserialize)]
struct ScanHeader {
    table: TableRef,
    name: String,
    settings: Vec<(String, String)>,
    projection: Vec<usize>,
    heap_partitions: usize,
}

/// An `IndexScanExec`; its predicate is the one blob.
#[derive(Debug, Serialize, Deserialize)]
struct IndexScanHeader {
    table: TableRef,
    name: String,
    settings: Vec<(String, String)>,
    index: usize,
    ranges: Vec<(WireBound, WireBound)>,
    ranges_text: String,
    read_columns: Vec<usize>,
    output: Option<Vec<usize>>,
    estimate: (usize, usize),
    level: usize,
}

/// An `IndexJoinExec`. Blobs: the outer keys, then the inner predicate (if any), then the
/// join filter's expression and schema (if any).
#[derive(Debug, Serialize, Deserialize)]
struct IndexJoinHeader {
    table: TableRef,
    name: String,
    settings: Vec<(String, String)>,
    index: usize,
    key_len: usize,
    read_columns: Vec<usize>,
    has_predicate: bool,
    output: Option<Vec<usize>>,
    kind: u8,
    outer_side_left: bool,
    /// The join filter's columns: (index, from the left side).
    filter_columns: Option<Vec<(usize, bool)>>,
    estimated_rows: Option<usize>,
    level: usize,
    outer_keys: usize,
}

/// A header and blobs: `u32` length + JSON, then `u32` length + bytes per blob.
fn frame(header: &impl Serialize, blobs: &[Vec<u8>], buf: &mut Vec<u8>) -> Result<()> {
    let json = serde_json::to_vec(header).map_err(|e| DataFusionError::External(Box::new(e)))?;
    for part in std::iter::once(&json).chain(blobs) {
        let len = u32::try_from(part.len())
            .map_err(|_| DataFusionError::Execution("an ooode plan node over 4 GiB".into()))?;
        buf.extend(len.to_le_bytes());
        buf.extend(part);
    }
    Ok(())
}

fn unframe<'a, H: for<'de> Deserialize<'de>>(
    what: &str,
    mut bytes: &'a [u8],
) -> Result<(H, Vec<&'a [u8]>)> {
    let cut = || DataFusionError::Execution(format!("the encoding of an {what} is cut short"));
    let mut parts = Vec::new();
    while !bytes.is_empty() {
        let (len, rest) = bytes.split_first_chunk::<4>().ok_or_else(cut)?;
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() < len {
            return Err(cut());
        }
        parts.push(&rest[..len]);
        bytes = &rest[len..];
    }
    let Some((json, blobs)) = parts.split_first() else {
        return Err(cut());
    };
    let header = serde_json::from_slice(json).map_err(|e| {
        DataFusionError::Execution(format!("the encoding of an {what} is not valid: {e}"))
    })?;
    Ok((header, blobs.to_vec()))
}

/// The settings a node's reads follow: its query's (see [`crate::table::shipped_settings`]).
fn settings_of(query: &QueryIo) -> Vec<(String, String)> {
    crate::table::shipped_settings(query.config())
}

fn config_from(settings: &[(String, String)]) -> Result<OoodeConfig> {
    let mut config = OoodeConfig::default();
    for (key, value) in settings {
        let key = key
            .strip_prefix(&format!("{}.", OoodeConfig::PREFIX))
            .unwrap_or(key);
        config.set(key, value)?;
    }
    Ok(config)
}

/// A decoded query's budget: its session, its settings.
type QueryEntry = (String, Vec<(String, String)>, Weak<QueryIo>);

/// What a worker keeps between decodes: the tables' providers (a table in object storage is
/// opened once, not per query) and the budget of each query (one per query, not per node).
#[derive(Debug, Default)]
pub(crate) struct NodeDecoder {
    providers: Mutex<HashMap<String, Arc<OoodeTable>>>,
    queries: Mutex<Vec<QueryEntry>>,
}

/// The session a worker's decode uses the providers with.
fn session_of(ctx: &TaskContext) -> SessionState {
    SessionStateBuilder::new()
        .with_config(SessionConfig::from(
            ctx.session_config().options().as_ref().clone(),
        ))
        .with_runtime_env(ctx.runtime_env())
        .build()
}

/// Runs `fut` to completion from the codec's synchronous decode.
fn block_on<T>(fut: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    let handle = tokio::runtime::Handle::try_current().map_err(|_| {
        DataFusionError::Execution("decoding ooode plan nodes needs a tokio runtime".into())
    })?;
    match handle.runtime_flavor() {
        tokio::runtime::RuntimeFlavor::CurrentThread => Err(DataFusionError::Execution(
            "decoding ooode plan nodes needs a multi-threaded tokio runtime (it opens tables)"
                .into(),
        )),
        // block_in_place hands this thread's other tasks to the runtime's other threads.
        _ => tokio::task::block_in_place(|| handle.block_on(fut)),
    }
}

impl NodeDecoder {
    fn query(&self, ctx: &TaskContext, settings: &[(String, String)]) -> Result<Arc<QueryIo>> {
        let session = ctx.session_id();
        let mut queries = self.queries.lock();
        queries.retain(|(_, _, q)| q.strong_count() > 0);
        if let Some(q) = queries
            .iter()
            .find(|(s, set, _)| *s == session && set == settings)
            .and_then(|(_, _, q)| q.upgrade())
        {
            return Ok(q);
        }
        let runtime = OoodeRuntime::for_env(&ctx.runtime_env());
        let query = QueryIo::new(&runtime, &config_from(settings)?);
        queries.push((session, settings.to_vec(), Arc::downgrade(&query)));
        Ok(query)
    }

    async fn provider(&self, state: &SessionState, r: &TableRef) -> Result<Arc<OoodeTable>> {
        let key = r.remote_url.clone().unwrap_or_else(|| r.shown());
        if let Some(p) = self.providers.lock().get(&key) {
            return Ok(p.clone());
        }
        let provider = Arc::new(match &r.remote_url {
            Some(url) => OoodeTable::open_location(state, url, &HashMap::new()).await?,
            None => OoodeTable::open(r.local_root())?,
        });
        self.providers.lock().insert(key, provider.clone());
        Ok(provider)
    }

    /// The segments `r` names, opened through this process's runtime.
    async fn table(
        &self,
        state: &SessionState,
        r: &TableRef,
        config: &OoodeConfig,
    ) -> Result<(Arc<OoodeTable>, Arc<TableIo>)> {
        let runtime = OoodeRuntime::for_env(state.runtime_env());
        let provider = self.provider(state, r).await?;
        let differs = |seen: Vec<u32>| {
            DataFusionError::Execution(format!(
                "ooode table {} is not the one the coordinator planned with here (segment \
                 checksums {:?}, the coordinator's {:?}): every machine must see the same files",
                r.shown(),
                seen,
                r.checksums
            ))
        };
        if r.remote_url.is_some() {
            for attempt in 0..2 {
                let remote = provider.remote_table().ok_or_else(|| differs(vec![]))?;
                let seen: Vec<u32> = remote
                    .segments()
                    .iter()
                    .map(|s| s.manifest().checksum)
                    .collect();
                if seen == r.checksums {
                    let io = runtime
                        .remote_table(&remote, config.execution_mode)
                        .map_err(to_df)?;
                    return Ok((provider, io));
                }
                if attempt == 1 {
                    return Err(differs(seen));
                }
                // Committed to since this process opened it.
                provider.reopen().await?;
            }
            unreachable!("the loop returns");
        }
        let mut opened = Vec::with_capacity(r.segments.len());
        for dir in &r.segments {
            let dir = Path::new(dir);
            let mut io = runtime
                .table(dir, config.execution_mode, config.direct_io)
                .map_err(to_df)?;
            if !r.checksums.contains(&io.table().manifest().checksum) {
                // Replaced on disk since this process opened it.
                runtime.forget_table(dir);
                io = runtime
                    .table(dir, config.execution_mode, config.direct_io)
                    .map_err(to_df)?;
            }
            opened.push(io);
        }
        let seen = checksums_of(&opened);
        if seen != r.checksums {
            return Err(differs(seen));
        }
        let io = match opened.as_slice() {
            [one] => one.clone(),
            _ => Arc::new(TableIo::combine(&opened).map_err(to_df)?),
        };
        Ok((provider, io))
    }
}

fn expr_bytes(
    expr: &Arc<dyn PhysicalExpr>,
    codec: &dyn PhysicalExtensionCodec,
    converter: &dyn PhysicalProtoConverterExtension,
) -> Result<Vec<u8>> {
    Ok(converter
        .physical_expr_to_proto(expr, codec)?
        .encode_to_vec())
}

fn expr_from(
    bytes: &[u8],
    schema: &Schema,
    ctx: &TaskContext,
    codec: &dyn PhysicalExtensionCodec,
    converter: &dyn PhysicalProtoConverterExtension,
) -> Result<Arc<dyn PhysicalExpr>> {
    let proto = protobuf::PhysicalExprNode::decode(bytes)
        .map_err(|e| DataFusionError::Execution(format!("an ooode node's expression: {e}")))?;
    converter.proto_to_physical_expr(&proto, schema, &PhysicalPlanDecodeContext::new(ctx, codec))
}

/// Encodes `node` if it is one of ooode's one-node plan nodes (false: it is not).
pub(crate) fn encode(
    node: &Arc<dyn ExecutionPlan>,
    buf: &mut Vec<u8>,
    codec: &dyn PhysicalExtensionCodec,
    converter: &dyn PhysicalProtoConverterExtension,
) -> Result<bool> {
    if let Some(scan) = node.downcast_ref::<OoodeScanExec>() {
        buf.push(OOODE_SCAN);
        let header = ScanHeader {
            table: TableRef::of(scan.table()),
            name: scan.table_name().to_string(),
            settings: settings_of(scan.query()),
            projection: scan.projection().to_vec(),
            heap_partitions: scan.heap_partitions(),
        };
        frame(&header, &[], buf)?;
        return Ok(true);
    }
    if let Some(scan) = node.downcast_ref::<IndexScanExec>() {
        buf.push(INDEX_SCAN);
        let estimate = scan.estimate();
        let header = IndexScanHeader {
            table: TableRef::of(scan.table()),
            name: scan.table_name().to_string(),
            settings: settings_of(scan.query()),
            index: scan.index(),
            ranges: scan
                .ranges()
                .iter()
                .map(|r| (WireBound::of(&r.lower), WireBound::of(&r.upper)))
                .collect(),
            ranges_text: scan.ranges_text().to_string(),
            read_columns: scan.read_columns().to_vec(),
            output: scan.output().map(<[usize]>::to_vec),
            estimate: (estimate.rows, estimate.pages),
            level: scan.level(),
        };
        let predicate = expr_bytes(scan.predicate(), codec, converter)?;
        frame(&header, &[predicate], buf)?;
        return Ok(true);
    }
    if let Some(join) = node.downcast_ref::<IndexJoinExec>() {
        buf.push(INDEX_JOIN);
        let inner = join.inner();
        let (filter, outer_side) = join.filter();
        let header = IndexJoinHeader {
            table: TableRef::of(&inner.table),
            name: inner.name.clone(),
            settings: settings_of(join.query()),
            index: inner.index,
            key_len: inner.encoder.columns(),
            read_columns: inner.read_columns().to_vec(),
            has_predicate: inner.predicate.is_some(),
            output: inner.output.clone(),
            kind: match join.kind() {
                IndexJoinKind::Inner => 0,
                IndexJoinKind::Semi => 1,
                IndexJoinKind::Anti => 2,
                IndexJoinKind::LeftOuter => 3,
            },
            outer_side_left: outer_side == JoinSide::Left,
            filter_columns: filter.map(|f| {
                f.column_indices()
                    .iter()
                    .map(|c| (c.index, c.side == JoinSide::Left))
                    .collect()
            }),
            estimated_rows: join.estimated_rows(),
            level: join.level(),
            outer_keys: join.outer_keys().len(),
        };
        let mut blobs = join
            .outer_keys()
            .iter()
            .map(|k| expr_bytes(k, codec, converter))
            .collect::<Result<Vec<_>>>()?;
        if let Some(p) = &inner.predicate {
            blobs.push(expr_bytes(p, codec, converter)?);
        }
        if let Some(f) = filter {
            blobs.push(expr_bytes(f.expression(), codec, converter)?);
            blobs.push(protobuf::Schema::try_from(f.schema().as_ref())?.encode_to_vec());
        }
        frame(&header, &blobs, buf)?;
        return Ok(true);
    }
    Ok(false)
}

/// The read schema of `table`'s columns `columns`.
fn read_schema(table: &TableIo, columns: &[usize]) -> Result<Schema> {
    Ok(table.table().schema().project(columns)?)
}

impl NodeDecoder {
    /// Decodes a node of tag `tag` (one of this module's).
    pub(crate) fn decode(
        &self,
        tag: u8,
        bytes: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        codec: &dyn PhysicalExtensionCodec,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let state = session_of(ctx);
        match tag {
            OOODE_SCAN => {
                let (h, _) = unframe::<ScanHeader>("ooode scan", bytes)?;
                let config = config_from(&h.settings)?;
                let (provider, table) = block_on(self.table(&state, &h.table, &config))?;
                let query = self.query(ctx, &h.settings)?;
                let scan = OoodeScanExec::new(
                    table.clone(),
                    h.name,
                    h.projection,
                    h.heap_partitions,
                    query,
                )?;
                match inputs {
                    [] => Ok(Arc::new(scan)),
                    [columnar] => {
                        block_on(bind_columnar(&state, &provider, &table, columnar))?;
                        Ok(Arc::new(scan.with_columnar(columnar.clone())))
                    }
                    more => Err(DataFusionError::Execution(format!(
                        "an ooode scan has at most one input, not {}",
                        more.len()
                    ))),
                }
            }
            INDEX_SCAN => {
                let (h, blobs) = unframe::<IndexScanHeader>("ooode index scan", bytes)?;
                let [predicate] = blobs.as_slice() else {
                    return Err(DataFusionError::Execution(
                        "an ooode index scan's encoding has no predicate".into(),
                    ));
                };
                let config = config_from(&h.settings)?;
                let (_, table) = block_on(self.table(&state, &h.table, &config))?;
                check_columns(&table, &h.read_columns)?;
                let schema = read_schema(&table, &h.read_columns)?;
                let predicate = expr_from(predicate, &schema, ctx, codec, converter)?;
                let ranges = h
                    .ranges
                    .into_iter()
                    .map(|(lower, upper)| KeyRange {
                        lower: lower.bound(),
                        upper: upper.bound(),
                    })
                    .collect();
                check_index(&table, h.index)?;
                let scan =
                    IndexScanExec::builder(table, h.index, ranges, self.query(ctx, &h.settings)?)
                        .name(h.name)
                        .ranges_text(h.ranges_text)
                        .read_columns(h.read_columns)
                        .predicate(predicate)
                        .output(h.output)
                        .estimate(ooode::access::plan_time::ScanEstimate {
                            rows: h.estimate.0,
                            pages: h.estimate.1,
                        })
                        .build()?;
                Ok(Arc::new(scan.with_level(h.level)))
            }
            INDEX_JOIN => {
                let [outer] = inputs else {
                    return Err(DataFusionError::Execution(format!(
                        "an ooode index join has one input, not {}",
                        inputs.len()
                    )));
                };
                let (h, blobs) = unframe::<IndexJoinHeader>("ooode index join", bytes)?;
                let wanted = h.outer_keys
                    + usize::from(h.has_predicate)
                    + 2 * usize::from(h.filter_columns.is_some());
                if blobs.len() != wanted {
                    return Err(DataFusionError::Execution(format!(
                        "an ooode index join's encoding has {} expressions, not {wanted}",
                        blobs.len()
                    )));
                }
                let config = config_from(&h.settings)?;
                let (_, table) = block_on(self.table(&state, &h.table, &config))?;
                check_columns(&table, &h.read_columns)?;
                check_index(&table, h.index)?;
                let mut blobs = blobs.into_iter();
                let outer_schema = outer.schema();
                let outer_keys = blobs
                    .by_ref()
                    .take(h.outer_keys)
                    .map(|b| expr_from(b, &outer_schema, ctx, codec, converter))
                    .collect::<Result<Vec<_>>>()?;
                let predicate = match h.has_predicate {
                    true => {
                        let schema = read_schema(&table, &h.read_columns)?;
                        let bytes = blobs.next().unwrap_or_default();
                        Some(expr_from(bytes, &schema, ctx, codec, converter)?)
                    }
                    false => None,
                };
                let filter = match h.filter_columns {
                    Some(columns) => {
                        let (expr, schema) = (
                            blobs.next().unwrap_or_default(),
                            blobs.next().unwrap_or_default(),
                        );
                        let schema = protobuf::Schema::decode(schema).map_err(|e| {
                            DataFusionError::Execution(format!(
                                "an ooode join filter's schema: {e}"
                            ))
                        })?;
                        let schema: SchemaRef = Arc::new(Schema::try_from(&schema)?);
                        let expr = expr_from(expr, &schema, ctx, codec, converter)?;
                        let indices = columns
                            .into_iter()
                            .map(|(index, left)| ColumnIndex {
                                index,
                                side: if left {
                                    JoinSide::Left
                                } else {
                                    JoinSide::Right
                                },
                            })
                            .collect();
                        Some(JoinFilter::new(expr, indices, schema))
                    }
                    None => None,
                };
                let inner = InnerSide::try_new(
                    table,
                    h.name,
                    h.index,
                    h.key_len,
                    h.read_columns,
                    predicate,
                    h.output,
                )?;
                let kind = match h.kind {
                    0 => IndexJoinKind::Inner,
                    1 => IndexJoinKind::Semi,
                    2 => IndexJoinKind::Anti,
                    3 => IndexJoinKind::LeftOuter,
                    other => {
                        return Err(DataFusionError::Execution(format!(
                            "unknown index join kind {other}"
                        )));
                    }
                };
                let outer_side = if h.outer_side_left {
                    JoinSide::Left
                } else {
                    JoinSide::Right
                };
                let join = IndexJoinExec::builder(
                    outer.clone(),
                    outer_keys,
                    Arc::new(inner),
                    self.query(ctx, &h.settings)?,
                )
                .kind(kind)
                .filter(filter, outer_side)
                .estimated_rows(h.estimated_rows)
                .build()?;
                Ok(Arc::new(join.with_level(h.level)))
            }
            other => Err(DataFusionError::Execution(format!(
                "unknown ooode plan node (tag {other})"
            ))),
        }
    }
}

fn check_columns(table: &TableIo, columns: &[usize]) -> Result<()> {
    let width = table.table().schema().fields().len();
    match columns.iter().find(|&&c| c >= width) {
        Some(c) => Err(DataFusionError::Execution(format!(
            "an ooode plan node reads column {c} of a table of {width}"
        ))),
        None => Ok(()),
    }
}

fn check_index(table: &TableIo, index: usize) -> Result<()> {
    let count = table.table().indexes().len();
    if index >= count {
        return Err(DataFusionError::Execution(format!(
            "an ooode plan node reads index {index} of a table of {count}"
        )));
    }
    Ok(())
}

/// Binds the stores `columnar` (the coordinator's Parquet scan of the table's columnar
/// copies, one per segment in order) names under the coordinator's URLs to this process's
/// stores of the same files (see [`crate::stores`]).
async fn bind_columnar(
    state: &SessionState,
    provider: &OoodeTable,
    table: &TableIo,
    columnar: &Arc<dyn ExecutionPlan>,
) -> Result<()> {
    let mut named = Vec::new();
    columnar.apply(|plan| {
        if let Some(config) = plan
            .downcast_ref::<DataSourceExec>()
            .and_then(|s| s.data_source().downcast_ref::<FileScanConfig>())
        {
            named.push(config.object_store_url.clone());
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    let mismatch = || {
        DataFusionError::Execution(format!(
            "ooode table {}: its Parquet scan does not match its segments",
            provider.dir().display()
        ))
    };
    if named.len() != table.segments() {
        return Err(mismatch());
    }
    for (part, theirs) in named.iter().enumerate() {
        let segment = table.segment(part).ok_or_else(mismatch)?;
        let Some(ours) = provider.columnar_store_url(state, segment).await? else {
            return Err(DataFusionError::Execution(format!(
                "ooode table {}: segment {} has no columnar copy here",
                provider.dir().display(),
                segment.dir().display()
            )));
        };
        if ours.as_str() != theirs.as_str() {
            let store = state.runtime_env().object_store(&ours)?;
            crate::stores::PendingStore::bind(theirs.as_str(), store);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> ScanHeader {
        ScanHeader {
            table: TableRef {
                remote_url: Some("s3://bkt/t".into()),
                segments: vec!["s3://bkt/t".into()],
                checksums: vec![7],
            },
            name: "t".into(),
            settings: vec![("ooode.index_join".into(), "always".into())],
            projection: vec![1, 0],
            heap_partitions: 4,
        }
    }

    #[test]
    fn frames_round_trip_and_cut_or_bad_frames_are_errors() {
        let mut buf = Vec::new();
        frame(&header(), &[vec![1, 2, 3], vec![]], &mut buf).unwrap();
        let (back, blobs) = unframe::<ScanHeader>("ooode scan", &buf).unwrap();
        assert_eq!(back.table, header().table);
        assert_eq!((back.projection, back.heap_partitions), (vec![1, 0], 4));
        assert_eq!(blobs, vec![&[1u8, 2, 3][..], &[][..]]);
        for cut in [0, 2, 5, buf.len() - 1] {
            let err = unframe::<ScanHeader>("ooode scan", &buf[..cut]).unwrap_err();
            assert!(err.to_string().contains("cut short"), "cut at {cut}: {err}");
        }
        let mut garbage = Vec::new();
        frame(&"not a header", &[], &mut garbage).unwrap();
        let err = unframe::<ScanHeader>("ooode scan", &garbage).unwrap_err();
        assert!(err.to_string().contains("not valid"), "{err}");
    }

    #[test]
    fn settings_travel_and_bad_ones_are_errors() {
        let config = config_from(&[
            ("ooode.execution_mode".into(), "in_order".into()),
            ("ooode.max_outstanding_io".into(), "17".into()),
        ])
        .unwrap();
        assert_eq!(config.max_outstanding_io, 17);
        assert_eq!(config.execution_mode, ooode::exec::ExecutionMode::InOrder);
        assert!(config_from(&[("ooode.execution_mode".into(), "sideways".into())]).is_err());
    }
}
