//! The `exp=` grammar: 2.4.1's JavaCC `SyntaxChecker` (`src/parser.jj`),
//! which `/api/query/gexp` uses (not the `,,`-separated reader in
//! `Expressions.parse`, which nothing on the HTTP path calls).
//!
//! ```text
//! expression := NAME "(" parameter ("," parameter)* ")"
//! parameter  := expression | metric | NAME
//! metric     := NAME ":" [NAME ":"] [NAME ":"] NAME ["{" NAME "=" NAME ("," NAME "=" NAME)* "}"]
//! NAME       := ("*" | [a-zA-Z0-9] | - _ # / $ @ | . ' ] [)+
//! ```
//!
//! Blanks (space, tab, CR, LF) separate tokens anywhere. Whatever follows
//! the closing parenthesis of the outer expression is never read (the
//! generated parser stops there), so it is ignored. Tag values are plain
//! names: `host=*` and `host=a|b` work, filter functions such as
//! `wildcard(a*)` do not.

use super::Function;

/// A parsed `exp=`: a function and its parameters in the order given.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tree {
    pub function: Function,
    pub params: Vec<Param>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Param {
    /// A nested function call.
    Expression(Tree),
    /// An `m`-style sub-query rebuilt from its tokens
    /// (`sum:1m-avg:if.bytes_in{host=*}`), with its position among all the
    /// metric queries of the request (2.4.1 keys a tree's metrics by it).
    Metric { text: String, global: usize },
    /// A bare name: a function argument such as `1024` or `'5min'`.
    Name(String),
}

/// Why an expression was refused. Both come before any query runs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum ParseError {
    /// `ParseException` (and the lexer's errors, which 2.4.1 lets escape
    /// as a `java.lang.Error` that drops the connection).
    #[error("Failed to parse {0}")]
    Syntax(String),
    /// `ExpressionFactory.getByName`, thrown as soon as the name is read.
    #[error("Function {0} has not been implemented")]
    UnknownFunction(String),
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Name(String),
    Open,
    Close,
    Comma,
    Colon,
    LBrace,
    RBrace,
    Equals,
    /// `&&`, a token of the grammar that no rule accepts.
    And,
    End,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "*-_#/$@|.'][".contains(c)
}

/// Tokens read on demand, as JavaCC's token manager does: a character no
/// token accepts is an error only if the parser gets that far.
struct Lexer<'a> {
    rest: &'a str,
    ahead: Vec<Token>,
}

impl<'a> Lexer<'a> {
    fn scan(&mut self) -> Option<Token> {
        self.rest = self.rest.trim_start_matches([' ', '\t', '\n', '\r']);
        let mut chars = self.rest.chars();
        let Some(c) = chars.next() else {
            return Some(Token::End);
        };
        let single = match c {
            '(' => Some(Token::Open),
            ')' => Some(Token::Close),
            ',' => Some(Token::Comma),
            ':' => Some(Token::Colon),
            '{' => Some(Token::LBrace),
            '}' => Some(Token::RBrace),
            '=' => Some(Token::Equals),
            _ => None,
        };
        if let Some(t) = single {
            self.rest = &self.rest[1..];
            return Some(t);
        }
        if self.rest.starts_with("&&") {
            self.rest = &self.rest[2..];
            return Some(Token::And);
        }
        let len = self
            .rest
            .find(|c: char| !is_name_char(c))
            .unwrap_or(self.rest.len());
        if len == 0 {
            return None;
        }
        let name = self.rest[..len].to_string();
        self.rest = &self.rest[len..];
        Some(Token::Name(name))
    }

    fn peek(&mut self, n: usize) -> Option<&Token> {
        while self.ahead.len() <= n {
            let t = self.scan()?;
            self.ahead.push(t);
        }
        self.ahead.get(n)
    }

    fn next(&mut self) -> Option<Token> {
        self.peek(0)?;
        Some(self.ahead.remove(0))
    }
}

/// How deep functions may nest. 2.4.1's recursive parser has no limit
/// but its thread's stack (a `StackOverflowError`, a dropped connection);
/// here a deeper expression is a syntax error, long before the stack of
/// a query thread could run out.
pub(crate) const MAX_DEPTH: usize = 256;

struct Parser<'a> {
    lexer: Lexer<'a>,
    text: &'a str,
    depth: usize,
    /// The next metric query's position in the request.
    next_metric: usize,
}

impl Parser<'_> {
    fn syntax(&self) -> ParseError {
        ParseError::Syntax(self.text.to_string())
    }

    fn expect(&mut self, want: &Token) -> Result<(), ParseError> {
        match self.lexer.next() {
            Some(t) if t == *want => Ok(()),
            _ => Err(self.syntax()),
        }
    }

    fn name(&mut self) -> Result<String, ParseError> {
        match self.lexer.next() {
            Some(Token::Name(n)) => Ok(n),
            _ => Err(self.syntax()),
        }
    }

    fn expression(&mut self) -> Result<Tree, ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.syntax());
        }
        let tree = self.call();
        self.depth -= 1;
        tree
    }

    fn call(&mut self) -> Result<Tree, ParseError> {
        let name = self.name()?;
        // The tree (and so the function lookup) is built right after the
        // name is read, before the parenthesis is checked.
        let function =
            Function::by_name(&name).ok_or_else(|| ParseError::UnknownFunction(name.clone()))?;
        self.expect(&Token::Open)?;
        let mut params = vec![self.parameter()?];
        loop {
            match self.lexer.next() {
                Some(Token::Comma) => params.push(self.parameter()?),
                Some(Token::Close) => return Ok(Tree { function, params }),
                _ => return Err(self.syntax()),
            }
        }
    }

    fn parameter(&mut self) -> Result<Param, ParseError> {
        if !matches!(self.lexer.peek(0), Some(Token::Name(_))) {
            return Err(self.syntax());
        }
        match self.lexer.peek(1) {
            Some(Token::Open) => Ok(Param::Expression(self.expression()?)),
            Some(Token::Colon) => {
                let text = self.metric()?;
                self.next_metric += 1;
                Ok(Param::Metric {
                    text,
                    global: self.next_metric - 1,
                })
            }
            _ => Ok(Param::Name(self.name()?)),
        }
    }

    fn metric(&mut self) -> Result<String, ParseError> {
        let mut text = self.name()?;
        self.expect(&Token::Colon)?;
        text.push(':');
        // Up to two more `NAME :` parts (downsampling, rate) before the
        // metric name.
        for _ in 0..2 {
            let part = matches!(self.lexer.peek(0), Some(Token::Name(_)))
                && matches!(self.lexer.peek(1), Some(Token::Colon));
            if !part {
                break;
            }
            text.push_str(&self.name()?);
            self.expect(&Token::Colon)?;
            text.push(':');
        }
        text.push_str(&self.name()?);
        if matches!(self.lexer.peek(0), Some(Token::LBrace)) {
            self.lexer.next();
            let mut pairs = Vec::new();
            loop {
                let k = self.name()?;
                self.expect(&Token::Equals)?;
                let v = self.name()?;
                pairs.push(format!("{k}={v}"));
                match self.lexer.next() {
                    Some(Token::Comma) => continue,
                    Some(Token::RBrace) => break,
                    _ => return Err(self.syntax()),
                }
            }
            text.push('{');
            text.push_str(&pairs.join(","));
            text.push('}');
        }
        Ok(text)
    }
}

/// Parses one `exp=` value whose first metric query is the request's
/// `first_metric`-th.
pub(crate) fn parse(text: &str, first_metric: usize) -> Result<Tree, ParseError> {
    let mut p = Parser {
        lexer: Lexer {
            rest: text,
            ahead: Vec::new(),
        },
        text,
        depth: 0,
        next_metric: first_metric,
    };
    p.expression()
}

impl Tree {
    /// The metric sub-queries, depth first in the order written (the
    /// order 2.4.1 adds them to the query).
    pub(crate) fn metric_queries<'a>(&'a self, out: &mut Vec<&'a str>) {
        for p in &self.params {
            match p {
                Param::Expression(t) => t.metric_queries(out),
                Param::Metric { text, .. } => out.push(text),
                Param::Name(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(s: &str, global: usize) -> Param {
        Param::Metric {
            text: s.to_string(),
            global,
        }
    }

    fn parse(s: &str) -> Result<Tree, ParseError> {
        super::parse(s, 0)
    }

    #[test]
    fn nested_functions_metrics_and_names() {
        let t =
            parse(" scale( sumSeries(sum:1m-avg:rate:a.b{host=*, dc = lga|lgb},max:c) , 1024 ) ")
                .unwrap();
        assert_eq!(t.function, Function::Scale);
        assert_eq!(
            t.params,
            vec![
                Param::Expression(Tree {
                    function: Function::SumSeries,
                    params: vec![
                        metric("sum:1m-avg:rate:a.b{host=*,dc=lga|lgb}", 0),
                        metric("max:c", 1),
                    ],
                }),
                Param::Name("1024".into()),
            ]
        );
        let mut m = Vec::new();
        t.metric_queries(&mut m);
        assert_eq!(m, ["sum:1m-avg:rate:a.b{host=*,dc=lga|lgb}", "max:c"]);
        // Quoted windows and templates are names.
        let t = parse("movingAverage(sum:m,'5min')").unwrap();
        assert_eq!(t.params[1], Param::Name("'5min'".into()));
        // Trailing text after the expression is never read.
        assert!(parse("absolute(sum:m) % garbage").is_ok());
    }

    #[test]
    fn nesting_is_bounded() {
        let nested =
            |depth: usize| format!("{}sum:m{}", "absolute(".repeat(depth), ")".repeat(depth));
        // A query thread's stack (2 MiB) holds the deepest accepted
        // expression, parsed and evaluated, even unoptimised.
        let ok = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || parse(&nested(MAX_DEPTH)).is_ok())
            .unwrap()
            .join()
            .unwrap();
        assert!(ok);
        let deep = nested(MAX_DEPTH + 1);
        assert_eq!(parse(&deep).unwrap_err(), ParseError::Syntax(deep.clone()));
        // A huge one fails fast, without recursing further.
        let huge = "absolute(".repeat(100_000);
        assert!(parse(&huge).is_err());
    }

    #[test]
    fn errors() {
        let fail = |s: &str| parse(s).unwrap_err().to_string();
        assert_eq!(fail("sum:m"), "Failed to parse sum:m");
        assert_eq!(fail("foo(sum:m)"), "Function foo has not been implemented");
        // The name is looked up before anything after it is checked.
        assert_eq!(fail("foo:m"), "Function foo has not been implemented");
        assert_eq!(
            fail("scale(bar(sum:m),2)"),
            "Function bar has not been implemented"
        );
        for bad in [
            "",
            "scale()",
            "scale(sum:m,)",
            "scale(sum:m",
            "scale(sum:a:b:c:d)",
            "scale(sum:m{host=wildcard(a*)})",
            "scale(sum:m{host})",
            "scale(sum:m{}})",
            "scale(sum:m%,2)",
            "scale(sum:m && 2)",
            "scale(2 3)",
        ] {
            assert_eq!(fail(bad), format!("Failed to parse {bad}"), "{bad}");
        }
    }
}
