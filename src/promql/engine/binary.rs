//! Binary operators as Prometheus 2.42 applies them: arithmetic,
//! comparisons (filtering, or 0/1 with `bool`), `atan2`, and the set
//! operators `and`, `or`, `unless`; between scalars, a vector and a
//! scalar, or two vectors matched one-to-one, many-to-one
//! (`group_left`) or one-to-many (`group_right`) on their labels.

use promql_parser::label::Labels as NameList;
use promql_parser::parser::token::{
    T_ADD, T_ATAN2, T_DIV, T_EQLC, T_GTE, T_GTR, T_LAND, T_LOR, T_LSS, T_LTE, T_LUNLESS, T_MOD,
    T_MUL, T_NEQ, T_POW, T_SUB, TokenId,
};
use promql_parser::parser::{BinaryExpr, LabelModifier, VectorMatchCardinality};

use super::step::{Eval, LabelMap, LabelSet, StepValue, check_unique};
use crate::promql::error::PromError;
use crate::promql::value::{Labels, METRIC_NAME, VectorSample};

/// Evaluates `b` at `t`.
pub(super) fn eval(ev: &mut impl Eval, b: &BinaryExpr, t: i64) -> Result<StepValue, PromError> {
    let op = b.op.id();
    let lhs = ev.eval(&b.lhs, t)?;
    let rhs = ev.eval(&b.rhs, t)?;
    let return_bool = b.modifier.as_ref().is_some_and(|m| m.return_bool);
    match (lhs, rhs) {
        (StepValue::Scalar(l), StepValue::Scalar(r)) => Ok(StepValue::Scalar(scalar_op(op, l, r)?)),
        (StepValue::Vector(l), StepValue::Scalar(r)) => {
            vector_scalar(ev, b, l, r, false).map(StepValue::Vector)
        }
        (StepValue::Scalar(l), StepValue::Vector(r)) => {
            vector_scalar(ev, b, r, l, true).map(StepValue::Vector)
        }
        (StepValue::Vector(l), StepValue::Vector(r)) => {
            let matching = Matching::of(b);
            let node = b as *const BinaryExpr as usize;
            let out = match op {
                T_LAND => and(ev, node, &matching, l, r),
                T_LOR => or(ev, node, &matching, l, r),
                T_LUNLESS => unless(ev, node, &matching, l, r),
                _ => vector_vector(ev, node, op, &matching, return_bool, l, r)?,
            };
            ev.hold(out.len())?;
            Ok(StepValue::Vector(out))
        }
        (l, r) => Err(PromError::internal(format!(
            "binary operator between {l:?} and {r:?} passed the parser"
        ))),
    }
}

/// How two vectors' elements are matched.
struct Matching {
    /// `on(...)` (true) or `ignoring(...)` (false, also the default).
    on: bool,
    names: Vec<String>,
    card: Card,
    /// The labels `group_left`/`group_right` copy from the "one" side.
    include: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Card {
    OneToOne,
    ManyToOne,
    OneToMany,
}

fn names(l: &NameList) -> Vec<String> {
    l.labels.clone()
}

impl Matching {
    fn of(b: &BinaryExpr) -> Matching {
        let mut m = Matching {
            on: false,
            names: Vec::new(),
            card: Card::OneToOne,
            include: Vec::new(),
        };
        if let Some(modifier) = &b.modifier {
            match &modifier.matching {
                Some(LabelModifier::Include(l)) => {
                    m.on = true;
                    m.names = names(l);
                }
                Some(LabelModifier::Exclude(l)) => m.names = names(l),
                None => {}
            }
            match &modifier.card {
                VectorMatchCardinality::ManyToOne(l) => {
                    m.card = Card::ManyToOne;
                    m.include = names(l);
                }
                VectorMatchCardinality::OneToMany(l) => {
                    m.card = Card::OneToMany;
                    m.include = names(l);
                }
                VectorMatchCardinality::OneToOne | VectorMatchCardinality::ManyToMany => {}
            }
        }
        m
    }

    /// The labels two elements are matched on: the `on` labels, or all
    /// but the `ignoring` ones and the name.
    fn signature(&self, l: &Labels) -> Labels {
        if self.on {
            l.keep(&self.names)
        } else {
            l.filter(|n| n != METRIC_NAME && !self.names.iter().any(|x| x == n))
        }
    }
}

fn signatures(ev: &mut impl Eval, node: usize, m: &Matching, v: &[VectorSample]) -> Vec<Labels> {
    v.iter()
        .map(|s| ev.derive(node, &s.labels, |l| m.signature(l)))
        .collect()
}

fn and(
    ev: &mut impl Eval,
    node: usize,
    m: &Matching,
    l: Vec<VectorSample>,
    r: Vec<VectorSample>,
) -> Vec<VectorSample> {
    if l.is_empty() || r.is_empty() {
        return Vec::new();
    }
    let right: LabelSet<Labels> = signatures(ev, node, m, &r).into_iter().collect();
    let ls = signatures(ev, node, m, &l);
    l.into_iter()
        .zip(ls)
        .filter(|(_, sig)| right.contains(sig))
        .map(|(s, _)| s)
        .collect()
}

fn or(
    ev: &mut impl Eval,
    node: usize,
    m: &Matching,
    mut l: Vec<VectorSample>,
    r: Vec<VectorSample>,
) -> Vec<VectorSample> {
    if l.is_empty() {
        return r;
    }
    if r.is_empty() {
        return l;
    }
    let left: LabelSet<Labels> = signatures(ev, node, m, &l).into_iter().collect();
    let rs = signatures(ev, node, m, &r);
    l.extend(
        r.into_iter()
            .zip(rs)
            .filter(|(_, sig)| !left.contains(sig))
            .map(|(s, _)| s),
    );
    l
}

fn unless(
    ev: &mut impl Eval,
    node: usize,
    m: &Matching,
    l: Vec<VectorSample>,
    r: Vec<VectorSample>,
) -> Vec<VectorSample> {
    if l.is_empty() || r.is_empty() {
        return l;
    }
    let right: LabelSet<Labels> = signatures(ev, node, m, &r).into_iter().collect();
    let ls = signatures(ev, node, m, &l);
    l.into_iter()
        .zip(ls)
        .filter(|(_, sig)| !right.contains(sig))
        .map(|(s, _)| s)
        .collect()
}

/// Arithmetic and comparisons between two vectors.
fn vector_vector(
    ev: &mut impl Eval,
    node: usize,
    op: TokenId,
    m: &Matching,
    return_bool: bool,
    lhs: Vec<VectorSample>,
    rhs: Vec<VectorSample>,
) -> Result<Vec<VectorSample>, PromError> {
    if lhs.is_empty() || rhs.is_empty() {
        return Ok(Vec::new());
    }
    // One-to-many is many-to-one with the sides swapped (and swapped
    // back for the operation itself).
    let swapped = m.card == Card::OneToMany;
    let (many, one) = if swapped { (rhs, lhs) } else { (lhs, rhs) };
    let one_sigs = signatures(ev, node, m, &one);
    let many_sigs = signatures(ev, node, m, &many);

    let mut by_sig: LabelMap<&Labels, usize> =
        LabelMap::with_capacity_and_hasher(one.len(), Default::default());
    for (i, sig) in one_sigs.iter().enumerate() {
        if let Some(&j) = by_sig.get(sig) {
            let side = if swapped { "left" } else { "right" };
            return Err(PromError::execution(format!(
                "found duplicate series for the match group {} on the {side} hand-side of the operation: [{}, {}];many-to-many matching not allowed: matching labels must be unique on one side",
                sig, one[i].labels, one[j].labels
            )));
        }
        by_sig.insert(sig, i);
    }

    // Per match group: whether seen (one-to-one), or the result label
    // sets produced (many-to-one), to refuse ambiguous matches.
    let mut matched: LabelMap<&Labels, LabelSet<Labels>> = LabelMap::default();
    let mut out = Vec::new();
    for (s, sig) in many.iter().zip(&many_sigs) {
        let Some(&j) = by_sig.get(sig) else {
            continue;
        };
        let r = &one[j];
        let (vl, vr) = if swapped { (r.v, s.v) } else { (s.v, r.v) };
        let (mut value, keep) = elem_op(op, vl, vr)?;
        if return_bool {
            value = if keep { 1.0 } else { 0.0 };
        } else if !keep {
            continue;
        }
        let metric = if m.include.is_empty() {
            // Without group_x labels the result depends on this side
            // only: derive it once per series.
            ev.derive(result_key(node), &s.labels, |l| {
                let l = result_labels(l, l, op, m);
                if return_bool { l.without_name() } else { l }
            })
        } else {
            let l = result_labels(&s.labels, &r.labels, op, m);
            if return_bool { l.without_name() } else { l }
        };
        match matched.get_mut(sig) {
            Some(_) if m.card == Card::OneToOne => {
                return Err(PromError::execution(
                    "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)",
                ));
            }
            Some(set) => {
                if !set.insert(metric.clone()) {
                    return Err(PromError::execution(
                        "multiple matches for labels: grouping labels must ensure unique matches",
                    ));
                }
            }
            None => {
                let mut set = LabelSet::default();
                if m.card != Card::OneToOne {
                    set.insert(metric.clone());
                }
                matched.insert(sig, set);
            }
        }
        out.push(VectorSample {
            labels: metric,
            t: s.t,
            v: value,
        });
    }
    check_unique(&out)?;
    Ok(out)
}

/// The labels of a vector-vector result: the "many" side's, without the
/// name for arithmetic, cut to the matching labels when one-to-one, with
/// the `group_x` labels copied from the "one" side.
fn result_labels(many: &Labels, one: &Labels, op: TokenId, m: &Matching) -> Labels {
    let mut l = if drops_name(op) {
        many.without_name()
    } else {
        many.clone()
    };
    if m.card == Card::OneToOne {
        l = if m.on {
            l.keep(&m.names)
        } else {
            l.drop_names(&m.names)
        };
    }
    for name in &m.include {
        l.set(name, one.get(name));
    }
    l
}

/// The key result labels are derived under, apart from the matching
/// signatures derived under the node's own address (nodes are boxed, so
/// their addresses are even and address + 1 is no other node's).
fn result_key(node: usize) -> usize {
    node + 1
}

/// A vector and a scalar; `swapped` when the scalar was on the left.
fn vector_scalar(
    ev: &mut impl Eval,
    b: &BinaryExpr,
    v: Vec<VectorSample>,
    scalar: f64,
    swapped: bool,
) -> Result<Vec<VectorSample>, PromError> {
    let op = b.op.id();
    let return_bool = b.modifier.as_ref().is_some_and(|m| m.return_bool);
    let node = b as *const BinaryExpr as usize;
    let comparison = is_comparison(op);
    let drop = drops_name(op) || return_bool;
    let mut out = Vec::with_capacity(v.len());
    for mut s in v {
        let (l, r) = if swapped {
            (scalar, s.v)
        } else {
            (s.v, scalar)
        };
        let (mut value, mut keep) = elem_op(op, l, r)?;
        // A comparison keeps the vector's value, whichever side it is.
        if comparison && swapped {
            value = r;
        }
        if return_bool {
            value = if keep { 1.0 } else { 0.0 };
            keep = true;
        }
        if keep {
            s.v = value;
            if drop {
                // The same shared label set for a series at every step.
                s.labels = ev.derive(result_key(node), &s.labels, Labels::without_name);
            }
            out.push(s);
        }
    }
    if drop {
        check_unique(&out)?;
    }
    Ok(out)
}

/// Whether the result of `op` loses the metric name (arithmetic does;
/// comparisons and, in 2.42, `atan2` do not).
fn drops_name(op: TokenId) -> bool {
    matches!(op, T_ADD | T_SUB | T_MUL | T_DIV | T_POW | T_MOD)
}

fn is_comparison(op: TokenId) -> bool {
    matches!(op, T_EQLC | T_NEQ | T_GTR | T_LSS | T_GTE | T_LTE)
}

/// Two scalars: comparisons (always with `bool`) give 0 or 1.
fn scalar_op(op: TokenId, l: f64, r: f64) -> Result<f64, PromError> {
    let (v, keep) = elem_op(op, l, r)?;
    Ok(if is_comparison(op) {
        if keep { 1.0 } else { 0.0 }
    } else {
        v
    })
}

/// One operation on two values: the result and, for comparisons, whether
/// it holds (the value of a comparison is the left side).
fn elem_op(op: TokenId, l: f64, r: f64) -> Result<(f64, bool), PromError> {
    Ok(match op {
        T_ADD => (l + r, true),
        T_SUB => (l - r, true),
        T_MUL => (l * r, true),
        T_DIV => (l / r, true),
        T_POW => (l.powf(r), true),
        T_MOD => (go_mod(l, r), true),
        T_ATAN2 => (l.atan2(r), true),
        T_EQLC => (l, l == r),
        T_NEQ => (l, l != r),
        T_GTR => (l, l > r),
        T_LSS => (l, l < r),
        T_GTE => (l, l >= r),
        T_LTE => (l, l <= r),
        _ => {
            return Err(PromError::internal(format!(
                "operator {op} not allowed between values"
            )));
        }
    })
}

/// Go's `math.Mod`: the remainder with the sign of `l` (Rust's `%` on
/// floats is the same, NaN for a zero divisor or infinite dividend).
fn go_mod(l: f64, r: f64) -> f64 {
    l % r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_remainder_follows_go() {
        assert_eq!(go_mod(7.0, 3.0), 1.0);
        assert_eq!(go_mod(-7.0, 3.0), -1.0);
        assert!(go_mod(1.0, 0.0).is_nan());
        assert_eq!(go_mod(3.0, f64::INFINITY), 3.0);
    }
}
