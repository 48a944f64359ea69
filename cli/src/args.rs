//! The `ooode` command's arguments: a SQL shell by default (the flags datafusion-cli users
//! know), and subcommands for what is not SQL.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use datafusion_cli::print_format::PrintFormat;
use datafusion_cli::print_options::MaxRows;
use ooode::config::ByteSize;

#[derive(Debug, Parser)]
#[command(
    name = "ooode",
    version,
    about = "SQL on DataFusion with ooode's out-of-order index scans and joins",
    long_about = "SQL on DataFusion with ooode's out-of-order index scans and joins.\n\n\
        Without a subcommand: a SQL shell (a REPL, or the statements of -c and -f), with \
        `STORED AS OOODE` tables, `COPY ... STORED AS OOODE`, INSERT, ooode_compact() and the \
        `ooode.*` settings registered.",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub shell: ShellArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Merges the segments of the ooode table in DIR into one (what `SELECT * FROM
    /// ooode_compact('DIR')` does) and prints what it did.
    Compact {
        /// Table directory.
        dir: PathBuf,
    },
    /// Serves this machine's shards of sharded tables to a coordinator (`ooode --workers`):
    /// loads them, and runs the query stages that read them.
    Worker {
        /// Address to listen on, `host:port`; coordinators name the worker by it.
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// Directory holding this worker's shards (created if missing).
        #[arg(long)]
        data: PathBuf,
        /// Memory limit of everything the worker runs (and of ooode's buffer pool share),
        /// e.g. `4G`; none by default.
        #[arg(short = 'm', long, value_parser = byte_size)]
        memory_limit: Option<usize>,
    },
}

/// The SQL shell's arguments.
#[derive(Debug, clap::Args)]
pub struct ShellArgs {
    /// Run this statement (repeatable), then exit.
    #[arg(short = 'c', long = "command", value_parser = non_empty)]
    pub commands: Vec<String>,

    /// Run the statements of this file (repeatable), then exit.
    #[arg(short = 'f', long = "file")]
    pub files: Vec<PathBuf>,

    /// Output format of results.
    #[arg(long, value_enum, default_value_t = PrintFormat::Automatic)]
    pub format: PrintFormat,

    /// Print results only (no banner, no timings).
    #[arg(short = 'q', long)]
    pub quiet: bool,

    /// Most rows shown in the table format (a number, or `inf`).
    #[arg(long, default_value = "40")]
    pub maxrows: MaxRows,

    /// Memory limit of queries (and of ooode's buffer pool share), e.g. `64M`, `2GiB`;
    /// none by default.
    #[arg(short = 'm', long, value_parser = byte_size)]
    pub memory_limit: Option<usize>,

    /// How queries share the memory limit.
    #[arg(long, value_enum, default_value_t = MemoryPoolKind::Greedy)]
    pub memory_pool: MemoryPoolKind,

    /// Rows per batch (DataFusion's default when not given).
    #[arg(short = 'b', long, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch_size: Option<u64>,

    /// Directory to run in (relative paths in statements resolve against it).
    #[arg(short = 'p', long)]
    pub data_path: Option<PathBuf>,

    /// Highlight SQL in the REPL.
    #[arg(long)]
    pub color: bool,

    /// Run as the coordinator of these workers (`host:port,...`, each an `ooode worker`):
    /// sharded tables load onto them and their stages run there.
    #[arg(long, value_delimiter = ',')]
    pub workers: Vec<String>,
}

/// How queries share the memory limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MemoryPoolKind {
    /// First come, first served.
    Greedy,
    /// Operators that can spill share it evenly.
    Fair,
}

fn non_empty(s: &str) -> Result<String, String> {
    match s.trim().is_empty() {
        true => Err("-c needs a statement".into()),
        false => Ok(s.to_string()),
    }
}

fn byte_size(s: &str) -> Result<usize, String> {
    s.parse::<ByteSize>()
        .map(|b| b.0)
        .map_err(|e| e.message().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_flags_and_subcommands_parse() {
        let cli = Cli::try_parse_from([
            "ooode", "-q", "-c", "SELECT 1", "-c", "SELECT 2", "-m", "64M", "--format", "csv",
        ])
        .unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.shell.commands, ["SELECT 1", "SELECT 2"]);
        assert_eq!(cli.shell.memory_limit, Some(64 << 20));
        assert!(cli.shell.quiet);
        let cli = Cli::try_parse_from(["ooode", "compact", "/tmp/t"]).unwrap();
        assert!(matches!(cli.command, Some(Command::Compact { .. })));
        let cli = Cli::try_parse_from(["ooode", "--workers", "127.0.0.1:1,127.0.0.1:2"]).unwrap();
        assert_eq!(cli.shell.workers, ["127.0.0.1:1", "127.0.0.1:2"]);
        let cli = Cli::try_parse_from([
            "ooode",
            "worker",
            "--listen",
            "127.0.0.1:7001",
            "--data",
            "/tmp/w",
        ])
        .unwrap();
        assert!(matches!(cli.command, Some(Command::Worker { .. })));
        for bad in [
            vec!["ooode", "-m", "lots"],
            vec!["ooode", "-c", " "],
            vec!["ooode", "-b", "0"],
            vec!["ooode", "-q", "compact", "/tmp/t"],
            vec!["ooode", "worker", "--listen", "nowhere", "--data", "/tmp/w"],
        ] {
            assert!(Cli::try_parse_from(&bad).is_err(), "{bad:?}");
        }
    }
}
