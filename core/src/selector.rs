//! Label and field selectors, parsed from their Kubernetes string forms.
//!
//! The grammars and matching rules are those of apimachinery's `labels` and `fields`
//! packages: label selectors take `=`, `==`, `!=`, `in`, `notin`, `>`, `<`, exists (`key`)
//! and does-not-exist (`!key`), with keys and values validated as qualified names and label
//! values; field selectors take `=`, `==` and `!=`, with `\`, `,` and `=` escaped by a
//! backslash in values. A missing field reads as "". Malformed input is a typed
//! [`SelectorError`], never a panic.

use std::fmt;

use crate::names::is_dns1123_subdomain;
use crate::object::ObjectVersion;

/// What was wrong with a label or field selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectorErrorKind {
    /// A token stood where it cannot (`a in b`, `=x`, `a,,b`).
    Unexpected {
        /// What the parser found.
        found: String,
        /// What it expected there.
        expected: &'static str,
    },
    /// A label key that is not a qualified name (`[prefix/]name`).
    InvalidKey(String),
    /// A label value that is not a valid label value.
    InvalidValue(String),
    /// `>` or `<` with a value that is not an integer.
    NotAnInteger(String),
    /// A field selector term without an operator.
    MissingOperator(String),
    /// A backslash followed by something other than `\`, `,` or `=`.
    InvalidEscape(String),
    /// A field that this resource cannot be selected by.
    UnsupportedField(String),
}

/// A label or field selector that could not be parsed or is not supported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorError {
    /// The selector as given.
    pub selector: String,
    /// What was wrong.
    pub kind: SelectorErrorKind,
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid selector {:?}: ", self.selector)?;
        match &self.kind {
            SelectorErrorKind::Unexpected { found, expected } => {
                write!(f, "found {found}, expected {expected}")
            }
            SelectorErrorKind::InvalidKey(k) => write!(f, "invalid label key {k:?}"),
            SelectorErrorKind::InvalidValue(v) => write!(f, "invalid label value {v:?}"),
            SelectorErrorKind::NotAnInteger(v) => write!(f, "{v:?} is not an integer"),
            SelectorErrorKind::MissingOperator(t) => {
                write!(f, "term {t:?} has no operator (=, ==, !=)")
            }
            SelectorErrorKind::InvalidEscape(t) => write!(f, "invalid escape sequence in {t:?}"),
            SelectorErrorKind::UnsupportedField(n) => {
                write!(f, "field label not supported: {n}")
            }
        }
    }
}

impl std::error::Error for SelectorError {}

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelRequirement {
    /// `key=value`, `key==value`, `key in (v1,v2)`: the label is present with one of the values.
    In(String, Vec<String>),
    /// `key!=value`, `key notin (v1,v2)`: the label is absent or has none of the values.
    NotIn(String, Vec<String>),
    /// `key`: the label is present.
    Exists(String),
    /// `!key`: the label is absent.
    DoesNotExist(String),
    /// `key>n`: the label is present and an integer greater than n.
    GreaterThan(String, i64),
    /// `key<n`: the label is present and an integer less than n.
    LessThan(String, i64),
}

impl LabelRequirement {
    fn matches(&self, object: &ObjectVersion) -> bool {
        match self {
            LabelRequirement::In(k, vs) => object.label(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            LabelRequirement::NotIn(k, vs) => object.label(k).is_none_or(|v| vs.iter().all(|x| x != v)),
            LabelRequirement::Exists(k) => object.label(k).is_some(),
            LabelRequirement::DoesNotExist(k) => object.label(k).is_none(),
            LabelRequirement::GreaterThan(k, n) => object
                .label(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            LabelRequirement::LessThan(k, n) => object
                .label(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        }
    }
}

/// A parsed label selector; the empty selector matches everything.
///
/// ```
/// use watchcache_core::LabelSelector;
///
/// let s = LabelSelector::parse("app in (web,api), tier!=cache, !canary")?;
/// assert_eq!(s.requirements().len(), 3);
/// assert!(LabelSelector::parse("app in web").is_err());
/// # Ok::<(), watchcache_core::SelectorError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

impl LabelSelector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        LabelSelector::default()
    }

    /// Parses a selector such as `app=web,tier in (a,b),!canary`.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        LabelParser::new(selector).parse().map_err(|kind| SelectorError {
            selector: selector.to_owned(),
            kind,
        })
    }

    /// The requirements, all of which must hold.
    pub fn requirements(&self) -> &[LabelRequirement] {
        &self.requirements
    }

    /// Whether this selector matches everything.
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `object`'s labels satisfy every requirement.
    pub fn matches(&self, object: &ObjectVersion) -> bool {
        self.requirements.iter().all(|r| r.matches(object))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    In,
    NotIn,
    Bang,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
    End,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::Ident(s) => format!("{s:?}"),
            Token::In => "'in'".into(),
            Token::NotIn => "'notin'".into(),
            Token::Bang => "'!'".into(),
            Token::Eq => "'='".into(),
            Token::DoubleEq => "'=='".into(),
            Token::NotEq => "'!='".into(),
            Token::Gt => "'>'".into(),
            Token::Lt => "'<'".into(),
            Token::Open => "'('".into(),
            Token::Close => "')'".into(),
            Token::Comma => "','".into(),
            Token::End => "end of input".into(),
        }
    }
}

struct LabelParser<'a> {
    rest: &'a str,
    peeked: Option<Token>,
}

fn is_special(c: char) -> bool {
    matches!(c, '!' | '=' | '<' | '>' | '(' | ')' | ',') || c.is_whitespace()
}

fn unexpected(found: &Token, expected: &'static str) -> SelectorErrorKind {
    SelectorErrorKind::Unexpected {
        found: found.describe(),
        expected,
    }
}

impl<'a> LabelParser<'a> {
    fn new(selector: &'a str) -> Self {
        LabelParser {
            rest: selector,
            peeked: None,
        }
    }

    fn lex(&mut self) -> Token {
        self.rest = self.rest.trim_start();
        let mut chars = self.rest.chars();
        let Some(c) = chars.next() else {
            return Token::End;
        };
        let two = self.rest.get(..2);
        let (token, len) = match (c, two) {
            (_, Some("!=")) => (Token::NotEq, 2),
            (_, Some("==")) => (Token::DoubleEq, 2),
            ('!', _) => (Token::Bang, 1),
            ('=', _) => (Token::Eq, 1),
            ('>', _) => (Token::Gt, 1),
            ('<', _) => (Token::Lt, 1),
            ('(', _) => (Token::Open, 1),
            (')', _) => (Token::Close, 1),
            (',', _) => (Token::Comma, 1),
            _ => {
                let len = self.rest.find(is_special).unwrap_or(self.rest.len());
                let word = &self.rest[..len];
                let token = match word {
                    "in" => Token::In,
                    "notin" => Token::NotIn,
                    _ => Token::Ident(word.to_owned()),
                };
                (token, len)
            }
        };
        self.rest = &self.rest[len..];
        token
    }

    fn next(&mut self) -> Token {
        match self.peeked.take() {
            Some(t) => t,
            None => self.lex(),
        }
    }

    fn peek(&mut self) -> &Token {
        if self.peeked.is_none() {
            self.peeked = Some(self.lex());
        }
        self.peeked.as_ref().unwrap_or(&Token::End)
    }

    fn parse(mut self) -> Result<LabelSelector, SelectorErrorKind> {
        let mut requirements = Vec::new();
        if *self.peek() == Token::End {
            return Ok(LabelSelector { requirements });
        }
        loop {
            requirements.push(self.requirement()?);
            match self.next() {
                Token::End => return Ok(LabelSelector { requirements }),
                Token::Comma => {}
                t => return Err(unexpected(&t, "',' or end of input")),
            }
        }
    }

    fn key(&mut self) -> Result<String, SelectorErrorKind> {
        match self.next() {
            Token::Ident(k) => {
                validate_label_key(&k)?;
                Ok(k)
            }
            t => Err(unexpected(&t, "a label key")),
        }
    }

    /// A value after `=`, `==` or `!=`: an identifier, or "" when the requirement ends.
    fn value(&mut self) -> Result<String, SelectorErrorKind> {
        match self.peek() {
            Token::Comma | Token::End => Ok(String::new()),
            _ => match self.next() {
                Token::Ident(v) => {
                    validate_label_value(&v)?;
                    Ok(v)
                }
                t => Err(unexpected(&t, "a label value")),
            },
        }
    }

    fn value_set(&mut self) -> Result<Vec<String>, SelectorErrorKind> {
        match self.next() {
            Token::Open => {}
            t => return Err(unexpected(&t, "'('")),
        }
        let mut values = Vec::new();
        loop {
            // An empty element ("in (a,)") is the empty label value, as in apimachinery.
            let value = match self.peek() {
                Token::Comma | Token::Close => String::new(),
                _ => match self.next() {
                    Token::Ident(v) => {
                        validate_label_value(&v)?;
                        v
                    }
                    t => return Err(unexpected(&t, "a label value, ',' or ')'")),
                },
            };
            values.push(value);
            match self.next() {
                Token::Comma => {}
                Token::Close => break,
                t => return Err(unexpected(&t, "',' or ')'")),
            }
        }
        if values.len() == 1 && values[0].is_empty() {
            // "in ()": apimachinery requires at least one value.
            return Err(unexpected(&Token::Close, "at least one value"));
        }
        Ok(values)
    }

    fn integer(&mut self) -> Result<i64, SelectorErrorKind> {
        match self.next() {
            Token::Ident(v) => v.parse().map_err(|_| SelectorErrorKind::NotAnInteger(v)),
            t => Err(unexpected(&t, "an integer")),
        }
    }

    fn requirement(&mut self) -> Result<LabelRequirement, SelectorErrorKind> {
        if *self.peek() == Token::Bang {
            self.next();
            return Ok(LabelRequirement::DoesNotExist(self.key()?));
        }
        let key = self.key()?;
        match self.peek().clone() {
            Token::Comma | Token::End => Ok(LabelRequirement::Exists(key)),
            Token::Eq | Token::DoubleEq => {
                self.next();
                Ok(LabelRequirement::In(key, vec![self.value()?]))
            }
            Token::NotEq => {
                self.next();
                Ok(LabelRequirement::NotIn(key, vec![self.value()?]))
            }
            Token::In => {
                self.next();
                Ok(LabelRequirement::In(key, self.value_set()?))
            }
            Token::NotIn => {
                self.next();
                Ok(LabelRequirement::NotIn(key, self.value_set()?))
            }
            Token::Gt => {
                self.next();
                Ok(LabelRequirement::GreaterThan(key, self.integer()?))
            }
            Token::Lt => {
                self.next();
                Ok(LabelRequirement::LessThan(key, self.integer()?))
            }
            t => Err(unexpected(
                &t,
                "an operator (=, ==, !=, in, notin, >, <), ',' or end",
            )),
        }
    }
}

/// `[prefix/]name`: name as a label value but non-empty, prefix a DNS-1123 subdomain.
fn validate_label_key(key: &str) -> Result<(), SelectorErrorKind> {
    let invalid = || SelectorErrorKind::InvalidKey(key.to_owned());
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if name.is_empty() || !is_label_value(name) {
        return Err(invalid());
    }
    if prefix.is_some_and(|p| !is_dns1123_subdomain(p)) {
        return Err(invalid());
    }
    Ok(())
}

fn validate_label_value(value: &str) -> Result<(), SelectorErrorKind> {
    if is_label_value(value) {
        Ok(())
    } else {
        Err(SelectorErrorKind::InvalidValue(value.to_owned()))
    }
}

/// At most 63 characters of `[A-Za-z0-9_.-]`, starting and ending alphanumeric; "" is valid.
fn is_label_value(v: &str) -> bool {
    let b = v.as_bytes();
    match (b.first(), b.last()) {
        (None, _) => true,
        (Some(f), Some(l)) => {
            b.len() <= 63
                && f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        (Some(_), None) => false,
    }
}

/// One term of a field selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldRequirement {
    /// `field=value` or `field==value`.
    Equals(String, String),
    /// `field!=value`.
    NotEquals(String, String),
}

impl FieldRequirement {
    /// The field the term selects on.
    pub fn field(&self) -> &str {
        match self {
            FieldRequirement::Equals(f, _) | FieldRequirement::NotEquals(f, _) => f,
        }
    }

    fn matches(&self, object: &ObjectVersion) -> bool {
        match self {
            FieldRequirement::Equals(f, v) => object.field(f).unwrap_or("") == v,
            FieldRequirement::NotEquals(f, v) => object.field(f).unwrap_or("") != v,
        }
    }
}

/// A parsed field selector; the empty selector matches everything.
///
/// ```
/// use watchcache_core::FieldSelector;
///
/// let s = FieldSelector::parse("spec.nodeName=node-1,metadata.name!=a\\,b")?;
/// assert_eq!(s.equality("spec.nodeName"), Some("node-1"));
/// assert!(FieldSelector::parse("spec.nodeName").is_err());
/// # Ok::<(), watchcache_core::SelectorError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        FieldSelector::default()
    }

    /// Parses a selector such as `spec.nodeName=n1,status.phase!=Running`.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        parse_fields(selector).map_err(|kind| SelectorError {
            selector: selector.to_owned(),
            kind,
        })
    }

    /// The terms, all of which must hold.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// Whether this selector matches everything.
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The value `field` must equal, if a term requires one.
    pub fn equality(&self, field: &str) -> Option<&str> {
        self.requirements.iter().find_map(|r| match r {
            FieldRequirement::Equals(f, v) if f == field => Some(v.as_str()),
            _ => None,
        })
    }

    /// Whether `object`'s fields satisfy every term.
    pub fn matches(&self, object: &ObjectVersion) -> bool {
        self.requirements.iter().all(|r| r.matches(object))
    }
}

/// Splits on separators not preceded by an escaping backslash.
fn split_unescaped(s: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(&s[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&s[start..]);
    parts
}

fn parse_fields(selector: &str) -> Result<FieldSelector, SelectorErrorKind> {
    let mut requirements = Vec::new();
    for term in split_unescaped(selector, ',') {
        if term.trim().is_empty() {
            continue;
        }
        // The first unescaped operator splits the term; `!=` and `==` before `=`.
        let mut op = None;
        let mut escaped = false;
        for (i, c) in term.char_indices() {
            if escaped {
                escaped = false;
                continue;
            }
            match c {
                '\\' => escaped = true,
                '!' if term[i..].starts_with("!=") => {
                    op = Some((i, 2, false));
                    break;
                }
                '=' => {
                    let len = if term[i..].starts_with("==") { 2 } else { 1 };
                    op = Some((i, len, true));
                    break;
                }
                _ => {}
            }
        }
        let Some((at, len, equals)) = op else {
            return Err(SelectorErrorKind::MissingOperator(term.to_owned()));
        };
        let field = term[..at].trim();
        if field.is_empty() {
            return Err(SelectorErrorKind::Unexpected {
                found: format!("{term:?}"),
                expected: "a field name before the operator",
            });
        }
        let value =
            unescape(&term[at + len..]).ok_or_else(|| SelectorErrorKind::InvalidEscape(term.to_owned()))?;
        requirements.push(if equals {
            FieldRequirement::Equals(field.to_owned(), value)
        } else {
            FieldRequirement::NotEquals(field.to_owned(), value)
        });
    }
    Ok(FieldSelector { requirements })
}

/// Undoes `\\`, `\,` and `\=`; any other escape, or an unescaped `,` or `=`, is invalid.
fn unescape(value: &str) -> Option<String> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                _ => return None,
            },
            ',' | '=' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::ObjectKey;
    use crate::rv::Revision;

    fn pod(labels: &[(&str, &str)], node: Option<&str>) -> ObjectVersion {
        let mut b = ObjectVersion::builder(ObjectKey::new("default", "p1"), Revision::new(1))
            .labels(labels.iter().copied());
        if let Some(n) = node {
            b = b.field("spec.nodeName", n);
        }
        b.build()
    }

    fn labels_match(selector: &str, labels: &[(&str, &str)]) -> bool {
        LabelSelector::parse(selector)
            .unwrap()
            .matches(&pod(labels, None))
    }

    #[test]
    fn label_operators_follow_apimachinery_semantics() {
        let l = &[("app", "web"), ("tier", "front"), ("n", "5")];
        assert!(labels_match("", l));
        assert!(labels_match("app=web", l));
        assert!(labels_match("app==web", l));
        assert!(!labels_match("app=api", l));
        assert!(labels_match("app!=api", l));
        assert!(labels_match("missing!=x", l), "!= matches an absent label");
        assert!(labels_match("app in (api, web)", l));
        assert!(!labels_match("app in (api)", l));
        assert!(labels_match("app notin (api)", l));
        assert!(
            labels_match("missing notin (api)", l),
            "notin matches an absent label"
        );
        assert!(!labels_match("app notin (web)", l));
        assert!(labels_match("app", l));
        assert!(!labels_match("missing", l));
        assert!(labels_match("!missing", l));
        assert!(!labels_match("!app", l));
        assert!(labels_match("n>4,n<6", l));
        assert!(!labels_match("n>5", l));
        assert!(!labels_match("app>1", l), "a non-integer value never compares");
        assert!(labels_match(" app = web , tier in ( front ) ", l));
        assert!(
            !labels_match("app=web,tier=back", l),
            "all requirements must hold"
        );
        assert!(labels_match("example.com/team!=x", l));
        assert!(
            labels_match("tier in (a,)", &[("tier", "")]),
            "an empty element is the empty value"
        );
        assert!(labels_match("tier=", &[("tier", "")]));
        assert!(labels_match("tier==", &[("tier", "")]));
    }

    #[test]
    fn malformed_label_selectors_are_typed_errors() {
        type IsKind = fn(&SelectorErrorKind) -> bool;
        let cases: &[(&str, IsKind)] = &[
            ("app in web", |k| {
                matches!(k, SelectorErrorKind::Unexpected { .. })
            }),
            ("app in (web", |k| {
                matches!(k, SelectorErrorKind::Unexpected { .. })
            }),
            ("app in ()", |k| matches!(k, SelectorErrorKind::Unexpected { .. })),
            ("=web", |k| matches!(k, SelectorErrorKind::Unexpected { .. })),
            ("app=web,", |k| matches!(k, SelectorErrorKind::Unexpected { .. })),
            ("a b", |k| matches!(k, SelectorErrorKind::Unexpected { .. })),
            ("app=(x)", |k| matches!(k, SelectorErrorKind::Unexpected { .. })),
            ("app>x", |k| matches!(k, SelectorErrorKind::NotAnInteger(_))),
            ("-app=x", |k| matches!(k, SelectorErrorKind::InvalidKey(_))),
            ("Bad_Prefix/app=x", |k| {
                matches!(k, SelectorErrorKind::InvalidKey(_))
            }),
            ("/app=x", |k| matches!(k, SelectorErrorKind::InvalidKey(_))),
            ("app=-x", |k| matches!(k, SelectorErrorKind::InvalidValue(_))),
            ("app=x@y", |k| matches!(k, SelectorErrorKind::InvalidValue(_))),
            ("!", |k| matches!(k, SelectorErrorKind::Unexpected { .. })),
            ("!app=x", |k| matches!(k, SelectorErrorKind::Unexpected { .. })),
        ];
        for (s, is_kind) in cases {
            match LabelSelector::parse(s) {
                Err(e) => {
                    assert_eq!(e.selector, *s);
                    assert!(is_kind(&e.kind), "{s:?}: {:?}", e.kind);
                    assert!(!e.to_string().is_empty());
                }
                Ok(sel) => panic!("{s:?} parsed as {sel:?}"),
            }
        }
        let long = format!("app={}", "x".repeat(64));
        assert!(LabelSelector::parse(&long).is_err());
    }

    #[test]
    fn field_selectors_compare_with_missing_fields_reading_as_empty() {
        let p = pod(&[], Some("n1"));
        let unscheduled = pod(&[], None);
        let m = |s: &str, o: &ObjectVersion| FieldSelector::parse(s).unwrap().matches(o);
        assert!(m("", &p));
        assert!(m("spec.nodeName=n1", &p));
        assert!(m("spec.nodeName==n1", &p));
        assert!(!m("spec.nodeName!=n1", &p));
        assert!(m("spec.nodeName=", &unscheduled));
        assert!(m("metadata.name=p1,metadata.namespace=default", &p));
        assert!(!m("metadata.name=p1,metadata.namespace=other", &p));
        assert!(m("metadata.name=p1,,", &p), "empty terms are skipped");
        let s = FieldSelector::parse(r"metadata.name=a\,b\=c\\d").unwrap();
        assert_eq!(
            s.requirements(),
            &[FieldRequirement::Equals(
                "metadata.name".into(),
                r"a,b=c\d".into()
            )]
        );
    }

    #[test]
    fn malformed_field_selectors_are_typed_errors() {
        for (s, want) in [
            (
                "spec.nodeName",
                SelectorErrorKind::MissingOperator("spec.nodeName".into()),
            ),
            (
                "=x",
                SelectorErrorKind::Unexpected {
                    found: "\"=x\"".into(),
                    expected: "a field name before the operator",
                },
            ),
            (r"a=b\x", SelectorErrorKind::InvalidEscape(r"a=b\x".into())),
            (r"a=b=c", SelectorErrorKind::InvalidEscape("a=b=c".into())),
            (r"a=b\", SelectorErrorKind::InvalidEscape(r"a=b\".into())),
        ] {
            assert_eq!(FieldSelector::parse(s).unwrap_err().kind, want, "{s:?}");
        }
    }

    #[test]
    fn equality_finds_the_value_a_field_must_have() {
        let s = FieldSelector::parse("spec.nodeName!=a,spec.nodeName=b").unwrap();
        assert_eq!(s.equality("spec.nodeName"), Some("b"));
        assert_eq!(s.equality("metadata.name"), None);
    }

    #[test]
    fn arbitrary_input_never_panics() {
        // A cheap exhaustive sweep over short strings of the selector alphabet.
        let alphabet = [
            'a', '=', '!', ',', '(', ')', ' ', 'i', 'n', '\\', '<', '>', '/', '1',
        ];
        let mut buf = String::new();
        fn rec(buf: &mut String, alphabet: &[char], depth: usize) {
            let _ = LabelSelector::parse(buf);
            let _ = FieldSelector::parse(buf);
            if depth == 0 {
                return;
            }
            for &c in alphabet {
                buf.push(c);
                rec(buf, alphabet, depth - 1);
                buf.pop();
            }
        }
        rec(&mut buf, &alphabet, if cfg!(miri) { 2 } else { 4 });
    }
}
