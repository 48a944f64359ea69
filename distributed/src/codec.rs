//! `OoodeCodec`: ooode's plan nodes on the wire between coordinator and workers.
//!
//! Each encoding starts with a tag byte naming the node, so nodes can be added without
//! misreading old ones.

use std::sync::Arc;

use datafusion::common::{DataFusionError, Result, not_impl_err};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};

use crate::scan::{ShardScanExec, ShardScanSpec};
use crate::worker::LocalShards;

const SHARD_SCAN: u8 = 1;

/// The codec; on a worker it binds decoded scans to the worker's own shards.
#[derive(Debug, Clone, Default)]
pub struct OoodeCodec {
    local: Option<Arc<LocalShards>>,
}

impl OoodeCodec {
    /// The coordinator's codec: it holds no shards.
    pub fn coordinator() -> Self {
        Self::default()
    }

    /// A worker's codec, over its shards.
    pub fn worker(local: Arc<LocalShards>) -> Self {
        Self { local: Some(local) }
    }
}

impl PhysicalExtensionCodec for OoodeCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        _inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match buf.split_first() {
            Some((&SHARD_SCAN, spec)) => Ok(Arc::new(ShardScanExec::try_new(
                ShardScanSpec::decode(spec)?,
                self.local.clone(),
            )?)),
            Some((tag, _)) => Err(DataFusionError::Execution(format!(
                "unknown ooode plan node (tag {tag}): coordinator and worker run different \
                 versions of ooode"
            ))),
            None => Err(DataFusionError::Execution(
                "an empty ooode plan node".into(),
            )),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        if let Some(scan) = node.downcast_ref::<ShardScanExec>() {
            buf.push(SHARD_SCAN);
            buf.extend(scan.spec().encode()?);
            return Ok(());
        }
        not_impl_err!(
            "{} cannot run on a worker: only sharded tables' scans are distributed so far",
            node.name()
        )
    }
}
