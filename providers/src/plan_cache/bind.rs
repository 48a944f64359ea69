//! Which literal may become a parameter of which type, and the values to bind: only where
//! binding gives what DataFusion's type coercion gives the literal in the same place.

use std::collections::HashMap;

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::Result;
use datafusion::common::metadata::ScalarAndMetadata;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::expr::Placeholder;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{Expr, LogicalPlan};

use super::shape::Literal;

/// A shape's parameter: its name among the plan's placeholders (`1` for `$1`) and its field.
#[derive(Debug, Clone)]
pub(super) struct Parameter {
    name: String,
    field: FieldRef,
}

/// Each literal's parameter in `plan` (planned from the shape), or None if one has no type
/// or a type its literal's coercion would not match.
pub(super) fn parameters(plan: &LogicalPlan, literals: &[Literal]) -> Option<Vec<Parameter>> {
    let mut fields = plan.get_parameter_fields().ok()?;
    if fields.len() != literals.len() {
        return None;
    }
    literals
        .iter()
        .enumerate()
        .map(|(i, literal)| {
            let field = fields.remove(&format!("${}", i + 1))??;
            bindable(literal, field.data_type()).then(|| Parameter {
                name: (i + 1).to_string(),
                field,
            })
        })
        .collect()
}

/// Whether a literal of this kind compared with a value of `to` is coerced to `to` by
/// DataFusion (so casting it there is the same), given that the cast is checked for loss.
fn bindable(literal: &Literal, to: &DataType) -> bool {
    match literal {
        // Integer against integer, decimal or f64: compared exactly once the value converts
        // without loss (checked per value).
        Literal::Int(_) => {
            to.is_integer()
                || matches!(
                    to,
                    DataType::Float64 | DataType::Decimal128(..) | DataType::Decimal256(..)
                )
        }
        Literal::Float(_) => *to == DataType::Float64,
        Literal::Str(_) => matches!(
            to,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Date32
        ),
    }
}

/// The values of `literals` cast to their parameters' types, keyed as
/// [`datafusion::common::ParamValues::Map`] looks them up; None where a value does not
/// convert, or not without loss: such a query is planned as text.
pub(super) fn values(
    parameters: &[Parameter],
    literals: &[Literal],
) -> Option<HashMap<String, ScalarAndMetadata>> {
    parameters
        .iter()
        .zip(literals)
        .map(|(parameter, literal)| {
            let given = literal.scalar();
            let to = parameter.field.data_type();
            let value = given.cast_to(to).ok()?;
            // A string becomes a date as the coercion would parse it; numbers must come back.
            let exact = matches!(literal, Literal::Str(_))
                || value.cast_to(&given.data_type()).ok()? == given;
            (exact && !value.is_null())
                .then(|| (parameter.name.clone(), ScalarAndMetadata::new(value, None)))
        })
        .collect()
}

/// `plan` with its placeholders replaced by `values` (from [`values`]: each of its
/// parameter's own type). What `LogicalPlan::replace_params_with_values` does, made for this
/// case: only the nodes holding a placeholder are rebuilt, as a value of the placeholder's
/// type changes no other node's schema (that function infers types again and recomputes
/// every node's schema, 8 % of a cached query's planning in a profile).
pub(super) fn bind_plan(
    plan: &LogicalPlan,
    values: &HashMap<String, ScalarAndMetadata>,
) -> Result<LogicalPlan> {
    let rebuilt = plan.clone().transform_up_with_subqueries(|node| {
        let holds_placeholder = node.apply_expressions(|e| {
            Ok(match e.exists(|e| Ok(matches!(e, Expr::Placeholder(_))))? {
                true => TreeNodeRecursion::Stop,
                false => TreeNodeRecursion::Continue,
            })
        })? == TreeNodeRecursion::Stop;
        if !holds_placeholder {
            return Ok(Transformed::no(node));
        }
        let names = NamePreserver::new(&node);
        node.map_expressions(|e| {
            let name = names.save(&e);
            let bound = e.transform_up(|e| match e {
                Expr::Placeholder(Placeholder { id, .. }) => {
                    let key = id.strip_prefix('$').unwrap_or(&id);
                    let value = values.get(key).ok_or_else(|| {
                        datafusion::common::plan_datafusion_err!("no value for {id}")
                    })?;
                    let (value, metadata) = value.clone().into_inner();
                    Ok(Transformed::yes(Expr::Literal(value, metadata)))
                }
                e => Ok(Transformed::no(e)),
            })?;
            Ok(bound.update_data(|e| name.restore(e)))
        })?
        .map_data(|node| node.recompute_schema())
    })?;
    Ok(rebuilt.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::common::ScalarValue;

    #[test]
    fn integers_bind_to_numeric_columns_only_without_loss() {
        let lit = Literal::Int(300);
        assert!(bindable(&lit, &DataType::Int16));
        assert!(bindable(&lit, &DataType::Decimal128(15, 2)));
        assert!(!bindable(&lit, &DataType::Utf8));
        assert!(!bindable(&lit, &DataType::Float32));
        let param = |t: DataType| Parameter {
            name: "1".into(),
            field: std::sync::Arc::new(datafusion::arrow::datatypes::Field::new("p", t, true)),
        };
        let bound = values(&[param(DataType::Int16)], std::slice::from_ref(&lit)).unwrap();
        assert_eq!(bound["1"].value, ScalarValue::Int16(Some(300)));
        assert!(values(&[param(DataType::UInt8)], std::slice::from_ref(&lit)).is_none());
        assert!(values(&[param(DataType::Decimal128(3, 2))], &[lit]).is_none());
        let big = Literal::Int((1 << 53) + 1);
        assert!(values(&[param(DataType::Float64)], &[big]).is_none());
        let date = Literal::Str("1995-03-15".into());
        let bound = values(&[param(DataType::Date32)], &[date]).unwrap();
        assert_eq!(bound["1"].value, ScalarValue::Date32(Some(9204)));
        let not_a_date = Literal::Str("March".into());
        assert!(values(&[param(DataType::Date32)], &[not_a_date]).is_none());
        assert!(!bindable(&Literal::Float(2.5), &DataType::Int64));
        assert!(!bindable(
            &Literal::Float(2.5),
            &DataType::Decimal128(15, 2)
        ));
    }
}
