//! Column statistics of a sharded table (min, max, nulls), gathered while it loads and kept
//! in its shard map: the coordinator plans with them as it would with a Parquet footer's
//! (a filter's selectivity, the build side of a join, whether lookups beat a scan).

use datafusion::arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray};
use datafusion::arrow::compute::{max, max_string, min, min_string};
use datafusion::arrow::datatypes::{ArrowPrimitiveType, DataType, SchemaRef};
use datafusion::arrow::downcast_primitive_array;
use datafusion::catalog::Session;
use datafusion::common::stats::Precision;
use datafusion::common::{ColumnStatistics, DFSchema, Result, ScalarValue, Statistics};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{AnalysisContext, analyze};
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

/// `stats` (of a table of `schema`) for the rows that satisfy `filter`: rows scaled by its
/// selectivity, and each column it narrows given its narrowed bounds and its distinct values
/// scaled by the share of its range kept. (DataFusion's FilterExec caps distinct counts at
/// the rows left but does not scale them: a filtered join key then looks as varied as the
/// whole column, and the join far smaller than it is.) The FilterExec above the scan finds
/// the bounds already narrowed and keeps the rows. Unchanged when the filter cannot be
/// analysed.
pub fn under_filter(
    state: &dyn Session,
    schema: &SchemaRef,
    stats: &Statistics,
    filter: &Expr,
) -> Statistics {
    let attempt = || -> Result<Statistics> {
        let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
        let predicate = state.create_physical_expr(filter.clone(), &df_schema)?;
        let context = AnalysisContext::try_from_statistics(schema, &stats.column_statistics)?;
        let analysis = analyze(&predicate, context, schema)?;
        let Some(&rows) = stats.num_rows.get_value() else {
            return Ok(stats.clone());
        };
        let selectivity = analysis.selectivity.unwrap_or(1.0).clamp(0.0, 1.0);
        let mut left = (rows as f64 * selectivity).ceil() as usize;
        let mut narrowed = selectivity < 1.0;
        let mut out = stats.clone();
        for ((column, bounds), before) in out
            .column_statistics
            .iter_mut()
            .zip(&analysis.boundaries)
            .zip(&stats.column_statistics)
        {
            let Some(interval) = &bounds.interval else {
                left = 0;
                narrowed = true;
                continue;
            };
            let (lo, hi) = (interval.lower(), interval.upper());
            if let Some(share) = range_share(before, lo, hi) {
                narrowed = true;
                if !lo.is_null() {
                    column.min_value = Precision::Inexact(lo.clone());
                }
                if !hi.is_null() {
                    column.max_value = Precision::Inexact(hi.clone());
                }
                if let Some(&d) = before.distinct_count.get_value() {
                    column.distinct_count =
                        Precision::Inexact(((d as f64 * share).ceil() as usize).max(1));
                }
            }
        }
        if !narrowed {
            return Ok(stats.clone());
        }
        out.num_rows = Precision::Inexact(left);
        for column in &mut out.column_statistics {
            if column
                .distinct_count
                .get_value()
                .is_some_and(|&d| d > left.max(1))
            {
                column.distinct_count = Precision::Inexact(left.max(1));
            }
            if column.null_count.get_value().is_some_and(|&n| n > left) {
                column.null_count = Precision::Inexact(left);
            }
        }
        Ok(out)
    };
    attempt().unwrap_or_else(|_| stats.clone())
}

/// The share of a numeric column's range `before` that `lo..=hi` keeps (a null bound: the
/// old one); None when it keeps all of it or the column is not numeric.
fn range_share(before: &ColumnStatistics, lo: &ScalarValue, hi: &ScalarValue) -> Option<f64> {
    let number = |v: &ScalarValue| match v.cast_to(&DataType::Int64) {
        Ok(ScalarValue::Int64(Some(x))) => Some(x as f64),
        _ => match v.cast_to(&DataType::Float64) {
            Ok(ScalarValue::Float64(Some(x))) => Some(x),
            _ => None,
        },
    };
    let old_lo = number(before.min_value.get_value()?)?;
    let old_hi = number(before.max_value.get_value()?)?;
    let new_lo = if lo.is_null() {
        old_lo
    } else {
        number(lo)?.max(old_lo)
    };
    let new_hi = if hi.is_null() {
        old_hi
    } else {
        number(hi)?.min(old_hi)
    };
    let span = old_hi - old_lo;
    if (new_lo == old_lo && new_hi == old_hi) || span <= 0.0 {
        return None;
    }
    Some(((new_hi - new_lo).max(0.0) / span).clamp(0.0, 1.0))
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

    #[test]
    fn a_filter_narrows_rows_bounds_and_the_distinct_values_of_its_column() {
        use datafusion::logical_expr::{col, lit};
        let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("g", DataType::Int64, false),
        ]));
        let column = |lo: i64, hi: i64, distinct: usize| ColumnStatistics {
            min_value: Precision::Inexact(ScalarValue::Int64(Some(lo))),
            max_value: Precision::Inexact(ScalarValue::Int64(Some(hi))),
            null_count: Precision::Exact(0),
            distinct_count: Precision::Inexact(distinct),
            ..ColumnStatistics::new_unknown()
        };
        let stats = Statistics {
            num_rows: Precision::Exact(150_000),
            total_byte_size: Precision::Absent,
            column_statistics: vec![column(1, 150_000, 150_000), column(0, 99, 100)],
        };
        let state = datafusion::prelude::SessionContext::new().state();
        let out = under_filter(&state, &schema, &stats, &col("k").lt_eq(lit(1500i64)));
        let rows = *out.num_rows.get_value().unwrap();
        assert!((1450..=1550).contains(&rows), "{rows}");
        let k = &out.column_statistics[0];
        assert_eq!(
            k.max_value.get_value(),
            Some(&ScalarValue::Int64(Some(1500)))
        );
        let distinct = *k.distinct_count.get_value().unwrap();
        assert!((1450..=1550).contains(&distinct), "{distinct}");
        // Another column keeps its distinct values (below the rows left).
        assert_eq!(
            out.column_statistics[1].distinct_count.get_value(),
            Some(&100)
        );
        // A filter it cannot analyse leaves the statistics as they were.
        let opaque =
            datafusion::logical_expr::Expr::Literal(ScalarValue::Boolean(Some(true)), None);
        assert_eq!(
            under_filter(&state, &schema, &stats, &opaque).num_rows,
            stats.num_rows
        );
    }
}
