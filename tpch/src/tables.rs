//! The eight TPC-H tables: generators (tpchgen-arrow), clustering keys and the default index set.

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use tpchgen::generators::*;
use tpchgen_arrow::*;

/// A boxed batch generator.
pub type BatchIter = Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>> + Send>;

/// How one TPC-H table is stored in ooode.
#[derive(Debug, Clone, Copy)]
pub struct TpchTable {
    /// Table name.
    pub name: &'static str,
    /// Clustering key (the primary key; lineitem by order).
    pub clustering_key: &'static [&'static str],
    /// Secondary indexes: foreign keys the joins of the paper's queries walk, and the date
    /// columns their selective predicates use. A foreign key's index also holds the table's
    /// key where joins go on from it (customer -> orders -> lineitem needs only
    /// `o_orderkey` of the orders of a customer): such joins read no heap page of the table
    /// (index-only).
    pub indexes: &'static [&'static [&'static str]],
}

/// All tables, smallest first.
pub const TABLES: [TpchTable; 8] = [
    TpchTable {
        name: "region",
        clustering_key: &["r_regionkey"],
        indexes: &[],
    },
    TpchTable {
        name: "nation",
        clustering_key: &["n_nationkey"],
        indexes: &[&["n_regionkey"]],
    },
    TpchTable {
        name: "supplier",
        clustering_key: &["s_suppkey"],
        indexes: &[&["s_nationkey", "s_suppkey"]],
    },
    TpchTable {
        name: "customer",
        clustering_key: &["c_custkey"],
        indexes: &[&["c_nationkey", "c_custkey"]],
    },
    TpchTable {
        name: "part",
        clustering_key: &["p_partkey"],
        indexes: &[],
    },
    TpchTable {
        name: "partsupp",
        clustering_key: &["ps_partkey", "ps_suppkey"],
        indexes: &[&["ps_suppkey"]],
    },
    TpchTable {
        name: "orders",
        clustering_key: &["o_orderkey"],
        indexes: &[&["o_custkey", "o_orderkey"], &["o_orderdate"]],
    },
    TpchTable {
        name: "lineitem",
        clustering_key: &["l_orderkey", "l_linenumber"],
        indexes: &[&["l_partkey"], &["l_suppkey"], &["l_shipdate"]],
    },
];

/// The table called `name`.
pub fn table(name: &str) -> Option<TpchTable> {
    TABLES.iter().copied().find(|t| t.name == name)
}

/// Arrow schema of table `name`.
pub fn schema(name: &str) -> SchemaRef {
    match name {
        "region" => RegionArrow::schema_ref(),
        "nation" => NationArrow::schema_ref(),
        "supplier" => SupplierArrow::schema_ref(),
        "customer" => CustomerArrow::schema_ref(),
        "part" => PartArrow::schema_ref(),
        "partsupp" => PartSuppArrow::schema_ref(),
        "orders" => OrderArrow::schema_ref(),
        "lineitem" => LineItemArrow::schema_ref(),
        other => panic!("no TPC-H table {other}"),
    }
}

/// Generates table `name` at scale factor `sf` as batches of `batch_size` rows.
pub fn generate(name: &str, sf: f64, batch_size: usize) -> BatchIter {
    match name {
        "region" => {
            Box::new(RegionArrow::new(RegionGenerator::new(sf, 1, 1)).with_batch_size(batch_size))
        }
        "nation" => {
            Box::new(NationArrow::new(NationGenerator::new(sf, 1, 1)).with_batch_size(batch_size))
        }
        "supplier" => Box::new(
            SupplierArrow::new(SupplierGenerator::new(sf, 1, 1)).with_batch_size(batch_size),
        ),
        "customer" => Box::new(
            CustomerArrow::new(CustomerGenerator::new(sf, 1, 1)).with_batch_size(batch_size),
        ),
        "part" => {
            Box::new(PartArrow::new(PartGenerator::new(sf, 1, 1)).with_batch_size(batch_size))
        }
        "partsupp" => Box::new(
            PartSuppArrow::new(PartSuppGenerator::new(sf, 1, 1)).with_batch_size(batch_size),
        ),
        "orders" => {
            Box::new(OrderArrow::new(OrderGenerator::new(sf, 1, 1)).with_batch_size(batch_size))
        }
        "lineitem" => Box::new(
            LineItemArrow::new(LineItemGenerator::new(sf, 1, 1)).with_batch_size(batch_size),
        ),
        other => panic!("no TPC-H table {other}"),
    }
}

/// Expected row count of `name` at `sf` (the TPC-H specification's cardinalities).
pub fn expected_rows(name: &str, sf: f64) -> Option<u64> {
    let per_sf = match name {
        "region" => return Some(5),
        "nation" => return Some(25),
        "supplier" => 10_000.0,
        "customer" => 150_000.0,
        "part" => 200_000.0,
        "partsupp" => 800_000.0,
        "orders" => 1_500_000.0,
        // lineitem varies around 6,000,000 per SF: no exact number.
        _ => return None,
    };
    Some((per_sf * sf) as u64)
}
