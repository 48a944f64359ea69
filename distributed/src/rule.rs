//! `ShardLookupRule`: a hash join whose one side reads a sharded table through an index's
//! leading column becomes a [`ShardLookupJoinExec`] where lookups win: inner joins (either
//! side), and outer, semi and anti joins whose preserved side is the other one. A join may
//! have more key pairs and a filter: the lookups use one key, and the other equalities and
//! the filter are checked on the pairs they return (before an outer, semi or anti join
//! decides which outer rows found a match).
//!
//! It runs on the coordinator right after ooode's own index rule, before DataFusion adds
//! repartitions, and only changes plans: the replaced join's key, output columns and order
//! are kept, and the inner side's predicate travels with the lookups (applied on the
//! workers exactly as the scan applied it; the rule declines when the predicate above the
//! scan holds more than the scan was given).
//!
//! `ooode.index_join`: `never` keeps hash joins; `always` uses lookups wherever they fit;
//! `auto` uses them when the pages they would read (the outer side's estimated rows or, if
//! fewer, the distinct values of its key, times
//! the inner rows per key unless the key leads the clustering key, whose rows of a key are
//! neighbours) are below `ooode.index_cost_ratio` times the pages the hash join's scan of
//! the inner table reads (its shards' columnar copies, or heaps), as ooode's one-node rule
//! weighs an index join against a scan. (A shard map written before scan pages were
//! counted falls back to 0.5 % of the inner table's rows.)

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{JoinSide, JoinType, NullEquality, Result, ScalarValue, internal_err};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, Column};
use datafusion::physical_expr::split_conjunction;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use datafusion::physical_plan::{ExecutionPlan, Partitioning};
use ooode::config::{IndexJoinMode, OoodeConfig};
use ooode::exec::IndexJoinKind;
use ooode::optimizer::rule::restore_join_output;

use crate::lookup::{LookupJoin, LookupKind, ShardLookupJoinExec};
use crate::scan::{ShardScanExec, ShardScanSpec};

/// See the module docs.
#[derive(Debug, Default)]
pub struct ShardLookupRule;

impl PhysicalOptimizerRule for ShardLookupRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let ooode = config
            .extensions
            .get::<OoodeConfig>()
            .cloned()
            .unwrap_or_default();
        if ooode.index_join == IndexJoinMode::Never {
            return Ok(plan);
        }
        plan.transform_up(|node| {
            let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            Ok(match lookup_join(join, &ooode)? {
                Some(plan) => Transformed::yes(plan),
                None => Transformed::no(node),
            })
        })
        .data()
    }

    fn name(&self) -> &str {
        "ooode_shard_lookup"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `plan` without the nodes above it that only move rows between partitions (a partitioned
/// hash join's hash repartitions too: lookups need none).
fn below_moves(plan: &Arc<dyn ExecutionPlan>) -> &Arc<dyn ExecutionPlan> {
    let moves_only = plan.is::<CoalescePartitionsExec>()
        || plan.name() == "CoalesceBatchesExec"
        || plan.downcast_ref::<RepartitionExec>().is_some_and(|r| {
            matches!(
                r.partitioning(),
                Partitioning::RoundRobinBatch(_) | Partitioning::Hash(..)
            )
        });
    match plan.children().as_slice() {
        [child] if moves_only => below_moves(child),
        _ => plan,
    }
}

/// The sharded scan `plan` reads, with all of the predicate above it (if any) shipped in it,
/// and the columns `plan` outputs as its projection.
fn shard_read(plan: &Arc<dyn ExecutionPlan>) -> Option<ShardScanSpec> {
    let plan = below_moves(plan);
    if let Some(scan) = plan.downcast_ref::<ShardScanExec>() {
        return Some(scan.spec().clone());
    }
    let filter = plan.downcast_ref::<FilterExec>()?;
    let spec = below_moves(filter.input())
        .downcast_ref::<ShardScanExec>()?
        .spec();
    // Every filter the scan got was shipped, and the predicate above is just those.
    let complete = spec.filters_pushed == spec.filters_shipped
        && split_conjunction(filter.predicate()).len() == spec.filters_pushed;
    if !complete {
        return None;
    }
    let mut spec = spec.clone();
    if let Some(columns) = filter.projection() {
        spec.projection = columns
            .iter()
            .map(|&i| spec.projection.get(i).copied())
            .collect::<Option<Vec<_>>>()?;
    }
    Some(spec)
}

/// The estimated rows of `plan`'s output and the distinct values of its column `column`.
fn estimated_rows(plan: &Arc<dyn ExecutionPlan>, column: usize) -> (Option<usize>, Option<usize>) {
    let Ok(stats) = StatisticsContext::new().compute(plan.as_ref(), &StatisticsArgs::new()) else {
        return (None, None);
    };
    let distinct = stats
        .column_statistics
        .get(column)
        .and_then(|c| c.distinct_count.get_value().copied());
    (stats.num_rows.get_value().copied(), distinct)
}

/// Inner rows per distinct key: the table's rows over the key's distinct values (known, or
/// the span of an integer key's min..max), 1 when nothing is known. From the scan's own
/// statistics: the whole table's, not those left after the filter.
fn fanout(inner: &Arc<dyn ExecutionPlan>, table_col: usize, table_rows: u64) -> f64 {
    let mut scan = below_moves(inner);
    if let Some(filter) = scan.downcast_ref::<FilterExec>() {
        scan = below_moves(filter.input());
    }
    let Some(shard_scan) = scan.downcast_ref::<ShardScanExec>() else {
        return 1.0;
    };
    let Some(column) = shard_scan
        .spec()
        .projection
        .iter()
        .position(|&c| c == table_col)
    else {
        return 1.0;
    };
    let stats = match shard_scan.table_statistics() {
        Some(s) => Arc::new(s.clone()),
        None => match StatisticsContext::new().compute(scan.as_ref(), &StatisticsArgs::new()) {
            Ok(s) => s,
            Err(_) => return 1.0,
        },
    };
    let Some(c) = stats.column_statistics.get(column) else {
        return 1.0;
    };
    let distinct = match (
        c.distinct_count.get_value(),
        c.min_value.get_value(),
        c.max_value.get_value(),
    ) {
        (Some(&d), _, _) => d as f64,
        (None, Some(lo), Some(hi)) => {
            match (lo.cast_to(&DataType::Int64), hi.cast_to(&DataType::Int64)) {
                (Ok(ScalarValue::Int64(Some(lo))), Ok(ScalarValue::Int64(Some(hi)))) => {
                    (hi.saturating_sub(lo) as f64 + 1.0).min(table_rows as f64)
                }
                _ => return 1.0,
            }
        }
        _ => return 1.0,
    };
    (table_rows as f64 / distinct.max(1.0)).max(1.0)
}

/// The conditions of `join` beyond its key pair `used`, over the lookup join's
/// output (the outer side's columns, then the inner side's): the other key equalities and
/// the join filter. None: there are none.
fn residual(
    join: &HashJoinExec,
    used: usize,
    inner_side: JoinSide,
) -> Result<Option<Arc<dyn PhysicalExpr>>> {
    let outer_len = match inner_side {
        JoinSide::Left => join.right.schema().fields().len(),
        _ => join.left.schema().fields().len(),
    };
    // Where a column of the left (right) input is in the lookup join's output.
    let at = |side: JoinSide, index: usize| match side == inner_side {
        true => outer_len + index,
        false => index,
    };
    let moved = |expr: &Arc<dyn PhysicalExpr>, side: JoinSide| {
        Arc::clone(expr)
            .transform(|e| match e.downcast_ref::<Column>() {
                Some(c) => Ok(Transformed::yes(
                    Arc::new(Column::new(c.name(), at(side, c.index()))) as Arc<dyn PhysicalExpr>,
                )),
                None => Ok(Transformed::no(e)),
            })
            .data()
    };
    let mut conditions: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
    for (i, (left, right)) in join.on.iter().enumerate() {
        if i != used {
            conditions.push(Arc::new(BinaryExpr::new(
                moved(left, JoinSide::Left)?,
                Operator::Eq,
                moved(right, JoinSide::Right)?,
            )));
        }
    }
    if let Some(filter) = &join.filter {
        let indices = filter.column_indices();
        let expr = Arc::clone(filter.expression())
            .transform(|e| match e.downcast_ref::<Column>() {
                Some(c) => {
                    let Some(source) = indices.get(c.index()) else {
                        return internal_err!("a join filter's column {} has no source", c.index());
                    };
                    Ok(Transformed::yes(Arc::new(Column::new(
                        c.name(),
                        at(source.side, source.index),
                    ))
                        as Arc<dyn PhysicalExpr>))
                }
                None => Ok(Transformed::no(e)),
            })
            .data()?;
        conditions.push(expr);
    }
    Ok(conditions
        .into_iter()
        .reduce(|a, b| Arc::new(BinaryExpr::new(a, Operator::And, b)) as Arc<dyn PhysicalExpr>))
}

fn lookup_join(
    join: &HashJoinExec,
    config: &OoodeConfig,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    // Conditions beyond one key are checked on the pairs found, before an outer, semi or
    // anti join decides which outer rows have a match.
    if join.on.is_empty()
        || join.null_aware
        || join.null_equality != NullEquality::NullEqualsNothing
        || join.fetch().is_some()
    {
        return Ok(None);
    }
    // (inner side, kind): the outer side is the one the join preserves.
    let candidates: &[(JoinSide, LookupKind)] = match join.join_type {
        JoinType::Inner => &[
            (JoinSide::Right, LookupKind::Inner),
            (JoinSide::Left, LookupKind::Inner),
        ],
        JoinType::Left => &[(JoinSide::Right, LookupKind::LeftOuter)],
        JoinType::LeftSemi => &[(JoinSide::Right, LookupKind::Semi)],
        JoinType::LeftAnti => &[(JoinSide::Right, LookupKind::Anti)],
        JoinType::Right => &[(JoinSide::Left, LookupKind::LeftOuter)],
        JoinType::RightSemi => &[(JoinSide::Left, LookupKind::Semi)],
        JoinType::RightAnti => &[(JoinSide::Left, LookupKind::Anti)],
        _ => &[],
    };
    // (estimated outer rows, inner side, kind, outer plan, join, key pair used) of the best
    // candidate.
    type Choice = (
        usize,
        JoinSide,
        LookupKind,
        Arc<dyn ExecutionPlan>,
        LookupJoin,
        usize,
    );
    let mut best: Option<Choice> = None;
    let pairs = (0..join.on.len()).flat_map(|p| candidates.iter().map(move |c| (p, *c)));
    for (pair, (inner_side, kind)) in pairs {
        let (inner_plan, outer_plan, inner_expr, outer_expr) = match inner_side {
            JoinSide::Left => (&join.left, &join.right, &join.on[pair].0, &join.on[pair].1),
            _ => (&join.right, &join.left, &join.on[pair].1, &join.on[pair].0),
        };
        let Some(spec) = shard_read(inner_plan) else {
            continue;
        };
        let (Some(inner_col), Some(outer_col)) = (
            inner_expr.downcast_ref::<Column>(),
            outer_expr.downcast_ref::<Column>(),
        ) else {
            continue;
        };
        let Some(&table_col) = spec.projection.get(inner_col.index()) else {
            continue;
        };
        if !spec.lookup_columns.contains(&table_col) {
            continue;
        }
        let (outer_rows, outer_distinct) = estimated_rows(outer_plan, outer_col.index());
        // The lookups send each batch's distinct keys: no more keys than the outer key has
        // values.
        let outer_keys = outer_rows.map(|rows| outer_distinct.map_or(rows, |d| d.min(rows)));
        let fanout = fanout(inner_plan, table_col, spec.table_rows);
        // Pages the lookups would read on the workers (a key's rows are neighbours when the
        // key leads the clustering key: about one page; otherwise about one page per row)
        // against the table a hash join reads whole.
        let pages_per_key = match spec.clustering_first == Some(table_col) {
            true => 1.0,
            false => fanout,
        };
        let wanted = match config.index_join {
            IndexJoinMode::Always => true,
            IndexJoinMode::Never => false,
            IndexJoinMode::Auto => outer_keys.is_some_and(|n| {
                let lookup_pages = n as f64 * pages_per_key;
                match spec.scan_pages {
                    0 => lookup_pages <= spec.table_rows as f64 * 0.005,
                    scan => lookup_pages <= scan as f64 * config.index_cost_ratio,
                }
            }),
        };
        let rank = outer_rows.unwrap_or(usize::MAX);
        if wanted && best.as_ref().is_none_or(|b| rank < b.0) {
            let lookup = LookupJoin {
                inner: spec,
                outer_key: outer_col.index(),
                inner_key: table_col,
                inner_key_output: inner_col.index(),
                fanout,
                kind,
            };
            // A build side gathered into one partition for a hash join need not be, nor a side
            // hash-partitioned for a partitioned one: the lookups run in the outer side's own
            // tasks (on the workers, where it is a scan). DataFusion places the repartitions
            // the plan above still needs after this rule.
            let outer = match (
                outer_plan.downcast_ref::<CoalescePartitionsExec>(),
                outer_plan.downcast_ref::<RepartitionExec>(),
            ) {
                (Some(c), _) if c.fetch().is_none() => c.input().clone(),
                (_, Some(r)) if matches!(r.partitioning(), Partitioning::Hash(..)) => {
                    r.input().clone()
                }
                _ => outer_plan.clone(),
            };
            best = Some((rank, inner_side, kind, outer, lookup, pair));
        }
    }
    let Some((_, inner_side, kind, outer, lookup, pair)) = best else {
        return Ok(None);
    };
    let node: Arc<dyn ExecutionPlan> = Arc::new(
        ShardLookupJoinExec::try_new(outer, lookup, None)?
            .with_condition(residual(join, pair, inner_side)?),
    );
    let kind = match kind {
        LookupKind::Inner => IndexJoinKind::Inner,
        LookupKind::Semi => IndexJoinKind::Semi,
        LookupKind::Anti => IndexJoinKind::Anti,
        LookupKind::LeftOuter => IndexJoinKind::LeftOuter,
    };
    restore_join_output(join, node, inner_side, kind).map(Some)
}
