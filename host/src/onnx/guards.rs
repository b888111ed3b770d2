//! Size guards checked at run time. torch.export traces the branch a
//! model's code takes at the traced sizes and records a guard where another
//! size would take another (a chunked scan's `((4 - x.shape[1] % 4) % 4) <=
//! 0`); the ONNX model keeps only its inputs' dynamic axes, so a size that
//! breaks the guard would run and compute wrong values. Each guard over the
//! graph inputs' sizes is computed in the graph from those inputs' shapes,
//! and the first input it reads passes through a `Reshape` to its own shape,
//! or to an impossible one where the guard breaks: ONNX Runtime then stops
//! with an error naming that node, whose name holds the guard. (One input
//! suffices: a run reads the inputs whose sizes guard the branch it takes.)
//!
//! A guard is the worker's readable form of torch's guard code: Python over
//! `input.shape[axis]` and integers with `+ - * // %`, comparisons, `and`,
//! `or`, `not`, `max` and `min` ([`parse`]); anything else is refused, and
//! that guard stays unchecked (the summary says which).

use std::collections::HashMap;

use super::proto as p;
use super::weights::{Bytes, Initializer};
use super::{Attribute, Node};

/// A guard's expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Expr {
    /// The size of `input`'s `axis`.
    Size {
        input: String,
        axis: i64,
    },
    Int(i64),
    Not(Box<Expr>),
    Neg(Box<Expr>),
    Binary(Op, Box<Expr>, Box<Expr>),
}

/// A binary operator, with Python's meaning (`//` floors, `%` takes the
/// divisor's sign).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Add,
    Sub,
    Mul,
    FloorDiv,
    Mod,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    Max,
    Min,
}

/// A guard's text longer than this is refused (a guard is one condition).
const MAX_GUARD: usize = 4096;
/// Nesting deeper than this is refused (the parser recurses).
const MAX_DEPTH: usize = 64;

/// The expression of `guard`, or why it is not one this module reads.
pub fn parse(guard: &str) -> Result<Expr, String> {
    if guard.len() > MAX_GUARD {
        return Err(format!("a guard of {} bytes (at most {MAX_GUARD})", guard.len()));
    }
    let tokens = tokenize(guard)?;
    let mut parser = Parser { tokens, at: 0, depth: 0 };
    let expr = parser.or()?;
    match parser.peek() {
        None => Ok(expr),
        Some(t) => Err(format!("unexpected `{t:?}` after the expression")),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Int(i64),
    Name(String),
    Punct(&'static str),
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    const PUNCT: &[&str] =
        &["//", "==", "!=", "<=", ">=", "+", "-", "*", "%", "<", ">", "(", ")", "[", "]", ".", ","];
    let mut tokens = Vec::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c.is_whitespace() {
            rest = &rest[c.len_utf8()..];
        } else if c.is_ascii_digit() {
            let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            let value =
                rest[..end].parse().map_err(|_| format!("`{}` is too large", &rest[..end]))?;
            tokens.push(Token::Int(value));
            rest = &rest[end..];
        } else if c.is_ascii_alphabetic() || c == '_' {
            let end =
                rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
            tokens.push(Token::Name(rest[..end].to_string()));
            rest = &rest[end..];
        } else if let Some(p) = PUNCT.iter().find(|p| rest.starts_with(**p)) {
            tokens.push(Token::Punct(p));
            rest = &rest[p.len()..];
        } else {
            return Err(format!("unexpected `{c}`"));
        }
    }
    Ok(tokens)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        token
    }

    fn eat(&mut self, punct: &str) -> bool {
        let found = matches!(self.peek(), Some(Token::Punct(p)) if *p == punct);
        if found {
            self.at += 1;
        }
        found
    }

    fn keyword(&mut self, word: &str) -> bool {
        let found = matches!(self.peek(), Some(Token::Name(n)) if n == word);
        if found {
            self.at += 1;
        }
        found
    }

    fn expect(&mut self, punct: &str) -> Result<(), String> {
        if self.eat(punct) {
            Ok(())
        } else {
            Err(format!("expected `{punct}`, found {:?}", self.peek()))
        }
    }

    fn nested<T>(
        &mut self,
        parse: impl FnOnce(&mut Self) -> Result<T, String>,
    ) -> Result<T, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH}"));
        }
        let result = parse(self);
        self.depth -= 1;
        result
    }

    fn or(&mut self) -> Result<Expr, String> {
        let mut left = self.and()?;
        while self.keyword("or") {
            left = Expr::Binary(Op::Or, Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut left = self.not()?;
        while self.keyword("and") {
            left = Expr::Binary(Op::And, Box::new(left), Box::new(self.not()?));
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Expr, String> {
        if self.keyword("not") {
            return self.nested(|p| Ok(Expr::Not(Box::new(p.not()?))));
        }
        self.comparison()
    }

    /// A comparison, chained as Python chains them (`a < b < c`: both).
    fn comparison(&mut self) -> Result<Expr, String> {
        const COMPARISONS: &[(&str, Op)] = &[
            ("==", Op::Eq),
            ("!=", Op::Ne),
            ("<=", Op::Le),
            (">=", Op::Ge),
            ("<", Op::Lt),
            (">", Op::Gt),
        ];
        let mut left = self.sum()?;
        let mut chain: Option<Expr> = None;
        while let Some(&(_, op)) = COMPARISONS.iter().find(|(p, _)| self.eat(p)) {
            let right = self.sum()?;
            let link = Expr::Binary(op, Box::new(left), Box::new(right.clone()));
            chain = Some(match chain {
                None => link,
                Some(before) => Expr::Binary(Op::And, Box::new(before), Box::new(link)),
            });
            left = right;
        }
        Ok(chain.unwrap_or(left))
    }

    fn sum(&mut self) -> Result<Expr, String> {
        let mut left = self.product()?;
        loop {
            let op = if self.eat("+") {
                Op::Add
            } else if self.eat("-") {
                Op::Sub
            } else {
                return Ok(left);
            };
            left = Expr::Binary(op, Box::new(left), Box::new(self.product()?));
        }
    }

    fn product(&mut self) -> Result<Expr, String> {
        let mut left = self.unary()?;
        loop {
            let op = if self.eat("*") {
                Op::Mul
            } else if self.eat("//") {
                Op::FloorDiv
            } else if self.eat("%") {
                Op::Mod
            } else {
                return Ok(left);
            };
            left = Expr::Binary(op, Box::new(left), Box::new(self.unary()?));
        }
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.eat("-") {
            return self.nested(|p| Ok(Expr::Neg(Box::new(p.unary()?))));
        }
        if self.eat("+") {
            return self.nested(|p| p.unary());
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Expr, String> {
        match self.next() {
            Some(Token::Int(n)) => Ok(Expr::Int(n)),
            Some(Token::Punct("(")) => {
                let inner = self.nested(|p| p.or())?;
                self.expect(")")?;
                Ok(inner)
            }
            Some(Token::Name(name)) if name == "True" => Ok(Expr::Int(1)),
            Some(Token::Name(name)) if name == "False" => Ok(Expr::Int(0)),
            Some(Token::Name(name)) if (name == "max" || name == "min") && self.eat("(") => {
                let op = if name == "max" { Op::Max } else { Op::Min };
                let mut value = self.nested(|p| p.or())?;
                while self.eat(",") {
                    value = Expr::Binary(op, Box::new(value), Box::new(self.nested(|p| p.or())?));
                }
                self.expect(")")?;
                Ok(value)
            }
            Some(Token::Name(input)) => {
                self.expect(".")?;
                if !self.keyword("shape") {
                    return Err(format!("`{input}.`: only an input's `.shape[axis]` is read"));
                }
                self.expect("[")?;
                let sign = if self.eat("-") { -1 } else { 1 };
                let axis = match self.next() {
                    Some(Token::Int(axis)) => sign * axis,
                    other => {
                        return Err(format!("`{input}.shape[`: expected an axis, found {other:?}"))
                    }
                };
                self.expect("]")?;
                Ok(Expr::Size { input, axis })
            }
            other => Err(format!("expected a size, an integer or `(`, found {other:?}")),
        }
    }
}

impl Expr {
    /// The same value in fewer nodes: torch writes `a - b` as `a + (-1)*b`
    /// and negative integers as `(-1)`; arithmetic of integers is done here.
    pub fn simplified(self) -> Expr {
        use Expr::{Binary, Int, Neg, Not};
        match self {
            Neg(e) => match e.simplified() {
                Int(n) => n.checked_neg().map_or(Neg(Box::new(Int(n))), Int),
                Neg(inner) => *inner,
                e => Neg(Box::new(e)),
            },
            Not(e) => Not(Box::new(e.simplified())),
            Binary(op, a, b) => match (op, a.simplified(), b.simplified()) {
                (Op::Mul, Int(-1), e) | (Op::Mul, e, Int(-1)) => Neg(Box::new(e)).simplified(),
                (Op::Mul, Int(1), e) | (Op::Mul, e, Int(1)) => e,
                (Op::Add, Int(0), e) | (Op::Add | Op::Sub, e, Int(0)) => e,
                (Op::Add, a, Neg(b)) => Binary(Op::Sub, Box::new(a), b),
                (Op::Add, Neg(a), b) => Binary(Op::Sub, Box::new(b), a),
                (op, Int(x), Int(y)) => match integers(op, x, y) {
                    Some(n) => Int(n),
                    None => Binary(op, Box::new(Int(x)), Box::new(Int(y))),
                },
                (op, a, b) => Binary(op, Box::new(a), Box::new(b)),
            },
            e => e,
        }
    }

    /// The inputs whose sizes the expression reads, in first-read order.
    pub fn inputs(&self) -> Vec<&str> {
        let mut found = Vec::new();
        self.collect_inputs(&mut found);
        found
    }

    fn collect_inputs<'e>(&'e self, found: &mut Vec<&'e str>) {
        match self {
            Expr::Size { input, .. } if !found.contains(&input.as_str()) => found.push(input),
            Expr::Size { .. } | Expr::Int(_) => {}
            Expr::Not(e) | Expr::Neg(e) => e.collect_inputs(found),
            Expr::Binary(_, a, b) => {
                a.collect_inputs(found);
                b.collect_inputs(found);
            }
        }
    }
}

/// `x op y` as Python computes it, where it is an integer that fits.
fn integers(op: Op, x: i64, y: i64) -> Option<i64> {
    Some(match op {
        Op::Add => x.checked_add(y)?,
        Op::Sub => x.checked_sub(y)?,
        Op::Mul => x.checked_mul(y)?,
        Op::FloorDiv => {
            x.checked_div_euclid(y)
                .map(|q| if y < 0 && x.rem_euclid(y) != 0 { q - 1 } else { q })?
        }
        Op::Mod => x.checked_rem_euclid(y).map(|r| if y < 0 && r != 0 { r + y } else { r })?,
        Op::Max => x.max(y),
        Op::Min => x.min(y),
        _ => return None,
    })
}

/// Whether every size `expr` reads is an axis of a graph input (`ranks`).
fn readable(expr: &Expr, ranks: &HashMap<String, usize>) -> Result<(), String> {
    match expr {
        Expr::Size { input, axis } => {
            let rank = *ranks.get(input).ok_or_else(|| format!("no graph input `{input}`"))?;
            let valid = (-(rank as i64)..rank as i64).contains(axis);
            valid.then_some(()).ok_or_else(|| format!("`{input}` has no axis {axis}"))
        }
        Expr::Int(_) => Ok(()),
        Expr::Not(e) | Expr::Neg(e) => readable(e, ranks),
        Expr::Binary(_, a, b) => readable(a, ranks).and_then(|()| readable(b, ranks)),
    }
}

/// Whether `expr` is never negative: sizes and what sums, products,
/// quotients, remainders and extrema of such make.
fn nonnegative(expr: &Expr) -> bool {
    match expr {
        Expr::Size { .. } => true,
        Expr::Int(n) => *n >= 0,
        Expr::Binary(Op::Add | Op::Mul | Op::FloorDiv | Op::Max | Op::Min, a, b) => {
            nonnegative(a) && nonnegative(b)
        }
        // Python's remainder takes the divisor's sign.
        Expr::Binary(Op::Mod, _, b) => nonnegative(b),
        _ => false,
    }
}

/// What a guard's value is in the graph: a `[1]` int64 or a `[1]` bool.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Bool,
}

/// Emits guards' computations into `nodes` (their integers into
/// `constants`, initializers), names from `fresh`; what one guard computed
/// another reads again (`emitted`, `ints`), as torch's guards share terms.
struct Emitter<'a> {
    nodes: Vec<Node>,
    constants: Vec<(String, Vec<i64>)>,
    emitted: HashMap<Expr, (String, Kind)>,
    integers: HashMap<Vec<i64>, String>,
    fresh: &'a mut dyn FnMut() -> String,
    /// Each graph input's rank, by name.
    ranks: &'a HashMap<String, usize>,
}

impl Emitter<'_> {
    fn node(&mut self, op: &str, inputs: &[&str], attributes: Vec<(&str, Attribute)>) -> String {
        let output = (self.fresh)();
        self.nodes.push(Node {
            op_type: op.into(),
            domain: String::new(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec![output.clone()],
            attributes: attributes.into_iter().map(|(n, a)| (n.to_string(), a)).collect(),
            function: None,
        });
        output
    }

    fn ints(&mut self, values: &[i64]) -> String {
        if let Some(name) = self.integers.get(values) {
            return name.clone();
        }
        let name = (self.fresh)();
        self.constants.push((name.clone(), values.to_vec()));
        self.integers.insert(values.to_vec(), name.clone());
        name
    }

    fn as_kind(&mut self, (value, kind): (String, Kind), want: Kind) -> String {
        match (kind, want) {
            (a, b) if a == b => value,
            (Kind::Bool, Kind::Int) => {
                self.node("Cast", &[&value], vec![("to", Attribute::Int(7))])
            }
            _ => {
                let zero = self.ints(&[0]);
                let equal = self.node("Equal", &[&value, &zero], vec![]);
                self.node("Not", &[&equal], vec![])
            }
        }
    }

    /// The value of `expr`, which must be [`readable`].
    fn emit(&mut self, expr: &Expr) -> (String, Kind) {
        if let Some(done) = self.emitted.get(expr) {
            return done.clone();
        }
        let value = self.emit_new(expr);
        self.emitted.insert(expr.clone(), value.clone());
        value
    }

    fn emit_new(&mut self, expr: &Expr) -> (String, Kind) {
        match expr {
            Expr::Int(n) => (self.ints(&[*n]), Kind::Int),
            Expr::Size { input, axis } => {
                let axis = if *axis < 0 { axis + self.ranks[input] as i64 } else { *axis };
                let attributes =
                    vec![("start", Attribute::Int(axis)), ("end", Attribute::Int(axis + 1))];
                (self.node("Shape", &[input], attributes), Kind::Int)
            }
            Expr::Neg(e) => {
                let value = self.emit(e);
                let value = self.as_kind(value, Kind::Int);
                (self.node("Neg", &[&value], vec![]), Kind::Int)
            }
            Expr::Not(e) => {
                let value = self.emit(e);
                let value = self.as_kind(value, Kind::Bool);
                (self.node("Not", &[&value], vec![]), Kind::Bool)
            }
            Expr::Binary(op, left, right) => {
                let (a, b) = (self.emit(left), self.emit(right));
                let logical = matches!(op, Op::And | Op::Or);
                let want = if logical { Kind::Bool } else { Kind::Int };
                let (a, b) = (self.as_kind(a, want), self.as_kind(b, want));
                let (a, b) = (a.as_str(), b.as_str());
                match op {
                    Op::Add => (self.node("Add", &[a, b], vec![]), Kind::Int),
                    Op::Sub => (self.node("Sub", &[a, b], vec![]), Kind::Int),
                    Op::Mul => (self.node("Mul", &[a, b], vec![]), Kind::Int),
                    Op::Max => (self.node("Max", &[a, b], vec![]), Kind::Int),
                    Op::Min => (self.node("Min", &[a, b], vec![]), Kind::Int),
                    // ONNX's integer Mod with fmod 0 takes the divisor's sign, as Python's `%`.
                    Op::Mod => {
                        (self.node("Mod", &[a, b], vec![("fmod", Attribute::Int(0))]), Kind::Int)
                    }
                    // Of sizes and positive integers, truncation is the floor.
                    Op::FloorDiv if nonnegative(left) && nonnegative(right) => {
                        (self.node("Div", &[a, b], vec![]), Kind::Int)
                    }
                    // a // b = (a - a % b) / b, exact where ONNX's Div truncates.
                    Op::FloorDiv => {
                        let rest = self.node("Mod", &[a, b], vec![("fmod", Attribute::Int(0))]);
                        let whole = self.node("Sub", &[a, &rest], vec![]);
                        (self.node("Div", &[&whole, b], vec![]), Kind::Int)
                    }
                    Op::Eq => (self.node("Equal", &[a, b], vec![]), Kind::Bool),
                    Op::Ne => {
                        let equal = self.node("Equal", &[a, b], vec![]);
                        (self.node("Not", &[&equal], vec![]), Kind::Bool)
                    }
                    Op::Lt => (self.node("Less", &[a, b], vec![]), Kind::Bool),
                    Op::Le => (self.node("LessOrEqual", &[a, b], vec![]), Kind::Bool),
                    Op::Gt => (self.node("Greater", &[a, b], vec![]), Kind::Bool),
                    Op::Ge => (self.node("GreaterOrEqual", &[a, b], vec![]), Kind::Bool),
                    Op::And => (self.node("And", &[a, b], vec![]), Kind::Bool),
                    Op::Or => (self.node("Or", &[a, b], vec![]), Kind::Bool),
                }
            }
        }
    }
}

/// The guards of `guards` that the graph now checks, and for each one it
/// does not, why. Each checked guard's first input reads through a
/// `Reshape` named for the guard; `nodes` gains the computation first (it
/// reads only graph inputs) and `initializers` its integers; every
/// main-graph reader of a checked input reads the checked one.
pub fn check(
    nodes: &mut Vec<Node>,
    initializers: &mut Vec<Initializer>,
    inputs: &[p::ValueInfoProto],
    guards: &[String],
) -> (Vec<String>, Vec<(String, String)>) {
    let ranks: HashMap<String, usize> = inputs
        .iter()
        .filter_map(|i| {
            let rank = match &i.r#type.as_ref()?.value {
                Some(p::type_proto::Value::TensorType(t)) => t.shape.as_ref()?.dim.len(),
                _ => return None,
            };
            Some((i.name.clone()?, rank))
        })
        .collect();
    let mut counter = 0;
    let mut fresh = || {
        counter += 1;
        format!("size_guard_{counter}")
    };
    let (mut checked, mut unchecked) = (Vec::new(), Vec::new());
    let mut emitter = Emitter {
        nodes: Vec::new(),
        constants: Vec::new(),
        emitted: HashMap::new(),
        integers: HashMap::new(),
        fresh: &mut fresh,
        ranks: &ranks,
    };
    // Each input's whole shape, read once.
    let mut shapes: HashMap<String, String> = HashMap::new();
    // Each checked input's latest name.
    let mut current: HashMap<String, String> = HashMap::new();
    for (at, guard) in guards.iter().enumerate() {
        if guards[..at].contains(guard) {
            continue; // torch states some guards twice
        }
        let expr = match parse(guard) {
            Ok(expr) => expr.simplified(),
            Err(why) => {
                unchecked.push((guard.clone(), why));
                continue;
            }
        };
        if let Err(why) = readable(&expr, &ranks) {
            unchecked.push((guard.clone(), why));
            continue;
        }
        let value = emitter.emit(&expr);
        let holds = emitter.as_kind(value, Kind::Bool);
        if let Some(&input) = expr.inputs().first() {
            let rank = ranks[input];
            let reading = current.get(input).cloned().unwrap_or_else(|| input.to_string());
            let shape = match shapes.get(input) {
                Some(shape) => shape.clone(),
                None => emitter.node("Shape", &[input], vec![]),
            };
            shapes.insert(input.to_string(), shape.clone());
            let broken = emitter.ints(&vec![-2; rank.max(1)]);
            let target = emitter.node("Where", &[&holds, &shape, &broken], vec![]);
            // The node's name (its output's, with `_node`) is what ONNX Runtime's error names.
            let name = format!("{input} where torch.export's guard `{guard}` holds");
            emitter.nodes.push(Node {
                op_type: "Reshape".into(),
                domain: String::new(),
                inputs: vec![reading, target],
                outputs: vec![name.clone()],
                attributes: vec![("allowzero".into(), Attribute::Int(1))],
                function: None,
            });
            current.insert(input.to_string(), name);
        }
        checked.push(guard.clone());
    }
    let mut added = emitter.nodes;
    for (name, values) in emitter.constants {
        let header = p::TensorProto {
            dims: vec![values.len() as i64],
            data_type: Some(hfx_dtype::DType::Int64.onnx_code()),
            name: Some(name),
            ..Default::default()
        };
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        initializers.push(Initializer { header, bytes: Bytes::Owned(bytes) });
    }
    if added.is_empty() {
        return (checked, unchecked);
    }
    let ours: std::collections::HashSet<String> =
        added.iter().flat_map(|n| n.outputs.iter().cloned()).collect();
    for node in nodes.iter_mut().filter(|n| n.function.is_none()) {
        for input in node.inputs.iter_mut() {
            if let Some(name) = current.get(input.as_str()) {
                if !ours.contains(input.as_str()) {
                    *input = name.clone();
                }
            }
        }
    }
    added.append(nodes);
    *nodes = added;
    (checked, unchecked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(input: &str, axis: i64) -> Box<Expr> {
        Box::new(Expr::Size { input: input.into(), axis })
    }

    #[test]
    fn guards_parse_with_pythons_precedence() {
        let e = parse("((4 + (-1)*(x.shape[1] % 4)) % 4) <= 0").unwrap();
        let inner = Expr::Binary(
            Op::Add,
            Box::new(Expr::Int(4)),
            Box::new(Expr::Binary(
                Op::Mul,
                Box::new(Expr::Neg(Box::new(Expr::Int(1)))),
                Box::new(Expr::Binary(Op::Mod, size("x", 1), Box::new(Expr::Int(4)))),
            )),
        );
        let want = Expr::Binary(
            Op::Le,
            Box::new(Expr::Binary(Op::Mod, Box::new(inner), Box::new(Expr::Int(4)))),
            Box::new(Expr::Int(0)),
        );
        assert_eq!(e, want);
        let chained =
            parse("2 <= a.shape[0] < b.shape[-1] and not max(a.shape[1], 3) == 4").unwrap();
        assert_eq!(chained.inputs(), ["a", "b"]);
        assert!(matches!(chained, Expr::Binary(Op::And, _, _)));
        assert_eq!(
            parse("x.shape[1] // 4 == 2").unwrap(),
            Expr::Binary(
                Op::Eq,
                Box::new(Expr::Binary(Op::FloorDiv, size("x", 1), Box::new(Expr::Int(4)))),
                Box::new(Expr::Int(2))
            )
        );
    }

    /// Simplified, an expression computes what Python computes, in fewer
    /// operations: evaluated both ways at many sizes.
    #[test]
    fn simplifying_keeps_pythons_value() {
        fn value(e: &Expr, n: i64) -> i64 {
            match e {
                Expr::Size { .. } => n,
                Expr::Int(v) => *v,
                Expr::Neg(e) => -value(e, n),
                Expr::Not(e) => (value(e, n) == 0) as i64,
                Expr::Binary(op, a, b) => {
                    let (x, y) = (value(a, n), value(b, n));
                    match op {
                        Op::Eq => (x == y) as i64,
                        Op::Le => (x <= y) as i64,
                        Op::And => (x != 0 && y != 0) as i64,
                        op => integers(*op, x, y).unwrap(),
                    }
                }
            }
        }
        for guard in [
            "((4 + (-1)*(x.shape[1] % 4)) % 4) <= 0",
            "x.shape[1] + ((-1)*x.shape[0]) <= 0",
            "(-7) // 2 + (-7) % 3 + 7 // (-2) + 7 % (-3) + (-1)*(-1)*x.shape[1] == 0",
            "1*x.shape[1] + 0 == (-(-x.shape[1])) and max(2, 3) * min(x.shape[0], 5) == 3*x.shape[0]",
        ] {
            let (parsed, simplified) = (parse(guard).unwrap(), parse(guard).unwrap().simplified());
            assert!(format!("{simplified:?}").len() < format!("{parsed:?}").len(), "{guard}");
            for n in -9..=9 {
                assert_eq!(value(&parsed, n), value(&simplified, n), "{guard} at {n}");
            }
        }
        // Python's floor division and remainder of negative integers.
        assert_eq!(parse("(-7) // 2").unwrap().simplified(), Expr::Int(-4));
        assert_eq!(parse("7 % (-3)").unwrap().simplified(), Expr::Int(-2));
        assert_eq!(parse("(-7) % 3").unwrap().simplified(), Expr::Int(2));
        assert_eq!(parse("7 // (-2)").unwrap().simplified(), Expr::Int(-4));
    }

    #[test]
    fn what_is_not_a_size_guard_is_refused_in_one_line() {
        for (guard, why) in [
            ("x.stride()[0] == 1", "only an input's `.shape[axis]`"),
            ("x.shape[1] ** 2 == 4", "expected a size"),
            ("x.shape[1] == 4)", "after the expression"),
            ("x.shape[a] == 4", "expected an axis"),
            ("L['x'].size()[0] == 4", "unexpected `'`"),
            ("99999999999999999999 == 1", "too large"),
        ] {
            let error = parse(guard).unwrap_err();
            assert!(error.contains(why) && !error.contains('\n'), "{guard}: {error}");
        }
        let deep = format!("{}1{}", "(".repeat(100), ")".repeat(100));
        assert!(parse(&deep).unwrap_err().contains("nested deeper"));
        assert!(parse(&"1 + ".repeat(2000)).unwrap_err().contains("at most"));
    }
}
