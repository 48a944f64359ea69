//! From a predicate to B+tree key ranges: which conditions on an index's first column the
//! predicate implies (`=`, `<`, `<=`, `>`, `>=`, `IN (...)`, combined with AND).
//!
//! The ranges only narrow the rows to read; the whole predicate is still applied to them, so
//! a condition this module does not understand costs reads, never results.

use std::ops::Bound;
use std::sync::Arc;

use arrow::datatypes::FieldRef;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, InListExpr, Literal};
use datafusion::physical_expr::utils::split_conjunction;

use crate::access::to_df;
use crate::storage::btree::KeyRange;
use crate::storage::key::prefix_successor;
use crate::storage::{KeyEncoder, Table};

/// Conditions on one column.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnBounds {
    /// Lower bound.
    pub lower: Bound<ScalarValue>,
    /// Upper bound.
    pub upper: Bound<ScalarValue>,
    /// Exact values (from `=` or `IN`), when known.
    pub points: Option<Vec<ScalarValue>>,
}

fn column_of(e: &Arc<dyn PhysicalExpr>) -> Option<usize> {
    e.downcast_ref::<Column>().map(|c| c.index())
}

fn literal_of(e: &Arc<dyn PhysicalExpr>) -> Option<ScalarValue> {
    e.downcast_ref::<Literal>()
        .map(|l| l.value().clone())
        .filter(|v| !v.is_null())
}

fn tighter(a: &ScalarValue, b: &ScalarValue, want_greater: bool) -> bool {
    match a.partial_cmp(b) {
        Some(std::cmp::Ordering::Greater) => want_greater,
        Some(std::cmp::Ordering::Less) => !want_greater,
        _ => false,
    }
}

/// The conditions `predicate` places on column `column` of its input, if any.
pub fn column_bounds(predicate: &Arc<dyn PhysicalExpr>, column: usize) -> Option<ColumnBounds> {
    let mut b = ColumnBounds {
        lower: Bound::Unbounded,
        upper: Bound::Unbounded,
        points: None,
    };
    let mut found = false;
    for conjunct in split_conjunction(predicate) {
        if let Some(bin) = conjunct.downcast_ref::<BinaryExpr>() {
            let (op, value) = match (column_of(bin.left()), literal_of(bin.right())) {
                (Some(c), Some(v)) if c == column => (*bin.op(), v),
                _ => match (literal_of(bin.left()), column_of(bin.right())) {
                    (Some(v), Some(c)) if c == column => match bin.op().swap() {
                        Some(op) => (op, v),
                        None => continue,
                    },
                    _ => continue,
                },
            };
            let set_lower = |b: &mut ColumnBounds, new: Bound<ScalarValue>| {
                let replace = match (&b.lower, &new) {
                    (Bound::Unbounded, _) => true,
                    (
                        Bound::Included(o) | Bound::Excluded(o),
                        Bound::Included(n) | Bound::Excluded(n),
                    ) => tighter(n, o, true),
                    _ => false,
                };
                if replace {
                    b.lower = new;
                }
            };
            let set_upper = |b: &mut ColumnBounds, new: Bound<ScalarValue>| {
                let replace = match (&b.upper, &new) {
                    (Bound::Unbounded, _) => true,
                    (
                        Bound::Included(o) | Bound::Excluded(o),
                        Bound::Included(n) | Bound::Excluded(n),
                    ) => tighter(n, o, false),
                    _ => false,
                };
                if replace {
                    b.upper = new;
                }
            };
            match op {
                Operator::Eq => b.points = Some(vec![value]),
                Operator::Lt => set_upper(&mut b, Bound::Excluded(value)),
                Operator::LtEq => set_upper(&mut b, Bound::Included(value)),
                Operator::Gt => set_lower(&mut b, Bound::Excluded(value)),
                Operator::GtEq => set_lower(&mut b, Bound::Included(value)),
                _ => continue,
            }
            found = true;
        } else if let Some(in_list) = conjunct.downcast_ref::<InListExpr>() {
            if in_list.negated() || column_of(in_list.expr()) != Some(column) {
                continue;
            }
            let values: Option<Vec<_>> = in_list.list().iter().map(literal_of).collect();
            if let Some(values) = values
                && b.points.is_none()
            {
                b.points = Some(values);
                found = true;
            }
        }
    }
    found.then_some(b)
}

/// Key ranges, for an index whose first column is `field`, that hold every row satisfying
/// `bounds`. Empty when no row can.
pub fn key_ranges(bounds: &ColumnBounds, field: &FieldRef) -> Result<Vec<KeyRange>> {
    let encoder = KeyEncoder::new(std::slice::from_ref(field)).map_err(to_df)?;
    let encode = |v: &ScalarValue| -> Result<Vec<u8>> {
        let array = v.to_array()?;
        let array = if array.data_type() == field.data_type() {
            array
        } else {
            arrow::compute::cast(&array, field.data_type())?
        };
        encoder.encode_row(&[array], 0).map_err(to_df)
    };
    if let Some(points) = &bounds.points {
        let mut keys = points.iter().map(encode).collect::<Result<Vec<_>>>()?;
        keys.sort();
        keys.dedup();
        return Ok(keys.into_iter().map(KeyRange::prefix).collect());
    }
    // The key of a composite index starts with the first column's encoding, so a bound on
    // that column is a bound on key prefixes.
    let lower = match &bounds.lower {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(v) => Bound::Included(encode(v)?),
        Bound::Excluded(v) => match prefix_successor(&encode(v)?) {
            Some(s) => Bound::Included(s),
            None => return Ok(vec![]),
        },
    };
    let upper = match &bounds.upper {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(v) => match prefix_successor(&encode(v)?) {
            Some(s) => Bound::Excluded(s),
            None => Bound::Unbounded,
        },
        Bound::Excluded(v) => Bound::Excluded(encode(v)?),
    };
    Ok(vec![KeyRange { lower, upper }])
}

/// An index whose first column a predicate bounds.
#[derive(Debug, Clone)]
pub struct IndexCandidate {
    /// The index (position in the manifest).
    pub index: usize,
    /// Key ranges that hold every row the predicate can keep.
    pub ranges: Vec<KeyRange>,
    /// The predicate's conditions on the index's first column.
    pub bounds: ColumnBounds,
}

/// The indexes of `table` whose first column `predicate` bounds. `position` maps a table
/// column to its position among the predicate's input columns (None: not among them).
pub fn index_candidates(
    table: &Table,
    predicate: &Arc<dyn PhysicalExpr>,
    position: impl Fn(usize) -> Option<usize>,
) -> Result<Vec<IndexCandidate>> {
    let mut out = Vec::new();
    for (index, idx) in table.indexes().iter().enumerate() {
        let first = table.schema().index_of(&idx.meta.columns[0])?;
        let Some(bounds) = position(first).and_then(|pos| column_bounds(predicate, pos)) else {
            continue;
        };
        let ranges = key_ranges(&bounds, &table.schema().fields()[first])?;
        out.push(IndexCandidate {
            index,
            ranges,
            bounds,
        });
    }
    Ok(out)
}

/// A short description of bounds for plans.
pub fn describe(bounds: &ColumnBounds, column: &str) -> String {
    if let Some(points) = &bounds.points {
        let shown: Vec<String> = points.iter().take(5).map(|p| p.to_string()).collect();
        let more = if points.len() > 5 { ", ..." } else { "" };
        return format!("{column} IN ({}{more})", shown.join(", "));
    }
    let lo = match &bounds.lower {
        Bound::Unbounded => String::new(),
        Bound::Included(v) => format!("{v} <= "),
        Bound::Excluded(v) => format!("{v} < "),
    };
    let hi = match &bounds.upper {
        Bound::Unbounded => String::new(),
        Bound::Included(v) => format!(" <= {v}"),
        Bound::Excluded(v) => format!(" < {v}"),
    };
    format!("{lo}{column}{hi}")
}
