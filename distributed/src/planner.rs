//! The coordinator's query planner, around datafusion-distributed's: `EXPLAIN` shows the
//! distributed plan (its stages, their tasks, and the worker of each shard read), and a query
//! that fails because a worker went away says which one.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::display::{PlanType, StringifiedPlan};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::explain::ExplainExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion_distributed::{DistributedExec, NetworkBoundaryExt, Stage, display_plan_ascii};
use futures::StreamExt;
use ooode::exec::{IndexJoinExec, IndexScanExec, OoodeScanExec};

/// See the module docs.
pub struct OoodeDistributedPlanner {
    inner: Arc<dyn QueryPlanner + Send + Sync>,
    workers: Vec<String>,
}

impl OoodeDistributedPlanner {
    /// Around `inner` (the distributed planner), for a session of `workers`.
    pub fn new(inner: Arc<dyn QueryPlanner + Send + Sync>, workers: Vec<String>) -> Self {
        Self { inner, workers }
    }
}

impl fmt::Debug for OoodeDistributedPlanner {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "OoodeDistributedPlanner({:?})", self.workers)
    }
}

#[async_trait]
impl QueryPlanner for OoodeDistributedPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if let LogicalPlan::Explain(explain) = logical_plan
            && !explain.verbose
        {
            let plan = self
                .inner
                .create_physical_plan(&explain.plan, session)
                .await?;
            if plan.is::<DistributedExec>() {
                let mut rows: Vec<StringifiedPlan> = explain
                    .stringified_plans
                    .iter()
                    .filter(|p| p.plan_type == PlanType::FinalLogicalPlan)
                    .cloned()
                    .collect();
                rows.push(StringifiedPlan::new(
                    PlanType::FinalPhysicalPlan,
                    display_plan_ascii(plan.as_ref(), false),
                ));
                return Ok(Arc::new(ExplainExec::new(
                    Arc::new(explain.schema.as_arrow().clone()),
                    rows,
                    false,
                )));
            }
        }
        let plan = self
            .inner
            .create_physical_plan(logical_plan, session)
            .await?;
        if plan.is::<DistributedExec>() {
            for child in plan.children() {
                no_local_tables_on_workers(child, false)?;
            }
            return Ok(Arc::new(NamesLostWorkers::new(plan, self.workers.clone())));
        }
        Ok(plan)
    }
}

/// Refuses a plan that would run ooode's one-node plan nodes over a table in a local
/// directory in a stage sent to a worker: they read files of the coordinator, which no
/// worker has. (Tables in object storage are read by the workers themselves.) Detected
/// here, while planning: the stage would otherwise fail only on the worker.
fn no_local_tables_on_workers(plan: &Arc<dyn ExecutionPlan>, in_stage: bool) -> Result<()> {
    let table = if let Some(scan) = plan.downcast_ref::<OoodeScanExec>() {
        Some(scan.table())
    } else if let Some(scan) = plan.downcast_ref::<IndexScanExec>() {
        Some(scan.table())
    } else {
        plan.downcast_ref::<IndexJoinExec>()
            .map(|join| &join.inner().table)
    };
    let local = table.is_some_and(|t| t.remote_url().is_none());
    if local && in_stage {
        let what = match plan.downcast_ref::<OoodeScanExec>() {
            Some(scan) => format!("table '{}'", scan.table_name()),
            None => format!("a plan node ({})", plan.name()),
        };
        return Err(DataFusionError::Plan(format!(
            "{what} is an ooode table in a local directory of this process, and the stage \
             reading it would run on a worker, which does not have its files: load it sharded \
             (COPY ... OPTIONS ('ooode.shards' ...)) or into object storage to join it with \
             sharded tables"
        )));
    }
    if let Some(boundary) = plan.as_network_boundary()
        && let Stage::Local(stage) = boundary.input_stage()
    {
        no_local_tables_on_workers(&stage.plan, true)?;
    }
    for child in plan.children() {
        no_local_tables_on_workers(child, in_stage)?;
    }
    Ok(())
}

/// Above a distributed plan: when the query fails, the workers that no longer answer are
/// named in its error (the transport's own error names none).
#[derive(Debug)]
struct NamesLostWorkers {
    input: Arc<dyn ExecutionPlan>,
    workers: Vec<String>,
}

impl NamesLostWorkers {
    fn new(input: Arc<dyn ExecutionPlan>, workers: Vec<String>) -> Self {
        Self { input, workers }
    }
}

/// The workers of `workers` that do not accept a connection within a second.
async fn unreachable(workers: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for w in workers {
        let addr = w
            .trim_start_matches("http://")
            .trim_start_matches("https://");
        let probe = tokio::time::timeout(
            Duration::from_secs(1),
            tokio::net::TcpStream::connect(addr.to_string()),
        )
        .await;
        // A connection to itself (the kernel picked the dead worker's port as the probe's
        // own source port, possible on loopback) is no worker.
        let answered = match probe {
            Ok(Ok(stream)) => stream.local_addr().ok() != stream.peer_addr().ok(),
            _ => false,
        };
        if !answered {
            out.push(w.clone());
        }
    }
    out
}

impl DisplayAs for NamesLostWorkers {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "NamesLostWorkers")
    }
}

impl ExecutionPlan for NamesLostWorkers {
    fn name(&self) -> &str {
        "NamesLostWorkers"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self::new(
            children.remove(0),
            self.workers.clone(),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let schema = self.schema();
        let workers = self.workers.clone();
        // Starting the query can fail too (a worker gone before its plan was sent).
        let input = match self.input.execute(partition, context) {
            Ok(input) => input,
            Err(e) => {
                let failed = async move { Err(name_lost(e, &workers).await) };
                return Ok(Box::pin(RecordBatchStreamAdapter::new(
                    schema,
                    futures::stream::once(failed),
                )));
            }
        };
        let stream = input.then(move |batch| {
            let workers = workers.clone();
            async move {
                match batch {
                    Ok(b) => Ok(b),
                    Err(e) => Err(name_lost(e, &workers).await),
                }
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

/// `e`, naming the workers that no longer answer, if any.
async fn name_lost(e: DataFusionError, workers: &[String]) -> DataFusionError {
    // A connection broken by a dying worker can be reported a moment before its listening
    // socket closes: a transport error gets a few more looks.
    let text = e.to_string().to_ascii_lowercase();
    let transport = [
        "h2 protocol",
        "transport",
        "broken pipe",
        "connection",
        "unavailable",
    ]
    .iter()
    .any(|t| text.contains(t));
    let mut lost = unreachable(workers).await;
    for _ in 0..10 {
        if !lost.is_empty() || !transport {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        lost = unreachable(workers).await;
    }
    if lost.is_empty() {
        e
    } else {
        DataFusionError::Execution(format!("worker {} stopped answering: {e}", lost.join(", ")))
    }
}
