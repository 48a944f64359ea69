//! A cache of query plans for SQL text: [`PlanCache`] plans `SELECT ... WHERE col = 5` once
//! per shape (its SQL with the literals compared with columns taken out), and for the next
//! query of that shape (`col = 7`) binds the values and plans physically only, as
//! [`crate::PreparedQuery`] does for a query prepared by hand.
//!
//! Why: a service's clients send the same few query shapes as text, each with its own
//! values, and on small data DataFusion's SQL planning and logical optimizer are half of such
//! a query's CPU (the log and `ooode-tpch plans` have the figures). Databases that serve
//! many clients cache plans the same way (SQL Server's simple parameterization, Oracle's
//! cursor sharing).
//!
//! A reused plan gives the rows planning the text gives, or the query is planned as text:
//! - Literals are taken only where no output column is named after them and no plan choice
//!   rests on them before physical planning (the `shape` module); ooode's index decisions, made
//!   physically, see the values.
//! - A value is bound only where binding it is what DataFusion's type coercion would have
//!   done with the literal: an integer for an integer, decimal or float column when the value
//!   converts there and back unchanged, a float for a float column, a string for a string or
//!   date column. Any other pairing makes the shape uncacheable; a value that does not
//!   convert plans that query as text (which then fails or not as it would have).
//! - A plan is reused only in the session that made it, with the same settings (a `SET`
//!   replaces the session's settings object), the same SQL planner extensions and analyzer
//!   and optimizer rules, the same table providers for every table the SQL names (a table
//!   dropped and created again, or a view replaced, is planned again) and the same
//!   functions. A reused plan that fails to bind or to plan physically plans the text
//!   instead, which gives its rows or its own error. Plans calling functions that are not
//!   immutable (`now()`, `random()`) are not cached: the logical optimizer evaluates some of
//!   those when planning.
//! - Anything else (DDL, `SET`, `INSERT`, `EXPLAIN`, SQL with placeholders of its own or with
//!   no literal to take) is planned as `SessionContext::sql` plans it.
//!
//! One difference remains, as for a [`crate::PreparedQuery`]: where the text's optimizer
//! proves a predicate false from its literals (`a = 5 AND a = 6` plans no scan at all), an
//! expression beside it that fails on some row (a division by zero) is never evaluated, while
//! the reused plan evaluates it and fails. [`PlanCache::collect`] then runs the text, so its
//! result is the text's; a stream from [`PlanCache::execute`] or a plan from
//! [`PlanCache::plan`] fails.
//!
//! ```
//! # #[tokio::main]
//! # async fn main() -> datafusion::common::Result<()> {
//! use datafusion::arrow::array::AsArray;
//! use datafusion::arrow::datatypes::Int64Type;
//! use ooode_providers::PlanCache;
//!
//! let ctx = ooode_providers::ooode_context(datafusion::prelude::SessionConfig::new());
//! ctx.sql("CREATE TABLE t AS SELECT value AS id FROM generate_series(1, 100)").await?;
//! let cache = PlanCache::new(1024);
//! for hi in [10, 20] {
//!     let sql = format!("SELECT count(*) FROM t WHERE id BETWEEN 1 AND {hi}");
//!     let batches = cache.collect(&ctx, &sql).await?;
//!     assert_eq!(batches[0].column(0).as_primitive::<Int64Type>().value(0), hi);
//! }
//! assert_eq!(cache.stats().reused, 1);
//! # Ok(()) }
//! ```

mod bind;
mod shape;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::common::config::ConfigOptions;
use datafusion::common::metadata::ScalarAndMetadata;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{ResolvedTableReference, Result};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::expr::{AggregateFunction, WindowFunction};
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility, WindowFunctionDefinition};
use datafusion::physical_plan::{ExecutionPlan, collect, execute_stream};
use datafusion::prelude::SessionContext;
use parking_lot::Mutex;

use shape::{Literal, Shape, shape_of};

/// Plans of SQL text, one per query shape and session, reused with each query's values.
/// Shared by all tasks of a service (`Arc<PlanCache>` or a static); bounded to `capacity`
/// shapes, the least recently used dropped first.
pub struct PlanCache {
    capacity: usize,
    shapes: Mutex<HashMap<String, Slot>>,
    clock: AtomicU64,
    reused: AtomicU64,
    planned: AtomicU64,
    as_text: AtomicU64,
}

/// What a [`PlanCache`] has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanCacheStats {
    /// Queries that reused a cached plan.
    pub reused: u64,
    /// Queries whose shape was planned and cached (or found uncacheable).
    pub planned: u64,
    /// Queries planned as text: no shape, an uncacheable shape, or a value that does not
    /// convert to its column's type.
    pub as_text: u64,
    /// Shapes held.
    pub shapes: usize,
}

/// A planned query: its physical plan, and the logical plan it came from (optimized, with
/// placeholders, when reused; as `SessionContext::sql` made it otherwise).
#[derive(Debug, Clone)]
pub struct PlannedSql {
    /// The physical plan, to execute with the session's task context.
    pub physical: Arc<dyn ExecutionPlan>,
    /// The logical plan it was made from.
    pub logical: Arc<LogicalPlan>,
    /// Whether a cached plan was reused.
    pub reused: bool,
}

struct Slot {
    entry: Arc<Entry>,
    last_used: u64,
}

/// A shape's plan, with what must still hold for it to be reused.
struct Entry {
    /// The settings it was planned with (compared by identity: `SET` replaces them).
    options: Arc<ConfigOptions>,
    /// The SQL planner's extensions and the analyzer's and logical optimizer's rules it was
    /// planned with (by identity): a session built from another's state with its own rules
    /// (a row filter in an analyzer rule) keeps the other's id.
    planners: Vec<usize>,
    /// Every table the SQL names, with the provider it was planned with.
    tables: Vec<(ResolvedTableReference, Arc<dyn TableProvider>)>,
    /// Every function the plan calls, with the definition it was planned with.
    functions: Vec<FunctionUse>,
    plan: Cached,
}

enum Cached {
    /// Analyzed and optimized with placeholders; each parameter's field, `$1` first.
    Plan {
        logical: Arc<LogicalPlan>,
        parameters: Vec<bind::Parameter>,
    },
    /// Planned as text every time (see the module's documentation for why a shape is).
    Uncacheable,
}

enum FunctionUse {
    Scalar(String, usize),
    Aggregate(String, usize),
    Window(String, usize),
}

impl PlanCache {
    /// A cache holding at most `capacity` shapes (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            shapes: Mutex::new(HashMap::new()),
            clock: AtomicU64::new(0),
            reused: AtomicU64::new(0),
            planned: AtomicU64::new(0),
            as_text: AtomicU64::new(0),
        }
    }

    /// What the cache has done so far.
    pub fn stats(&self) -> PlanCacheStats {
        PlanCacheStats {
            reused: self.reused.load(Ordering::Relaxed),
            planned: self.planned.load(Ordering::Relaxed),
            as_text: self.as_text.load(Ordering::Relaxed),
            shapes: self.shapes.lock().len(),
        }
    }

    /// Drops every cached plan.
    pub fn clear(&self) {
        self.shapes.lock().clear();
    }

    /// Drops the plans of `ctx`'s session, as a service does when a client's session ends: a
    /// cached plan holds the providers of the tables it reads (as any plan does), so a
    /// dropped table's provider lives on until its plans are evicted or dropped.
    pub fn clear_session(&self, ctx: &SessionContext) {
        let prefix = session_prefix(ctx);
        self.shapes
            .lock()
            .retain(|key, _| !key.starts_with(&prefix));
    }

    /// Plans one SQL statement in `ctx`, as `ctx.sql(sql)` and its DataFrame's physical plan
    /// would (statements other than queries run as they do there), reusing the plan of an
    /// earlier query of the same shape.
    pub async fn plan(&self, ctx: &SessionContext, sql: &str) -> Result<PlannedSql> {
        let state = ctx.state();
        let options = state.config().options();
        let statement = state.sql_to_statement(sql, &options.sql_parser.dialect)?;
        let floats_as_decimals = options.sql_parser.parse_float_as_decimal;
        let shape = match shape_of(statement, floats_as_decimals) {
            Ok(shape) => shape,
            Err(statement) => {
                self.as_text.fetch_add(1, Ordering::Relaxed);
                return as_text(ctx, &state, *statement).await;
            }
        };
        let key = key_of(ctx, &shape);
        let (entry, reused) = match self.lookup(&key) {
            Some(entry) if entry.holds(&state).await? => (entry, true),
            _ => {
                let Some(entry) = Entry::plan(&state, &shape).await? else {
                    // A name that is no table: planning the text says what is wrong.
                    return self.text_again(ctx, &state, sql).await;
                };
                self.planned.fetch_add(1, Ordering::Relaxed);
                let entry = Arc::new(entry);
                self.insert(key, Arc::clone(&entry));
                (entry, false)
            }
        };
        let Cached::Plan {
            logical,
            parameters,
        } = &entry.plan
        else {
            return self.text_again(ctx, &state, sql).await;
        };
        let physical = match bind::values(parameters, &shape.literals) {
            Some(values) => physical_plan(&state, logical, values).await,
            None => None,
        };
        // A value that does not convert, or a plan with placeholders that does not plan
        // physically: the text, which gives its rows or its own error.
        let Some(physical) = physical else {
            return self.text_again(ctx, &state, sql).await;
        };
        if reused {
            self.reused.fetch_add(1, Ordering::Relaxed);
        }
        Ok(PlannedSql {
            physical,
            logical: Arc::clone(logical),
            reused,
        })
    }

    /// Plans `sql` as text, parsing it again (its statement became the shape).
    async fn text_again(
        &self,
        ctx: &SessionContext,
        state: &SessionState,
        sql: &str,
    ) -> Result<PlannedSql> {
        self.as_text.fetch_add(1, Ordering::Relaxed);
        let dialect = state.config().options().sql_parser.dialect;
        let statement = state.sql_to_statement(sql, &dialect)?;
        as_text(ctx, state, statement).await
    }

    /// Plans `sql` (as [`Self::plan`]) and executes it: the output partitions merged.
    pub async fn execute(
        &self,
        ctx: &SessionContext,
        sql: &str,
    ) -> Result<SendableRecordBatchStream> {
        let planned = self.plan(ctx, sql).await?;
        execute_stream(planned.physical, ctx.task_ctx())
    }

    /// Plans `sql` (as [`Self::plan`]), executes it and collects the output. Where a reused
    /// plan fails while executing, the text is planned and run instead, so that the result,
    /// rows or error, is the text's even where its optimizer drops a failing expression.
    pub async fn collect(&self, ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>> {
        let planned = self.plan(ctx, sql).await?;
        match collect(planned.physical, ctx.task_ctx()).await {
            Err(_) if planned.reused => {
                let state = ctx.state();
                let planned = self.text_again(ctx, &state, sql).await?;
                collect(planned.physical, ctx.task_ctx()).await
            }
            done => done,
        }
    }

    fn lookup(&self, key: &str) -> Option<Arc<Entry>> {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut shapes = self.shapes.lock();
        let slot = shapes.get_mut(key)?;
        slot.last_used = now;
        Some(Arc::clone(&slot.entry))
    }

    fn insert(&self, key: String, entry: Arc<Entry>) {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut shapes = self.shapes.lock();
        if shapes.len() >= self.capacity && !shapes.contains_key(&key) {
            // A linear search, only when a new shape arrives at a full cache.
            let oldest = shapes
                .iter()
                .min_by_key(|(_, slot)| slot.last_used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                shapes.remove(&oldest);
            }
        }
        shapes.insert(
            key,
            Slot {
                entry,
                last_used: now,
            },
        );
    }
}

impl std::fmt::Debug for PlanCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanCache")
            .field("capacity", &self.capacity)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// The physical plan of `logical` with `values` bound; None where that fails.
async fn physical_plan(
    state: &SessionState,
    logical: &LogicalPlan,
    values: HashMap<String, ScalarAndMetadata>,
) -> Option<Arc<dyn ExecutionPlan>> {
    let bound = bind::bind_plan(logical, &values).ok()?;
    state
        .query_planner()
        .create_physical_plan(&bound, state)
        .await
        .ok()
}

/// The session, the shape's SQL and its literals' kinds: a plan made for `a = 5` is not
/// reused for `a = '5'`.
fn key_of(ctx: &SessionContext, shape: &Shape) -> String {
    let mut key = session_prefix(ctx);
    key.extend(shape.literals.iter().map(Literal::kind));
    key.push('\0');
    key.push_str(&shape.statement.to_string());
    key
}

/// The start of every key of `ctx`'s session.
fn session_prefix(ctx: &SessionContext) -> String {
    let mut prefix = ctx.session_id();
    prefix.push('\0');
    prefix
}

/// Plans `statement` as `SessionContext::sql` does (running DDL and `SET` as it does).
async fn as_text(
    ctx: &SessionContext,
    state: &SessionState,
    statement: datafusion::sql::parser::Statement,
) -> Result<PlannedSql> {
    let plan = state.statement_to_plan(statement).await?;
    let frame = ctx.execute_logical_plan(plan).await?;
    let logical = Arc::new(frame.logical_plan().clone());
    Ok(PlannedSql {
        physical: frame.create_physical_plan().await?,
        logical,
        reused: false,
    })
}

impl Entry {
    /// Plans `shape` with placeholders, or finds it uncacheable; None where a table it names
    /// does not exist. Errors only where looking up the tables does.
    async fn plan(state: &SessionState, shape: &Shape) -> Result<Option<Self>> {
        // The providers first: one replaced while planning then fails the next check.
        let Some(tables) = tables_of(state, &shape.statement).await? else {
            return Ok(None);
        };
        let plan = Self::logical(state, shape).await;
        let (functions, plan) = match plan {
            Some((functions, plan)) => (functions, plan),
            None => (Vec::new(), Cached::Uncacheable),
        };
        Ok(Some(Self {
            options: Arc::clone(state.config().options()),
            planners: planners_of(state).collect(),
            tables,
            functions,
            plan,
        }))
    }

    async fn logical(state: &SessionState, shape: &Shape) -> Option<(Vec<FunctionUse>, Cached)> {
        let plan = state
            .statement_to_plan(shape.statement.clone())
            .await
            .ok()?;
        let functions = functions_of(&plan)?
            .into_iter()
            .filter(|f| f.registered_in(state))
            .collect();
        let parameters = bind::parameters(&plan, &shape.literals)?;
        let logical = Arc::new(state.optimize(&plan).ok()?);
        Some((
            functions,
            Cached::Plan {
                logical,
                parameters,
            },
        ))
    }

    /// Whether the plan may be reused in `state`.
    async fn holds(&self, state: &SessionState) -> Result<bool> {
        if !Arc::ptr_eq(&self.options, state.config().options())
            || !self.planners.iter().copied().eq(planners_of(state))
        {
            return Ok(false);
        }
        if !self.functions.iter().all(|f| f.registered_in(state)) {
            return Ok(false);
        }
        for (reference, planned) in &self.tables {
            match provider_of(state, reference).await? {
                Some(current) if address(&current) == address(planned) => {}
                _ => return Ok(false),
            }
        }
        Ok(true)
    }
}

impl FunctionUse {
    /// Whether `state` names this very definition. Functions not registered (made by the SQL
    /// planner itself) are fixed by DataFusion's code and need no check.
    fn registered_in(&self, state: &SessionState) -> bool {
        let current = match self {
            FunctionUse::Scalar(name, _) => state.scalar_functions().get(name).map(address),
            FunctionUse::Aggregate(name, _) => state.aggregate_functions().get(name).map(address),
            FunctionUse::Window(name, _) => state.window_functions().get(name).map(address),
        };
        let (FunctionUse::Scalar(_, planned)
        | FunctionUse::Aggregate(_, planned)
        | FunctionUse::Window(_, planned)) = self;
        current == Some(*planned)
    }
}

/// The addresses of the planners and rules that make a logical plan in `state` (compared on
/// every reuse, so not collected there).
fn planners_of(state: &SessionState) -> impl Iterator<Item = usize> + '_ {
    let analyzer = state.analyzer();
    let rules = analyzer.rules.iter().map(address);
    let rewrites = analyzer.function_rewrites.iter().map(address);
    let optimizers = state.optimizers().iter().map(address);
    let expr_planners = state.expr_planners().iter().map(address);
    let relation_planners = state.relation_planners().iter().map(address);
    rules
        .chain(rewrites)
        .chain(optimizers)
        .chain(expr_planners)
        .chain(relation_planners)
}

/// The address of what an `Arc` points to, without its vtable: identity of a provider or
/// function definition.
fn address<T: ?Sized>(arc: &Arc<T>) -> usize {
    Arc::as_ptr(arc).cast::<()>() as usize
}

/// The tables `statement` names (its WITH queries' names aside), resolved as DataFusion's SQL
/// planner resolves them, each with its provider now; None if one is no table.
async fn tables_of(
    state: &SessionState,
    statement: &datafusion::sql::parser::Statement,
) -> Result<Option<Vec<(ResolvedTableReference, Arc<dyn TableProvider>)>>> {
    let catalog = &state.config_options().catalog;
    let mut tables = Vec::new();
    for reference in state.resolve_table_references(statement)? {
        let resolved = reference.resolve(&catalog.default_catalog, &catalog.default_schema);
        let Some(provider) = provider_of(state, &resolved).await? else {
            return Ok(None);
        };
        tables.push((resolved, provider));
    }
    Ok(Some(tables))
}

async fn provider_of(
    state: &SessionState,
    reference: &ResolvedTableReference,
) -> Result<Option<Arc<dyn TableProvider>>> {
    match state.schema_for_ref(reference.clone()) {
        Ok(schema) => schema.table(&reference.table).await,
        Err(_) => Ok(None),
    }
}

/// Whether every function `plan` calls is immutable: the logical optimizer may evaluate the
/// others (`now()` at the query's start), so a plan calling one is optimized per execution.
pub(crate) fn calls_only_immutable(plan: &LogicalPlan) -> bool {
    functions_of(plan).is_some()
}

/// The functions `plan` calls, or None if one of them is not immutable.
fn functions_of(plan: &LogicalPlan) -> Option<Vec<FunctionUse>> {
    let mut uses = Vec::new();
    let mut immutable = true;
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                match e {
                    Expr::ScalarFunction(f) => {
                        immutable &= f.func.signature().volatility == Volatility::Immutable;
                        uses.push(FunctionUse::Scalar(f.func.name().into(), address(&f.func)));
                    }
                    Expr::AggregateFunction(AggregateFunction { func, .. }) => {
                        uses.push(FunctionUse::Aggregate(func.name().into(), address(func)));
                    }
                    Expr::WindowFunction(w) => {
                        let WindowFunction { fun, .. } = w.as_ref();
                        match fun {
                            WindowFunctionDefinition::AggregateUDF(f) => {
                                uses.push(FunctionUse::Aggregate(f.name().into(), address(f)))
                            }
                            WindowFunctionDefinition::WindowUDF(f) => {
                                uses.push(FunctionUse::Window(f.name().into(), address(f)))
                            }
                        }
                    }
                    _ => {}
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    immutable.then_some(uses)
}
