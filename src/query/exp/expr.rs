//! The expression language of `/api/query/exp`: what OpenTSDB 2.4.1
//! hands to Apache Commons JEXL 2.1.1 (`JexlEngine.createScript`, then
//! `Script.execute` with every variable bound to a `Double`).
//!
//! Parsing follows JEXL's grammar (`Parser.jjt`) as a Pratt parser, with
//! its precedence (lowest first): `?:` and `? :`, `||`/`or`, `&&`/`and`,
//! `|`, `^`, `&`, `==`/`!=`/`eq`/`ne` (non-associative), `<`/`>`/`<=`/`>=`
//! and their word forms (non-associative), `+`/`-`, `*`/`/`/`%`/`div`/
//! `mod`, then the prefix operators `-`, `~`, `!`/`not`. Statements may be
//! separated by `;`; the script's value is the last one's.
//!
//! Evaluation follows `JexlArithmetic` with the engine's defaults
//! (lenient arithmetic, non-strict interpreter), including its quirks,
//! because dashboards built on OpenTSDB see exactly these numbers:
//! - a decimal literal is a `Float` (`0.1` is `0.1f`), read back as a
//!   double through its decimal text; integer literals are `Integer`
//!   (octal with a leading `0`, hex with `0x`, `Long` with `l`);
//! - arithmetic on two integers stays integral (`7 / 2` is 3);
//! - `/` and `%` by zero give `0.0`, not an error or infinity (the
//!   non-strict interpreter catches JEXL's `ArithmeticException`);
//! - comparisons order NaN below every number and equal to itself
//!   (`NaN < 1` and `NaN == NaN` are true);
//! - a number is true when it is neither 0 nor NaN.
//!
//! OpenTSDB keeps a result only when it is a `Double` or a `Boolean`
//! (1 or 0); any other type fails the query ([`Eval::type_name`]).
//! Strings, `null`, assignments, blocks, loops, functions and methods
//! are JEXL too but mean nothing over numeric series: they are refused
//! with a parse error here.

use std::fmt;

/// A parsed expression and the variables it reads, in order of first use.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    source: String,
    statements: Vec<Node>,
    variables: Vec<String>,
}

/// A syntax error, with the 1-based column where it was found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("@1:{column} parsing error: {message}")]
pub struct ParseError {
    pub column: usize,
    pub message: String,
}

/// An error raised while evaluating (JEXL's `JexlException`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct EvalError(pub String);

#[derive(Debug, Clone, Copy, PartialEq)]
enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    BitAnd,
    BitOr,
    BitXor,
    Eq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Lit(Eval),
    Var(usize),
    Neg(Box<Node>),
    Not(Box<Node>),
    BitNot(Box<Node>),
    Bin(BinOp, Box<Node>, Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Ternary(Box<Node>, Box<Node>, Box<Node>),
    Elvis(Box<Node>, Box<Node>),
}

/// A JEXL value: the Java types arithmetic can produce from numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Eval {
    Bool(bool),
    Int(i32),
    Long(i64),
    /// A `BigInteger` (only as wide as the arithmetic here needs).
    Big(i128),
    Float(f32),
    Double(f64),
}

impl Eval {
    /// The Java class name OpenTSDB prints for a result it refuses.
    pub fn type_name(&self) -> &'static str {
        match self {
            Eval::Bool(_) => "java.lang.Boolean",
            Eval::Int(_) => "java.lang.Integer",
            Eval::Long(_) => "java.lang.Long",
            Eval::Big(_) => "java.math.BigInteger",
            Eval::Float(_) => "java.lang.Float",
            Eval::Double(_) => "java.lang.Double",
        }
    }

    /// The number OpenTSDB keeps: a `Double` as is, a `Boolean` as 1 or 0.
    pub fn to_output(self) -> Option<f64> {
        match self {
            Eval::Double(d) => Some(d),
            Eval::Bool(b) => Some(if b { 1.0 } else { 0.0 }),
            _ => None,
        }
    }

    fn is_floating(self) -> bool {
        matches!(self, Eval::Float(_) | Eval::Double(_))
    }

    fn is_integral(self) -> bool {
        matches!(self, Eval::Int(_) | Eval::Long(_))
    }

    /// `JexlArithmetic.toDouble`: other numbers go through their decimal
    /// text, so a `Float` 0.1 becomes the double 0.1.
    fn to_double(self) -> f64 {
        match self {
            Eval::Double(d) => d,
            Eval::Float(f) => float_to_double(f),
            Eval::Int(i) => i as f64,
            Eval::Long(l) => l as f64,
            Eval::Big(b) => b as f64,
            Eval::Bool(b) => {
                if b {
                    1.0
                } else {
                    0.0
                }
            }
        }
    }

    /// `JexlArithmetic.toBoolean`.
    fn truthy(self) -> bool {
        match self {
            Eval::Bool(b) => b,
            n => {
                let d = n.to_double();
                !d.is_nan() && d != 0.0
            }
        }
    }

    /// `JexlArithmetic.toLong`. A `Double` always gives 0: 2.1.1 tests
    /// `!isNaN` where it meant `isNaN`.
    fn to_long(self) -> i64 {
        match self {
            Eval::Double(_) => 0,
            Eval::Float(f) => f as i64,
            Eval::Int(i) => i as i64,
            Eval::Long(l) => l,
            Eval::Big(b) => b as i64,
            Eval::Bool(b) => b as i64,
        }
    }

    /// `JexlArithmetic.toBigInteger`; booleans are refused.
    fn to_big(self, op: &str) -> Result<i128, EvalError> {
        match self {
            Eval::Int(i) => Ok(i as i128),
            Eval::Long(l) => Ok(l as i128),
            Eval::Big(b) => Ok(b),
            Eval::Bool(b) => Err(EvalError(format!(
                "{op} error: BigInteger coercion: java.lang.Boolean:({b})"
            ))),
            // Floating values never get here (the double path wins).
            Eval::Float(f) => Ok(f as i128),
            Eval::Double(d) => Ok(d as i128),
        }
    }
}

/// `Double.parseDouble(Float.toString(f))`.
fn float_to_double(f: f32) -> f64 {
    if f.is_nan() {
        return f64::NAN;
    }
    if f.is_infinite() {
        return if f > 0.0 {
            f64::INFINITY
        } else {
            f64::NEG_INFINITY
        };
    }
    format!("{f}").parse().unwrap_or(f as f64)
}

/// `narrowBigInteger`: an `Integer` when both operands were narrower than
/// `Long` and it fits, else a `Long` when it fits, else a `BigInteger`.
fn narrow(l: Eval, r: Eval, v: i128) -> Eval {
    let big = matches!(l, Eval::Big(_)) || matches!(r, Eval::Big(_));
    if !big && (i64::MIN as i128..=i64::MAX as i128).contains(&v) {
        let long = matches!(l, Eval::Long(_)) || matches!(r, Eval::Long(_));
        if !long && (i32::MIN as i128..=i32::MAX as i128).contains(&v) {
            return Eval::Int(v as i32);
        }
        return Eval::Long(v as i64);
    }
    Eval::Big(v)
}

fn overflow(op: &str) -> EvalError {
    EvalError(format!("{op} error: integer overflow"))
}

/// `JexlArithmetic.compare` for numbers and booleans.
fn compare(l: Eval, r: Eval) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    if matches!(l, Eval::Big(_)) || matches!(r, Eval::Big(_)) {
        let as_big = |v: Eval| match v {
            Eval::Big(b) => b,
            o => o.to_long() as i128,
        };
        return as_big(l).cmp(&as_big(r));
    }
    if l.is_floating() || r.is_floating() {
        let (a, b) = (l.to_double(), r.to_double());
        return match (a.is_nan(), b.is_nan()) {
            (true, true) => Equal,
            (true, false) => Less,
            (false, true) => Greater,
            _ => a.partial_cmp(&b).unwrap_or(Equal),
        };
    }
    if l.is_integral() || r.is_integral() {
        return l.to_long().cmp(&r.to_long());
    }
    // Two booleans: Boolean.compareTo (false < true).
    l.truthy().cmp(&r.truthy())
}

fn arith(op: BinOp, l: Eval, r: Eval) -> Result<Eval, EvalError> {
    let name = match op {
        BinOp::Add | BinOp::Sub => "+/-",
        BinOp::Mul => "*",
        BinOp::Div => "divide",
        _ => "%",
    };
    if l.is_floating() || r.is_floating() {
        let (a, b) = (l.to_double(), r.to_double());
        return Ok(Eval::Double(match op {
            BinOp::Add => a + b,
            BinOp::Sub => a - b,
            BinOp::Mul => a * b,
            // The non-strict interpreter answers 0.0 to a division by zero.
            BinOp::Div if b == 0.0 => 0.0,
            BinOp::Div => a / b,
            BinOp::Mod if b == 0.0 => 0.0,
            _ => a % b,
        }));
    }
    let big = (l.to_big(name), r.to_big(name));
    let (a, b) = match big {
        (Ok(a), Ok(b)) => (a, b),
        // Division and modulo swallow any arithmetic error as 0.0.
        (Err(_), _) | (_, Err(_)) if matches!(op, BinOp::Div | BinOp::Mod) => {
            return Ok(Eval::Double(0.0));
        }
        (Err(e), _) | (_, Err(e)) => return Err(e),
    };
    let v = match op {
        BinOp::Add => a.checked_add(b).ok_or_else(|| overflow(name))?,
        BinOp::Sub => a.checked_sub(b).ok_or_else(|| overflow(name))?,
        BinOp::Mul => a.checked_mul(b).ok_or_else(|| overflow(name))?,
        BinOp::Div if b == 0 => return Ok(Eval::Double(0.0)),
        BinOp::Div => a / b,
        // BigInteger.mod refuses a modulus that is not positive; the
        // interpreter turns that into 0.0 too. Its result is never negative.
        BinOp::Mod if b <= 0 => return Ok(Eval::Double(0.0)),
        _ => a.rem_euclid(b),
    };
    Ok(narrow(l, r, v))
}

fn negate(v: Eval) -> Eval {
    match v {
        Eval::Int(i) => Eval::Int(i.wrapping_neg()),
        Eval::Long(l) => Eval::Long(l.wrapping_neg()),
        Eval::Big(b) => Eval::Big(b.wrapping_neg()),
        Eval::Float(f) => Eval::Float(-f),
        Eval::Double(d) => Eval::Double(-d),
        Eval::Bool(b) => Eval::Bool(!b),
    }
}

impl Script {
    /// Parses `source` (`JexlEngine.createScript`).
    pub fn parse(source: &str) -> Result<Script, ParseError> {
        let tokens = lex(source)?;
        let mut p = Parser {
            tokens,
            pos: 0,
            variables: Vec::new(),
            depth: 0,
        };
        let mut statements = Vec::new();
        while !p.at_end() {
            if p.eat(&Tok::Semi) {
                continue;
            }
            statements.push(p.expression()?);
            if !p.at_end() && !p.eat(&Tok::Semi) {
                return Err(p.unexpected());
            }
        }
        Ok(Script {
            source: source.to_string(),
            statements,
            variables: p.variables,
        })
    }

    /// The text it was parsed from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The variables read, in order of first appearance.
    pub fn variables(&self) -> &[String] {
        &self.variables
    }

    /// Runs the script with `values[i]` bound to `variables()[i]`. An
    /// empty script has no value (`None`).
    pub fn eval(&self, values: &[f64]) -> Result<Option<Eval>, EvalError> {
        let mut last = None;
        for s in &self.statements {
            last = Some(eval(s, values)?);
        }
        Ok(last)
    }
}

fn eval(n: &Node, vars: &[f64]) -> Result<Eval, EvalError> {
    Ok(match n {
        Node::Lit(v) => *v,
        Node::Var(i) => Eval::Double(vars.get(*i).copied().unwrap_or(f64::NAN)),
        Node::Neg(a) => negate(eval(a, vars)?),
        Node::Not(a) => Eval::Bool(!eval(a, vars)?.truthy()),
        Node::BitNot(a) => Eval::Long(!eval(a, vars)?.to_long()),
        Node::And(a, b) => Eval::Bool(eval(a, vars)?.truthy() && eval(b, vars)?.truthy()),
        Node::Or(a, b) => Eval::Bool(eval(a, vars)?.truthy() || eval(b, vars)?.truthy()),
        Node::Ternary(c, a, b) => {
            if eval(c, vars)?.truthy() {
                eval(a, vars)?
            } else {
                eval(b, vars)?
            }
        }
        Node::Elvis(c, b) => {
            let v = eval(c, vars)?;
            if v.truthy() { v } else { eval(b, vars)? }
        }
        Node::Bin(op, a, b) => {
            let (l, r) = (eval(a, vars)?, eval(b, vars)?);
            match op {
                BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Mod => arith(*op, l, r)?,
                BinOp::BitAnd => Eval::Long(l.to_long() & r.to_long()),
                BinOp::BitOr => Eval::Long(l.to_long() | r.to_long()),
                BinOp::BitXor => Eval::Long(l.to_long() ^ r.to_long()),
                BinOp::Eq | BinOp::Ne => {
                    // A boolean on either side compares truth values.
                    let eq = if matches!(l, Eval::Bool(_)) || matches!(r, Eval::Bool(_)) {
                        l.truthy() == r.truthy()
                    } else {
                        compare(l, r).is_eq()
                    };
                    Eval::Bool(eq == (*op == BinOp::Eq))
                }
                BinOp::Lt => Eval::Bool(compare(l, r).is_lt()),
                BinOp::Gt => Eval::Bool(compare(l, r).is_gt()),
                BinOp::Le => Eval::Bool(compare(l, r).is_le()),
                BinOp::Ge => Eval::Bool(compare(l, r).is_ge()),
            }
        }
    })
}

impl fmt::Display for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

// ---------------------------------------------------------------- lexer

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(Eval),
    Ident(String),
    True,
    False,
    /// A JEXL keyword or literal kind that means nothing over numbers.
    Unsupported(&'static str),
    LParen,
    RParen,
    Semi,
    Colon,
    Question,
    Elvis,
    OrOr,
    AndAnd,
    Pipe,
    Caret,
    Amp,
    EqEq,
    NotEq,
    Lt,
    Gt,
    Le,
    Ge,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Tilde,
    Bang,
    /// Any other symbol JEXL knows (`=`, `=~`, `.`, `[`, `{`, `,`...).
    Other(String),
}

fn lex(src: &str) -> Result<Vec<(usize, Tok)>, ParseError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let err = |i: usize, m: String| ParseError {
        column: i + 1,
        message: m,
    };
    while i < b.len() {
        let c = b[i];
        if matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0c) {
            i += 1;
            continue;
        }
        // Comments: `##` or `//` to the end of the line, `/* ... */`.
        if (c == b'#' && b.get(i + 1) == Some(&b'#')) || (c == b'/' && b.get(i + 1) == Some(&b'/'))
        {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            match src[i + 2..].find("*/") {
                Some(end) => {
                    i += end + 4;
                    continue;
                }
                None => return Err(err(i, "unterminated comment".into())),
            }
        }
        let start = i;
        if c.is_ascii_digit() {
            let (tok, len) = lex_number(&src[i..]).map_err(|m| err(i, m))?;
            out.push((start, tok));
            i += len;
            continue;
        }
        if c.is_ascii_alphabetic() || matches!(c, b'_' | b'$' | b'@') {
            while i < b.len()
                && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'_' | b'$' | b'@'))
            {
                i += 1;
            }
            let word = &src[start..i];
            let tok = match word {
                "true" => Tok::True,
                "false" => Tok::False,
                "and" => Tok::AndAnd,
                "or" => Tok::OrOr,
                "eq" => Tok::EqEq,
                "ne" => Tok::NotEq,
                "lt" => Tok::Lt,
                "gt" => Tok::Gt,
                "le" => Tok::Le,
                "ge" => Tok::Ge,
                "mod" => Tok::Percent,
                "div" => Tok::Slash,
                "not" => Tok::Bang,
                "null" => Tok::Unsupported("null"),
                "if" | "else" | "for" | "foreach" | "while" | "new" | "var" | "empty" | "size"
                | "return" => Tok::Unsupported("statements and functions"),
                w => Tok::Ident(w.to_string()),
            };
            out.push((start, tok));
            continue;
        }
        if c == b'"' || c == b'\'' {
            out.push((start, Tok::Unsupported("string literals")));
            i += 1;
            while i < b.len() && b[i] != c {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        let two = src.get(i..i + 2).unwrap_or("");
        let (tok, len) = match two {
            "?:" => (Tok::Elvis, 2),
            "||" => (Tok::OrOr, 2),
            "&&" => (Tok::AndAnd, 2),
            "==" => (Tok::EqEq, 2),
            "!=" => (Tok::NotEq, 2),
            "<=" => (Tok::Le, 2),
            ">=" => (Tok::Ge, 2),
            "=~" | "!~" => (Tok::Other(two.to_string()), 2),
            _ => match c {
                b'(' => (Tok::LParen, 1),
                b')' => (Tok::RParen, 1),
                b';' => (Tok::Semi, 1),
                b':' => (Tok::Colon, 1),
                b'?' => (Tok::Question, 1),
                b'|' => (Tok::Pipe, 1),
                b'^' => (Tok::Caret, 1),
                b'&' => (Tok::Amp, 1),
                b'<' => (Tok::Lt, 1),
                b'>' => (Tok::Gt, 1),
                b'+' => (Tok::Plus, 1),
                b'-' => (Tok::Minus, 1),
                b'*' => (Tok::Star, 1),
                b'/' => (Tok::Slash, 1),
                b'%' => (Tok::Percent, 1),
                b'~' => (Tok::Tilde, 1),
                b'!' => (Tok::Bang, 1),
                b'=' | b'.' | b'[' | b']' | b'{' | b'}' | b',' => {
                    (Tok::Other((c as char).to_string()), 1)
                }
                _ => {
                    let ch = src[i..].chars().next().unwrap_or('?');
                    return Err(err(i, format!("unexpected character '{ch}'")));
                }
            },
        };
        out.push((start, tok));
        i += len;
    }
    Ok(out)
}

/// A numeric literal at the start of `s` (JEXL's `INTEGER_LITERAL` /
/// `FLOAT_LITERAL`, longest match) and its length.
fn lex_number(s: &str) -> Result<(Tok, usize), String> {
    let b = s.as_bytes();
    let digits = |from: usize, ok: fn(u8) -> bool| b[from..].iter().take_while(|&&c| ok(c)).count();
    let int_len = digits(0, |c| c.is_ascii_digit());
    // FLOAT_LITERAL: digits "." digits [exponent] [dDfFbB]
    if b.get(int_len) == Some(&b'.') && b.get(int_len + 1).is_some_and(u8::is_ascii_digit) {
        let mut end = int_len + 1 + digits(int_len + 1, |c| c.is_ascii_digit());
        if matches!(b.get(end), Some(b'e' | b'E')) {
            let mut e = end + 1;
            if matches!(b.get(e), Some(b'+' | b'-')) {
                e += 1;
            }
            let n = digits(e, |c| c.is_ascii_digit());
            if n > 0 {
                end = e + n;
            }
        }
        let text = &s[..end];
        return Ok(match b.get(end) {
            Some(b'd' | b'D') => (
                Tok::Num(Eval::Double(text.parse().map_err(|_| bad_number(text))?)),
                end + 1,
            ),
            Some(b'b' | b'B') => (Tok::Unsupported("BigDecimal literals"), end + 1),
            Some(b'f' | b'F') => (
                Tok::Num(Eval::Float(text.parse().map_err(|_| bad_number(text))?)),
                end + 1,
            ),
            _ => (
                Tok::Num(Eval::Float(text.parse().map_err(|_| bad_number(text))?)),
                end,
            ),
        });
    }
    // INTEGER_LITERAL: 0[0-7]* (octal) | [1-9][0-9]* | 0[xX][0-9a-fA-F]+
    let (radix, body_start, body_len) = if b[0] == b'0' {
        if matches!(b.get(1), Some(b'x' | b'X')) && b.get(2).is_some_and(u8::is_ascii_hexdigit) {
            (16, 2, digits(2, |c| c.is_ascii_hexdigit()))
        } else {
            (8, 0, 1 + digits(1, |c| (b'0'..=b'7').contains(&c)))
        }
    } else {
        (10, 0, int_len)
    };
    let end = body_start + body_len;
    let body = &s[body_start..end];
    let parsed = i128::from_str_radix(body, radix).map_err(|_| bad_number(&s[..end]))?;
    Ok(match b.get(end) {
        Some(b'l' | b'L') => (
            Tok::Num(Eval::Long(
                i64::try_from(parsed).map_err(|_| bad_number(&s[..end]))?,
            )),
            end + 1,
        ),
        Some(b'h' | b'H') => (Tok::Num(Eval::Big(parsed)), end + 1),
        _ => (
            Tok::Num(if let Ok(i) = i32::try_from(parsed) {
                Eval::Int(i)
            } else if let Ok(l) = i64::try_from(parsed) {
                Eval::Long(l)
            } else {
                Eval::Big(parsed)
            }),
            end,
        ),
    })
}

fn bad_number(s: &str) -> String {
    format!("invalid number '{s}'")
}

// --------------------------------------------------------------- parser

/// Nesting deeper than this is refused rather than risking the stack.
const MAX_DEPTH: usize = 256;

struct Parser {
    tokens: Vec<(usize, Tok)>,
    pos: usize,
    variables: Vec<String>,
    depth: usize,
}

/// Binding power of the binary operators (higher binds tighter).
fn binary_op(t: &Tok) -> Option<(u8, Option<BinOp>)> {
    Some(match t {
        Tok::OrOr => (1, None),
        Tok::AndAnd => (2, None),
        Tok::Pipe => (3, Some(BinOp::BitOr)),
        Tok::Caret => (4, Some(BinOp::BitXor)),
        Tok::Amp => (5, Some(BinOp::BitAnd)),
        Tok::EqEq => (6, Some(BinOp::Eq)),
        Tok::NotEq => (6, Some(BinOp::Ne)),
        Tok::Lt => (7, Some(BinOp::Lt)),
        Tok::Gt => (7, Some(BinOp::Gt)),
        Tok::Le => (7, Some(BinOp::Le)),
        Tok::Ge => (7, Some(BinOp::Ge)),
        Tok::Plus => (8, Some(BinOp::Add)),
        Tok::Minus => (8, Some(BinOp::Sub)),
        Tok::Star => (9, Some(BinOp::Mul)),
        Tok::Slash => (9, Some(BinOp::Div)),
        Tok::Percent => (9, Some(BinOp::Mod)),
        _ => return None,
    })
}

/// Equality and relational operators take one operand on each side:
/// `a < b < c` does not parse in JEXL.
fn non_associative(bp: u8) -> bool {
    bp == 6 || bp == 7
}

impl Parser {
    fn at_end(&self) -> bool {
        self.pos >= self.tokens.len()
    }

    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos).map(|t| &t.1)
    }

    fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == Some(t) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn column(&self) -> usize {
        match self.tokens.get(self.pos) {
            Some((c, _)) => c + 1,
            None => self.tokens.last().map_or(1, |t| t.0 + 2),
        }
    }

    fn unexpected(&self) -> ParseError {
        let message = match self.peek() {
            None => "unexpected end of expression".to_string(),
            Some(Tok::Unsupported(what)) => format!("{what} are not supported in expressions"),
            Some(t) => format!("unexpected {}", describe(t)),
        };
        ParseError {
            column: self.column(),
            message,
        }
    }

    fn enter(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(ParseError {
                column: self.column(),
                message: "expression nested too deeply".into(),
            });
        }
        Ok(())
    }

    /// `Expression`: a conditional (assignments are refused).
    fn expression(&mut self) -> Result<Node, ParseError> {
        self.enter()?;
        let cond = self.binary(1)?;
        let node = if self.eat(&Tok::Question) {
            let a = self.expression()?;
            if !self.eat(&Tok::Colon) {
                return Err(self.unexpected());
            }
            let b = self.expression()?;
            Node::Ternary(Box::new(cond), Box::new(a), Box::new(b))
        } else if self.eat(&Tok::Elvis) {
            let b = self.expression()?;
            Node::Elvis(Box::new(cond), Box::new(b))
        } else {
            cond
        };
        self.depth -= 1;
        Ok(node)
    }

    fn binary(&mut self, min_bp: u8) -> Result<Node, ParseError> {
        let mut lhs = self.unary()?;
        while let Some((bp, op)) = self.peek().and_then(binary_op) {
            if bp < min_bp {
                break;
            }
            self.pos += 1;
            let rhs = self.binary(bp + 1)?;
            lhs = match op {
                Some(op) => Node::Bin(op, Box::new(lhs), Box::new(rhs)),
                None if bp == 1 => Node::Or(Box::new(lhs), Box::new(rhs)),
                None => Node::And(Box::new(lhs), Box::new(rhs)),
            };
            if non_associative(bp) && self.peek().and_then(binary_op).is_some_and(|n| n.0 == bp) {
                return Err(self.unexpected());
            }
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Node, ParseError> {
        self.enter()?;
        let node = match self.peek() {
            Some(Tok::Minus) => {
                self.pos += 1;
                Node::Neg(Box::new(self.unary()?))
            }
            Some(Tok::Tilde) => {
                self.pos += 1;
                Node::BitNot(Box::new(self.unary()?))
            }
            Some(Tok::Bang) => {
                self.pos += 1;
                Node::Not(Box::new(self.unary()?))
            }
            _ => self.primary()?,
        };
        self.depth -= 1;
        Ok(node)
    }

    fn primary(&mut self) -> Result<Node, ParseError> {
        let tok = self.peek().cloned();
        let node = match tok {
            Some(Tok::Num(v)) => Node::Lit(v),
            Some(Tok::True) => Node::Lit(Eval::Bool(true)),
            Some(Tok::False) => Node::Lit(Eval::Bool(false)),
            Some(Tok::Ident(name)) => {
                let i = match self.variables.iter().position(|v| *v == name) {
                    Some(i) => i,
                    None => {
                        self.variables.push(name);
                        self.variables.len() - 1
                    }
                };
                Node::Var(i)
            }
            Some(Tok::LParen) => {
                self.pos += 1;
                let inner = self.expression()?;
                if self.peek() != Some(&Tok::RParen) {
                    return Err(self.unexpected());
                }
                inner
            }
            _ => return Err(self.unexpected()),
        };
        self.pos += 1;
        // `a.b`, `a[0]`, `a(..)`: references JEXL resolves through Java
        // introspection, meaningless over a series.
        if matches!(self.peek(), Some(Tok::Other(s)) if s == "." || s == "[")
            || (matches!(node, Node::Var(_)) && self.peek() == Some(&Tok::LParen))
        {
            return Err(ParseError {
                column: self.column(),
                message: "member access and calls are not supported in expressions".into(),
            });
        }
        Ok(node)
    }
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Num(_) => "number".into(),
        Tok::Ident(n) => format!("identifier '{n}'"),
        Tok::True => "'true'".into(),
        Tok::False => "'false'".into(),
        Tok::Unsupported(w) => (*w).into(),
        Tok::Other(s) => format!("'{s}'"),
        t => format!("'{}'", symbol(t)),
    }
}

fn symbol(t: &Tok) -> &'static str {
    match t {
        Tok::LParen => "(",
        Tok::RParen => ")",
        Tok::Semi => ";",
        Tok::Colon => ":",
        Tok::Question => "?",
        Tok::Elvis => "?:",
        Tok::OrOr => "||",
        Tok::AndAnd => "&&",
        Tok::Pipe => "|",
        Tok::Caret => "^",
        Tok::Amp => "&",
        Tok::EqEq => "==",
        Tok::NotEq => "!=",
        Tok::Lt => "<",
        Tok::Gt => ">",
        Tok::Le => "<=",
        Tok::Ge => ">=",
        Tok::Plus => "+",
        Tok::Minus => "-",
        Tok::Star => "*",
        Tok::Slash => "/",
        Tok::Percent => "%",
        Tok::Tilde => "~",
        Tok::Bang => "!",
        _ => "?",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(src: &str, vars: &[f64]) -> Eval {
        Script::parse(src).unwrap().eval(vars).unwrap().unwrap()
    }

    fn num(src: &str, vars: &[f64]) -> f64 {
        run(src, vars).to_output().unwrap()
    }

    #[test]
    fn variables_in_order_of_first_use() {
        let s = Script::parse("b * (a + b) / c").unwrap();
        assert_eq!(s.variables(), ["b", "a", "c"]);
        assert!(Script::parse("1 + 2").unwrap().variables().is_empty());
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(num("a + b * 2", &[1.0, 3.0]), 7.0);
        assert_eq!(num("(a + b) * 2", &[1.0, 3.0]), 8.0);
        assert_eq!(num("a - b - 1", &[10.0, 3.0]), 6.0);
        assert_eq!(num("a / b / 2", &[8.0, 2.0]), 2.0);
        assert_eq!(num("-a * 2", &[3.0]), -6.0);
        assert_eq!(num("a - -1", &[3.0]), 4.0);
        assert_eq!(num("a % 3", &[7.0]), 1.0);
        assert_eq!(num("a mod 3 + a div 7", &[7.0]), 2.0);
    }

    #[test]
    fn jexl_arithmetic_quirks() {
        // Division and modulo by zero are 0, not infinity.
        assert_eq!(num("a / 0", &[5.0]), 0.0);
        assert_eq!(num("a / b", &[5.0, 0.0]), 0.0);
        assert_eq!(num("a % b", &[5.0, 0.0]), 0.0);
        // NaN flows through arithmetic.
        assert!(num("a + 1", &[f64::NAN]).is_nan());
        // Integer literals stay integral among themselves.
        assert_eq!(num("a * (7 / 2)", &[1.0]), 3.0);
        assert_eq!(num("a * (1 / 2)", &[4.0]), 0.0);
        assert_eq!(num("a + (-7 % 2)", &[0.0]), 1.0);
        // Decimal literals are floats read back through their text.
        assert_eq!(num("a * 0.1", &[3.0]), 3.0 * 0.1);
        assert_eq!(num("a * 0.123456789", &[1.0]), 0.12345679);
        // Octal and hex.
        assert_eq!(num("a + 010", &[0.0]), 8.0);
        assert_eq!(num("a + 0x10", &[0.0]), 16.0);
    }

    #[test]
    fn comparisons_and_booleans_are_numbers() {
        assert_eq!(num("a > b", &[2.0, 1.0]), 1.0);
        assert_eq!(num("a lt b", &[2.0, 1.0]), 0.0);
        assert_eq!(num("a == b", &[2.0, 2.0]), 1.0);
        assert_eq!(num("a != b && a > 0", &[2.0, 1.0]), 1.0);
        assert_eq!(num("!a", &[0.0]), 1.0);
        assert_eq!(num("a || b", &[0.0, f64::NAN]), 0.0);
        // NaN sorts below every number and equals itself.
        assert_eq!(num("a < 1", &[f64::NAN]), 1.0);
        assert_eq!(num("a == b", &[f64::NAN, f64::NAN]), 1.0);
        assert_eq!(num("a > b ? a : b", &[1.0, 5.0]), 5.0);
        assert_eq!(num("a ?: b", &[0.0, 5.0]), 5.0);
        assert_eq!(num("(a > b) * a", &[3.0, 1.0]), 3.0);
    }

    #[test]
    fn results_that_are_not_double_or_boolean() {
        assert_eq!(run("a > 0 ? 1 : 0", &[1.0]), Eval::Int(1));
        assert_eq!(
            run("a > 0 ? 1.5 : 0", &[1.0]).type_name(),
            "java.lang.Float"
        );
        assert_eq!(run("a & 1", &[1.0]), Eval::Long(0));
        // Integer arithmetic on a boolean fails; division gives 0.0.
        assert!(Script::parse("(a > 0) + 1").unwrap().eval(&[1.0]).is_err());
        assert_eq!(run("(a > 0) / 2", &[1.0]), Eval::Double(0.0));
    }

    #[test]
    fn syntax_errors() {
        for bad in [
            "a +",
            "(a",
            "a b",
            "a < b < c",
            "a == b == c",
            "a = 1",
            "a.b",
            "foo(a)",
            "'x' + a",
            "a ? b",
            "1.",
            ".5 + a",
            "a + 08",
            "if (a) b",
            "a # b",
            "a[0]",
        ] {
            assert!(Script::parse(bad).is_err(), "{bad}");
        }
        assert!(Script::parse("a; b").is_ok());
        assert!(Script::parse("a /* c */ + b // x").is_ok());
        let e = Script::parse("a + * b").unwrap_err();
        assert_eq!(e.column, 5);
    }

    /// A plain reference: the same grammar with every value a double and
    /// textbook precedence, evaluated on a tree built independently.
    #[derive(Debug, Clone)]
    enum Ref {
        Var(usize),
        Lit(f64),
        Neg(Box<Ref>),
        Bin(char, Box<Ref>, Box<Ref>),
    }

    impl Ref {
        fn text(&self) -> String {
            match self {
                Ref::Var(i) => ["a", "b", "c"][*i].to_string(),
                Ref::Lit(v) => format!("{v:.1}"),
                Ref::Neg(e) => format!("-({})", e.text()),
                Ref::Bin(op, l, r) => format!("({} {op} {})", l.text(), r.text()),
            }
        }

        /// The same tree printed with only the parentheses precedence
        /// requires, to test the parser's precedence.
        fn minimal(&self, parent: u8, right: bool) -> String {
            let bp = |op: char| if op == '+' || op == '-' { 1 } else { 2 };
            match self {
                Ref::Var(_) | Ref::Lit(_) => self.text(),
                Ref::Neg(e) => format!("-{}", e.minimal(3, false)),
                Ref::Bin(op, l, r) => {
                    let p = bp(*op);
                    let s = format!("{} {op} {}", l.minimal(p, false), r.minimal(p, true));
                    if p < parent || (p == parent && right) {
                        format!("({s})")
                    } else {
                        s
                    }
                }
            }
        }

        fn eval(&self, v: &[f64]) -> f64 {
            match self {
                Ref::Var(i) => v[*i],
                Ref::Lit(x) => *x,
                Ref::Neg(e) => -e.eval(v),
                Ref::Bin(op, l, r) => {
                    let (a, b) = (l.eval(v), r.eval(v));
                    match op {
                        '+' => a + b,
                        '-' => a - b,
                        '*' => a * b,
                        '/' if b == 0.0 => 0.0,
                        '/' => a / b,
                        '%' if b == 0.0 => 0.0,
                        _ => a % b,
                    }
                }
            }
        }
    }

    fn reference() -> impl Strategy<Value = Ref> {
        // Half-integers are exact as floats and doubles alike.
        let leaf = prop_oneof![
            (0usize..3).prop_map(Ref::Var),
            (1i32..20).prop_map(|v| Ref::Lit(v as f64 + 0.5)),
        ];
        leaf.prop_recursive(5, 32, 2, |inner| {
            prop_oneof![
                inner.clone().prop_map(|e| Ref::Neg(Box::new(e))),
                (
                    prop::sample::select(vec!['+', '-', '*', '/', '%']),
                    inner.clone(),
                    inner
                )
                    .prop_map(|(op, l, r)| Ref::Bin(op, Box::new(l), Box::new(r))),
            ]
        })
    }

    fn same(a: f64, b: f64) -> bool {
        (a.is_nan() && b.is_nan()) || a == b
    }

    proptest! {
        #[test]
        fn random_text_never_panics(s in "[-+*/%()<>=!&|^~?:;.a-c0-9 ]{0,40}") {
            if let Ok(script) = Script::parse(&s) {
                let _ = script.eval(&[1.0, f64::NAN, 0.0]);
            }
        }

        #[test]
        fn precedence_matches_the_reference(
            e in reference(),
            vals in prop::collection::vec(-50i32..50, 3),
        ) {
            let vals: Vec<f64> = vals.iter().map(|v| *v as f64 / 2.0).collect();
            let want = e.eval(&vals);
            for text in [e.text(), e.minimal(0, false)] {
                let script = Script::parse(&text).unwrap();
                let names = script.variables().to_vec();
                let bound: Vec<f64> = names
                    .iter()
                    .map(|n| vals[["a", "b", "c"].iter().position(|x| x == n).unwrap()])
                    .collect();
                let got = script.eval(&bound).unwrap().unwrap();
                // Literals are floats and variables doubles, so every
                // operation is in doubles; a lone literal stays a float.
                let got = match got {
                    Eval::Float(f) => float_to_double(f),
                    other => other.to_output().unwrap(),
                };
                prop_assert!(same(got, want), "{text}: {got:?} vs {want}");
            }
        }
    }
}
