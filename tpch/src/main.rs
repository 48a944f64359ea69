//! `ooode-tpch`: generate and load TPC-H data for ooode and the stock DataFusion baseline.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use ooode_tpch::datagen::{DataSet, default_root, ensure_dataset, format_load_reports};

#[derive(Parser)]
#[command(name = "ooode-tpch", about = "TPC-H data and benchmarks for ooode")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate TPC-H at a scale factor; write ooode tables and Parquet files, timing both.
    Gen {
        /// Scale factor.
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        /// Data directory (default: data/sf<SF>).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Regenerate tables that already exist.
        #[arg(long)]
        force: bool,
        /// Also write the load report as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    match Cli::parse().command {
        Command::Gen {
            sf,
            dir,
            force,
            json,
        } => {
            let root = dir.unwrap_or_else(|| default_root(&PathBuf::from("data"), sf));
            let data = DataSet::new(root, sf);
            let reports = ensure_dataset(&data, force)?;
            if reports.is_empty() {
                println!("TPC-H SF {sf} is already in {}", data.root.display());
            } else {
                println!(
                    "TPC-H SF {sf} in {}:\n{}",
                    data.root.display(),
                    format_load_reports(&reports)
                );
            }
            if let Some(path) = json {
                std::fs::write(path, serde_json::to_string_pretty(&reports)?)?;
            }
        }
    }
    Ok(())
}
