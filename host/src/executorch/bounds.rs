//! Symbolic sizes as upper bounds: the portable runtime plans memory for the
//! largest tensor a dynamic axis allows (`DYNAMIC_BOUND`), and resizes within
//! it at run time. A size expression is evaluated over intervals: each symbol
//! ranges over its range constraint.
//!
//! Every dynamic input axis of an ExecuTorch program gets a declared
//! maximum before the backend's stages ([`declare`]), so the planned arena
//! follows what the user declared rather than a far-off guess: a
//! `--dynamic-shapes` range's own; else a batch axis [`MAX_BATCH`], a
//! sequence axis `--max-cache-len` (a static cache) or the model's
//! `max_position_embeddings`. An axis none of these covers is bounded by the
//! `executorch-fix-range-constraints` plugin.

use std::collections::BTreeMap;

use crate::graph::pt2::sympy::{self, Expr};
use crate::graph::{Dim, Graph, GraphError, RangeConstraint};

/// The largest batch a dynamic ExecuTorch program is planned for unless a
/// `--dynamic-shapes` range declares another: on a device a program runs a
/// handful of sequences at once, and the arena grows with the batch.
pub const MAX_BATCH: i64 = 4;

/// The largest size each kind of input axis is planned for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Maxima {
    pub batch: i64,
    /// `--max-cache-len`, else the model's longest sequence; None: unknown.
    pub sequence: Option<i64>,
}

/// A declared maximum, for the run's summary: `batch <= 4`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    pub axis: &'static str,
    pub max: i64,
}

impl std::fmt::Display for Declared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} <= {}", self.axis, self.max)
    }
}

/// Bounds each unbounded symbol of `batch` and `sequence` (the size symbols
/// of those input axes, each with the size it was traced at) at its kind's
/// maximum (never below its minimum nor the size traced, which verification
/// runs); a
/// symbol with a maximum already (a `--dynamic-shapes` range, a size the
/// model itself bounds) keeps it. Returns each kind's maxima, in that order.
pub fn declare(
    graph: &mut Graph,
    batch: &[(String, i64)],
    sequence: &[(String, i64)],
    maxima: Maxima,
) -> Result<Vec<Declared>, GraphError> {
    let mut declared: Vec<Declared> = Vec::new();
    for (axis, symbols, max) in
        [("batch", batch, Some(maxima.batch)), ("sequence", sequence, maxima.sequence)]
    {
        for (symbol, traced) in symbols {
            let Some(range) = graph.range_constraints().get(symbol).copied() else { continue };
            let max = match (range.max, max) {
                (Some(own), _) => own,
                (None, Some(max)) => {
                    let max = max.max(range.min).max(*traced);
                    graph.set_range_constraint(
                        symbol,
                        RangeConstraint { max: Some(max), ..range },
                    )?;
                    max
                }
                (None, None) => continue,
            };
            if !declared.iter().any(|d| d.axis == axis && d.max == max) {
                declared.push(Declared { axis, max });
            }
        }
    }
    Ok(declared)
}

/// The upper bound of each size, or why there is none.
pub struct Bounds<'g> {
    graph: &'g Graph,
    ranges: &'g BTreeMap<String, RangeConstraint>,
}

impl<'g> Bounds<'g> {
    pub fn new(graph: &'g Graph) -> Self {
        Bounds { graph, ranges: graph.range_constraints() }
    }

    /// The largest value `dim` takes.
    pub fn upper(&self, dim: &Dim) -> Result<i64, String> {
        match dim {
            Dim::Fixed(n) => Ok(*n),
            Dim::Symbolic(printed) => {
                let expr = match self.graph.exprs().get(printed) {
                    Some(e) => sympy::parse(&e.srepr)?,
                    None => Expr::Symbol(printed.clone()),
                };
                let (_, hi) = self.interval(&expr).map_err(|e| format!("size `{printed}`: {e}"))?;
                Ok(hi)
            }
        }
    }

    fn interval(&self, e: &Expr) -> Result<(i64, i64), String> {
        let checked = |v: Option<i64>| v.ok_or_else(|| "overflows 64 bits".to_string());
        Ok(match e {
            Expr::Integer(n) => (*n, *n),
            Expr::Symbol(s) => {
                let range =
                    self.ranges.get(s).ok_or_else(|| format!("symbol `{s}` has no range"))?;
                let max = range.max.ok_or_else(|| {
                    format!("symbol `{s}` has no upper bound (give --dynamic-shapes a max: the portable runtime plans memory for the largest size)")
                })?;
                (range.min, max)
            }
            Expr::Call(f, args) => {
                let xs = args.iter().map(|a| self.interval(a)).collect::<Result<Vec<_>, _>>()?;
                let corners = |a: (i64, i64),
                               b: (i64, i64),
                               op: fn(i64, i64) -> Option<i64>|
                 -> Result<(i64, i64), String> {
                    let v = [op(a.0, b.0), op(a.0, b.1), op(a.1, b.0), op(a.1, b.1)];
                    let v = v.into_iter().map(checked).collect::<Result<Vec<_>, _>>()?;
                    Ok((*v.iter().min().unwrap(), *v.iter().max().unwrap()))
                };
                match (f.as_str(), xs.as_slice()) {
                    ("Add", [first, rest @ ..]) => {
                        rest.iter().try_fold(*first, |a, b| corners(a, *b, i64::checked_add))?
                    }
                    ("Mul", [first, rest @ ..]) => {
                        rest.iter().try_fold(*first, |a, b| corners(a, *b, i64::checked_mul))?
                    }
                    ("Max", [first, rest @ ..]) => {
                        rest.iter().fold(*first, |a, b| (a.0.max(b.0), a.1.max(b.1)))
                    }
                    ("Min", [first, rest @ ..]) => {
                        rest.iter().fold(*first, |a, b| (a.0.min(b.0), a.1.min(b.1)))
                    }
                    ("FloorDiv", [a, b]) if b.0 > 0 => {
                        corners(*a, *b, |x, y| Some(x.div_euclid(y)))?
                    }
                    ("CleanDiv" | "IntTrueDiv", [a, b]) if b.0 > 0 => {
                        corners(*a, *b, |x, y| Some(x.div_euclid(y)))?
                    }
                    ("CeilDiv", [a, b]) if b.0 > 0 => {
                        corners(*a, *b, |x, y| Some(-(-x).div_euclid(y)))?
                    }
                    ("Mod" | "PythonMod", [a, b]) if b.0 > 0 && a.0 >= 0 => (0, (b.1 - 1).min(a.1)),
                    ("Pow", [a, (n, m)]) if n == m && *n >= 0 && a.0 >= 0 => {
                        let p = u32::try_from(*n).map_err(|_| "exponent too large".to_string())?;
                        (checked(a.0.checked_pow(p))?, checked(a.1.checked_pow(p))?)
                    }
                    _ => return Err(format!("no upper bound for `{}`", sympy::print(e))),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_axes_are_bounded_by_what_they_are_unless_a_range_bounds_them() {
        let mut g = Graph::new();
        g.set_range_constraint("s0", RangeConstraint { min: 2, max: None }).unwrap();
        g.set_range_constraint("s1", RangeConstraint { min: 2, max: None }).unwrap();
        g.set_range_constraint("s2", RangeConstraint { min: 2, max: Some(2048) }).unwrap();
        g.set_range_constraint("s3", RangeConstraint { min: 2, max: None }).unwrap();
        // Each symbol traced at 2.
        let strings = |s: &[&str]| s.iter().map(|s| (s.to_string(), 2)).collect::<Vec<_>>();
        let maxima = Maxima { batch: MAX_BATCH, sequence: Some(64) };
        let declared = declare(&mut g, &strings(&["s0"]), &strings(&["s1", "s2"]), maxima).unwrap();
        let printed: Vec<String> = declared.iter().map(ToString::to_string).collect();
        assert_eq!(printed, ["batch <= 4", "sequence <= 64", "sequence <= 2048"]);
        let max = |s: &str| g.range_constraints()[s].max;
        assert_eq!((max("s0"), max("s1")), (Some(4), Some(64)));
        assert_eq!(max("s2"), Some(2048), "a --dynamic-shapes range stands");
        assert_eq!(max("s3"), None, "an axis of no known kind is the plugin's");
        // No known sequence length: the sequence is left to the plugin too.
        let mut g = Graph::new();
        g.set_range_constraint("s0", RangeConstraint { min: 8, max: None }).unwrap();
        let unknown = Maxima { batch: MAX_BATCH, sequence: None };
        let declared = declare(&mut g, &[], &strings(&["s0"]), unknown).unwrap();
        assert!(declared.is_empty() && g.range_constraints()["s0"].max.is_none());
        // Never below the symbol's own minimum.
        let declared = declare(&mut g, &strings(&["s0"]), &[], unknown).unwrap();
        assert_eq!(declared, [Declared { axis: "batch", max: 8 }]);
        // Nor below the size traced (a caller's batch of 6, past the default maximum).
        let mut g = Graph::new();
        g.set_range_constraint("s0", RangeConstraint { min: 2, max: None }).unwrap();
        let declared = declare(&mut g, &[("s0".into(), 6)], &[], maxima).unwrap();
        assert_eq!(declared, [Declared { axis: "batch", max: 6 }]);
    }

    #[test]
    fn sizes_are_bounded_by_their_symbols_ranges() {
        let mut g = Graph::new();
        g.set_range_constraint("s0", RangeConstraint { min: 2, max: Some(64) }).unwrap();
        g.set_range_constraint("s1", RangeConstraint { min: 1, max: None }).unwrap();
        let b = Bounds::new(&g);
        assert_eq!(b.upper(&Dim::Fixed(7)), Ok(7));
        assert_eq!(b.upper(&Dim::Symbolic("s0".into())), Ok(64));
        let upper = |e: Expr| b.interval(&e).map(|i| i.1);
        let s0 = || Expr::Symbol("s0".into());
        let call = |f: &str, args: Vec<Expr>| Expr::Call(f.into(), args);
        assert_eq!(upper(call("Mul", vec![Expr::Integer(2), s0()])), Ok(128));
        assert_eq!(upper(call("Add", vec![s0(), Expr::Integer(-1)])), Ok(63));
        assert_eq!(
            upper(call(
                "Add",
                vec![Expr::Integer(100), call("Mul", vec![Expr::Integer(-1), s0()])]
            )),
            Ok(98),
            "decreasing in s0: its minimum"
        );
        assert_eq!(upper(call("FloorDiv", vec![s0(), Expr::Integer(3)])), Ok(21));
        assert_eq!(upper(call("Mod", vec![s0(), Expr::Integer(4)])), Ok(3));
        let e = b.upper(&Dim::Symbolic("s1".into())).unwrap_err();
        assert!(e.contains("`s1` has no upper bound"), "{e}");
        assert!(upper(call("Sin", vec![s0()]))
            .unwrap_err()
            .contains("no upper bound for `Sin(s0)`"));
    }
}
