//! A slice starting at a data-dependent negative size starts at
//! `size + start` instead.
//!
//! VideoMAE's decoder keeps the masked tokens at the end of the sequence,
//! `hidden_states[:, -return_token_num:]`, where the count comes from a
//! boolean mask: torch.export records `start = -(u0 // 2)`, `u0` an unbacked
//! (data-dependent) size. `to_edge_transform_and_lower` runs the slice's meta
//! function again, whose `if start < 0` cannot be decided for an unbacked size
//! ("Could not guard on data-dependent expression -((u0//2)) < 0"). The
//! reference's `_fix_negative_slice_start` (transformers 5.24) slices from
//! `sym_size(input, dim) + start` instead: the number of leading elements,
//! never negative. (A backed size's sign torch decides from its sample value.)
//!
//! A plugin sees sizes as torch prints them (`FloorDiv(u0, 2) + 6`,
//! `-1*FloorDiv(u0, 2)`) and can declare only sizes the program already has,
//! so the sum is worked out here, as sums of terms: a constant becomes the
//! start itself; a size the program has (a dim of another tensor, say) is
//! computed with `sym_size` and `operator.add`; anything else is an error
//! naming it for an unbacked start, where the lowering would fail anyway, and
//! left alone for a backed one. hfx's portable program never meets the guard
//! (the worker's edge decomposition keeps `aten.slice` whole): only the XNNPACK
//! delegate needs this.
//!
//! Not yet enough on its own: the reference also drops the slice's
//! `unbacked_bindings` (its length was a fresh data-dependent symbol and is now
//! `u0 // 2`). A `.pt2` carries no bindings, and `torch.export.load` derives
//! them again from the recorded shapes, so the lowering binds the stale symbol
//! and stops at "should have been constant, but got (u0//2)"
//! (`tests/it/executorch_fixes.rs` pins where).

use std::collections::BTreeMap;

use hfx_sdk::prelude::*;

/// A size as a sum of terms: a constant and integer multiples of the rest
/// (`FloorDiv(u0, 2) + 6` is 6 and 1 x `FloorDiv(u0, 2)`).
#[derive(Debug, Default, PartialEq)]
struct Sum {
    constant: i64,
    /// Each term as printed, with its multiple.
    terms: BTreeMap<String, i64>,
}

impl Sum {
    /// The terms of `printed`, split at its top-level ` + `; None for a form
    /// this reading does not take apart.
    fn parse(printed: &str) -> Option<Sum> {
        let mut sum = Sum::default();
        for term in split_top_level(printed) {
            if let Ok(c) = term.parse::<i64>() {
                sum.constant = sum.constant.checked_add(c)?;
                continue;
            }
            let (multiple, rest) = match term.split_once('*') {
                Some((k, rest)) if k.parse::<i64>().is_ok() => (k.parse::<i64>().ok()?, rest),
                _ => (1, term),
            };
            if rest.is_empty() || rest.starts_with('-') {
                return None;
            }
            *sum.terms.entry(rest.to_string()).or_insert(0) += multiple;
        }
        Some(sum)
    }

    fn add(mut self, other: Sum) -> Option<Sum> {
        self.constant = self.constant.checked_add(other.constant)?;
        for (term, multiple) in other.terms {
            *self.terms.entry(term).or_insert(0) += multiple;
        }
        self.terms.retain(|_, multiple| *multiple != 0);
        Some(self)
    }

    /// Known to be at least 0: sizes and floor divisions of sizes are, so a
    /// sum of them with multiples and a constant that are not negative is.
    fn at_least_zero(&self) -> bool {
        self.constant >= 0
            && self.terms.iter().all(|(term, &multiple)| multiple >= 0 && is_size(term))
    }

    /// The form torch prints for a sum of one term and no constant (`u0`,
    /// `2*u0`); None for others, whose term order this reading does not know.
    fn printed(&self) -> Option<String> {
        match (self.constant, self.terms.iter().next(), self.terms.len()) {
            (c, None, 0) => Some(c.to_string()),
            (0, Some((term, 1)), 1) => Some(term.clone()),
            (0, Some((term, k)), 1) => Some(format!("{k}*{term}")),
            _ => None,
        }
    }
}

/// `printed` split at the ` + ` outside parentheses.
fn split_top_level(printed: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    let bytes = printed.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'(' => depth += 1,
            b')' => depth -= 1,
            b' ' if depth == 0 && printed[i..].starts_with(" + ") => {
                parts.push(&printed[start..i]);
                start = i + 3;
                i += 2;
            }
            _ => {}
        }
        i += 1;
    }
    parts.push(&printed[start..]);
    parts
}

/// A size symbol (`s0`, `u3`) or a floor division of one by a positive constant.
fn is_size(term: &str) -> bool {
    let symbol = |s: &str| {
        s.len() > 1
            && (s.starts_with('s') || s.starts_with('u'))
            && s[1..].bytes().all(|b| b.is_ascii_digit())
    };
    if symbol(term) {
        return true;
    }
    let Some(args) = term.strip_prefix("FloorDiv(").and_then(|t| t.strip_suffix(')')) else {
        return false;
    };
    matches!(args.split_once(", "), Some((x, d)) if symbol(x) && d.parse::<i64>().is_ok_and(|d| d > 0))
}

/// Whether `printed` names a data-dependent size (`u0`).
fn is_unbacked(printed: &str) -> bool {
    printed.split(|c: char| !c.is_ascii_alphanumeric()).any(|word| {
        word.len() > 1 && word.starts_with('u') && word[1..].bytes().all(|b| b.is_ascii_digit())
    })
}

/// Whether some value of the program has `printed` as its size or as a dim:
/// the sizes a plugin may declare.
fn program_has(graph: &Graph, printed: &str) -> Result<bool> {
    let has = |value: ValueId| -> Result<bool> {
        Ok(match graph.value_meta(value)? {
            ValueMeta::SymInt(size) => size == printed,
            ValueMeta::Tensor(meta) => meta
                .shape
                .iter()
                .chain(&meta.strides)
                .any(|d| matches!(d, Dim::Symbolic(s) if s == printed)),
            _ => false,
        })
    };
    for value in graph.graph_inputs() {
        if has(value)? {
            return Ok(true);
        }
    }
    for node in graph.nodes() {
        for output in graph.output_values(node)? {
            if has(output)? {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

#[hfx_sdk::fx_node_fix(targets = ["aten.slice.Tensor", "aten.slice_copy.Tensor"])]
fn fix_negative_slice_start(graph: &Graph, node: NodeId) -> Result<bool> {
    let Some(Argument::SymInt(SymInt::Value(start))) = graph.input(node, "start")? else {
        return Ok(false);
    };
    let ValueMeta::SymInt(start_printed) = graph.value_meta(start)? else { return Ok(false) };
    let Some(start_sum) = Sum::parse(&start_printed) else { return Ok(false) };
    if start_sum.at_least_zero() {
        return Ok(false);
    }
    let input = graph.tensor_input(node, "self")?;
    let Some(meta) = graph.tensor_meta(input)? else { return Ok(false) };
    let dim = match graph.input(node, "dim")? {
        None => 0,
        Some(Argument::Int(d)) => d,
        Some(_) => return Ok(false),
    };
    let rank = meta.shape.len() as i64;
    let Some(size) = usize::try_from(if dim < 0 { dim + rank } else { dim })
        .ok()
        .and_then(|d| meta.shape.get(d))
    else {
        return Ok(false);
    };
    let size_sum = match size {
        Dim::Fixed(n) => Some(Sum { constant: *n, ..Sum::default() }),
        Dim::Symbolic(printed) => Sum::parse(printed),
    };
    let leading =
        size_sum.and_then(|s| s.add(Sum::parse(&start_printed)?)).and_then(|s| s.printed());
    let new_start = match leading {
        Some(printed) => match printed.parse::<i64>() {
            Ok(constant) => Argument::Int(constant),
            Err(_) if program_has(graph, &printed)? => {
                let size_printed = match size {
                    Dim::Symbolic(s) => s.clone(),
                    Dim::Fixed(n) => n.to_string(),
                };
                let size_value = graph.insert_value(
                    node,
                    "aten.sym_size.int",
                    &[
                        positional("self", Argument::Tensor(input)),
                        positional("dim", Argument::Int(dim)),
                    ],
                    OutputDecl::SymInt(size_printed),
                )?;
                let operands = [
                    positional("a", Argument::SymInt(SymInt::Value(size_value))),
                    positional("b", Argument::SymInt(SymInt::Value(start))),
                ];
                Argument::SymInt(SymInt::Value(graph.insert_value(
                    node,
                    "_operator.add",
                    &operands,
                    OutputDecl::SymInt(printed),
                )?))
            }
            Err(_) => return unexpressible(node, &start_printed, &format!("`{printed}`")),
        },
        None => {
            return unexpressible(node, &start_printed, "a sum this fix cannot print as torch does")
        }
    };
    graph.set_input(node, &positional("start", new_start))?;
    Ok(true)
}

/// A start whose `size + start` the fix cannot declare: an error for an
/// unbacked one (the lowering would fail on it), nothing for a backed one.
fn unexpressible(node: NodeId, start: &str, leading: &str) -> Result<bool> {
    if !is_unbacked(start) {
        return Ok(false);
    }
    Err(error(format!("the slice starts at `{start}`; size + start is {leading}, a symbolic size the program does not have, and a plugin cannot declare one"), Some(node)))
}
