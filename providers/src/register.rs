//! One call to add ooode to a DataFusion session.

use std::sync::Arc;

use datafusion::common::config::{ConfigExtension, TableOptions};
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::prelude::{SessionConfig, SessionContext};
use ooode::access::OoodeRuntime;
use ooode::config::OoodeConfig;
use ooode::optimizer::{OoodeIndexRule, OoodeOnePipelineRule};

use crate::factory::OoodeTableFactory;
use crate::remote::{AzureKeys, HttpKeys, StoreTableOptions};
use crate::writer::{OoodeCopyOptions, OoodeFormatFactory};

/// Adds ooode to a session being built: the `OOODE` table factory, the `OOODE` file format
/// (for `COPY ... STORED AS OOODE`), the `ooode.*` settings, the index rule, placed right
/// after DataFusion's filter pushdown (before distribution and sorting are enforced, so
/// DataFusion plans around the index nodes), and the one-pipeline rule right after
/// distribution is enforced.
pub fn with_ooode(mut builder: SessionStateBuilder) -> SessionStateBuilder {
    let config = builder.config().take().unwrap_or_default();
    let config = if config.options().extensions.get::<OoodeConfig>().is_some() {
        config
    } else {
        config.with_option_extension(OoodeConfig::default())
    };
    let mut rules = builder
        .physical_optimizer_rules()
        .take()
        .unwrap_or_else(|| PhysicalOptimizer::new().rules);
    let at = rules
        .iter()
        .position(|r| r.name() == "FilterPushdown")
        .map_or(rules.len(), |i| i + 1);
    rules.insert(at, Arc::new(OoodeIndexRule::new()));
    // Once DataFusion has placed its repartitions, the small index scans' ones come out again.
    let at = rules
        .iter()
        .position(|r| r.name() == "EnsureRequirements")
        .map(|i| i + 1)
        .or_else(|| rules.iter().position(|r| r.name() == "SanityCheckPlan"))
        .unwrap_or(rules.len());
    rules.insert(at, Arc::new(OoodeOnePipelineRule::new()));
    let mut formats = builder
        .file_formats()
        .take()
        .unwrap_or_else(datafusion::execution::SessionStateDefaults::default_file_formats);
    formats.push(Arc::new(OoodeFormatFactory));
    // Table options know the `ooode.` COPY options too: tools that check a COPY's options
    // against them before planning (datafusion-cli does) then accept them.
    let mut table_options = builder
        .table_options()
        .take()
        .unwrap_or_else(|| TableOptions::default_from_session_config(config.options()));
    add_default::<OoodeCopyOptions>(&mut table_options);
    // The stores ooode builds that datafusion-cli does not: their options pass its check too.
    add_default::<StoreTableOptions<AzureKeys>>(&mut table_options);
    add_default::<StoreTableOptions<HttpKeys>>(&mut table_options);
    let mut functions = builder
        .table_functions()
        .take()
        .map(|f| f.into_values().collect::<Vec<_>>())
        .unwrap_or_default();
    if !functions.iter().any(|f| f.name() == "ooode_compact") {
        functions.push(Arc::new(datafusion::catalog::TableFunction::new(
            "ooode_compact".into(),
            Arc::new(crate::compact::CompactFunction),
        )));
    }
    builder
        .with_table_options(table_options)
        .with_file_formats(formats)
        .with_config(config)
        .with_physical_optimizer_rules(rules)
        .with_table_factory("OOODE".into(), Arc::new(OoodeTableFactory))
        .with_table_function_list(functions)
}

/// Adds a default `T` to `options` unless one is there.
fn add_default<T: ConfigExtension + Default>(options: &mut TableOptions) {
    if options.extensions.get::<T>().is_none() {
        options.extensions.insert(T::default());
    }
}

/// A SessionContext with DataFusion's default features and ooode.
pub fn ooode_context(config: SessionConfig) -> SessionContext {
    let builder = SessionStateBuilder::new()
        .with_default_features()
        .with_config(config);
    SessionContext::new_with_state(with_ooode(builder).build())
}

/// The ooode runtime (engines, buffer pool, admission) of a context's `RuntimeEnv`: for
/// tools and tests that empty the pool or read its counters.
pub fn ooode_runtime(ctx: &SessionContext) -> Arc<OoodeRuntime> {
    OoodeRuntime::for_env(&ctx.runtime_env())
}
