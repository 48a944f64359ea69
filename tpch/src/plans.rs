//! `ooode-tpch plans`: what planning one of the many-clients benchmark's queries costs, by
//! phase, on ooode (`auto`) and on stock DataFusion over Parquet. At many clients ooode's
//! queries are bound by planning CPU (a point lookup reads a few pages, but its three-table
//! plan takes milliseconds), so this is where throughput there is decided.
//!
//! Plans are made hot (the tables' pages and the columnar copies' footers already read), one
//! at a time, alternating between the engines so that the machine's drift hits both alike.
//! Beside the three phases of planning SQL text, the same query prepared once
//! ([`ooode_providers::PreparedQuery`]) is bound and planned physically, as a service's
//! prepared statement is at each execution, and the SQL text through a plan cache
//! ([`ooode_providers::PlanCache`]): its shape planned once, the values taken from the text.
//! Then, apart, each logical optimizer rule and each part of the physical plan is timed
//! ([`crate::rule_times`]), so that where planning goes is seen rule by rule.

use std::time::{Duration, Instant};

use datafusion::common::ScalarValue;
use datafusion::prelude::SessionContext;
use ooode_providers::{PlanCache, PreparedQuery};

use crate::concurrency::{between_sql, range_sql};
use crate::datagen::DataSet;
use crate::rule_times::{self, PartTime};
use crate::runner::{contexts, median, query_rows, run_sql};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Median milliseconds of each planning phase of one query on one engine.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct PlanPhases {
    /// Parsing and SQL to a logical plan (analyzer included).
    pub sql_ms: f64,
    /// DataFusion's logical optimizer.
    pub logical_ms: f64,
    /// The physical plan: DataFusion's planner, the tables' scans (ooode's plan-time reads
    /// among them) and the physical optimizer's rules (ooode's among them).
    pub physical_ms: f64,
    /// The whole plan, measured around all three.
    pub total_ms: f64,
    /// The query prepared once: binding its values and the physical plan.
    #[serde(default)]
    pub prepared_ms: f64,
    /// The SQL text through a plan cache holding its shape: parsing, taking the values out,
    /// binding them and the physical plan.
    #[serde(default)]
    pub cached_ms: f64,
}

/// One phase's times, then their medians.
#[derive(Default)]
struct Samples {
    sql: Vec<f64>,
    logical: Vec<f64>,
    physical: Vec<f64>,
    total: Vec<f64>,
    prepared: Vec<f64>,
    cached: Vec<f64>,
}

impl Samples {
    async fn plan_once(&mut self, ctx: &SessionContext, sql: &str) -> Result<(), BoxError> {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let start = Instant::now();
        let state = ctx.state();
        let logical = state.create_logical_plan(sql).await?;
        let parsed = Instant::now();
        let optimized = state.optimize(&logical)?;
        let logical_done = Instant::now();
        let physical = state
            .query_planner()
            .create_physical_plan(&optimized, &state)
            .await?;
        let end = Instant::now();
        std::hint::black_box(physical);
        self.sql.push(ms(parsed - start));
        self.logical.push(ms(logical_done - parsed));
        self.physical.push(ms(end - logical_done));
        self.total.push(ms(end - start));
        Ok(())
    }

    async fn bind_once(&mut self, query: &PreparedQuery, lo: u64, hi: u64) -> Result<(), BoxError> {
        let start = Instant::now();
        let values = vec![ScalarValue::from(lo as i64), ScalarValue::from(hi as i64)];
        std::hint::black_box(query.plan(values).await?);
        self.prepared.push(start.elapsed().as_secs_f64() * 1e3);
        Ok(())
    }

    async fn cached_once(
        &mut self,
        cache: &PlanCache,
        ctx: &SessionContext,
        sql: &str,
    ) -> Result<(), BoxError> {
        let start = Instant::now();
        let planned = cache.plan(ctx, sql).await?;
        self.cached.push(start.elapsed().as_secs_f64() * 1e3);
        if !planned.reused {
            return Err(format!("the plan cache planned {sql} again").into());
        }
        std::hint::black_box(planned);
        Ok(())
    }

    fn medians(self) -> PlanPhases {
        PlanPhases {
            sql_ms: median(self.sql),
            logical_ms: median(self.logical),
            physical_ms: median(self.physical),
            total_ms: median(self.total),
            prepared_ms: median(self.prepared),
            cached_ms: median(self.cached),
        }
    }
}

/// The queries planned: a point lookup and the widest range of the many-clients mix, each
/// with its first and last customer.
pub fn queries(customers: u64) -> Vec<(String, u64, u64)> {
    let widest = (customers / 1000).max(1);
    let (point, range) = (customers / 2, customers / 3);
    vec![
        ("point (N = 1)".to_string(), point, point),
        (format!("range (N = {widest})"), range, range + widest - 1),
    ]
}

/// One query's planning on both engines.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PlanRow {
    /// Which query, e.g. "point (N = 1)".
    pub query: String,
    /// ooode, `auto`, out of order.
    pub ooode: PlanPhases,
    /// Stock DataFusion on Parquet.
    pub stock: PlanPhases,
    /// Where the planning time goes, by part, measured apart.
    #[serde(default)]
    pub parts: PlanParts,
}

/// The logical optimizer by rule and the physical plan by part (the initial plan, each
/// rule), on each engine.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct PlanParts {
    /// ooode's logical optimizer, by rule.
    pub ooode_logical: Vec<PartTime>,
    /// Stock DataFusion's logical optimizer, by rule.
    pub stock_logical: Vec<PartTime>,
    /// ooode's physical plan by part.
    pub ooode_physical: Vec<PartTime>,
    /// Stock DataFusion's physical plan by part.
    pub stock_physical: Vec<PartTime>,
}

/// Plans each query `count` times on each engine; `settings` are further `SET` statements
/// for ooode's session.
pub async fn run(
    data: &DataSet,
    count: usize,
    settings: &[String],
) -> Result<Vec<PlanRow>, BoxError> {
    let (stock, ooode) = contexts(data).await?;
    for s in settings {
        run_sql(&ooode, s).await?;
    }
    let customers = crate::tables::expected_rows("customer", data.sf).unwrap_or(150_000);
    let mut out = Vec::new();
    let prepared = between_sql("$1", "$2");
    let (prepared_ooode, prepared_stock) = (
        PreparedQuery::new(&ooode, &prepared).await?,
        PreparedQuery::new(&stock, &prepared).await?,
    );
    for (name, lo, hi) in queries(customers) {
        let sql = range_sql(lo, hi - lo + 1);
        // Run once on each: the pages the plan reads (range counts) and the footers are
        // then in memory, as in a service that has run a while.
        query_rows(&ooode, &sql).await?;
        query_rows(&stock, &sql).await?;
        let cache = PlanCache::new(16);
        cache.plan(&ooode, &sql).await?;
        cache.plan(&stock, &sql).await?;
        let (mut on_ooode, mut on_stock) = (Samples::default(), Samples::default());
        for _ in 0..count {
            on_ooode.plan_once(&ooode, &sql).await?;
            on_stock.plan_once(&stock, &sql).await?;
            on_ooode.bind_once(&prepared_ooode, lo, hi).await?;
            on_stock.bind_once(&prepared_stock, lo, hi).await?;
            on_ooode.cached_once(&cache, &ooode, &sql).await?;
            on_stock.cached_once(&cache, &stock, &sql).await?;
        }
        // Apart from the timed phases above: the timers would be in them.
        let parts = PlanParts {
            ooode_logical: rule_times::measure_logical(&ooode, &sql, count).await?,
            stock_logical: rule_times::measure_logical(&stock, &sql, count).await?,
            ooode_physical: rule_times::measure(&ooode, &sql, count).await?,
            stock_physical: rule_times::measure(&stock, &sql, count).await?,
        };
        out.push(PlanRow {
            query: name,
            ooode: on_ooode.medians(),
            stock: on_stock.medians(),
            parts,
        });
    }
    Ok(out)
}

/// The measurement as a table.
pub fn format(results: &[PlanRow], count: usize) -> String {
    let mut out = format!(
        "Planning, hot, median of {count} plans per engine (alternating), ms:\n{:<16} {:<19} \
         {:>8} {:>8} {:>9} {:>8} {:>9} {:>8}\n",
        "query", "engine", "SQL", "logical", "physical", "total", "prepared", "cached"
    );
    for row in results {
        for (engine, p) in [
            ("ooode (auto)", &row.ooode),
            ("datafusion parquet", &row.stock),
        ] {
            out.push_str(&format!(
                "{:<16} {engine:<19} {:>8.3} {:>8.3} {:>9.3} {:>8.3} {:>9.3} {:>8.3}\n",
                row.query,
                p.sql_ms,
                p.logical_ms,
                p.physical_ms,
                p.total_ms,
                p.prepared_ms,
                p.cached_ms
            ));
        }
    }
    out.push_str(
        "prepared: the same query prepared once (PreparedQuery), each time its values bound \
         and its physical plan made; cached: the SQL text through a plan cache holding its \
         shape (PlanCache)\n",
    );
    for row in results
        .iter()
        .filter(|r| !r.parts.ooode_physical.is_empty())
    {
        let p = &row.parts;
        let title = |what: &str| {
            format!(
                "{what} of {} by part (each rule timed, apart from the table above)",
                row.query
            )
        };
        out.push('\n');
        out.push_str(&rule_times::format(
            &title("Logical optimizer"),
            &p.ooode_logical,
            &p.stock_logical,
            5.0,
        ));
        out.push_str(&rule_times::format(
            &title("Physical plan"),
            &p.ooode_physical,
            &p.stock_physical,
            5.0,
        ));
    }
    out
}

/// The planning times as grouped bars: per query, each engine from SQL text and prepared.
pub fn plot(results: &[PlanRow]) -> String {
    let queries: Vec<String> = results.iter().map(|r| r.query.clone()).collect();
    let series = |name: &str, f: &dyn Fn(&PlanRow) -> f64| {
        (
            name.to_string(),
            results.iter().map(|r| Some(f(r))).collect::<Vec<_>>(),
        )
    };
    crate::svg::bar_chart(
        "Planning one query, hot (medians)",
        crate::svg::Axis {
            label: "milliseconds",
            log: false,
        },
        &queries,
        &[
            series("ooode, SQL text", &|r| r.ooode.total_ms),
            series("ooode, prepared", &|r| r.ooode.prepared_ms),
            series("ooode, plan cache", &|r| r.ooode.cached_ms),
            series("stock DataFusion, SQL text", &|r| r.stock.total_ms),
            series("stock DataFusion, prepared", &|r| r.stock.prepared_ms),
            series("stock DataFusion, plan cache", &|r| r.stock.cached_ms),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> PlanRow {
        let phases = |total_ms, prepared_ms| PlanPhases {
            sql_ms: 0.4,
            logical_ms: 0.7,
            physical_ms: 0.9,
            total_ms,
            prepared_ms,
            cached_ms: prepared_ms + 0.05,
        };
        PlanRow {
            query: "point (N = 1)".into(),
            ooode: phases(2.068, 1.012),
            stock: phases(2.53, 1.611),
            parts: PlanParts::default(),
        }
    }

    #[test]
    fn the_table_and_the_plot_give_sql_prepared_and_cached_for_both_engines() {
        let table = format(&[row()], 300);
        let ooode = table.lines().find(|l| l.contains("ooode (auto)")).unwrap();
        assert!(ooode.ends_with("2.068     1.012    1.062"), "{ooode}");
        let plot = plot(&[row()]);
        for name in [
            "ooode, SQL text",
            "ooode, prepared",
            "stock DataFusion, SQL text",
            "stock DataFusion, prepared",
            "ooode, plan cache",
            "stock DataFusion, plan cache",
            "point (N = 1)",
        ] {
            assert!(plot.contains(name), "{name}");
        }
        // Six bars (one per series, for the one query) and six legend boxes.
        assert_eq!(plot.matches("<rect x=").count(), 6 + 6, "{plot}");
    }
}
