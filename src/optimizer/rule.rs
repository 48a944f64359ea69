//! `OoodeIndexRule`: replaces scans with filters by index scans, and hash joins whose one side
//! is an indexed ooode table by index nested-loop joins, where that is cheaper.
//!
//! It runs right after DataFusion's filter pushdown and before distribution and sorting are
//! enforced, so DataFusion adds whatever repartitioning our nodes' outputs need, and the
//! sanity check validates the result. It only ever changes plans: every index node applies
//! the replaced operators' full predicates, and join keys, filters and output columns are
//! carried over exactly.
//!
//! Decisions (`SET ooode.index_join`): `never` leaves the plan alone; `always` uses an index
//! wherever one fits; `auto` uses one when its estimated page reads are below
//! `ooode.index_cost_ratio` (`ooode.remote_index_cost_ratio` for a table in object storage)
//! times the pages a full scan of the table reads. Estimates come
//! from B+tree range counts (exact but for the two leaves where a range starts and ends,
//! which are interpolated) and the outer input's row estimate.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{JoinSide, JoinType, NullEquality, Result};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};

use super::cost::{index_scan_estimate, probe_estimate, scan_pages};
use super::ranges::{IndexCandidate, describe, index_candidates};
use crate::access::admission::LEVELS;
use crate::access::index_only::covers;
use crate::access::{QueryIo, ScanEstimate, TableIo};
use crate::config::{IndexJoinMode, OoodeConfig};
use crate::exec::{IndexJoinExec, IndexJoinKind, IndexScanExec, InnerSide, OoodeScanExec};
use crate::io::IoMetrics;
use crate::storage::Table;

/// The ooode physical optimizer rule.
#[derive(Debug, Default)]
pub struct OoodeIndexRule;

impl OoodeIndexRule {
    /// The rule.
    pub fn new() -> Self {
        Self
    }
}

/// A table read that an index plan can stand in for: columns read, predicate over them, and
/// the projection after the predicate.
struct TableRead {
    table: Arc<TableIo>,
    name: String,
    read_columns: Vec<usize>,
    predicate: Option<Arc<dyn PhysicalExpr>>,
    output: Option<Vec<usize>>,
    /// What reading it costs, when it is already an index scan.
    index_scan: Option<ScanEstimate>,
}

impl TableRead {
    /// Table column of output column `i`.
    fn table_column(&self, i: usize) -> Option<usize> {
        let read_pos = match &self.output {
            Some(cols) => *cols.get(i)?,
            None => i,
        };
        self.read_columns.get(read_pos).copied()
    }
}

fn table_read(plan: &Arc<dyn ExecutionPlan>) -> Option<TableRead> {
    if let Some(scan) = plan.downcast_ref::<OoodeScanExec>() {
        return Some(TableRead {
            table: scan.table().clone(),
            name: scan.table_name().to_string(),
            read_columns: scan.projection().to_vec(),
            predicate: None,
            output: None,
            index_scan: None,
        });
    }
    if let Some(scan) = plan.downcast_ref::<IndexScanExec>() {
        return Some(TableRead {
            table: scan.table().clone(),
            name: scan.table_name().to_string(),
            read_columns: scan.read_columns().to_vec(),
            predicate: Some(scan.predicate().clone()),
            output: scan.output().map(<[usize]>::to_vec),
            index_scan: Some(scan.estimate()),
        });
    }
    if let Some(filter) = plan.downcast_ref::<FilterExec>()
        && let Some(scan) = filter.input().downcast_ref::<OoodeScanExec>()
    {
        return Some(TableRead {
            table: scan.table().clone(),
            name: scan.table_name().to_string(),
            read_columns: scan.projection().to_vec(),
            predicate: Some(filter.predicate().clone()),
            output: filter.projection().as_ref().map(|p| p.to_vec()),
            index_scan: None,
        });
    }
    if let Some(proj) = plan.downcast_ref::<ProjectionExec>() {
        let mut inner = table_read(proj.input())?;
        let cols: Option<Vec<usize>> = proj
            .expr()
            .iter()
            .map(|e| e.expr.downcast_ref::<Column>().map(|c| c.index()))
            .collect();
        let cols = cols?;
        // Output names must stay those of the projection.
        let names_kept = proj
            .expr()
            .iter()
            .zip(&cols)
            .all(|(e, &c)| e.alias == proj.input().schema().field(c).name().as_str());
        if !names_kept {
            return None;
        }
        inner.output = Some(match &inner.output {
            Some(prev) => cols.iter().map(|&c| prev[c]).collect(),
            None => cols,
        });
        return Some(inner);
    }
    None
}

struct Planner<'a> {
    config: &'a OoodeConfig,
    query: Arc<QueryIo>,
    /// Counters of the reads the rule's own estimates make.
    plan_io: Arc<IoMetrics>,
    /// Estimated page reads of the index nodes put in the plan.
    index_reads: std::cell::Cell<f64>,
}

impl Planner<'_> {
    fn add_index_reads(&self, pages: f64) {
        self.index_reads.set(self.index_reads.get() + pages);
    }

    /// Estimated page reads of `plan`, the rule's output: its index nodes' and the heap
    /// pages of its full scans that read the heap. Admission serves smaller queries first.
    fn estimated_reads(&self, plan: &Arc<dyn ExecutionPlan>) -> f64 {
        fn heap_scans(plan: &Arc<dyn ExecutionPlan>) -> f64 {
            let own = match plan.downcast_ref::<OoodeScanExec>() {
                Some(scan) if !scan.is_columnar() => scan.table().heap_pages() as f64,
                _ => 0.0,
            };
            own + plan.children().into_iter().map(heap_scans).sum::<f64>()
        }
        self.index_reads.get() + heap_scans(plan)
    }
    /// Whether an index plan reading `index_pages` beats a scan of `scan_pages` pages of
    /// `table`. A table in object storage has its own ratio: its index pages are a request
    /// each, a round trip apiece 256 at a time, while a scan fetches whole column chunks.
    fn wants(&self, index_pages: f64, scan_pages: f64, table: &Table) -> bool {
        let ratio = if table.is_remote() {
            self.config.remote_index_cost_ratio
        } else {
            self.config.index_cost_ratio
        };
        match self.config.index_join {
            IndexJoinMode::Never => false,
            IndexJoinMode::Always => true,
            IndexJoinMode::Auto => index_pages <= ratio * scan_pages,
        }
    }

    /// FilterExec over a full scan -> IndexScanExec, if a predicate bounds an index's first
    /// column and the index reads few enough pages.
    fn index_scan(&self, filter: &FilterExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(scan) = filter.input().downcast_ref::<OoodeScanExec>() else {
            return Ok(None);
        };
        let table = scan.table().table();
        let candidates = index_candidates(table, filter.predicate(), |c| {
            scan.projection().iter().position(|&p| p == c)
        })?;
        // Counted through the query's own engine: cold, out of order, all ranges at once.
        let best = candidates
            .into_iter()
            .map(|c| {
                let covering =
                    self.config.index_only_scans && covers(table, c.index, scan.projection());
                let estimate = index_scan_estimate(
                    scan.table(),
                    c.index,
                    &c.ranges,
                    scan.plan_counts(),
                    &self.query,
                    self.plan_io.clone(),
                    covering,
                );
                (estimate, c)
            })
            .min_by_key(|(estimate, _)| estimate.pages);
        let Some((
            estimate,
            IndexCandidate {
                index,
                ranges,
                bounds,
            },
        )) = best
        else {
            return Ok(None);
        };
        let text = describe(&bounds, &table.indexes()[index].meta.columns[0]);
        if !self.wants(estimate.pages as f64, scan_pages(scan.table()), table) {
            return Ok(None);
        }
        self.add_index_reads(estimate.pages as f64);
        Ok(Some(Arc::new(
            IndexScanExec::builder(scan.table().clone(), index, ranges, self.query.clone())
                .name(scan.table_name())
                .ranges_text(text)
                .read_columns(scan.projection().to_vec())
                .predicate(filter.predicate().clone())
                .output(filter.projection().as_ref().map(|p| p.to_vec()))
                .estimate(estimate)
                .io(scan.io_metrics().clone())
                .read_ahead(scan.read_ahead().cloned())
                .build()?,
        )))
    }

    /// HashJoinExec with an indexed ooode table on one side -> IndexJoinExec.
    fn index_join(&self, join: &HashJoinExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        if join.null_aware
            || join.null_equality != NullEquality::NullEqualsNothing
            || join.fetch().is_some()
        {
            return Ok(None);
        }
        use JoinType::*;
        // (inner side, kind) candidates: the outer side is the one the join preserves.
        let candidates: &[(JoinSide, IndexJoinKind)] = match join.join_type {
            Inner => &[
                (JoinSide::Right, IndexJoinKind::Inner),
                (JoinSide::Left, IndexJoinKind::Inner),
            ],
            Left => &[(JoinSide::Right, IndexJoinKind::LeftOuter)],
            LeftSemi => &[(JoinSide::Right, IndexJoinKind::Semi)],
            LeftAnti => &[(JoinSide::Right, IndexJoinKind::Anti)],
            Right => &[(JoinSide::Left, IndexJoinKind::LeftOuter)],
            RightSemi => &[(JoinSide::Left, IndexJoinKind::Semi)],
            RightAnti => &[(JoinSide::Left, IndexJoinKind::Anti)],
            _ => &[],
        };
        let mut best: Option<(f64, Arc<dyn ExecutionPlan>)> = None;
        for &(inner_side, kind) in candidates {
            if let Some(plan) = self.try_side(join, inner_side, kind)?
                && best.as_ref().is_none_or(|b| plan.0 < b.0)
            {
                best = Some(plan);
            }
        }
        Ok(best.map(|(cost, plan)| {
            self.add_index_reads(cost);
            plan
        }))
    }

    fn try_side(
        &self,
        join: &HashJoinExec,
        inner_side: JoinSide,
        kind: IndexJoinKind,
    ) -> Result<Option<(f64, Arc<dyn ExecutionPlan>)>> {
        let (inner_plan, outer_plan) = match inner_side {
            JoinSide::Left => (&join.left, &join.right),
            _ => (&join.right, &join.left),
        };
        let Some(read) = table_read(inner_plan) else {
            return Ok(None);
        };
        let table = read.table.table();
        // Inner key columns (table columns) paired with outer key expressions.
        let mut pairs = Vec::new();
        for (l, r) in &join.on {
            let (inner_expr, outer_expr) = match inner_side {
                JoinSide::Left => (l, r),
                _ => (r, l),
            };
            let Some(col) = inner_expr.downcast_ref::<Column>() else {
                return Ok(None);
            };
            let Some(table_col) = read.table_column(col.index()) else {
                return Ok(None);
            };
            pairs.push((table_col, outer_expr.clone()));
        }
        // An index whose leading columns are exactly the join key columns.
        let mut choice = None;
        for (i, idx) in table.indexes().iter().enumerate() {
            let k = pairs.len();
            if idx.meta.columns.len() < k {
                continue;
            }
            let lead: Option<Vec<usize>> = idx.meta.columns[..k]
                .iter()
                .map(|c| table.schema().index_of(c).ok())
                .collect();
            let Some(lead) = lead else { continue };
            let outer_keys: Option<Vec<_>> = lead
                .iter()
                .map(|c| pairs.iter().find(|p| p.0 == *c).map(|p| p.1.clone()))
                .collect();
            let Some(outer_keys) = outer_keys else {
                continue;
            };
            if pairs.iter().all(|p| lead.contains(&p.0)) {
                // The columns the inner side decodes: the scan's, and the key's.
                let mut needed = read.read_columns.clone();
                needed.extend(&lead);
                let covering = self.config.index_only_scans && covers(table, i, &needed);
                let (rows, pages) = probe_estimate(table, idx, k, covering);
                if choice
                    .as_ref()
                    .is_none_or(|c: &(usize, Vec<_>, f64, f64)| pages < c.3)
                {
                    choice = Some((i, outer_keys, rows, pages));
                }
            }
        }
        let Some((index, outer_keys, rows_per_probe, pages_per_probe)) = choice else {
            return Ok(None);
        };
        // In `auto`, trust only row estimates that come from index counts: an outer input fed
        // by an index scan (through other index joins). DataFusion's estimates for filtered
        // hash joins can be off by orders of magnitude, and a wrong guess here means many
        // random reads where a scan was cheap.
        if self.config.index_join == IndexJoinMode::Auto && !index_driven(outer_plan) {
            return Ok(None);
        }
        let outer_rows = StatisticsContext::new()
            .compute(outer_plan.as_ref(), &StatisticsArgs::new())?
            .num_rows
            .get_value()
            .copied();
        let cost = match (outer_rows, self.config.index_join) {
            (Some(n), _) => n as f64 * pages_per_probe,
            (None, IndexJoinMode::Always) => 0.0,
            (None, _) => return Ok(None),
        };
        if !self.wants(cost, scan_pages(&read.table), table) {
            return Ok(None);
        }
        // The inner side may already be an index scan (a filter on its key, often one that
        // DataFusion derived from the outer side's). Then the hash join costs that scan's
        // reads, and they run alongside the outer side's instead of after them; probes would
        // add a dependent step per outer row. `auto` keeps the cheaper of the two.
        if self.config.index_join == IndexJoinMode::Auto
            && read.index_scan.is_some_and(|s| s.pages as f64 <= cost)
        {
            return Ok(None);
        }
        let inner = Arc::new(InnerSide::try_new(
            read.table.clone(),
            read.name.clone(),
            index,
            outer_keys.len(),
            read.read_columns.clone(),
            read.predicate.clone(),
            read.output.clone(),
        )?);
        let estimated = outer_rows.map(|n| (n as f64 * rows_per_probe) as usize);
        let node: Arc<dyn ExecutionPlan> = Arc::new(
            IndexJoinExec::builder(outer_plan.clone(), outer_keys, inner, self.query.clone())
                .kind(kind)
                .filter(join.filter.clone(), inner_side.negate())
                .estimated_rows(estimated)
                .build()?,
        );
        Ok(Some((
            cost,
            restore_join_output(join, node, inner_side, kind)?,
        )))
    }
}

/// Whether `plan`'s rows come from an index scan, through index joins and row-preserving
/// operators only.
fn index_driven(plan: &Arc<dyn ExecutionPlan>) -> bool {
    if plan.is::<IndexScanExec>() {
        return true;
    }
    if let Some(join) = plan.downcast_ref::<IndexJoinExec>() {
        return index_driven(join.outer());
    }
    // A hash join of index-driven inputs (DataFusion's transitive filters make both sides of
    // `customer JOIN orders ... WHERE c_custkey <= N` index scans) is bounded by them.
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        return index_driven(&join.left) && index_driven(&join.right);
    }
    let passthrough = plan.is::<ProjectionExec>()
        || plan.is::<FilterExec>()
        || plan.name() == "CoalesceBatchesExec"
        || plan.name() == "RepartitionExec"
        || plan.name() == "CoalescePartitionsExec";
    passthrough && plan.children().len() == 1 && index_driven(plan.children()[0])
}

/// Puts a replacement join's columns (outer, then inner) back in the hash join's output order
/// (left, then right) and applies the hash join's projection.
pub fn restore_join_output(
    join: &HashJoinExec,
    node: Arc<dyn ExecutionPlan>,
    inner_side: JoinSide,
    kind: IndexJoinKind,
) -> Result<Arc<dyn ExecutionPlan>> {
    let outer_len = match inner_side {
        JoinSide::Left => join.right.schema().fields().len(),
        _ => join.left.schema().fields().len(),
    };
    let node_len = node.schema().fields().len();
    // Position in `node` of each column of the hash join's unprojected output.
    let order: Vec<usize> = match (inner_side, kind) {
        (JoinSide::Left, IndexJoinKind::Inner | IndexJoinKind::LeftOuter) => {
            (outer_len..node_len).chain(0..outer_len).collect()
        }
        _ => (0..node_len).collect(),
    };
    let order: Vec<usize> = match &join.projection {
        Some(p) => p.iter().map(|&i| order[i]).collect(),
        None => order,
    };
    if order.iter().copied().eq(0..node_len) {
        return Ok(node);
    }
    let want = join.schema();
    let exprs: Vec<ProjectionExpr> = order
        .iter()
        .zip(want.fields())
        .map(|(&i, f)| ProjectionExpr {
            expr: Arc::new(Column::new(node.schema().field(i).name(), i)) as Arc<dyn PhysicalExpr>,
            alias: f.name().clone(),
        })
        .collect();
    Ok(Arc::new(ProjectionExec::try_new(exprs, node)?))
}

/// Builds the Parquet scans of the ooode scans no index plan replaced (the others are never
/// built), so that DataFusion's later rules repartition them and push dynamic filters into
/// them as into a stock scan.
fn build_kept_columnar_scans(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let built = match node.downcast_ref::<OoodeScanExec>() {
            Some(scan) => scan.build_columnar()?,
            None => None,
        };
        Ok(match built {
            Some(scan) => Transformed::yes(Arc::new(scan) as Arc<dyn ExecutionPlan>),
            None => Transformed::no(node),
        })
    })
    .map(|t| t.data)
}

/// The budget of the query `plan` belongs to: the one its first ooode table scan was
/// planned with (each scan makes one as DataFusion asks the provider for it; the rule gives
/// every node of the plan the first, so a query has one).
fn query_of(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<QueryIo>> {
    if let Some(scan) = plan.downcast_ref::<OoodeScanExec>() {
        return Some(scan.query().clone());
    }
    plan.children().into_iter().find_map(query_of)
}

/// Gives each index node its level within the query: the closer to the output, the higher,
/// so that its reads are admitted first (finished work leaves memory before new work starts).
fn assign_levels(plan: &Arc<dyn ExecutionPlan>, above: usize) -> Result<Arc<dyn ExecutionPlan>> {
    let level = LEVELS - 1 - above.min(LEVELS - 1);
    // A node already at its level is kept as it is; a level changes no node's properties, so
    // the nodes above keep theirs (`replace_children_if_necessary` sees the same ones).
    let (node, below): (Arc<dyn ExecutionPlan>, usize) =
        if let Some(join) = plan.downcast_ref::<IndexJoinExec>() {
            let node = match join.level() == level {
                true => plan.clone(),
                false => Arc::new(join.with_level(level)),
            };
            (node, above + 1)
        } else if let Some(scan) = plan.downcast_ref::<IndexScanExec>() {
            let node = match scan.level() == level {
                true => plan.clone(),
                false => Arc::new(scan.with_level(level)),
            };
            (node, above + 1)
        } else {
            (plan.clone(), above)
        };
    let children: Vec<Arc<dyn ExecutionPlan>> = node.children().into_iter().cloned().collect();
    if children.is_empty() {
        return Ok(node);
    }
    let new: Vec<Arc<dyn ExecutionPlan>> = children
        .iter()
        .map(|c| assign_levels(c, below))
        .collect::<Result<_>>()?;
    replace_children_if_necessary(node, new)
}

fn has_index_nodes(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.is::<IndexJoinExec>()
        || plan.is::<IndexScanExec>()
        || plan.children().into_iter().any(has_index_nodes)
}

impl PhysicalOptimizerRule for OoodeIndexRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(ooode) = config.extensions.get::<OoodeConfig>() else {
            return Ok(plan);
        };
        let Some(query) = query_of(&plan) else {
            return Ok(plan);
        };
        let planner = Planner {
            config: ooode,
            query,
            plan_io: IoMetrics::new(),
            index_reads: Default::default(),
        };
        let plan = plan
            .transform_up(|node| {
                if let Some(scan) = node.downcast_ref::<OoodeScanExec>() {
                    if Arc::ptr_eq(scan.query(), &planner.query) {
                        return Ok(Transformed::no(node));
                    }
                    return Ok(Transformed::yes(
                        Arc::new(scan.with_query(planner.query.clone())) as Arc<dyn ExecutionPlan>,
                    ));
                }
                if ooode.index_join == IndexJoinMode::Never {
                    return Ok(Transformed::no(node));
                }
                if let Some(filter) = node.downcast_ref::<FilterExec>()
                    && let Some(new) = planner.index_scan(filter)?
                {
                    return Ok(Transformed::yes(new));
                }
                if let Some(join) = node.downcast_ref::<HashJoinExec>()
                    && let Some(new) = planner.index_join(join)?
                {
                    return Ok(Transformed::yes(new));
                }
                Ok(Transformed::no(node))
            })
            .map(|t| t.data)?;
        let plan = build_kept_columnar_scans(plan)?;
        let reads = planner.estimated_reads(&plan);
        planner
            .query
            .set_estimated_reads(reads.min(u64::MAX as f64) as u64);
        if has_index_nodes(&plan) {
            assign_levels(&plan, 0)
        } else {
            Ok(plan)
        }
    }

    fn name(&self) -> &str {
        "ooode_index"
    }

    fn schema_check(&self) -> bool {
        // Left outer joins mark the inner columns nullable, as DataFusion's hash join does.
        true
    }
}
