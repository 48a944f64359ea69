//! The worker's Arrow Flight service: loads shards (`DoPut`), reads shards for a stage run
//! elsewhere (`DoGet`), drops a table's shards and reports read counters (actions).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use datafusion::common::DataFusionError;
use datafusion::prelude::SessionConfig;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use ooode::storage::manifest::ColumnDef;
use serde::{Deserialize, Serialize};
use tonic::{Request, Response, Status, Streaming};

use crate::scan::ShardScanSpec;
use crate::shard_map::valid_table_id;
use crate::worker::LocalShards;

/// Action that removes a table's shards (body: the table id).
pub const DROP_TABLE: &str = "ooode.drop_table";
/// Action that returns the worker's read counters as JSON ([`crate::worker::WorkerReads`]).
pub const READS: &str = "ooode.reads";
/// Action that empties the worker's buffer pool (benchmarks' cold runs).
pub const EMPTY_POOL: &str = "ooode.empty_pool";
/// Action that removes a segment no shard map names (body: a [`SegmentRef`] as JSON).
pub const DROP_SEGMENT: &str = "ooode.drop_segment";

/// Action that removes a shard's segments no shard map names, but those listed (body: a
/// [`PruneSegments`] as JSON); answers the names removed, as JSON.
pub const PRUNE_SEGMENTS: &str = "ooode.prune_segments";

/// The segments of a shard to keep; any other segment of it goes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PruneSegments {
    /// The table's directory name in the data directory.
    pub table_id: String,
    /// The shard.
    pub shard: u32,
    /// The segments its shard map names.
    pub keep: Vec<String>,
}

/// A segment of a shard.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SegmentRef {
    /// The table's directory name in the data directory.
    pub table_id: String,
    /// The shard.
    pub shard: u32,
    /// The segment's directory name in the shard's.
    pub segment: String,
}

/// The command of a shard load (`DoPut`): what to write where.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PutShard {
    /// The table's directory name in the data directory.
    pub table_id: String,
    /// The shard.
    pub shard: u32,
    /// The table's columns.
    pub columns: Vec<ColumnDef>,
    /// `ooode.*` load options (clustering key, indexes, page size).
    pub options: HashMap<String, String>,
    /// Set for an `INSERT`: the rows form this new segment of the existing shard (built like
    /// the shard), which the shard map commits (the worker lists it nowhere).
    #[serde(default)]
    pub segment: Option<String>,
}

/// What a worker answers to a shard load.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PutShardDone {
    /// Rows written.
    pub rows: u64,
    /// Distinct values of each index's first column in the shard, by column name (counted
    /// while the indexes were built).
    #[serde(default)]
    pub distinct: Vec<(String, u64)>,
    /// Pages a full scan of what was written reads (its columnar copy's size in pages, or
    /// its heap pages).
    #[serde(default)]
    pub scan_pages: u64,
}

/// The service over `shards`, accepting messages of any size (a batch of wide rows can be
/// larger than gRPC's 4 MiB default).
pub fn flight_server(shards: Arc<LocalShards>) -> FlightServiceServer<ShardService> {
    FlightServiceServer::new(ShardService { shards })
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX)
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct ShardService {
    shards: Arc<LocalShards>,
}

fn status(e: DataFusionError) -> Status {
    Status::internal(e.to_string())
}

type Stream<T> = Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send + 'static>>;

impl ShardService {
    async fn put(&self, mut input: Streaming<FlightData>) -> Result<PutShardDone, Status> {
        let first = input
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("a shard load sent nothing"))?;
        let put: PutShard = first
            .flight_descriptor
            .as_ref()
            .and_then(|d| serde_json::from_slice(&d.cmd).ok())
            .ok_or_else(|| {
                Status::invalid_argument("a shard load must start with its PutShard command")
            })?;
        if !valid_table_id(&put.table_id) {
            return Err(Status::invalid_argument(format!(
                "'{}' is not a table id",
                put.table_id
            )));
        }
        let schema = crate::shard_map::schema_of(&put.columns).map_err(status)?;
        let (dest, options) = match &put.segment {
            Some(segment) => {
                let shard = self.shards.shard_dir(&put.table_id, put.shard);
                if !self.shards.holds(&put.table_id, put.shard) {
                    return Err(Status::not_found(format!(
                        "shard {} of {} is not on this worker",
                        put.shard, put.table_id
                    )));
                }
                let dest = self
                    .shards
                    .segment_dir(&put.table_id, put.shard, segment)
                    .map_err(status)?;
                let options = ooode_providers::insert::segment_options(&shard).map_err(status)?;
                (dest, options)
            }
            None => (
                self.shards.shard_dir(&put.table_id, put.shard),
                ooode_providers::writer::load_options(&put.options).map_err(status)?,
            ),
        };
        if dest.exists() {
            return Err(Status::already_exists(format!(
                "{} already exists on this worker",
                dest.display()
            )));
        }
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Status::internal(format!("create {}: {e}", parent.display())))?;
        }
        let data = futures::stream::once(async move { Ok(first) })
            .chain(input.map_err(FlightError::from))
            .boxed();
        let batches = FlightRecordBatchStream::new_from_flight_data(data)
            .map_err(|e| DataFusionError::External(Box::new(e)));
        let dest_dir = dest.clone();
        let manifest =
            ooode_providers::writer::load_from_stream(Box::pin(batches), dest, schema, options)
                .await
                .map_err(status)?;
        let distinct = manifest
            .indexes
            .iter()
            .filter(|i| i.distinct_first > 0)
            .filter_map(|i| Some((i.columns.first()?.clone(), i.distinct_first)))
            .collect();
        let columnar_bytes = manifest
            .columnar
            .as_ref()
            .and_then(|file| std::fs::metadata(dest_dir.join(file)).ok())
            .map(|m| m.len());
        let scan_pages = match columnar_bytes {
            Some(bytes) => bytes.div_ceil(manifest.page_size.max(1) as u64),
            None => manifest.heap_pages,
        };
        Ok(PutShardDone {
            rows: manifest.row_count,
            distinct,
            scan_pages,
        })
    }
}

#[tonic::async_trait]
impl FlightService for ShardService {
    type HandshakeStream = Stream<HandshakeResponse>;
    type ListFlightsStream = Stream<FlightInfo>;
    type DoGetStream = Stream<FlightData>;
    type DoPutStream = Stream<PutResult>;
    type DoExchangeStream = Stream<FlightData>;
    type DoActionStream = Stream<arrow_flight::Result>;
    type ListActionsStream = Stream<ActionType>;

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        let done = self.put(request.into_inner()).await?;
        let body = serde_json::to_vec(&done).map_err(|e| Status::internal(e.to_string()))?;
        let result = PutResult {
            app_metadata: body.into(),
        };
        Ok(Response::new(futures::stream::iter([Ok(result)]).boxed()))
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        let spec = ShardScanSpec::decode(&request.into_inner().ticket).map_err(status)?;
        self.shards.note_fetch(spec.probe.is_some());
        let schema = spec.output_schema().map_err(status)?;
        let batches = self
            .shards
            .scan(&spec, SessionConfig::new())
            .await
            .map_err(status)?;
        let data = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(batches.map_err(|e| FlightError::ExternalError(Box::new(e))))
            .map_err(|e| match e {
                FlightError::Tonic(s) => *s,
                other => Status::internal(other.to_string()),
            });
        Ok(Response::new(data.boxed()))
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        let action = request.into_inner();
        let body: Vec<u8> = match action.r#type.as_str() {
            DROP_TABLE => {
                let id = String::from_utf8_lossy(&action.body).to_string();
                let dropped = self.shards.drop_table(&id).map_err(status)?;
                dropped.to_string().into_bytes()
            }
            DROP_SEGMENT => {
                let segment: SegmentRef = serde_json::from_slice(&action.body)
                    .map_err(|e| Status::invalid_argument(format!("a segment: {e}")))?;
                let dropped = self.shards.drop_segment(&segment).map_err(status)?;
                dropped.to_string().into_bytes()
            }
            PRUNE_SEGMENTS => {
                let prune: PruneSegments = serde_json::from_slice(&action.body)
                    .map_err(|e| Status::invalid_argument(format!("a prune: {e}")))?;
                let removed = self.shards.prune_segments(&prune).map_err(status)?;
                serde_json::to_vec(&removed).map_err(|e| Status::internal(e.to_string()))?
            }
            READS => serde_json::to_vec(&self.shards.reads())
                .map_err(|e| Status::internal(e.to_string()))?,
            EMPTY_POOL => {
                ooode::access::OoodeRuntime::for_env(self.shards.runtime())
                    .pool()
                    .clear();
                b"true".to_vec()
            }
            other => return Err(Status::unimplemented(format!("unknown action '{other}'"))),
        };
        let result = arrow_flight::Result { body: body.into() };
        Ok(Response::new(futures::stream::iter([Ok(result)]).boxed()))
    }

    async fn list_actions(
        &self,
        _request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        let actions = [
            (DROP_TABLE, "remove a table's shards from this worker"),
            (DROP_SEGMENT, "remove a segment no shard map names"),
            (PRUNE_SEGMENTS, "remove a shard's segments but those listed"),
            (READS, "this worker's page read counters"),
            (EMPTY_POOL, "empty this worker's buffer pool"),
        ]
        .map(|(t, d)| {
            Ok(ActionType {
                r#type: t.into(),
                description: d.into(),
            })
        });
        Ok(Response::new(futures::stream::iter(actions).boxed()))
    }

    async fn handshake(
        &self,
        _request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented("an ooode worker needs no handshake"))
    }

    async fn list_flights(
        &self,
        _request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        Err(Status::unimplemented("an ooode worker lists no flights"))
    }

    async fn get_flight_info(
        &self,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(Status::unimplemented(
            "shards are read with DoGet of a shard scan",
        ))
    }

    async fn poll_flight_info(
        &self,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented(
            "shards are read with DoGet of a shard scan",
        ))
    }

    async fn get_schema(
        &self,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        Err(Status::unimplemented(
            "a shard's schema is in its table's shard map",
        ))
    }

    async fn do_exchange(
        &self,
        _request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented("an ooode worker has no exchanges"))
    }
}

/// A stream of record batches, boxed.
pub type Batches =
    BoxStream<'static, datafusion::common::Result<datafusion::arrow::record_batch::RecordBatch>>;
