//! A query's shape: its SQL with the literals it compares columns with taken out as
//! placeholders (`$1`, `$2`, ... in the order they come), so that queries differing only in
//! those values share one plan.
//!
//! Only literals that cannot change a result's schema or the logical optimizer's work beyond
//! the values themselves are taken: a bare number or string compared with a column
//! (`col = 5`, `5 < col`, `col BETWEEN 1 AND 9`) in a WHERE or HAVING clause (of the query,
//! its set operations, its WITH queries and the subqueries in its FROM, and of subqueries
//! inside those clauses). A
//! literal in a select list would name its output column after the value, one in LIMIT or
//! GROUP BY changes the plan itself; those stay in the text, part of the shape.

use std::ops::ControlFlow;

use datafusion::common::ScalarValue;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, Query, SetExpr, Statement, TableFactor, UnaryOperator, Value,
    ValueWithSpan, visit_expressions_mut,
};

/// A literal taken out of the SQL, typed as DataFusion's SQL planner types it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Literal {
    /// An integer that fits an i64: planned as `Int64`.
    Int(i64),
    /// A number with a fraction or exponent: planned as `Float64` (unless the session parses
    /// such numbers as decimals; then they are not taken).
    Float(f64),
    /// A single-quoted string: planned as `Utf8`.
    Str(String),
}

impl Literal {
    /// One letter per kind, part of a shape's key: a plan made for an integer is not reused
    /// for a string in the same place (their coercions differ).
    pub(super) fn kind(&self) -> char {
        match self {
            Literal::Int(_) => 'i',
            Literal::Float(_) => 'f',
            Literal::Str(_) => 's',
        }
    }

    /// The value as DataFusion's SQL planner would have put it in the plan.
    pub(super) fn scalar(&self) -> ScalarValue {
        match self {
            Literal::Int(v) => ScalarValue::Int64(Some(*v)),
            Literal::Float(v) => ScalarValue::Float64(Some(*v)),
            Literal::Str(v) => ScalarValue::Utf8(Some(v.clone())),
        }
    }
}

/// A statement with its literals taken out, and those literals (`$1` is the first).
#[derive(Debug)]
pub(super) struct Shape {
    pub statement: DFStatement,
    pub literals: Vec<Literal>,
}

/// The shape of `statement`; the statement untouched where it is not a query, already has
/// placeholders, or has no literal to take out (a plan cache gains nothing over planning it).
pub(super) fn shape_of(
    mut statement: DFStatement,
    floats_as_decimals: bool,
) -> Result<Shape, Box<DFStatement>> {
    let DFStatement::Statement(inner) = &mut statement else {
        return Err(Box::new(statement));
    };
    let Statement::Query(query) = inner.as_mut() else {
        return Err(Box::new(statement));
    };
    if has_placeholder(query) {
        return Err(Box::new(statement));
    }
    let mut literals = Vec::new();
    take_from_query(query, floats_as_decimals, &mut literals);
    match literals.is_empty() {
        // Nothing was replaced.
        true => Err(Box::new(statement)),
        false => Ok(Shape {
            statement,
            literals,
        }),
    }
}

fn has_placeholder(query: &mut Query) -> bool {
    visit_expressions_mut(query, |e| match e {
        Expr::Value(ValueWithSpan {
            value: Value::Placeholder(_),
            ..
        }) => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    })
    .is_break()
}

fn take_from_query(query: &mut Query, floats_as_decimals: bool, out: &mut Vec<Literal>) {
    if let Some(with) = &mut query.with {
        for cte in &mut with.cte_tables {
            take_from_query(&mut cte.query, floats_as_decimals, out);
        }
    }
    take_from_set_expr(&mut query.body, floats_as_decimals, out);
}

fn take_from_set_expr(body: &mut SetExpr, floats_as_decimals: bool, out: &mut Vec<Literal>) {
    match body {
        SetExpr::Select(select) => {
            for from in &mut select.from {
                let joined = from.joins.iter_mut().map(|j| &mut j.relation);
                for relation in std::iter::once(&mut from.relation).chain(joined) {
                    if let TableFactor::Derived { subquery, .. } = relation {
                        take_from_query(subquery, floats_as_decimals, out);
                    }
                }
            }
            if let Some(selection) = &mut select.selection {
                take_from_predicate(selection, floats_as_decimals, out);
            }
            if let Some(having) = &mut select.having {
                take_from_predicate(having, floats_as_decimals, out);
            }
        }
        SetExpr::Query(query) => take_from_query(query, floats_as_decimals, out),
        SetExpr::SetOperation { left, right, .. } => {
            take_from_set_expr(left, floats_as_decimals, out);
            take_from_set_expr(right, floats_as_decimals, out);
        }
        _ => {}
    }
}

/// Takes the literals compared with a column anywhere in `predicate` (subqueries included:
/// nothing of theirs names an output column of the query).
fn take_from_predicate(predicate: &mut Expr, floats_as_decimals: bool, out: &mut Vec<Literal>) {
    let _ = visit_expressions_mut(predicate, |e| {
        match e {
            Expr::BinaryOp { left, op, right } if is_comparison(op) => {
                if is_column(left) {
                    take(right, floats_as_decimals, out);
                } else if is_column(right) {
                    take(left, floats_as_decimals, out);
                }
            }
            Expr::Between {
                expr, low, high, ..
            } if is_column(expr) => {
                take(low, floats_as_decimals, out);
                take(high, floats_as_decimals, out);
            }
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
}

fn is_comparison(op: &BinaryOperator) -> bool {
    matches!(
        op,
        BinaryOperator::Eq
            | BinaryOperator::NotEq
            | BinaryOperator::Lt
            | BinaryOperator::LtEq
            | BinaryOperator::Gt
            | BinaryOperator::GtEq
    )
}

fn is_column(e: &Expr) -> bool {
    matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_))
}

/// Replaces `e` by the next placeholder if it is a literal this module takes.
fn take(e: &mut Expr, floats_as_decimals: bool, out: &mut Vec<Literal>) {
    let Some(literal) = literal_of(e, floats_as_decimals) else {
        return;
    };
    out.push(literal);
    *e = Expr::Value(Value::Placeholder(format!("${}", out.len())).into());
}

fn literal_of(e: &Expr, floats_as_decimals: bool) -> Option<Literal> {
    match e {
        Expr::Value(ValueWithSpan { value, .. }) => match value {
            Value::Number(text, false) => number(text, false, floats_as_decimals),
            Value::SingleQuotedString(s) => Some(Literal::Str(s.clone())),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            Expr::Value(ValueWithSpan {
                value: Value::Number(text, false),
                ..
            }) => number(text, true, floats_as_decimals),
            _ => None,
        },
        _ => None,
    }
}

/// A number as DataFusion's SQL planner types it (`parse_sql_number`): an i64 if it is one;
/// otherwise (not an integer) an f64 unless the session parses those as decimals. Others
/// (u64 beyond i64, decimals, underscores, hex) are left in the text.
fn number(text: &str, negative: bool, floats_as_decimals: bool) -> Option<Literal> {
    if text.is_empty()
        || !text
            .bytes()
            .all(|b| b.is_ascii_digit() || b".eE+-".contains(&b))
    {
        return None;
    }
    let signed = if negative {
        format!("-{text}")
    } else {
        text.to_string()
    };
    if let Ok(v) = signed.parse::<i64>() {
        return Some(Literal::Int(v));
    }
    if text.bytes().all(|b| b.is_ascii_digit()) || floats_as_decimals {
        return None;
    }
    let v = signed.parse::<f64>().ok()?;
    v.is_finite().then_some(Literal::Float(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::parser::DFParser;

    fn shape(sql: &str) -> Option<(String, Vec<Literal>)> {
        let mut statements = DFParser::parse_sql(sql).unwrap();
        let s = shape_of(statements.pop_front().unwrap(), false).ok()?;
        Some((s.statement.to_string(), s.literals))
    }

    #[test]
    fn comparisons_in_where_and_having_become_placeholders() {
        let (text, literals) = shape(
            "SELECT a, count(*) FROM t WHERE a BETWEEN 10 AND 13 AND 'x' = t.b AND c > -2.5 \
             GROUP BY a HAVING count(*) > 3",
        )
        .unwrap();
        assert_eq!(
            text,
            "SELECT a, count(*) FROM t WHERE a BETWEEN $1 AND $2 AND $3 = t.b AND c > $4 \
             GROUP BY a HAVING count(*) > 3"
        );
        assert_eq!(
            literals,
            vec![
                Literal::Int(10),
                Literal::Int(13),
                Literal::Str("x".into()),
                Literal::Float(-2.5)
            ]
        );
    }

    #[test]
    fn select_lists_limits_and_expressions_keep_their_literals() {
        assert!(shape("SELECT a = 5 FROM t LIMIT 3").is_none());
        assert!(shape("SELECT a FROM t WHERE a + 1 = 5 AND b LIKE 'x%'").is_none());
        assert!(shape("SELECT a FROM t WHERE a = $1").is_none());
        assert!(shape("INSERT INTO t VALUES (1)").is_none());
        assert!(shape("SELECT a FROM t WHERE a = 18446744073709551615").is_none());
    }

    #[test]
    fn subqueries_unions_and_with_queries_are_shaped() {
        let (text, literals) = shape(
            "WITH w AS (SELECT a FROM t WHERE a < 4) SELECT a FROM w WHERE a IN \
             (SELECT b FROM u WHERE c = 'z') UNION ALL SELECT a FROM v JOIN \
             (SELECT b FROM x WHERE b = 1) y ON a = b WHERE a >= 7",
        )
        .unwrap();
        assert_eq!(
            text,
            "WITH w AS (SELECT a FROM t WHERE a < $1) SELECT a FROM w WHERE a IN \
             (SELECT b FROM u WHERE c = $2) UNION ALL SELECT a FROM v JOIN \
             (SELECT b FROM x WHERE b = $3) y ON a = b WHERE a >= $4"
        );
        assert_eq!(
            literals,
            vec![
                Literal::Int(4),
                Literal::Str("z".into()),
                Literal::Int(1),
                Literal::Int(7)
            ]
        );
    }

    #[test]
    fn floats_stay_in_the_text_where_they_are_parsed_as_decimals() {
        let mut statements = DFParser::parse_sql("SELECT a FROM t WHERE a = 2.5").unwrap();
        assert!(shape_of(statements.pop_front().unwrap(), true).is_err());
    }
}
