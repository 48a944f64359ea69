//! Where a physical plan's time goes, rule by rule: the session's physical optimizer rules
//! wrapped in timers, the query planned again and again, each rule's time summed. The
//! initial plan (DataFusion's planner and the tables' scans) is what the plan took beyond
//! the rules. Measured in a session of its own, so `plans`' timed phases carry no timers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_optimizer::{PhysicalOptimizerContext, PhysicalOptimizerRule};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A rule and the nanoseconds spent in it so far.
#[derive(Debug)]
struct Timed {
    inner: Arc<dyn PhysicalOptimizerRule + Send + Sync>,
    nanos: AtomicU64,
}

impl Timed {
    fn time<T>(&self, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = f();
        self.nanos
            .fetch_add(start.elapsed().as_nanos() as u64, Relaxed);
        out
    }
}

impl PhysicalOptimizerRule for Timed {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.time(|| self.inner.optimize(plan, config))
    }

    // Rules that use the context (statistics) get it, as they would unwrapped.
    fn optimize_with_context(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        context: &dyn PhysicalOptimizerContext,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.time(|| self.inner.optimize_with_context(plan, context))
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn schema_check(&self) -> bool {
        self.inner.schema_check()
    }
}

/// Microseconds per plan of one part of planning: a rule, or the time outside the rules.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PartTime {
    /// A rule's name, or [`INITIAL_PLAN`] / [`CHECKS`].
    pub part: String,
    /// Mean microseconds per plan.
    pub us: f64,
}

/// The name under which the time outside every rule is reported.
pub const INITIAL_PLAN: &str = "initial plan";

/// Plans `sql`'s optimized logical plan physically `count` times in a copy of `ctx`'s session
/// whose rules are timed: the initial plan first, then every rule in the order they run.
pub async fn measure(
    ctx: &SessionContext,
    sql: &str,
    count: usize,
) -> Result<Vec<PartTime>, BoxError> {
    let state = ctx.state();
    let timed: Vec<Arc<Timed>> = state
        .physical_optimizers()
        .iter()
        .map(|r| {
            Arc::new(Timed {
                inner: r.clone(),
                nanos: AtomicU64::new(0),
            })
        })
        .collect();
    let rules = timed
        .iter()
        .map(|t| t.clone() as Arc<dyn PhysicalOptimizerRule + Send + Sync>)
        .collect();
    let state = SessionStateBuilder::new_from_existing(state)
        .with_physical_optimizer_rules(rules)
        .build();
    let optimized = state.optimize(&state.create_logical_plan(sql).await?)?;
    let mut total = 0u128;
    for _ in 0..count.max(1) {
        let start = Instant::now();
        let plan = state
            .query_planner()
            .create_physical_plan(&optimized, &state)
            .await?;
        total += start.elapsed().as_nanos();
        std::hint::black_box(plan);
    }
    let rules = timed
        .iter()
        .map(|t| (t.name().to_string(), t.nanos.load(Relaxed) as u128));
    Ok(per_plan(INITIAL_PLAN, total, rules.collect(), count))
}

/// Mean microseconds per plan of `count` plans: `rest` (what `total` took beyond the rules)
/// first, then each rule's.
fn per_plan(rest: &str, total: u128, rules: Vec<(String, u128)>, count: usize) -> Vec<PartTime> {
    let us = |nanos: u128| nanos as f64 / count.max(1) as f64 / 1e3;
    let in_rules: u128 = rules.iter().map(|(_, n)| n).sum();
    let rest = PartTime {
        part: rest.into(),
        us: us(total.saturating_sub(in_rules)),
    };
    std::iter::once(rest)
        .chain(
            rules
                .into_iter()
                .map(|(part, n)| PartTime { part, us: us(n) }),
        )
        .collect()
}

/// Optimizes `sql`'s logical plan `count` times with the session's logical optimizer, timing
/// each rule (summed over the optimizer's passes, in the order they first ran). DataFusion
/// reports a rule when it ends, so each rule's time runs from the end of the one before (the
/// first rule's from the optimizer's start, its check of the input plan included); "checks"
/// is what follows the last rule (the optimizer's closing checks).
pub async fn measure_logical(
    ctx: &SessionContext,
    sql: &str,
    count: usize,
) -> Result<Vec<PartTime>, BoxError> {
    let state = ctx.state();
    let logical = state.create_logical_plan(sql).await?;
    let mut nanos: Vec<(String, u128)> = Vec::new();
    let mut total = 0u128;
    for _ in 0..count.max(1) {
        let start = Instant::now();
        let mut last = start;
        let plan = state
            .optimizer()
            .optimize(logical.clone(), &state, |_, rule| {
                let now = Instant::now();
                let spent = (now - last).as_nanos();
                last = now;
                match nanos.iter_mut().find(|(name, _)| name == rule.name()) {
                    Some((_, n)) => *n += spent,
                    None => nanos.push((rule.name().to_string(), spent)),
                }
            })?;
        total += start.elapsed().as_nanos();
        std::hint::black_box(plan);
    }
    Ok(per_plan(CHECKS, total, nanos, count))
}

/// The name under which the logical optimizer's time outside its rules is reported.
pub const CHECKS: &str = "checks";

/// Each part with the how-many-th of its name it is (a rule may run twice, as
/// `ProjectionPushdown` does), so that the engines' lists line up by name and turn.
fn keyed(parts: &[PartTime]) -> Vec<((&str, usize), f64)> {
    let mut seen: Vec<&str> = Vec::new();
    parts
        .iter()
        .map(|p| {
            let turn = seen.iter().filter(|n| **n == p.part).count();
            seen.push(&p.part);
            ((p.part.as_str(), turn), p.us)
        })
        .collect()
}

/// `title`'s parts of both engines side by side, those above `floor_us` on either, in the
/// order they run, and the total.
pub fn format(title: &str, ooode: &[PartTime], stock: &[PartTime], floor_us: f64) -> String {
    let mut out = format!(
        "{title}, mean us per plan:\n{:<32} {:>9} {:>9}\n",
        "part", "ooode", "stock"
    );
    let (ooode, stock) = (keyed(ooode), keyed(stock));
    let of = |parts: &[((&str, usize), f64)], key| {
        parts.iter().find(|(k, _)| *k == key).map_or(0.0, |p| p.1)
    };
    let mut keys: Vec<(&str, usize)> = ooode.iter().map(|p| p.0).collect();
    for (key, _) in &stock {
        if !keys.contains(key) {
            keys.push(*key);
        }
    }
    let mut small = (0.0, 0.0);
    for key in keys {
        let (o, s) = (of(&ooode, key), of(&stock, key));
        if o.max(s) < floor_us {
            small = (small.0 + o, small.1 + s);
            continue;
        }
        out.push_str(&format!("{:<32} {o:>9.1} {s:>9.1}\n", key.0));
    }
    out.push_str(&format!(
        "{:<32} {:>9.1} {:>9.1}\n",
        format!("other rules (under {floor_us} us)"),
        small.0,
        small.1
    ));
    let sum = |parts: &[((&str, usize), f64)]| parts.iter().fold(0.0, |sum, p| sum + p.1);
    out.push_str(&format!(
        "{:<32} {:>9.1} {:>9.1}\n",
        "total",
        sum(&ooode),
        sum(&stock)
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(part: &str, us: f64) -> PartTime {
        PartTime {
            part: part.into(),
            us,
        }
    }

    #[test]
    fn parts_of_either_engine_are_listed_and_small_ones_summed() {
        let ooode = [
            part(INITIAL_PLAN, 200.0),
            part("OoodeIndexRule", 50.0),
            part("LimitPushdown", 1.0),
        ];
        let stock = [part(INITIAL_PLAN, 300.0), part("LimitPushdown", 2.0)];
        let text = format("point", &ooode, &stock, 5.0);
        assert!(text.starts_with("point, mean us per plan:"));
        assert!(text.contains("initial plan                         200.0     300.0"));
        assert!(text.contains("OoodeIndexRule                        50.0       0.0"));
        assert!(text.contains("other rules (under 5 us)               1.0       2.0"));
        assert!(text.contains("total                                251.0     302.0"));
        assert!(!text.contains("LimitPushdown"));
    }

    #[test]
    fn a_rule_that_runs_twice_is_listed_twice_with_its_own_times() {
        let ooode = [part("A", 10.0), part("B", 20.0), part("A", 30.0)];
        let stock = [part("A", 1.0), part("A", 7.0)];
        let text = format("x", &ooode, &stock, 0.5);
        let rows: Vec<&str> = text.lines().skip(2).take(3).collect();
        assert_eq!(
            rows,
            [
                "A                                     10.0       1.0",
                "B                                     20.0       0.0",
                "A                                     30.0       7.0",
            ]
        );
    }

    #[tokio::test]
    async fn every_rule_is_timed_and_the_plan_is_the_sessions() {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t AS VALUES (1, 'a'), (2, 'b')")
            .await
            .unwrap();
        let parts = measure(&ctx, "SELECT * FROM t WHERE column1 = 2", 3)
            .await
            .unwrap();
        let rules = ctx.state().physical_optimizers().len();
        assert_eq!(parts.len(), rules + 1);
        assert_eq!(parts[0].part, INITIAL_PLAN);
        assert_eq!(parts[1].part, ctx.state().physical_optimizers()[0].name());
        // Planning takes time somewhere: rules that ran were timed.
        assert!(parts.iter().skip(1).any(|p| p.us > 0.0));
        let logical = measure_logical(&ctx, "SELECT * FROM t WHERE column1 = 2", 3)
            .await
            .unwrap();
        assert_eq!(logical[0].part, CHECKS);
        let state = ctx.state();
        let names: Vec<&str> = state.optimizer().rules.iter().map(|r| r.name()).collect();
        assert!(
            logical
                .iter()
                .skip(1)
                .all(|p| names.contains(&p.part.as_str()))
        );
        assert!(logical.len() > 1);
    }
}
