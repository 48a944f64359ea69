//! `OoodeCodec`: ooode's plan nodes on the wire between coordinator and workers.
//!
//! Each encoding starts with a tag byte naming the node, so nodes can be added without
//! misreading old ones.

use std::sync::Arc;

use datafusion::common::{DataFusionError, Result, not_impl_err};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use prost::Message;

use crate::lookup::{LookupJoin, LookupKind, ShardLookupJoinExec};
use crate::node_codec::{self, INDEX_JOIN, INDEX_SCAN, NodeDecoder, OOODE_SCAN};
use crate::scan::{ShardScanExec, ShardScanSpec};
use crate::worker::LocalShards;

const SHARD_SCAN: u8 = 1;
const SHARD_LOOKUP_JOIN: u8 = 2;
/// A lookup join with a condition on its pairs: the five numbers, the condition's length
/// (`u32`) and protobuf bytes, then the inner scan.
const SHARD_LOOKUP_JOIN_IF: u8 = 6;

/// The codec; on a worker it binds decoded scans to the worker's own shards.
#[derive(Debug, Clone, Default)]
pub struct OoodeCodec {
    local: Option<Arc<LocalShards>>,
    /// Tables and query budgets of decoded one-node plan nodes.
    nodes: Arc<NodeDecoder>,
}

impl OoodeCodec {
    /// The coordinator's codec: it holds no shards.
    pub fn coordinator() -> Self {
        Self::default()
    }

    /// A worker's codec, over its shards.
    pub fn worker(local: Arc<LocalShards>) -> Self {
        Self {
            local: Some(local),
            nodes: Arc::default(),
        }
    }
}

impl PhysicalExtensionCodec for OoodeCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match buf.split_first() {
            Some((&tag, rest)) if [OOODE_SCAN, INDEX_SCAN, INDEX_JOIN].contains(&tag) => self
                .nodes
                .decode(tag, rest, inputs, ctx, self, proto_converter),
            Some((&SHARD_SCAN, spec)) => Ok(Arc::new(ShardScanExec::try_new(
                ShardScanSpec::decode(spec)?,
                self.local.clone(),
            )?)),
            Some((&tag, rest)) if tag == SHARD_LOOKUP_JOIN || tag == SHARD_LOOKUP_JOIN_IF => {
                let [outer] = inputs else {
                    return Err(DataFusionError::Execution(format!(
                        "a shard lookup join has one input, not {}",
                        inputs.len()
                    )));
                };
                let ([outer_key, inner_key, inner_key_output, fanout, kind], rest) =
                    decode_lookup(rest)?;
                let (condition, spec) = match tag {
                    SHARD_LOOKUP_JOIN_IF => {
                        let cut = || {
                            DataFusionError::Execution(
                                "a shard lookup join's condition is cut short".into(),
                            )
                        };
                        let (len, rest) = rest.split_first_chunk::<4>().ok_or_else(cut)?;
                        let len = u32::from_le_bytes(*len) as usize;
                        if rest.len() < len {
                            return Err(cut());
                        }
                        (Some(&rest[..len]), &rest[len..])
                    }
                    _ => (None, rest),
                };
                let join = LookupJoin {
                    inner: ShardScanSpec::decode(spec)?,
                    outer_key: outer_key as usize,
                    inner_key: inner_key as usize,
                    inner_key_output: inner_key_output as usize,
                    fanout: f64::from_bits(fanout),
                    kind: match kind {
                        0 => LookupKind::Inner,
                        1 => LookupKind::Semi,
                        2 => LookupKind::Anti,
                        3 => LookupKind::LeftOuter,
                        other => {
                            return Err(DataFusionError::Execution(format!(
                                "unknown lookup join kind {other}"
                            )));
                        }
                    },
                };
                let node = ShardLookupJoinExec::try_new(outer.clone(), join, self.local.clone())?;
                let condition = match condition {
                    Some(bytes) => {
                        let proto = datafusion_proto::protobuf::PhysicalExprNode::decode(bytes)
                            .map_err(|e| {
                                DataFusionError::Execution(format!(
                                    "a shard lookup join's condition: {e}"
                                ))
                            })?;
                        Some(proto_converter.proto_to_physical_expr(
                            &proto,
                            &node.pair_schema(),
                            &datafusion_proto::physical_plan::PhysicalPlanDecodeContext::new(
                                ctx, self,
                            ),
                        )?)
                    }
                    None => None,
                };
                Ok(Arc::new(node.with_condition(condition)))
            }
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
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        if node_codec::encode(&node, buf, self, proto_converter)? {
            return Ok(());
        }
        if let Some(scan) = node.downcast_ref::<ShardScanExec>() {
            buf.push(SHARD_SCAN);
            buf.extend(scan.spec().encode()?);
            return Ok(());
        }
        if let Some(join) = node.downcast_ref::<ShardLookupJoinExec>() {
            let j = join.join();
            buf.push(match join.condition() {
                Some(_) => SHARD_LOOKUP_JOIN_IF,
                None => SHARD_LOOKUP_JOIN,
            });
            let numbers = [
                j.outer_key as u64,
                j.inner_key as u64,
                j.inner_key_output as u64,
            ];
            let kind = match j.kind {
                LookupKind::Inner => 0,
                LookupKind::Semi => 1,
                LookupKind::Anti => 2,
                LookupKind::LeftOuter => 3,
            };
            for n in numbers.into_iter().chain([j.fanout.to_bits(), kind]) {
                buf.extend(n.to_le_bytes());
            }
            if let Some(condition) = join.condition() {
                let bytes = proto_converter
                    .physical_expr_to_proto(condition, self)?
                    .encode_to_vec();
                let len = u32::try_from(bytes.len()).map_err(|_| {
                    DataFusionError::Execution("a lookup join's condition over 4 GiB".into())
                })?;
                buf.extend(len.to_le_bytes());
                buf.extend(bytes);
            }
            buf.extend(j.inner.encode()?);
            return Ok(());
        }
        not_impl_err!("{} is not an ooode plan node", node.name())
    }
}

/// The five numbers of a lookup join's encoding (three columns, the fanout's bits, the
/// kind), and the rest (its inner scan).
fn decode_lookup(bytes: &[u8]) -> Result<([u64; 5], &[u8])> {
    let mut numbers = [0u64; 5];
    let mut rest = bytes;
    for n in &mut numbers {
        let (head, tail) = rest.split_first_chunk::<8>().ok_or_else(|| {
            DataFusionError::Execution("a shard lookup join's encoding is cut short".into())
        })?;
        *n = u64::from_le_bytes(*head);
        rest = tail;
    }
    Ok((numbers, rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lookup::{LookupJoin, LookupKind};
    use crate::scan::Probe;
    use crate::shard_map::{ShardEntry, ShardMap};
    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_plan::displayable;
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion_proto::physical_plan::DefaultPhysicalProtoConverter;

    fn spec() -> ShardScanSpec {
        let schema = Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Utf8, true),
        ]);
        ShardScanSpec {
            table: "/tables/t".into(),
            table_id: "t-1".into(),
            columns: ShardMap::columns_of(&schema),
            shards: (0..3)
                .map(|shard| ShardEntry {
                    shard,
                    worker: format!("127.0.0.1:{}", 7000 + shard),
                    rows: 10,
                    segments: vec![],
                })
                .collect(),
            projection: vec![1, 0],
            filter: None,
            filter_text: Some("k < 5".into()),
            limit: Some(7),
            settings: vec![("ooode.index_join".into(), "always".into())],
            filters_pushed: 1,
            filters_shipped: 1,
            lookup_columns: vec![0],
            clustering_first: Some(0),
            distribution_key: vec![0],
            shard_count: 3,
            table_rows: 30,
            scan_pages: 4,
            probe: None,
        }
    }

    fn round_trip(
        node: Arc<dyn ExecutionPlan>,
        inputs: &[Arc<dyn ExecutionPlan>],
    ) -> Arc<dyn ExecutionPlan> {
        let codec = OoodeCodec::coordinator();
        let mut buf = Vec::new();
        codec
            .try_encode(node, &mut buf, &DefaultPhysicalProtoConverter {})
            .unwrap();
        codec
            .try_decode(
                &buf,
                inputs,
                &TaskContext::default(),
                &DefaultPhysicalProtoConverter {},
            )
            .unwrap()
    }

    fn text(plan: &Arc<dyn ExecutionPlan>) -> String {
        displayable(plan.as_ref()).indent(true).to_string()
    }

    #[test]
    fn every_ooode_distributed_node_round_trips() {
        let mut with_probe = spec();
        let keys =
            RecordBatch::try_from_iter([("key", Arc::new(Int64Array::from(vec![1, 2, 3])) as _)])
                .unwrap();
        with_probe.probe = Some(Probe::new(0, &keys).unwrap());
        for s in [spec(), with_probe] {
            let scan: Arc<dyn ExecutionPlan> =
                Arc::new(ShardScanExec::try_new(s.clone(), None).unwrap());
            let back = round_trip(scan.clone(), &[]);
            let back_spec = back.downcast_ref::<ShardScanExec>().unwrap().spec();
            assert_eq!(back_spec, &s);
            assert_eq!(
                back_spec.probe.as_ref().map(|p| p.keys().unwrap()),
                s.probe.as_ref().map(|p| p.keys().unwrap())
            );
            assert_eq!(text(&back), text(&scan));
        }

        let outer: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(Arc::new(Schema::new(vec![
            Field::new("a", DataType::Utf8, true),
            Field::new("fk", DataType::Int64, true),
        ]))));
        for kind in [
            LookupKind::Inner,
            LookupKind::Semi,
            LookupKind::Anti,
            LookupKind::LeftOuter,
        ] {
            let join = LookupJoin {
                inner: spec(),
                outer_key: 1,
                inner_key: 0,
                inner_key_output: 1,
                fanout: 2.5,
                kind,
            };
            let node: Arc<dyn ExecutionPlan> =
                Arc::new(ShardLookupJoinExec::try_new(outer.clone(), join.clone(), None).unwrap());
            let back = round_trip(node.clone(), std::slice::from_ref(&outer));
            assert_eq!(
                back.downcast_ref::<ShardLookupJoinExec>().unwrap().join(),
                &join
            );
            assert_eq!(text(&back), text(&node));
            assert_eq!(back.schema(), node.schema());

            // With a condition on its pairs (outer columns, then the inner ones).
            use datafusion::logical_expr::Operator;
            use datafusion::physical_expr::expressions::{BinaryExpr, Column};
            let condition: Arc<dyn datafusion::physical_expr::PhysicalExpr> =
                Arc::new(BinaryExpr::new(
                    Arc::new(Column::new("fk", 1)),
                    Operator::NotEq,
                    Arc::new(Column::new("k", 3)),
                ));
            let node: Arc<dyn ExecutionPlan> = Arc::new(
                ShardLookupJoinExec::try_new(outer.clone(), join.clone(), None)
                    .unwrap()
                    .with_condition(Some(condition)),
            );
            let back = round_trip(node.clone(), std::slice::from_ref(&outer));
            let back_join = back.downcast_ref::<ShardLookupJoinExec>().unwrap();
            assert_eq!(back_join.join(), &join);
            assert!(
                text(&back).contains("condition=fk@1 != k@3"),
                "{}",
                text(&back)
            );
            assert_eq!(text(&back), text(&node));
        }
    }

    #[test]
    fn bad_bytes_are_errors() {
        let codec = OoodeCodec::coordinator();
        let decode = |b: &[u8], inputs: &[Arc<dyn ExecutionPlan>]| {
            codec
                .try_decode(
                    b,
                    inputs,
                    &TaskContext::default(),
                    &DefaultPhysicalProtoConverter {},
                )
                .map(drop)
                .unwrap_err()
                .to_string()
        };
        assert!(decode(&[], &[]).contains("empty"));
        assert!(decode(&[9, 1, 2], &[]).contains("unknown ooode plan node"));
        let mut good = vec![SHARD_SCAN];
        good.extend(spec().encode().unwrap());
        for cut in [1, 3, 5, good.len() - 1] {
            assert!(
                decode(&good[..cut], &[]).contains("shard scan"),
                "cut at {cut}"
            );
        }
        // Column numbers outside the table, or a lookup join without its input.
        let mut bad = spec();
        bad.projection = vec![5];
        let mut bytes = vec![SHARD_SCAN];
        bytes.extend(bad.encode().unwrap());
        decode(&bytes, &[]);
        assert!(decode(&[SHARD_LOOKUP_JOIN, 0, 0], &[]).contains("one input"));
        let outer: Arc<dyn ExecutionPlan> =
            Arc::new(EmptyExec::new(Arc::new(Schema::new(vec![Field::new(
                "a",
                DataType::Int64,
                true,
            )]))));
        assert!(
            decode(&[SHARD_LOOKUP_JOIN, 0, 0], std::slice::from_ref(&outer)).contains("cut short")
        );
        let mut lookup = vec![SHARD_LOOKUP_JOIN];
        for n in [4u64, 0, 1, 1.0f64.to_bits(), 0] {
            lookup.extend(n.to_le_bytes());
        }
        lookup.extend(spec().encode().unwrap());
        assert!(decode(&lookup, &[outer]).contains("do not fit"));
    }
}
