//! Generates TPC-H data once and writes it twice, side by side: as ooode tables (with their
//! indexes) and as Parquet files written with DataFusion's default Parquet writer settings, the
//! stock-DataFusion baseline. Each writer's time is measured separately in the same run.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use datafusion::common::config::TableParquetOptions;
use datafusion::common::file_options::parquet_writer::ParquetWriterOptions;
use datafusion::parquet::arrow::ArrowWriter;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use ooode::storage::{LoadOptions, Manifest, Table, TableWriter};

use crate::tables::{TABLES, TpchTable, expected_rows, generate, schema};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where a data set lives: `<root>/ooode/<table>/` and `<root>/parquet/<table>.parquet`.
#[derive(Debug, Clone)]
pub struct DataSet {
    /// Root directory.
    pub root: PathBuf,
    /// Scale factor.
    pub sf: f64,
}

impl DataSet {
    /// The data set at `root` for scale factor `sf`.
    pub fn new(root: impl Into<PathBuf>, sf: f64) -> Self {
        Self {
            root: root.into(),
            sf,
        }
    }

    /// Directory of ooode table `name`.
    pub fn ooode_table(&self, name: &str) -> PathBuf {
        self.root.join("ooode").join(name)
    }

    /// Parquet file of table `name`.
    pub fn parquet_file(&self, name: &str) -> PathBuf {
        self.root.join("parquet").join(format!("{name}.parquet"))
    }

    /// Whether both copies of every table are complete.
    pub fn is_complete(&self) -> bool {
        TABLES.iter().all(|t| {
            self.ooode_table(t.name).join("manifest.json").exists()
                && self.parquet_file(t.name).exists()
        })
    }
}

/// What writing one table cost.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TableLoadReport {
    /// Table name.
    pub table: String,
    /// Rows.
    pub rows: u64,
    /// Time generating the batches.
    pub generate_secs: f64,
    /// Time in the ooode loader (sort, heap, indexes, fsync).
    pub ooode_secs: f64,
    /// Heap bytes.
    pub heap_bytes: u64,
    /// Bytes per index, by name.
    pub index_bytes: Vec<(String, u64)>,
    /// Bytes of the table's Parquet copy (for full scans).
    pub columnar_bytes: u64,
    /// Time in the Parquet writer.
    pub parquet_secs: f64,
    /// Parquet file bytes.
    pub parquet_bytes: u64,
}

impl TableLoadReport {
    /// All indexes.
    pub fn all_index_bytes(&self) -> u64 {
        self.index_bytes.iter().map(|i| i.1).sum::<u64>()
    }

    fn from_manifest(table: &str, m: &Manifest) -> Self {
        let page = m.page_size as u64;
        Self {
            table: table.to_string(),
            rows: m.row_count,
            generate_secs: 0.0,
            ooode_secs: 0.0,
            heap_bytes: m.heap_pages * page,
            index_bytes: m
                .indexes
                .iter()
                .map(|i| (i.name.clone(), i.tree.pages * page))
                .collect(),
            columnar_bytes: 0,
            parquet_secs: 0.0,
            parquet_bytes: 0,
        }
    }
}

/// Options of [`load_table`] for the ooode copy.
pub fn load_options(t: &TpchTable) -> LoadOptions {
    LoadOptions {
        clustering_key: t.clustering_key.iter().map(|s| s.to_string()).collect(),
        indexes: t
            .indexes
            .iter()
            .map(|cols| cols.iter().map(|s| s.to_string()).collect())
            .collect(),
        replace: true,
        ..Default::default()
    }
}

/// Generates table `t` and writes both copies, timing each writer.
pub fn load_table(
    data: &DataSet,
    t: &TpchTable,
    options: LoadOptions,
    bar: &ProgressBar,
) -> Result<TableLoadReport, BoxError> {
    let schema = schema(t.name);
    let parquet_path = data.parquet_file(t.name);
    std::fs::create_dir_all(parquet_path.parent().expect("parquet dir"))?;
    let parquet_tmp = parquet_path.with_extension("parquet.partial");
    // DataFusion's own defaults, as its Parquet sink sets them up.
    let mut parquet_options = TableParquetOptions::default();
    parquet_options.arrow_schema(&schema);
    let props = ParquetWriterOptions::try_from(&parquet_options)?
        .writer_options()
        .clone();
    let mut parquet =
        ArrowWriter::try_new(File::create(&parquet_tmp)?, schema.clone(), Some(props))?;
    let progress_bar = bar.clone();
    let mut writer =
        TableWriter::create(data.ooode_table(t.name), schema, options)?.with_progress(move |p| {
            let mb = p.bytes_written as f64 / (1 << 20) as f64;
            let rate = mb / p.elapsed.as_secs_f64().max(1e-3);
            progress_bar.set_message(format!("{:?}: {mb:.0} MB written, {rate:.0} MB/s", p.phase));
        });

    let (mut gen_time, mut ooode_time, mut parquet_time) =
        (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut batches = generate(t.name, data.sf, 8192);
    let mut rows = 0u64;
    loop {
        let start = Instant::now();
        let Some(batch) = batches.next() else { break };
        let batch = batch?;
        gen_time += start.elapsed();
        let start = Instant::now();
        writer.write(&batch)?;
        ooode_time += start.elapsed();
        let start = Instant::now();
        parquet.write(&batch)?;
        parquet_time += start.elapsed();
        rows += batch.num_rows() as u64;
        bar.set_position(rows);
    }
    bar.set_message("sorting, writing pages and indexes");
    let start = Instant::now();
    let manifest = writer.finish()?;
    ooode_time += start.elapsed();
    let start = Instant::now();
    parquet.close()?;
    File::open(&parquet_tmp)?.sync_all()?;
    std::fs::rename(&parquet_tmp, &parquet_path)?;
    parquet_time += start.elapsed();

    let mut report = TableLoadReport::from_manifest(t.name, &manifest);
    report.generate_secs = gen_time.as_secs_f64();
    report.ooode_secs = ooode_time.as_secs_f64();
    report.parquet_secs = parquet_time.as_secs_f64();
    report.parquet_bytes = std::fs::metadata(&parquet_path)?.len();
    if let Some(file) = &manifest.columnar {
        report.columnar_bytes = std::fs::metadata(data.ooode_table(t.name).join(file))?.len();
    }
    Ok(report)
}

/// Generates and loads every table that is missing (all of them with `force`); returns a report
/// per table loaded now.
pub fn ensure_dataset(data: &DataSet, force: bool) -> Result<Vec<TableLoadReport>, BoxError> {
    let bars = MultiProgress::new();
    let style = ProgressStyle::with_template(
        "{prefix:>9} [{bar:30}] {human_pos:>10}/{human_len:10} rows {per_sec:>12} {msg}",
    )?
    .progress_chars("=> ");
    let mut reports = Vec::new();
    for t in &TABLES {
        // A table loaded with another index set (an older definition) is loaded again.
        let done = data.ooode_table(t.name).join("manifest.json").exists()
            && data.parquet_file(t.name).exists()
            && Table::open(data.ooode_table(t.name))
                .is_ok_and(|table| indexes_as_defined(&table, t));
        if done && !force {
            continue;
        }
        // lineitem has about 4 rows per order.
        let expect = expected_rows(t.name, data.sf).unwrap_or((6_001_215.0 * data.sf) as u64);
        let bar = bars.add(ProgressBar::new(expect.max(1)));
        bar.set_style(style.clone());
        bar.set_prefix(t.name);
        let report = load_table(data, t, load_options(t), &bar)?;
        bar.set_length(report.rows);
        bar.finish_with_message(format!(
            "ooode {:.1}s  parquet {:.1}s",
            report.ooode_secs, report.parquet_secs
        ));
        record_load(data, &report)?;
        reports.push(report);
    }
    Ok(reports)
}

/// Whether `table`'s secondary indexes are those `def` names, in its order.
fn indexes_as_defined(table: &Table, def: &TpchTable) -> bool {
    let loaded: Vec<&[String]> = table
        .indexes()
        .iter()
        .filter(|i| !i.meta.is_sparse())
        .map(|i| i.meta.columns.as_slice())
        .collect();
    loaded.len() == def.indexes.len()
        && loaded
            .iter()
            .zip(def.indexes)
            .all(|(have, want)| have.iter().map(String::as_str).eq(want.iter().copied()))
}

/// The file keeping each table's load report beside the data, for later reports.
fn load_record_path(data: &DataSet) -> PathBuf {
    data.root.join("load.json")
}

/// Replaces `report`'s table in the data set's load record.
fn record_load(data: &DataSet, report: &TableLoadReport) -> Result<(), BoxError> {
    let mut all = recorded_loads(data);
    all.retain(|r| r.table != report.table);
    all.push(report.clone());
    let path = load_record_path(data);
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(&all)?)?;
    std::fs::rename(tmp, path)?;
    Ok(())
}

/// The load reports recorded for the data set's tables (empty when none was: data loaded
/// before the record existed, or elsewhere).
pub fn recorded_loads(data: &DataSet) -> Vec<TableLoadReport> {
    std::fs::read(load_record_path(data))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Renders load reports as a text table.
pub fn format_load_reports(reports: &[TableLoadReport]) -> String {
    let mb = |b: u64| b as f64 / (1 << 20) as f64;
    let mut out = format!(
        "{:<9} {:>10} {:>9} {:>9} {:>10} {:>10} {:>11} {:>9} {:>10}  indexes\n",
        "table",
        "rows",
        "gen s",
        "ooode s",
        "heap MB",
        "index MB",
        "columnar MB",
        "parquet s",
        "parquet MB"
    );
    for r in reports {
        out += &format!(
            "{:<9} {:>10} {:>9.2} {:>9.2} {:>10.1} {:>10.1} {:>11.1} {:>9.2} {:>10.1}  {}\n",
            r.table,
            r.rows,
            r.generate_secs,
            r.ooode_secs,
            mb(r.heap_bytes),
            mb(r.all_index_bytes()),
            mb(r.columnar_bytes),
            r.parquet_secs,
            mb(r.parquet_bytes),
            r.index_bytes
                .iter()
                .map(|(n, b)| format!("{n} {:.1} MB", mb(*b)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let sum = |f: &dyn Fn(&TableLoadReport) -> f64| reports.iter().map(f).sum::<f64>();
    out += &format!(
        "{:<9} {:>10} {:>9.2} {:>9.2} {:>10.1} {:>10.1} {:>11.1} {:>9.2} {:>10.1}\n",
        "total",
        reports.iter().map(|r| r.rows).sum::<u64>(),
        sum(&|r| r.generate_secs),
        sum(&|r| r.ooode_secs),
        sum(&|r| mb(r.heap_bytes)),
        sum(&|r| mb(r.all_index_bytes())),
        sum(&|r| mb(r.columnar_bytes)),
        sum(&|r| r.parquet_secs),
        sum(&|r| mb(r.parquet_bytes)),
    );
    out
}

/// Default data directory for scale factor `sf`, under `base`.
pub fn default_root(base: &Path, sf: f64) -> PathBuf {
    base.join(format!("sf{sf}"))
}
