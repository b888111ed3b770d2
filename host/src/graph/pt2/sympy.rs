//! Symbolic sizes in a `.pt2` are sympy `srepr` strings:
//! `Symbol('s77', positive=True, integer=True)`, `Mul(Integer(2), Symbol(...))`,
//! `Add(Symbol(...), Integer(1))`, `FloorDiv(...)`. The IR and plugins use the
//! printed form (`s77`, `2*s77`, `s77 + 1`); this module parses `srepr` and
//! prints it. (The writer maps printed forms back through the table it built
//! while reading, so the `srepr` torch wrote is the `srepr` hfx writes.)

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Symbol(String),
    Integer(i64),
    /// Any other sympy node: `Add`, `Mul`, `Pow`, `FloorDiv`, `Mod`, `Max`, ...
    Call(String, Vec<Expr>),
}

/// Parses a sympy `srepr` string.
pub fn parse(srepr: &str) -> Result<Expr, String> {
    let mut p = Parser { s: srepr.as_bytes(), at: 0, depth: 0 };
    let e = p.expr()?;
    p.skip_ws();
    if p.at != p.s.len() {
        return Err(format!(
            "unexpected `{}` in sympy expression `{}`",
            excerpt(&p.s[p.at..]),
            excerpt(p.s)
        ));
    }
    Ok(e)
}

/// Nesting deeper than this is refused (torch's sizes nest a few levels).
const MAX_DEPTH: usize = 64;

/// At most 80 characters of `bytes`, escaped onto one line.
fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(80)]);
    let mut out: String = text.escape_debug().collect();
    if bytes.len() > 80 {
        out.push('…');
    }
    out
}

/// The printed form, close to sympy's `str`: `s0`, `2*s0`, `s0 + 1`, `FloorDiv(s0, 2)`.
pub fn print(e: &Expr) -> String {
    match e {
        Expr::Symbol(s) => s.clone(),
        Expr::Integer(i) => i.to_string(),
        Expr::Call(f, args) if f == "Add" => args.iter().map(print).collect::<Vec<_>>().join(" + "),
        Expr::Call(f, args) if f == "Mul" => args
            .iter()
            .map(|a| match a {
                Expr::Call(g, _) if g == "Add" => format!("({})", print(a)),
                _ => print(a),
            })
            .collect::<Vec<_>>()
            .join("*"),
        Expr::Call(f, args) if f == "Pow" && args.len() == 2 => {
            format!("{}**{}", print(&args[0]), print(&args[1]))
        }
        Expr::Call(f, args) => {
            format!("{f}({})", args.iter().map(print).collect::<Vec<_>>().join(", "))
        }
    }
}

/// `srepr` to printed form in one step.
pub fn printed(srepr: &str) -> Result<String, String> {
    parse(srepr).map(|e| print(&e))
}

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
    depth: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.at < self.s.len() && self.s[self.at].is_ascii_whitespace() {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.at).copied()
    }

    fn eat(&mut self, c: u8) -> Result<(), String> {
        if self.peek() == Some(c) {
            self.at += 1;
            Ok(())
        } else {
            Err(format!("expected `{}` at byte {} of sympy expression", c as char, self.at))
        }
    }

    fn ident(&mut self) -> String {
        self.skip_ws();
        let start = self.at;
        while self.at < self.s.len()
            && (self.s[self.at].is_ascii_alphanumeric() || self.s[self.at] == b'_')
        {
            self.at += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.at]).into_owned()
    }

    fn expr(&mut self) -> Result<Expr, String> {
        if self.depth >= MAX_DEPTH {
            return Err(format!("sympy expression nested deeper than {MAX_DEPTH} levels"));
        }
        self.depth += 1;
        let e = self.node();
        self.depth -= 1;
        e
    }

    fn node(&mut self) -> Result<Expr, String> {
        match self.peek() {
            Some(b'-' | b'0'..=b'9') => self.integer().map(Expr::Integer),
            Some(b'\'') => Err("unexpected string".into()),
            // A tuple, as `Piecewise` holds its (value, condition) pairs.
            Some(b'(') => {
                self.at += 1;
                let mut items = Vec::new();
                while self.peek() != Some(b')') {
                    items.push(self.expr()?);
                    if self.peek() != Some(b',') {
                        break;
                    }
                    self.at += 1;
                }
                self.eat(b')')?;
                Ok(Expr::Call("Tuple".into(), items))
            }
            _ => {
                let name = self.ident();
                if name.is_empty() {
                    return Err(format!("expected a sympy node at byte {}", self.at));
                }
                // A singleton written bare: `true`, `false`, `oo`, `zoo`, `nan`.
                if self.peek() != Some(b'(') {
                    return Ok(Expr::Symbol(name));
                }
                self.eat(b'(')?;
                let mut args = Vec::new();
                let mut strings = Vec::new();
                while self.peek() != Some(b')') {
                    match self.peek() {
                        Some(b'\'') => strings.push(self.string()?),
                        _ => {
                            // `key=value` assumptions (positive=True) carry no structure.
                            let save = self.at;
                            let word = self.ident();
                            if !word.is_empty() && self.peek() == Some(b'=') {
                                self.at += 1;
                                self.ident();
                            } else {
                                self.at = save;
                                args.push(self.expr()?);
                            }
                        }
                    }
                    if self.peek() == Some(b',') {
                        self.at += 1;
                    }
                }
                self.eat(b')')?;
                Ok(match name.as_str() {
                    "Symbol" => {
                        Expr::Symbol(strings.into_iter().next().ok_or("Symbol without a name")?)
                    }
                    "Integer" => match args.as_slice() {
                        [Expr::Integer(i)] => Expr::Integer(*i),
                        _ => return Err("Integer without a value".into()),
                    },
                    _ => Expr::Call(name, args),
                })
            }
        }
    }

    fn integer(&mut self) -> Result<i64, String> {
        self.skip_ws();
        let start = self.at;
        if self.s.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        while self.at < self.s.len() && self.s[self.at].is_ascii_digit() {
            self.at += 1;
        }
        std::str::from_utf8(&self.s[start..self.at])
            .unwrap_or("")
            .parse()
            .map_err(|_| "bad integer".to_string())
    }

    fn string(&mut self) -> Result<String, String> {
        self.eat(b'\'')?;
        let start = self.at;
        while self.at < self.s.len() && self.s[self.at] != b'\'' {
            self.at += 1;
        }
        let text = String::from_utf8_lossy(&self.s[start..self.at]).into_owned();
        self.eat(b'\'')?;
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_what_torch_writes() {
        let s = "Symbol('s77', positive=True, integer=True)";
        assert_eq!(printed(s).unwrap(), "s77");
        assert_eq!(printed(&format!("Mul(Integer(2), {s})")).unwrap(), "2*s77");
        assert_eq!(printed(&format!("Add({s}, Integer(-1))")).unwrap(), "s77 + -1");
        assert_eq!(
            printed(&format!("Mul(Integer(4), Add({s}, Integer(1)))")).unwrap(),
            "4*(s77 + 1)"
        );
        assert_eq!(printed(&format!("FloorDiv({s}, Integer(2))")).unwrap(), "FloorDiv(s77, 2)");
        assert!(parse("Mul(Integer(2), ").is_err());
        assert!(parse("Symbol('s1') trailing").is_err());
    }

    #[test]
    fn piecewise_conditions_and_bare_singletons_parse() {
        let s = "Symbol('s0', positive=True, integer=True)";
        let piecewise =
            format!("Piecewise((Integer(1), StrictLessThan({s}, Integer(4))), (Integer(0), true))");
        assert_eq!(
            printed(&piecewise).unwrap(),
            "Piecewise(Tuple(1, StrictLessThan(s0, 4)), Tuple(0, true))"
        );
        assert_eq!(printed(&format!("Max({s}, oo)")).unwrap(), "Max(s0, oo)");
        assert!(parse("(Integer(1), ").is_err());
    }

    #[test]
    fn deep_or_odd_input_is_an_error_not_a_crash() {
        let deep = format!("{}Integer(1){}", "Add(".repeat(100_000), ")".repeat(100_000));
        assert!(parse(&deep).unwrap_err().contains("nested deeper than 64"));
        let e = parse("Symbol('é') é\n trailing").unwrap_err();
        assert!(e.contains("unexpected `é\\n trailing`") && !e.contains('\n'), "{e}");
        assert!(parse("Integer(99999999999999999999)").is_err());
    }
}
