//! `CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION 'dir'`.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider, TableProviderFactory};
use datafusion::common::{Result, plan_err};
use datafusion::logical_expr::CreateExternalTable;

use crate::provider::OoodeTable;
use crate::remote::is_store_option;

/// Opens ooode tables named in `CREATE EXTERNAL TABLE ... STORED AS OOODE`.
#[derive(Debug, Default)]
pub struct OoodeTableFactory;

#[async_trait]
impl TableProviderFactory for OoodeTableFactory {
    async fn create(
        &self,
        state: &dyn Session,
        cmd: &CreateExternalTable,
    ) -> Result<Arc<dyn TableProvider>> {
        let [location] = cmd.locations.as_slice() else {
            return plan_err!(
                "STORED AS OOODE needs exactly one LOCATION: the table directory or URL"
            );
        };
        if let Some(key) = cmd
            .options
            .keys()
            .find(|k| !k.starts_with("format.") && !is_store_option(k))
        {
            return plan_err!(
                "unknown option '{key}' for an OOODE table (reading takes only object store \
                 options: aws.*, ...)"
            );
        }
        let path = location.as_str();
        let table = OoodeTable::open_location(state, location, &cmd.options).await?;
        // A column list, if given, must be the table's own.
        let given = cmd.schema.as_arrow();
        if !given.fields().is_empty() {
            let stored = table.schema();
            let same = given.fields().len() == stored.fields().len()
                && given
                    .fields()
                    .iter()
                    .zip(stored.fields())
                    .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
            if !same {
                return plan_err!(
                    "the column list does not match the ooode table at {path} ({stored}); \
                     leave it out: the schema comes from the table"
                );
            }
        }
        table.prepare(state).await;
        Ok(Arc::new(table))
    }
}
