//! Column statistics of a sharded table (min, max, nulls), gathered while it loads and kept
//! in its shard map: the coordinator plans with them as it would with a Parquet footer's
//! (a filter's selectivity, the build side of a join, whether lookups beat a scan).

use datafusion::arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray};
use datafusion::arrow::compute::{max, max_string, min, min_string};
use datafusion::arrow::datatypes::{ArrowPrimitiveType, DataType, SchemaRef};
use datafusion::arrow::downcast_primitive_array;
use datafusion::common::stats::Precision;
use datafusion::common::{ColumnStatistics, ScalarValue, Statistics};
use serde::{Deserialize, Serialize};

/// One column's statistics, values as text (parsed back with the column's type).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnStats {
    /// Smallest value, if known.
    pub min: Option<String>,
    /// Largest value, if known.
    pub max: Option<String>,
    /// Null values.
    pub nulls: u64,
    /// Distinct values, when an index counted them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distinct: Option<u64>,
}

/// Running min / max / nulls of every column of a load.
#[derive(Debug)]
pub struct StatsBuilder {
    columns: Vec<(Option<ScalarValue>, Option<ScalarValue>, u64)>,
}

fn min_max(a: &ArrayRef) -> Option<(ScalarValue, ScalarValue)> {
    if a.null_count() == a.len() {
        return None;
    }
    let t = a.data_type();
    downcast_primitive_array!(
        a => primitive(a, t),
        DataType::Utf8 => {
            let s = a.as_string::<i32>();
            Some((ScalarValue::from(min_string(s)?), ScalarValue::from(max_string(s)?)))
        }
        _ => None
    )
}

fn primitive<T: ArrowPrimitiveType>(
    a: &PrimitiveArray<T>,
    t: &DataType,
) -> Option<(ScalarValue, ScalarValue)> {
    let lo = ScalarValue::new_primitive::<T>(min(a), t).ok()?;
    let hi = ScalarValue::new_primitive::<T>(max(a), t).ok()?;
    Some((lo, hi))
}

fn keep(current: &mut Option<ScalarValue>, candidate: ScalarValue, smaller: bool) {
    let better = match current {
        None => true,
        Some(c) => match candidate.partial_cmp(c) {
            Some(std::cmp::Ordering::Less) => smaller,
            Some(std::cmp::Ordering::Greater) => !smaller,
            _ => false,
        },
    };
    if better {
        *current = Some(candidate);
    }
}

impl StatsBuilder {
    /// Statistics of `columns` columns, nothing seen yet.
    pub fn new(columns: usize) -> Self {
        Self {
            columns: vec![(None, None, 0); columns],
        }
    }

    /// Takes in one batch's columns.
    pub fn add(&mut self, columns: &[ArrayRef]) {
        for (c, (lo, hi, nulls)) in columns.iter().zip(&mut self.columns) {
            *nulls += c.null_count() as u64;
            if let Some((a, b)) = min_max(c) {
                keep(lo, a, true);
                keep(hi, b, false);
            }
        }
    }

    /// The statistics as the shard map keeps them.
    pub fn finish(self) -> Vec<ColumnStats> {
        self.columns
            .into_iter()
            .map(|(lo, hi, nulls)| ColumnStats {
                min: lo.map(|v| v.to_string()),
                max: hi.map(|v| v.to_string()),
                nulls,
                distinct: None,
            })
            .collect()
    }
}

/// DataFusion statistics of a table of `rows` rows with `schema` and `columns`' statistics
/// (missing or unparsable values are unknown).
pub fn table_statistics(schema: &SchemaRef, rows: u64, columns: &[ColumnStats]) -> Statistics {
    let mut stats = Statistics::new_unknown(schema);
    stats.num_rows = Precision::Exact(rows as usize);
    for ((field, out), c) in schema
        .fields()
        .iter()
        .zip(&mut stats.column_statistics)
        .zip(columns)
    {
        let parse = |v: &Option<String>| {
            v.as_ref()
                .and_then(|s| ScalarValue::try_from_string(s.clone(), field.data_type()).ok())
                .map_or(Precision::Absent, Precision::Inexact)
        };
        *out = ColumnStatistics {
            min_value: parse(&c.min),
            max_value: parse(&c.max),
            null_count: Precision::Exact(c.nulls as usize),
            distinct_count: c
                .distinct
                .map_or(Precision::Absent, |d| Precision::Inexact(d as usize)),
            ..ColumnStatistics::new_unknown()
        };
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Date32Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    #[test]
    fn min_max_and_nulls_over_batches_read_back_typed() {
        let mut b = StatsBuilder::new(3);
        let batch = |ints: Vec<Option<i64>>, s: Vec<&str>, d: Vec<i32>| -> Vec<ArrayRef> {
            vec![
                Arc::new(Int64Array::from(ints)),
                Arc::new(StringArray::from(s)),
                Arc::new(Date32Array::from(d)),
            ]
        };
        b.add(&batch(
            vec![Some(5), None, Some(-3)],
            vec!["m", "b", "x"],
            vec![10, 20, 30],
        ));
        b.add(&batch(
            vec![Some(40), Some(7), None],
            vec!["c", "z", "a"],
            vec![5, 6, 7],
        ));
        let cols = b.finish();
        assert_eq!(cols[0].nulls, 2);
        let schema = Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int64, true),
            Field::new("s", DataType::Utf8, false),
            Field::new("d", DataType::Date32, false),
        ]));
        let stats = table_statistics(&schema, 6, &cols);
        let c = &stats.column_statistics;
        assert_eq!(
            c[0].min_value,
            Precision::Inexact(ScalarValue::Int64(Some(-3)))
        );
        assert_eq!(
            c[0].max_value,
            Precision::Inexact(ScalarValue::Int64(Some(40)))
        );
        assert_eq!(c[1].min_value, Precision::Inexact(ScalarValue::from("a")));
        assert_eq!(c[1].max_value, Precision::Inexact(ScalarValue::from("z")));
        assert_eq!(
            c[2].min_value,
            Precision::Inexact(ScalarValue::Date32(Some(5)))
        );
        assert_eq!(stats.num_rows, Precision::Exact(6));
        assert_eq!(c[0].distinct_count, Precision::Absent);
        let mut counted = cols.clone();
        counted[0].distinct = Some(4);
        let stats = table_statistics(&schema, 6, &counted);
        assert_eq!(
            stats.column_statistics[0].distinct_count,
            Precision::Inexact(4)
        );
    }
}
