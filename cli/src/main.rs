//! The `ooode` command: a SQL shell on DataFusion with ooode registered (REPL, `-c`, `-f`),
//! and subcommands for the rest (`ooode compact DIR`).

mod args;
mod shell;
mod stores;

use std::process::ExitCode;

use clap::Parser;
use mimalloc::MiMalloc;

use args::{Cli, Command};

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

/// mimalloc hands freed memory back to the OS after a second; the buffer pool frees and
/// refills gigabytes of page buffers (a cold run starts from an emptied pool), and faulting
/// them in again (zeroed, as huge pages) took 10-14 % of a cold 10 % Fig. 4 run. Ten seconds
/// of idle before memory goes back.
fn delay_memory_purge() {
    // mimalloc v3's `mi_option_purge_delay` (libmimalloc-sys names no constant for it).
    const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: mi_option_set only stores a number; any value is valid for this option.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 10_000) };
}

#[tokio::main]
async fn main() -> ExitCode {
    delay_memory_purge();
    env_logger::init();
    match ooode::io::buf::huge_pages_only_where_advised() {
        Ok(ooode::io::buf::HugePages::WhereAdvised) => {}
        Ok(ooode::io::buf::HugePages::Never) => log::info!(
            "ooode: page buffers on 4 KiB pages (this kernel keeps no huge pages only where advised)"
        ),
        Err(e) => eprintln!("ooode: transparent huge pages stay on: {e}"),
    }
    let cli = Cli::parse();
    let done = match cli.command {
        None => shell::run(cli.shell).await,
        Some(Command::Compact { dir }) => compact(&dir).await,
        Some(Command::Worker {
            listen,
            data,
            memory_limit,
        }) => worker(listen, data, memory_limit).await,
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("Error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `ooode worker --listen ADDR --data DIR`: serves until interrupted (Ctrl-C, SIGTERM).
async fn worker(
    listen: std::net::SocketAddr,
    data: std::path::PathBuf,
    memory_limit: Option<usize>,
) -> datafusion::common::Result<()> {
    eprintln!("ooode worker on {listen}, shards in {}", data.display());
    let mut runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::new();
    if let Some(limit) = memory_limit {
        runtime = runtime.with_memory_limit(limit, 1.0);
    }
    let stop = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler installs");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    ooode_distributed::serve_with_runtime(listen, data, runtime.build_arc()?, stop).await
}

/// `ooode compact DIR`.
async fn compact(dir: &std::path::Path) -> datafusion::common::Result<()> {
    let ctx = ooode_providers::ooode_context(datafusion::prelude::SessionConfig::new());
    let r = ooode_providers::compact_table(&ctx, &dir.to_string_lossy()).await?;
    println!(
        "{}: {} segment(s) -> {}, {} rows; replaced segments removed {}, kept {} (still \
         open); uncommitted segments removed {}",
        dir.display(),
        r.segments_before,
        r.segments_after,
        r.rows,
        r.removed,
        r.kept,
        r.uncommitted_removed
    );
    Ok(())
}
