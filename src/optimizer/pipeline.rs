//! `OoodeOnePipelineRule`: takes out the round-robin repartitions that DataFusion puts above
//! small index scans (and projections or filters of them), so a point query runs in one
//! pipeline; in order, above every index scan, so the baseline computes on one core as the
//! paper's in-order engine does.
//!
//! DataFusion spreads a single-partition input over `target_partitions` with a round-robin
//! repartition unless the input's row count is *exact* and at most one batch: an estimate,
//! however good, gets the repartition (unless `use_row_number_estimates_to_optimize_
//! partitioning` is set). An index scan's count comes from the B+tree: the entries in its key
//! ranges, counted at planning time, which bound its rows from above (its residual predicate
//! can only drop rows). For a scan of at most [`ONE_PIPELINE_ROWS`](crate::exec::ONE_PIPELINE_ROWS) rows the repartition buys
//! no parallelism worth having and costs a task, two channels and a wake-up of a parked
//! thread between each read and the next operator; without it the whole plan above runs in
//! one partition. Measured on the Fig. 4 query with `N = 1` at SF 1 (cold, release build,
//! rule on and off alternating, medians): execution 0.531 -> 0.510 ms, planning 1.002 ->
//! 0.987 ms; with reads from the OS cache, where the disk's noise is gone, execution 0.299 ->
//! 0.265 ms. `N = 15` (150 rows from the scan) did not change.
//!
//! It runs after DataFusion has enforced distribution and before the sanity check. Taking out
//! a round-robin repartition never breaks a requirement: it promises nothing about which rows
//! go where, only how many partitions there are, and the plan above is rebuilt for one.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};

use crate::config::{ExecutionMode, OoodeConfig};
use crate::exec::IndexScanExec;

/// The rule (`ooode_one_pipeline`).
#[derive(Debug, Default)]
pub struct OoodeOnePipelineRule;

impl OoodeOnePipelineRule {
    /// The rule.
    pub fn new() -> Self {
        Self
    }
}

/// Whether `plan` is a round-robin repartition of a small index scan (through projections and
/// filters, which add no rows), or in order of any index scan: in order, index plans run as
/// one pipeline whatever their size (the paper's IODE: operators one after another).
fn spreads_index_scan(plan: &Arc<dyn ExecutionPlan>, in_order: bool) -> bool {
    let Some(repartition) = plan.downcast_ref::<RepartitionExec>() else {
        return false;
    };
    let input = repartition.input();
    matches!(repartition.partitioning(), Partitioning::RoundRobinBatch(_))
        && input.output_partitioning().partition_count() == 1
        && index_scan_below(input, in_order)
}

fn index_scan_below(plan: &Arc<dyn ExecutionPlan>, any_size: bool) -> bool {
    if let Some(scan) = plan.downcast_ref::<IndexScanExec>() {
        return any_size || scan.one_pipeline();
    }
    (plan.is::<ProjectionExec>() || plan.is::<FilterExec>())
        && index_scan_below(plan.children()[0], any_size)
}

impl PhysicalOptimizerRule for OoodeOnePipelineRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(ooode) = config.extensions.get::<OoodeConfig>() else {
            return Ok(plan);
        };
        let in_order = ooode.execution_mode == ExecutionMode::InOrder;
        plan.transform_up(|node| {
            Ok(if spreads_index_scan(&node, in_order) {
                Transformed::yes(node.children()[0].clone())
            } else {
                Transformed::no(node)
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "ooode_one_pipeline"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
