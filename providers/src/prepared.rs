//! Prepared queries, planned once: [`PreparedQuery`] turns SQL with placeholders (`$1`, `$2`,
//! ... or `$name`) into an analyzed and optimized logical plan once; each execution binds the
//! values and plans physically only, so ooode's index decisions see the values bound.
//!
//! Why: a service sends the same few query shapes again and again, and with many clients on
//! small data DataFusion's planning is most of a query's CPU (SQL to a logical plan and the
//! logical optimizer about half of the planning; the log has the profile). DataFusion's own
//! `PREPARE` / `EXECUTE` runs the logical optimizer again on every `EXECUTE`. For SQL text
//! with its values written in, [`crate::PlanCache`] does the same without preparing.
//!
//! What is fixed when preparing: the tables (their providers; an ooode table still sees rows
//! inserted since and a replaced copy) and the logical optimizer's settings. Everything
//! else, `ooode.*` included, is read from the session when executing.
//!
//! ```
//! # #[tokio::main]
//! # async fn main() -> datafusion::common::Result<()> {
//! use datafusion::arrow::array::AsArray;
//! use datafusion::arrow::datatypes::Int64Type;
//! use datafusion::common::ScalarValue;
//! use ooode_providers::PreparedQuery;
//!
//! let ctx = ooode_providers::ooode_context(datafusion::prelude::SessionConfig::new());
//! ctx.sql("CREATE TABLE t AS SELECT value AS id FROM generate_series(1, 100)").await?;
//! let count = PreparedQuery::new(&ctx, "SELECT count(*) FROM t WHERE id BETWEEN $1 AND $2").await?;
//! // Values of another integer type are cast to the parameter's (here Int64).
//! let batches = count.collect(vec![ScalarValue::from(11i32), ScalarValue::from(20i32)]).await?;
//! assert_eq!(batches[0].column(0).as_primitive::<Int64Type>().value(0), 10);
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::FieldRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::metadata::ScalarAndMetadata;
use datafusion::common::{ParamValues, Result, plan_datafusion_err, plan_err};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{LogicalPlan, Statement};
use datafusion::physical_plan::{ExecutionPlan, collect, execute_stream};
use datafusion::prelude::SessionContext;

/// A query planned up to its physical plan, executed with values bound to its placeholders.
/// Cheap to clone; one can be shared by every task of a service.
#[derive(Clone)]
pub struct PreparedQuery {
    ctx: SessionContext,
    /// Analyzed and optimized, placeholders in place of values; as planned from the SQL where
    /// `reoptimize` is set.
    plan: Arc<LogicalPlan>,
    /// The plan calls functions that are not immutable (`now()`): the logical optimizer
    /// evaluates some of them, so it runs again for each execution, at its time (as
    /// DataFusion's `EXECUTE` does).
    reoptimize: bool,
    /// Each placeholder (`$1`, `$name`) with the field its value must fit, ordered by id
    /// (positional ones by number).
    parameters: Vec<(String, FieldRef)>,
}

impl PreparedQuery {
    /// Plans `sql` in `ctx` up to its physical plan. `sql` is one query or DML statement
    /// (`INSERT INTO t VALUES ($1, $2)`), `EXPLAIN [ANALYZE]` of one (which shows the plan of
    /// the values bound), or `PREPARE name(type, ...) AS` one, which gives the parameters'
    /// types where they cannot be inferred from their use.
    pub async fn new(ctx: &SessionContext, sql: &str) -> Result<Self> {
        let state = ctx.state();
        let plan = state.create_logical_plan(sql).await?;
        let (plan, declared) = match plan {
            LogicalPlan::Statement(Statement::Prepare(prepare)) => {
                (Arc::unwrap_or_clone(prepare.input), prepare.fields)
            }
            plan @ (LogicalPlan::Statement(_) | LogicalPlan::Ddl(_) | LogicalPlan::Copy(_)) => {
                return plan_err!(
                    "a prepared query must be a query or an INSERT, UPDATE or DELETE, not: {}",
                    plan.display()
                );
            }
            plan => (plan, Vec::new()),
        };
        let parameters = parameters(&plan, &declared)?;
        let reoptimize = !crate::plan_cache::calls_only_immutable(&plan);
        let plan = if reoptimize {
            Arc::new(plan)
        } else {
            Arc::new(state.optimize(&plan)?)
        };
        Ok(Self {
            ctx: ctx.clone(),
            plan,
            reoptimize,
            parameters,
        })
    }

    /// The placeholders and the fields their values must fit, ordered by id.
    pub fn parameters(&self) -> &[(String, FieldRef)] {
        &self.parameters
    }

    /// The optimized logical plan, placeholders in place of values (not yet optimized where
    /// it calls functions that are not immutable, such as `now()`: those plans are optimized
    /// for each execution).
    pub fn logical_plan(&self) -> &LogicalPlan {
        &self.plan
    }

    /// The physical plan for `values`: a list for positional placeholders (`$1` first), or
    /// name-value pairs for named ones. A value of another type is cast to its parameter's;
    /// a missing, surplus or uncastable value is an error.
    pub async fn plan(&self, values: impl Into<ParamValues>) -> Result<Arc<dyn ExecutionPlan>> {
        let bound = self.bind(values.into())?;
        let plan = (*self.plan).clone().replace_params_with_values(&bound)?;
        let state = self.ctx.state();
        let plan = if self.reoptimize {
            state.optimize(&plan)?
        } else {
            plan
        };
        state
            .query_planner()
            .create_physical_plan(&plan, &state)
            .await
    }

    /// The task context to execute its plans in: the session's as it is now.
    pub fn task_ctx(&self) -> Arc<TaskContext> {
        self.ctx.task_ctx()
    }

    /// Executes with `values` (as for [`Self::plan`]): the output partitions merged.
    pub async fn execute(
        &self,
        values: impl Into<ParamValues>,
    ) -> Result<SendableRecordBatchStream> {
        let plan = self.plan(values).await?;
        execute_stream(plan, self.ctx.task_ctx())
    }

    /// Executes with `values` (as for [`Self::plan`]) and collects the output.
    pub async fn collect(&self, values: impl Into<ParamValues>) -> Result<Vec<RecordBatch>> {
        let plan = self.plan(values).await?;
        collect(plan, self.ctx.task_ctx()).await
    }

    /// Each parameter's value from `values`, cast to its type, keyed by the id without `$`
    /// (how [`ParamValues::Map`] finds both `$1` and `$name`).
    fn bind(&self, values: ParamValues) -> Result<ParamValues> {
        match &values {
            ParamValues::List(list) if list.len() != self.parameters.len() => {
                return plan_err!(
                    "the prepared query has {} parameter(s), {} value(s) given",
                    self.parameters.len(),
                    list.len()
                );
            }
            ParamValues::Map(map) => {
                if let Some(name) = map.keys().find(|name| {
                    !self
                        .parameters
                        .iter()
                        .any(|(id, _)| name_of(id) == name.as_str())
                }) {
                    return plan_err!("the prepared query has no parameter ${name}");
                }
            }
            ParamValues::List(_) => {}
        }
        let mut bound = HashMap::with_capacity(self.parameters.len());
        for (id, field) in &self.parameters {
            let given = values.get_placeholders_with_values(id)?;
            let value = if given.value.data_type() == *field.data_type() {
                given.value
            } else {
                given.value.cast_to(field.data_type()).map_err(|e| {
                    plan_datafusion_err!(
                        "parameter {id} is {}; its value {} ({}) does not cast to it: {e}",
                        field.data_type(),
                        given.value,
                        given.value.data_type()
                    )
                })?
            };
            bound.insert(name_of(id).to_string(), ScalarAndMetadata::new(value, None));
        }
        Ok(ParamValues::Map(bound))
    }
}

impl std::fmt::Debug for PreparedQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedQuery")
            .field("session", &self.ctx.session_id())
            .field("parameters", &self.parameters)
            .finish_non_exhaustive()
    }
}

/// The placeholders of `plan` with their fields: declared (`PREPARE q(BIGINT) AS ...`, for
/// `$1`, `$2`, ...) or inferred from their use; an error names any left without a type.
fn parameters(plan: &LogicalPlan, declared: &[FieldRef]) -> Result<Vec<(String, FieldRef)>> {
    let mut found = Vec::new();
    for (id, field) in plan.get_parameter_fields()? {
        let declared_field = positional(&id)
            .and_then(|i| declared.get(i.checked_sub(1)?))
            .cloned();
        let Some(field) = declared_field.or(field) else {
            return plan_err!(
                "the type of parameter {id} cannot be inferred from its use: declare the \
                 parameters' types, as in PREPARE q(BIGINT, ...) AS SELECT ..."
            );
        };
        found.push((id, field));
    }
    found.sort_by(|(a, _), (b, _)| match (positional(a), positional(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => a.cmp(b),
    });
    Ok(found)
}

/// A placeholder's id without its `$`: the key of its value among named ones.
fn name_of(id: &str) -> &str {
    id.strip_prefix('$').unwrap_or(id)
}

/// The number of a positional placeholder (`$3` is 3).
fn positional(id: &str) -> Option<usize> {
    id.strip_prefix('$')?.parse().ok()
}
