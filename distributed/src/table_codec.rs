//! `OoodeTableCodec`: ooode's table providers in logical plans on the wire (datafusion-proto's
//! `LogicalExtensionCodec`), for tools that ship logical plans between processes.
//!
//! A table travels as where it lives: a sharded table as its shard map's directory, an ooode
//! table as its directory. The receiving process opens it there, and refuses a table whose
//! schema is not the one the plan was made with. A table in object storage does not travel:
//! its store's credentials are the sender's session's, not the plan's.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::common::{DataFusionError, Result, TableReference, not_impl_err};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Extension, LogicalPlan};
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use ooode_providers::OoodeTable;

use crate::table::ShardedTable;

const SHARDED: u8 = 1;
const LOCAL: u8 = 2;

/// See the module docs.
#[derive(Debug, Default)]
pub struct OoodeTableCodec;

impl LogicalExtensionCodec for OoodeTableCodec {
    fn try_decode(
        &self,
        _buf: &[u8],
        _inputs: &[LogicalPlan],
        _ctx: &TaskContext,
    ) -> Result<Extension> {
        not_impl_err!("ooode has no logical plan nodes of its own")
    }

    fn try_encode(&self, _node: &Extension, _buf: &mut Vec<u8>) -> Result<()> {
        not_impl_err!("ooode has no logical plan nodes of its own")
    }

    fn try_decode_table_provider(
        &self,
        buf: &[u8],
        table_ref: &TableReference,
        schema: SchemaRef,
        _ctx: &TaskContext,
    ) -> Result<Arc<dyn TableProvider>> {
        let bad = |why: &str| DataFusionError::Execution(format!("table {table_ref}: {why}"));
        let (tag, path) = buf.split_first().ok_or_else(|| bad("an empty encoding"))?;
        let dir = std::str::from_utf8(path).map_err(|_| bad("a directory that is not UTF-8"))?;
        let table: Arc<dyn TableProvider> = match *tag {
            SHARDED => Arc::new(ShardedTable::open(Path::new(dir))?),
            LOCAL => Arc::new(OoodeTable::open(dir)?),
            other => return Err(bad(&format!("unknown ooode table kind {other}"))),
        };
        if table.schema().fields() != schema.fields() {
            return Err(bad(&format!(
                "the table at {dir} has columns {}, the plan expects {}",
                table.schema(),
                schema
            )));
        }
        Ok(table)
    }

    fn try_encode_table_provider(
        &self,
        table_ref: &TableReference,
        node: Arc<dyn TableProvider>,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        if let Some(t) = node.downcast_ref::<ShardedTable>() {
            buf.push(SHARDED);
            buf.extend(t.dir().to_string_lossy().as_bytes());
            return Ok(());
        }
        if let Some(t) = node.downcast_ref::<OoodeTable>() {
            if t.is_remote() {
                return not_impl_err!(
                    "table {table_ref} is in object storage: its store's credentials do not \
                     travel with a plan; register it where the plan runs"
                );
            }
            buf.push(LOCAL);
            buf.extend(t.dir().to_string_lossy().as_bytes());
            return Ok(());
        }
        not_impl_err!("table {table_ref} is not an ooode table")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionConfig;
    use datafusion_proto::bytes::{
        logical_plan_from_bytes_with_extension_codec, logical_plan_to_bytes_with_extension_codec,
    };

    #[tokio::test]
    async fn ooode_and_sharded_tables_travel_in_logical_plans() {
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("t").display().to_string();
        let ctx = ooode_providers::ooode_context(SessionConfig::new());
        ctx.sql(&format!(
            "COPY (SELECT value AS k, value % 7 AS g FROM generate_series(1, 1000)) TO '{local}' \
             STORED AS OOODE OPTIONS ('ooode.clustering_key' 'k')"
        ))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
        ctx.sql(&format!(
            "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{local}'"
        ))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
        let sql = "SELECT g, COUNT(*) AS n FROM t WHERE k <= 100 GROUP BY g ORDER BY g";
        let plan = ctx.sql(sql).await.unwrap().into_optimized_plan().unwrap();
        let bytes = logical_plan_to_bytes_with_extension_codec(&plan, &OoodeTableCodec).unwrap();
        let other = ooode_providers::ooode_context(SessionConfig::new());
        let back = logical_plan_from_bytes_with_extension_codec(
            &bytes,
            &other.task_ctx(),
            &OoodeTableCodec,
        )
        .unwrap();
        let run = |ctx: datafusion::prelude::SessionContext, plan: LogicalPlan| async move {
            let batches = ctx.execute_logical_plan(plan).await?.collect().await?;
            datafusion::arrow::util::pretty::pretty_format_batches(&batches).map(|t| t.to_string())
        };
        let want = run(ctx.clone(), plan).await.unwrap();
        assert_eq!(run(other, back).await.unwrap(), want);
        assert!(want.contains("| 0 | 14 |"), "{want}");

        // A sharded table travels as its shard map's directory; it opens where it arrives.
        let map = crate::shard_map::ShardMap {
            format_version: crate::shard_map::SHARD_MAP_VERSION,
            table_id: "s-1".into(),
            columns: crate::shard_map::ShardMap::columns_of(
                &ctx.table_provider("t").await.unwrap().schema(),
            ),
            distribution_key: vec!["k".into()],
            hash: crate::hash::HASH_NAME.into(),
            row_count: 0,
            clustering_key: vec!["k".into()],
            indexes: vec![],
            column_stats: vec![],
            scan_pages: 7,
            retired: vec![],
            shards: vec![crate::shard_map::ShardEntry {
                shard: 0,
                worker: "127.0.0.1:1".into(),
                rows: 0,
                segments: vec![],
            }],
            created_by: "test".into(),
        };
        let sharded_dir = dir.path().join("s");
        map.write(&sharded_dir).unwrap();
        let table: Arc<dyn TableProvider> = Arc::new(ShardedTable::open(&sharded_dir).unwrap());
        let mut buf = Vec::new();
        let name = TableReference::bare("s");
        OoodeTableCodec
            .try_encode_table_provider(&name, table.clone(), &mut buf)
            .unwrap();
        let back = OoodeTableCodec
            .try_decode_table_provider(&buf, &name, table.schema(), &ctx.task_ctx())
            .unwrap();
        let back = back.downcast_ref::<ShardedTable>().unwrap();
        assert_eq!(back.shard_map(), map);

        // Bad encodings and a changed schema are errors naming the table.
        let schema = table.schema();
        for bytes in [&[][..], &[9, b'x'][..], &[SHARDED, 0xff][..]] {
            let e = OoodeTableCodec
                .try_decode_table_provider(bytes, &name, schema.clone(), &ctx.task_ctx())
                .map(drop)
                .unwrap_err();
            assert!(e.to_string().contains("table s"), "{e}");
        }
        let narrow = Arc::new(schema.project(&[0]).unwrap());
        let e = OoodeTableCodec
            .try_decode_table_provider(&buf, &name, narrow, &ctx.task_ctx())
            .map(drop)
            .unwrap_err();
        assert!(e.to_string().contains("the plan expects"), "{e}");
    }
}
