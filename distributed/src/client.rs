//! Calls from the coordinator (or another worker) to a worker's Flight service.

use std::collections::HashMap;
use std::sync::LazyLock;

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{Action, FlightClient, FlightDescriptor, Ticket};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use futures::{Stream, StreamExt, TryStreamExt};
use parking_lot::Mutex;
use tonic::transport::{Channel, Endpoint};

use crate::scan::ShardScanSpec;
use crate::service::{
    Batches, DROP_SEGMENT, DROP_TABLE, EMPTY_POOL, PRUNE_SEGMENTS, PruneSegments, PutShard,
    PutShardDone, READS, SegmentRef,
};
use crate::worker::WorkerReads;

/// One HTTP/2 connection per worker, shared by every call of the process (tonic multiplexes
/// the calls on it and reconnects after a failure).
static CHANNELS: LazyLock<Mutex<HashMap<String, Channel>>> = LazyLock::new(Default::default);

/// The URL of a worker given as `host:port` (or already as a URL).
pub fn worker_url(worker: &str) -> String {
    if worker.contains("://") {
        worker.to_string()
    } else {
        format!("http://{worker}")
    }
}

fn client(worker: &str) -> Result<FlightClient> {
    let channel = {
        let mut channels = CHANNELS.lock();
        match channels.get(worker) {
            Some(c) => c.clone(),
            None => {
                let endpoint = Endpoint::from_shared(worker_url(worker)).map_err(|e| {
                    DataFusionError::Configuration(format!("worker address '{worker}': {e}"))
                })?;
                let c = endpoint.tcp_nodelay(true).connect_lazy();
                channels.insert(worker.to_string(), c.clone());
                c
            }
        }
    };
    let inner = FlightServiceClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    Ok(FlightClient::new_from_inner(inner))
}

/// A failed call to `worker`, as an error naming it.
fn failed(worker: &str, what: &str, e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Execution(format!("worker {worker}: {what}: {e}"))
}

fn flight(worker: &str, what: &str, e: FlightError) -> DataFusionError {
    match e {
        // The worker's own message, not tonic's wrapping of it.
        FlightError::Tonic(status) if status.code() != tonic::Code::Unavailable => {
            failed(worker, what, status.message())
        }
        FlightError::Tonic(status) => {
            failed(worker, what, format!("unreachable ({})", status.message()))
        }
        other => failed(worker, what, other),
    }
}

/// Reads `spec`'s shards (all on `worker`) from it.
pub async fn fetch(worker: &str, spec: &ShardScanSpec) -> Result<Batches> {
    let what = format!("reading shards {:?} of {}", shard_list(spec), spec.table);
    let mut client = client(worker)?;
    let ticket = Ticket {
        ticket: spec.encode()?.into(),
    };
    let stream = client
        .do_get(ticket)
        .await
        .map_err(|e| flight(worker, &what, e))?;
    let worker = worker.to_string();
    Ok(stream.map_err(move |e| flight(&worker, &what, e)).boxed())
}

fn shard_list(spec: &ShardScanSpec) -> Vec<u32> {
    spec.shards.iter().map(|s| s.shard).collect()
}

/// Loads `batches` into shard `put.shard` on `worker`; what it wrote.
pub async fn put_shard(
    worker: &str,
    put: PutShard,
    schema: datafusion::arrow::datatypes::SchemaRef,
    batches: impl Stream<Item = Result<RecordBatch>> + Send + 'static,
) -> Result<PutShardDone> {
    let what = format!("loading shard {} of {}", put.shard, put.table_id);
    let cmd = serde_json::to_vec(&put).map_err(|e| failed(worker, &what, e))?;
    let data = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .with_flight_descriptor(Some(FlightDescriptor::new_cmd(cmd)))
        .build(batches.map_err(|e| FlightError::ExternalError(Box::new(e))));
    let mut client = client(worker)?;
    let results: Vec<_> = client
        .do_put(data)
        .await
        .map_err(|e| flight(worker, &what, e))?
        .try_collect()
        .await
        .map_err(|e| flight(worker, &what, e))?;
    let done: PutShardDone = results
        .first()
        .and_then(|r| serde_json::from_slice(&r.app_metadata).ok())
        .ok_or_else(|| failed(worker, &what, "no result"))?;
    Ok(done)
}

async fn action(worker: &str, kind: &str, body: Vec<u8>) -> Result<Vec<u8>> {
    let mut client = client(worker)?;
    let mut results = client
        .do_action(Action::new(kind, body))
        .await
        .map_err(|e| flight(worker, kind, e))?;
    let first = results
        .try_next()
        .await
        .map_err(|e| flight(worker, kind, e))?
        .ok_or_else(|| failed(worker, kind, "no result"))?;
    Ok(first.to_vec())
}

/// Removes `table_id`'s shards from `worker`; whether there were any.
pub async fn drop_table(worker: &str, table_id: &str) -> Result<bool> {
    let body = action(worker, DROP_TABLE, table_id.as_bytes().to_vec()).await?;
    Ok(body == b"true")
}

/// Removes a segment (one no shard map names) from `worker`; whether it was there.
pub async fn drop_segment(worker: &str, segment: &SegmentRef) -> Result<bool> {
    let body = serde_json::to_vec(segment).map_err(|e| failed(worker, DROP_SEGMENT, e))?;
    Ok(action(worker, DROP_SEGMENT, body).await? == b"true")
}

/// Removes the segments of a shard on `worker` but those `prune` keeps; their names.
pub async fn prune_segments(worker: &str, prune: &PruneSegments) -> Result<Vec<String>> {
    let body = serde_json::to_vec(prune).map_err(|e| failed(worker, PRUNE_SEGMENTS, e))?;
    let answer = action(worker, PRUNE_SEGMENTS, body).await?;
    serde_json::from_slice(&answer).map_err(|e| failed(worker, PRUNE_SEGMENTS, e))
}

/// `worker`'s read counters.
pub async fn reads(worker: &str) -> Result<WorkerReads> {
    let body = action(worker, READS, vec![]).await?;
    serde_json::from_slice(&body).map_err(|e| failed(worker, READS, e))
}

/// Empties `worker`'s buffer pool (a cold run's start).
pub async fn empty_pool(worker: &str) -> Result<()> {
    action(worker, EMPTY_POOL, vec![]).await.map(drop)
}
