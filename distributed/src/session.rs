//! Sessions: the coordinator's ([`with_ooode_distributed`]) and the workers'.
//!
//! On the coordinator, datafusion-distributed plans the stages; three handlers teach it
//! ooode's sharded scans: each stage reading one runs on one task per worker
//! (`desired_tasks`), task `i` reads the shards held by worker `i` (`scale_up`), and runs on
//! worker `i` (`route`), so every shard is read from local flash where it lives.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result, plan_err};
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;
use datafusion_distributed::{
    DesiredTaskCountEvent, DesiredTaskCountEventResponse, DistributedExt, DistributedLeafExec,
    RouteTasksEvent, RouteTasksEventResponse, ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse,
    SessionStateBuilderExt, WorkerQueryContext, WorkerResolver, WorkerSessionBuilder,
    get_distributed_worker_resolver,
};
use ooode::exec::{IndexJoinExec, IndexScanExec, OoodeScanExec};
use url::Url;

use crate::client::worker_url;
use crate::codec::OoodeCodec;
use crate::load::ShardedFormatFactory;
use crate::planner::OoodeDistributedPlanner;
use crate::rule::ShardLookupRule;
use crate::scan::ShardScanExec;
use crate::shard_map::ShardEntry;
use crate::table::ShardedTableFactory;
use crate::worker::LocalShards;

/// The workers of a session, in the order given (task `i` of a sharded scan runs on the
/// `i`-th).
#[derive(Debug, Clone)]
struct Workers(Vec<Url>);

impl WorkerResolver for Workers {
    fn get_urls(&self) -> Result<Vec<Url>, DataFusionError> {
        Ok(self.0.clone())
    }
}

/// `host:port` of a worker URL, as shard maps name workers.
fn host_port(url: &Url) -> String {
    match (url.host_str(), url.port_or_known_default()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        _ => url.to_string(),
    }
}

/// The workers of a distributed session as `host:port`, in order.
pub fn session_workers(config: &SessionConfig) -> Result<Vec<String>> {
    let resolver = get_distributed_worker_resolver(config).map_err(|_| {
        DataFusionError::Plan(
            "this session has no workers: build it with with_ooode_distributed".into(),
        )
    })?;
    Ok(resolver.get_urls()?.iter().map(host_port).collect())
}

/// Adds ooode and its distributed parts to a session being built, with `workers`
/// (`host:port` each, `ooode worker` processes): sharded tables load and open through
/// `STORED AS OOODE`, and datafusion-distributed runs their scans on the workers that hold
/// them. Everything else ooode does on one node keeps working.
pub fn with_ooode_distributed(
    builder: SessionStateBuilder,
    workers: &[String],
) -> Result<SessionStateBuilder> {
    if workers.is_empty() {
        return plan_err!("a distributed session needs at least one worker");
    }
    let urls = workers
        .iter()
        .map(|w| {
            Url::parse(&worker_url(w))
                .map_err(|e| DataFusionError::Configuration(format!("worker address '{w}': {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut builder = ooode_providers::with_ooode(builder);
    let rules = builder
        .physical_optimizer_rules()
        .get_or_insert_with(Vec::new);
    let at = rules
        .iter()
        .position(|r| r.name() == "ooode_index")
        .map_or(rules.len(), |i| i + 1);
    rules.insert(at, Arc::new(ShardLookupRule));
    let formats = builder.file_formats().get_or_insert_with(Vec::new);
    formats.retain(|f| f.get_ext() != "ooode");
    formats.push(Arc::new(ShardedFormatFactory::default()));
    let mut builder = builder
        .with_table_factory("OOODE".into(), Arc::new(ShardedTableFactory::default()))
        .with_distributed_worker_resolver(Workers(urls.clone()))
        .with_distributed_planner()
        .with_distributed_user_codec(OoodeCodec::coordinator())
        .with_distributed_desired_task_count_handler(desired_tasks)
        .with_distributed_scale_up_leaf_node_handler(scale_up)
        .with_distributed_route_tasks_handler(route);
    let Some(distributed) = builder.query_planner().take() else {
        return plan_err!("datafusion-distributed set no query planner");
    };
    let names = urls.iter().map(host_port).collect();
    Ok(builder.with_query_planner(Arc::new(OoodeDistributedPlanner::new(distributed, names))))
}

fn session_urls(config: &SessionConfig) -> Result<Vec<Url>> {
    get_distributed_worker_resolver(config)?.get_urls()
}

/// A sharded scan wants one task per worker. ooode's one-node scans run in one task (each
/// reads its whole table); an index join of a table in a local directory too (it reads the
/// coordinator's files), while one of a table in object storage runs in as many tasks as
/// its outer input, each probing for its own rows.
fn desired_tasks(ev: DesiredTaskCountEvent) -> Option<Result<DesiredTaskCountEventResponse>> {
    if let Some(join) = ev.plan.downcast_ref::<IndexJoinExec>() {
        return match join.inner().table.remote_url() {
            Some(_) => None,
            None => Some(Ok(DesiredTaskCountEventResponse::maximum(1))),
        };
    }
    if ev.plan.is::<OoodeScanExec>() || ev.plan.is::<IndexScanExec>() {
        return Some(Ok(DesiredTaskCountEventResponse::maximum(1)));
    }
    ev.plan.downcast_ref::<ShardScanExec>()?;
    Some(session_urls(ev.session_config).map(|u| DesiredTaskCountEventResponse::desired(u.len())))
}

/// Task `i` of `tasks` reads the shards of the workers `j` with `j % tasks == i`: its own
/// (worker `i`) when there is a task per worker, which is the usual case.
fn scale_up(ev: ScaleUpLeafNodeEvent) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
    let scan = ev.plan.downcast_ref::<ShardScanExec>()?;
    Some((|| {
        let urls = session_urls(ev.session_config)?;
        let workers: Vec<String> = urls.iter().map(host_port).collect();
        let tasks = ev.task_count.max(1);
        let mut per_task: Vec<Vec<ShardEntry>> = vec![Vec::new(); tasks];
        for shard in &scan.spec().shards {
            let Some(j) = workers.iter().position(|w| *w == shard.worker) else {
                return plan_err!(
                    "shard {} of {} is on worker {}, which is not one of this session's \
                     workers ({})",
                    shard.shard,
                    scan.spec().table,
                    shard.worker,
                    workers.join(", ")
                );
            };
            per_task[j % tasks].push(shard.clone());
        }
        let variants = per_task
            .into_iter()
            .map(|shards| {
                ShardScanExec::try_new(scan.spec().with_shards(shards), None)
                    .map(|s| Arc::new(s) as Arc<dyn ExecutionPlan>)
            })
            .collect::<Result<Vec<_>>>()?;
        let leaf = DistributedLeafExec::try_new(Arc::clone(ev.plan), variants)?;
        Ok(ScaleUpLeafNodeEventResponse::new(Arc::new(leaf)))
    })())
}

/// Task `i` of a stage that reads sharded tables runs on worker `i` (see [`scale_up`]).
fn route(ev: RouteTasksEvent) -> Option<Result<RouteTasksEventResponse>> {
    let mut reads_shards = false;
    let found = ev.plan.apply(|node| {
        if let Some(leaf) = node.downcast_ref::<DistributedLeafExec>()
            && leaf.original().is::<ShardScanExec>()
        {
            reads_shards = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    if let Err(e) = found {
        return Some(Err(e));
    }
    if !reads_shards {
        return None;
    }
    Some(session_urls(ev.task_ctx.session_config()).map(|urls| {
        RouteTasksEventResponse::new(
            (0..ev.task_count)
                .map(|i| urls[i % urls.len()].clone())
                .collect(),
        )
    }))
}

/// The session a worker runs each stage in: ooode's, with the codec bound to the worker's
/// shards.
#[derive(Debug, Clone)]
pub struct WorkerSession {
    /// The worker's shards.
    pub shards: Arc<LocalShards>,
}

#[async_trait]
impl WorkerSessionBuilder for WorkerSession {
    async fn build_session_state(&self, ctx: WorkerQueryContext) -> Result<SessionState> {
        Ok(ooode_providers::with_ooode(ctx.builder)
            .with_distributed_user_codec(OoodeCodec::worker(self.shards.clone()))
            .build())
    }
}
