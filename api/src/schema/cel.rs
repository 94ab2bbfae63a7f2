//! `x-kubernetes-validations`: CEL rules on a schema node, evaluated with the `cel` crate over
//! the node's value (`self`) and, on an update, its old value (`oldSelf`).
//!
//! A rule is compiled when its CRD is written, and refused there when it does not parse, names
//! a variable other than `self` and `oldSelf` or a function this server does not have (the
//! CEL standard library, and the strings and lists extensions), or when its estimated cost is
//! over the budget. The estimate is what bounds the work a write can cause, so it is
//! conservative where it knows the evaluator's work (every comprehension costs its range's
//! most entries — its schema's `maxItems`, `maxProperties` or `maxLength`, or what a 3 MiB
//! body can hold — times its body; a rule under a list is evaluated once per entry; `join`,
//! `replace` and `indexOf` cost what they build or search) and assumes the most where it does
//! not (a function it does not model returns as much as it is given). The evaluator itself
//! has no budget of its own: an estimate that is too low is a bug, and the fuzz target
//! `crd_schema` looks for one. `matches` is this module's, each pattern compiled once per
//! thread and bounded in size.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::common::types::{CelBool, CelString};
use cel::objects::{Key, Map as CelMap};
use cel::{Context, Env, ExecutionError, Program};
use regex::{Regex, RegexBuilder};
use serde_json::Value;

use super::{ListType, Schema, validate};
use crate::mutation::value_key::ValueKey;
use crate::validation::field::{ErrorKind, Errors, Path};

/// The most a rule's one evaluation may cost (the apiserver's per-expression limit).
const PER_CALL_LIMIT: f64 = 10_000_000.0;
/// The most a rule may cost over all the values it is evaluated on in one object.
const PER_OBJECT_LIMIT: f64 = 100_000_000.0;
/// What compiling a pattern read from the object costs, at each call: a program of at most
/// [`PATTERN_BYTES`] (about as many steps to build).
const DYNAMIC_PATTERN: f64 = 100_000.0;
/// The largest compiled pattern a rule may use: ample for the patterns validation uses (a
/// DNS name, a version), and a bound on what one call can cost to compile.
const PATTERN_BYTES: usize = 256 << 10;
/// Patterns kept compiled, by their text.
const PATTERNS_KEPT: usize = 64;
/// The longest pattern kept compiled: a rule's own patterns are short; one read from an
/// object, of any length, is compiled at each call (and estimated so).
const PATTERN_TEXT_KEPT: usize = 1024;

/// The longest rule (or message expression) taken, in bytes.
const MAX_RULE_BYTES: usize = 16 * 1024;
/// The stack the parser runs on: ample for a rule of [`MAX_RULE_BYTES`] that is one chain.
const PARSER_STACK: usize = 256 << 20;
/// The deepest a rule's expression may nest: the evaluator recurses once per level, on the
/// stack of the thread that runs the write.
const MAX_DEPTH: usize = 64;

/// The environment every rule compiles and runs in.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // Both extensions declare only their own names: adding them to the standard library
    // cannot conflict.
    let _ = env.add_extension(cel::extensions::strings);
    let _ = env.add_extension(cel::extensions::lists);
    // `matches`, as a function and as a string's method.
    let _ = cel::add_overload!(env, fn matches: (CelString, CelString) -> Result<CelBool>, id = "matches");
    let _ = cel::add_member_overload!(env, fn matches: (CelString, CelString) -> Result<CelBool>);
    Arc::new(env)
});

/// Patterns compiled, by their text, shared by every thread: a rule's literal pattern is
/// compiled once, not at every call. Bounded in entries ([`PATTERNS_KEPT`], emptied when
/// full), in text (only patterns of at most [`PATTERN_TEXT_KEPT`] bytes are kept) and in what
/// each holds ([`PATTERN_BYTES`] of program and as much lazy DFA): a few tens of MiB in all.
/// Refused patterns are not kept.
static PATTERNS: LazyLock<Mutex<HashMap<std::string::String, Arc<Regex>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// `s.matches(pattern)`: RE2 syntax, as the `regex` crate takes it, and a pattern whose
/// program is over [`PATTERN_BYTES`] is an error, not a long compile.
fn matches(this: &CelString<'_>, pattern: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let pattern = pattern.inner();
    let kept = |patterns: &Mutex<HashMap<std::string::String, Arc<Regex>>>| {
        patterns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(pattern)
            .cloned()
    };
    let compiled = match kept(&PATTERNS) {
        Some(re) => Ok(re),
        None => {
            let made = RegexBuilder::new(pattern)
                .size_limit(PATTERN_BYTES)
                .dfa_size_limit(PATTERN_BYTES)
                .build()
                .map(Arc::new)
                .map_err(|e| format!("'{pattern}' not a valid regex:\n{e}"));
            if let Ok(re) = &made
                && pattern.len() <= PATTERN_TEXT_KEPT
            {
                let mut patterns = PATTERNS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if patterns.len() >= PATTERNS_KEPT {
                    patterns.clear();
                }
                patterns.insert(pattern.to_owned(), re.clone());
            }
            made
        }
    };
    match compiled {
        Ok(re) => Ok(CelBool::from(re.is_match(this.inner()))),
        Err(message) => Err(ExecutionError::FunctionError {
            function: "matches".to_owned(),
            message,
        }),
    }
}

/// The functions rules may call. Operators (`_+_`, `@in`, `!_`) are the language's own.
const FUNCTIONS: &[&str] = &[
    "size",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "type",
    "dyn",
    "matches",
    "contains",
    "startsWith",
    "endsWith",
    "charAt",
    "indexOf",
    "lastIndexOf",
    "join",
    "lowerAscii",
    "upperAscii",
    "trim",
    "replace",
    "split",
    "substring",
    "distinct",
    "flatten",
    "reverse",
    "sort",
];

/// The names a rule may read: its values and the type names.
const NAMES: &[&str] = &[
    "self",
    "oldSelf",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "list",
    "map",
    "null_type",
    "type",
];

/// One compiled rule.
#[derive(Clone)]
pub struct Rule {
    text: String,
    program: Arc<Program>,
    message: String,
    message_expression: Option<Arc<Program>>,
    reason: ErrorKind,
    field_path: Vec<String>,
    /// It reads `oldSelf`: evaluated on updates only, where the old value exists.
    transition: bool,
    /// Its estimated cost over one object: each evaluation's times the values it runs on.
    total: f64,
    /// Its path in the CRD (`…x-kubernetes-validations[0].rule`).
    at: std::string::String,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rule")
            .field("rule", &self.text)
            .finish_non_exhaustive()
    }
}

impl Rule {
    /// Compiles the rule `r` of the schema node `node`, which `instances` values of one
    /// object can hold; a refusal is reported at `at`.
    pub(super) fn compile(
        r: &Value,
        at: &Path,
        node: &Schema,
        instances: f64,
        errors: &mut Errors,
    ) -> Option<Rule> {
        let text = r
            .get("rule")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .trim()
            .to_owned();
        if text.is_empty() {
            errors.required(&at.child("rule"));
            return None;
        }
        let program = match checked(&text) {
            Ok(p) => p,
            Err(why) => {
                errors.invalid(
                    &at.child("rule"),
                    text.as_str(),
                    format!("compilation failed: {why}"),
                );
                return None;
            }
        };
        let message_expression = match r.get("messageExpression").and_then(Value::as_str) {
            None | Some("") => None,
            Some(m) => match checked(m) {
                Ok(p) => Some(Arc::new(p)),
                Err(why) => {
                    errors.invalid(
                        &at.child("messageExpression"),
                        m,
                        format!("compilation failed: {why}"),
                    );
                    return None;
                }
            },
        };
        let reason = match r.get("reason").and_then(Value::as_str) {
            None | Some("FieldValueInvalid") => ErrorKind::Invalid,
            Some("FieldValueForbidden") => ErrorKind::Forbidden,
            Some("FieldValueRequired") => ErrorKind::Required,
            Some("FieldValueDuplicate") => ErrorKind::Duplicate,
            Some(other) => {
                errors.not_supported(
                    &at.child("reason"),
                    other,
                    &[
                        "FieldValueRequired",
                        "FieldValueDuplicate",
                        "FieldValueInvalid",
                        "FieldValueForbidden",
                    ],
                );
                return None;
            }
        };
        let field_path: Vec<String> = r
            .get("fieldPath")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .split('.')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let transition = mentions(program.expression(), "oldSelf");
        let scope = [
            Binding {
                name: "self",
                node: Some(node),
                size: node.bytes(),
            },
            Binding {
                name: "oldSelf",
                node: Some(node),
                size: node.bytes(),
            },
        ];
        let per_call = estimate(program.expression(), &scope).cost
            + message_expression
                .as_ref()
                .map_or(0.0, |m| estimate(m.expression(), &scope).cost);
        let total = per_call * instances;
        let over = (per_call / PER_CALL_LIMIT).max(total / PER_OBJECT_LIMIT);
        // NaN (an unbounded body times an empty range) is over budget too.
        if over.is_nan() || over > 1.0 {
            errors.forbidden(&at.child("rule"), over_budget("estimated rule cost", over));
            return None;
        }
        Some(Rule {
            message: r
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            text,
            program: Arc::new(program),
            message_expression,
            reason,
            field_path,
            transition,
            total,
            at: at.child("rule").0,
        })
    }
}

/// `text` compiled, and checked for names the environment does not have.
fn checked(text: &str) -> Result<Program, String> {
    if text.len() > MAX_RULE_BYTES {
        return Err(format!("rule is longer than {MAX_RULE_BYTES} bytes"));
    }
    // The parser recurses through a chain of operators as deep as the chain: on a thread of
    // its own with a stack the longest rule cannot exhaust (a CRD write is rare; this thread's
    // stack may be a runtime worker's or a blocking thread's 2 MiB).
    let parsed = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("cel-compile".into())
            .stack_size(PARSER_STACK)
            .spawn_scoped(scope, || {
                let program = ENV.compile(text).map_err(|e| e.to_string())?;
                // Checked (and dropped, which recurses as deep) here, on the large stack.
                if depth(program.expression()) > MAX_DEPTH {
                    return Err(format!(
                        "ERROR: <input>: expression nests deeper than {MAX_DEPTH} levels"
                    ));
                }
                Ok(program)
            })
            .map_err(|e| format!("the rule could not be compiled: {e}"))?
            .join()
            .unwrap_or_else(|_| Err("the rule could not be compiled".into()))
    });
    let program = parsed?;
    let mut unknown = None;
    let mut broken_pattern = None;
    walk(program.expression(), &mut Vec::new(), &mut |e, bound| {
        if unknown.is_some() || broken_pattern.is_some() {
            return;
        }
        match &e.expr {
            Expr::Ident(name) if !bound.iter().any(|b| b == name) && !NAMES.contains(&name.as_str()) => {
                unknown = Some(format!("undeclared reference to '{name}' (in container '')"));
            }
            Expr::Call(call) => {
                let name = call.func_name.as_str();
                let operator = name.starts_with('_') || name.starts_with('@') || name.starts_with('!');
                if !operator && !FUNCTIONS.contains(&name) {
                    unknown = Some(format!("undeclared reference to '{name}' (in container '')"));
                }
                // A pattern the rule spells is compiled with the rule, as the apiserver's
                // regex optimisation compiles it: one that does not compile (or is over
                // `PATTERN_BYTES`) refuses the rule, not each write.
                if name == "matches"
                    && let Some(Expr::Literal(LiteralValue::String(pattern))) =
                        call.args.last().map(|a| &a.expr)
                    && let Err(e) = RegexBuilder::new(pattern.inner())
                        .size_limit(PATTERN_BYTES)
                        .dfa_size_limit(PATTERN_BYTES)
                        .build()
                {
                    broken_pattern = Some(format!("program instantiation failed: error parsing regexp: {e}"));
                }
            }
            _ => {}
        }
    });
    match (unknown, broken_pattern) {
        (Some(why), _) => Err(format!("ERROR: <input>: {why}\n | {text}")),
        (None, Some(why)) => Err(why),
        (None, None) => Ok(program),
    }
}

/// Calls `visit` on every expression of `e`, with the comprehension variables bound there.
fn walk(e: &IdedExpr, bound: &mut Vec<String>, visit: &mut impl FnMut(&IdedExpr, &[String])) {
    visit(e, bound);
    match &e.expr {
        Expr::Call(call) => {
            if let Some(t) = &call.target {
                walk(t, bound, visit);
            }
            for a in &call.args {
                walk(a, bound, visit);
            }
        }
        Expr::Comprehension(c) => {
            walk(&c.iter_range, bound, visit);
            walk(&c.accu_init, bound, visit);
            let before = bound.len();
            bound.push(c.iter_var.clone());
            bound.extend(c.iter_var2.clone());
            bound.push(c.accu_var.clone());
            walk(&c.loop_cond, bound, visit);
            walk(&c.loop_step, bound, visit);
            walk(&c.result, bound, visit);
            bound.truncate(before);
        }
        Expr::List(l) => {
            for x in &l.elements {
                walk(x, bound, visit);
            }
        }
        Expr::Map(m) => {
            for entry in &m.entries {
                if let EntryExpr::MapEntry(me) = &entry.expr {
                    walk(&me.key, bound, visit);
                    walk(&me.value, bound, visit);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                if let EntryExpr::StructField(f) = &entry.expr {
                    walk(&f.value, bound, visit);
                }
            }
        }
        Expr::Select(s) => walk(&s.operand, bound, visit),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn mentions(e: &IdedExpr, name: &str) -> bool {
    let mut found = false;
    walk(e, &mut Vec::new(), &mut |e, _| {
        if matches!(&e.expr, Expr::Ident(n) if n == name) {
            found = true;
        }
    });
    found
}

/// A variable in scope of the estimate: the schema node it holds, when known, and the most
/// its value can hold (bytes, or entries of scalars).
#[derive(Clone, Copy)]
struct Binding<'a, 's> {
    name: &'a str,
    node: Option<&'s Schema>,
    size: f64,
}

/// What the estimate says of an expression: the cost of one evaluation, and the most its
/// value can hold (characters of a string, the sum of a list's or a map's entries; 1 for a
/// scalar): what reading, copying or iterating it costs.
#[derive(Clone, Copy)]
struct Est {
    cost: f64,
    size: f64,
}

/// The schema node an expression reads, when it can be told (`self.spec.items`).
fn node_of<'s>(e: &IdedExpr, scope: &[Binding<'_, 's>]) -> Option<&'s Schema> {
    match &e.expr {
        Expr::Ident(name) => scope.iter().rev().find(|b| b.name == name).and_then(|b| b.node),
        Expr::Select(s) if !s.test => {
            let parent = node_of(&s.operand, scope)?;
            parent.properties.get(&s.field).or(parent.additional.as_deref())
        }
        Expr::Call(c) if c.func_name == "_[_]" => {
            let parent = node_of(c.args.first()?, scope)?;
            parent.items.as_deref().or(parent.additional.as_deref())
        }
        _ => None,
    }
}

/// Reading a value copies it (the evaluator converts what it reads): free for a scalar, its
/// size for a list, a map or a string.
fn read(size: f64) -> f64 {
    if size > 1.0 { size } else { 0.0 }
}

/// Functions whose work is linear in what they are given.
const LINEAR: &[&str] = &[
    "@in",
    "_==_",
    "_!=_",
    "_<_",
    "_<=_",
    "_>_",
    "_>=_",
    "contains",
    "startsWith",
    "endsWith",
    "indexOf",
    "lastIndexOf",
    "lowerAscii",
    "upperAscii",
    "trim",
    "split",
    "join",
    "substring",
    "charAt",
    "flatten",
    "reverse",
    "sort",
    "string",
    "bytes",
    "size",
];

/// Functions whose value is a scalar, whatever they are given.
const SCALAR: &[&str] = &[
    "@in",
    "_==_",
    "_!=_",
    "_<_",
    "_<=_",
    "_>_",
    "_>=_",
    "_&&_",
    "_||_",
    "!_",
    "-_",
    "_-_",
    "_*_",
    "_/_",
    "_%_",
    "@not_strictly_false",
    "contains",
    "startsWith",
    "endsWith",
    "indexOf",
    "lastIndexOf",
    "matches",
    "size",
    "int",
    "uint",
    "double",
    "bool",
    "type",
];

/// The cost of reaching the value a path names (`self.spec.items[0]`), not of reading it: a
/// field or an index is looked up, not copied, until the path's value is used.
fn path_cost(e: &IdedExpr, scope: &[Binding<'_, '_>]) -> f64 {
    match &e.expr {
        Expr::Ident(_) => 0.0,
        Expr::Select(sel) if !sel.test => path_cost(&sel.operand, scope) + 1.0,
        Expr::Call(c) if c.func_name == "_[_]" && c.args.len() == 2 => {
            path_cost(&c.args[0], scope) + estimate(&c.args[1], scope).cost + 1.0
        }
        _ => estimate(e, scope).cost,
    }
}

/// The estimated cost of one evaluation of `e`, where `scope` names what each variable holds.
/// Conservative: every read of a collection or a string copies it, every comprehension runs
/// over the most entries its range can have, a function not modelled returns as much as it is
/// given, and the linear functions cost what they are given.
fn estimate<'s>(e: &IdedExpr, scope: &[Binding<'_, 's>]) -> Est {
    let body = super::BODY_BYTES;
    match &e.expr {
        Expr::Literal(LiteralValue::String(text)) => Est {
            cost: 0.0,
            size: text.inner().chars().count().max(1) as f64,
        },
        Expr::Literal(_) | Expr::Unspecified => Est { cost: 0.0, size: 1.0 },
        Expr::Ident(name) => match scope.iter().rev().find(|b| b.name == name) {
            Some(b) => Est {
                cost: read(b.size),
                size: b.size,
            },
            // A type name (`int`).
            None => Est { cost: 0.0, size: 1.0 },
        },
        Expr::Select(sel) if sel.test => Est {
            cost: path_cost(&sel.operand, scope) + 1.0,
            size: 1.0,
        },
        Expr::Select(_) => {
            let size = node_of(e, scope).map_or(body, Schema::bytes);
            Est {
                cost: path_cost(e, scope) + read(size),
                size,
            }
        }
        // A literal list, map or message: what its entries cost, each entry a step.
        Expr::List(_) | Expr::Map(_) | Expr::Struct(_) => {
            let parts: Vec<Est> = children(e).into_iter().map(|x| estimate(x, scope)).collect();
            Est {
                cost: parts.iter().map(|p| p.cost).sum::<f64>() + parts.len() as f64,
                size: parts.iter().map(|p| p.size).sum::<f64>().max(1.0),
            }
        }
        Expr::Call(call) => {
            let name = call.func_name.as_str();
            if name == "_[_]" {
                let size = node_of(e, scope).map_or(body, Schema::bytes);
                return Est {
                    cost: path_cost(e, scope) + read(size),
                    size,
                };
            }
            let parts: Vec<Est> = call
                .target
                .iter()
                .map(|t| estimate(t, scope))
                .chain(call.args.iter().map(|a| estimate(a, scope)))
                .collect();
            let given = parts.iter().map(|p| p.cost).sum::<f64>() + 1.0;
            let sizes = parts.iter().map(|p| p.size).sum::<f64>();
            // What linear work reads beyond scalars (comparing two integers is one step).
            let collections = parts.iter().map(|p| read(p.size)).sum::<f64>();
            let largest = parts.iter().map(|p| p.size).fold(1.0, f64::max);
            let (cost, size) = match name {
                "_+_" => (given + collections, sizes),
                "replace" => {
                    let target = parts.first().map_or(1.0, |p| p.size);
                    let with = parts.get(2).map_or(1.0, |p| p.size);
                    let size = target * with.max(1.0);
                    (given + size, size)
                }
                // A pattern the rule spells is compiled once and kept; one read from the
                // object is compiled at each call, within a bounded program size
                // (`PATTERN_BYTES`), which [`DYNAMIC_PATTERN`] accounts for. Matching is
                // linear.
                "matches" => {
                    let literal = call
                        .args
                        .last()
                        .is_some_and(|p| matches!(p.expr, Expr::Literal(LiteralValue::String(_))));
                    let compile = if literal { 100.0 } else { DYNAMIC_PATTERN };
                    (given + compile + collections, 1.0)
                }
                // Every item once, and the separator between each two: as many separators as
                // the list has items (its bound, where its schema is known; empty strings take
                // no size but still a separator each).
                "join" => {
                    let list = parts.first().map_or(1.0, |p| p.size);
                    let items = call
                        .target
                        .as_deref()
                        .and_then(|t| node_of(t, scope))
                        .map_or(list, |n| n.cardinality().max(list));
                    let separator = parts.get(1).map_or(0.0, |p| p.size);
                    let size = list + items * separator;
                    (given + size, size)
                }
                // A naive search: each position of the string against the whole needle.
                "indexOf" | "lastIndexOf" => {
                    let within = parts.first().map_or(1.0, |p| p.size);
                    let needle = parts.get(1).map_or(1.0, |p| p.size);
                    (given + within * needle.max(1.0), 1.0)
                }
                "distinct" => {
                    let n = parts.first().map_or(1.0, |p| p.size);
                    (given + n * n, n)
                }
                _ if LINEAR.contains(&name) => (given + collections, sizes),
                _ => (given, largest),
            };
            Est {
                cost,
                size: if SCALAR.contains(&name) { 1.0 } else { size },
            }
        }
        Expr::Comprehension(c) => {
            // A literal list's elements are estimated once, for the range and its largest
            // element alike (twice would be exponential in how deep such ranges nest).
            let (range, largest) = match &c.iter_range.expr {
                Expr::List(l) => {
                    let parts: Vec<Est> = l.elements.iter().map(|x| estimate(x, scope)).collect();
                    let range = Est {
                        cost: parts.iter().map(|p| p.cost).sum::<f64>() + parts.len() as f64,
                        size: parts.iter().map(|p| p.size).sum::<f64>().max(1.0),
                    };
                    (range, parts.iter().map(|p| p.size).fold(1.0, f64::max))
                }
                _ => (estimate(&c.iter_range, scope), 1.0),
            };
            let range_node = node_of(&c.iter_range, scope);
            // Entries: the range's bound, or its size (each entry takes at least one unit).
            let entries = match (range_node, &c.iter_range.expr) {
                (Some(n), _) => n.cardinality().min(range.size.max(1.0)),
                (None, Expr::List(l)) => l.elements.len() as f64,
                (None, _) => range.size,
            };
            // A list's items are its item schema's; a map's keys are strings of any length.
            let element_node = range_node.and_then(|r| r.items.as_deref());
            let element_size = match (element_node, range_node, &c.iter_range.expr) {
                (Some(n), _, _) => n.bytes(),
                (None, None, Expr::List(_)) => largest.max(1.0),
                _ => range.size.max(1.0),
            };
            // map and filter accumulate a list as large as the range; the other macros a
            // scalar.
            let accumulates_list = matches!(c.accu_init.expr, Expr::List(_));
            let accu_size = if accumulates_list {
                range.size.max(1.0)
            } else {
                1.0
            };
            let init = estimate(&c.accu_init, scope);
            let mut inner = scope.to_vec();
            for name in std::iter::once(&c.iter_var).chain(c.iter_var2.iter()) {
                inner.push(Binding {
                    name,
                    node: element_node,
                    size: element_size,
                });
            }
            inner.push(Binding {
                name: &c.accu_var,
                node: None,
                size: accu_size,
            });
            let step = estimate(&c.loop_cond, &inner).cost + estimate(&c.loop_step, &inner).cost;
            let result = estimate(&c.result, &inner);
            Est {
                cost: range.cost + init.cost + entries.max(1.0) * step.max(1.0) + result.cost,
                size: result.size,
            }
        }
    }
}

/// The expressions directly under `e`.
fn children(e: &IdedExpr) -> Vec<&IdedExpr> {
    match &e.expr {
        Expr::Call(call) => call.target.iter().map(|t| &**t).chain(call.args.iter()).collect(),
        Expr::Comprehension(c) => vec![&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result],
        Expr::List(l) => l.elements.iter().collect(),
        Expr::Map(m) => m
            .entries
            .iter()
            .flat_map(|entry| match &entry.expr {
                EntryExpr::MapEntry(me) => vec![&me.key, &me.value],
                EntryExpr::StructField(f) => vec![&f.value],
            })
            .collect(),
        Expr::Struct(st) => st
            .entries
            .iter()
            .flat_map(|entry| match &entry.expr {
                EntryExpr::StructField(f) => vec![&f.value],
                EntryExpr::MapEntry(me) => vec![&me.key, &me.value],
            })
            .collect(),
        Expr::Select(sel) => vec![&*sel.operand],
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Vec::new(),
    }
}

/// How deep `e` nests, counted without recursion (a rule may be a long chain of operators,
/// which the evaluator, and the walks here, recurse through).
fn depth(e: &IdedExpr) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(e, 1usize)];
    while let Some((e, d)) = stack.pop() {
        deepest = deepest.max(d);
        stack.extend(children(e).into_iter().map(|c| (c, d + 1)));
    }
    deepest
}

/// A JSON value as a CEL value: integers as `int`, objects as maps.
fn to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(list) => cel::Value::List(Arc::new(list.iter().map(to_cel).collect())),
        Value::Object(map) => {
            let entries: HashMap<Key, cel::Value> = map
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            cel::Value::Map(CelMap {
                map: Arc::new(entries),
            })
        }
    }
}

/// An evaluation error as the apiserver words it.
fn error_text(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        other => other.to_string(),
    }
}

/// Evaluates the rules of `schema` and of the nodes under it over `v` (the update of `old`),
/// at `at`.
/// Whether a node is unchanged on an update, for ratcheting: decided only when a rule fails
/// there, once. A node with an old value of its own (the root, an object's field, a map list's
/// item) is unchanged when it equals it; any other (a set's or atomic list's item) when its
/// parent is.
pub(super) struct Unchanged<'a> {
    parent: Option<&'a Unchanged<'a>>,
    now: &'a Value,
    old: Option<&'a Value>,
    correlates: bool,
    known: Cell<Option<bool>>,
}

impl<'a> Unchanged<'a> {
    pub(super) fn root(now: &'a Value, old: Option<&'a Value>) -> Unchanged<'a> {
        Unchanged {
            parent: None,
            now,
            old,
            correlates: true,
            known: Cell::new(None),
        }
    }

    fn child(&'a self, now: &'a Value, old: Option<&'a Value>, correlates: bool) -> Unchanged<'a> {
        Unchanged {
            parent: Some(self),
            now,
            old,
            correlates,
            known: Cell::new(None),
        }
    }

    fn get(&self) -> bool {
        if let Some(known) = self.known.get() {
            return known;
        }
        let unchanged = if self.correlates {
            self.old == Some(self.now)
        } else {
            self.parent.is_some_and(Unchanged::get)
        };
        self.known.set(Some(unchanged));
        unchanged
    }
}

/// The apiserver's words for a cost `over` times its budget.
fn over_budget(what: &str, over: f64) -> std::string::String {
    let factor = if over > 100.0 || over.is_nan() {
        "more than 100x".to_owned()
    } else if over < 1.5 {
        format!("{over:.6}x")
    } else {
        format!("{over:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// The most expensive rules named when all rules together are over budget.
const MOST_EXPENSIVE: usize = 4;

/// The estimated cost of every rule of `schema` over one object, against the budget of one
/// object: what each rule may cost alone, all of them together may not either. Over it, the
/// most expensive rules are named, then the schema.
pub(super) fn check_total(schema: &Schema, at: &Path, errors: &mut Errors) {
    fn rules<'s>(s: &'s Schema, out: &mut Vec<&'s Rule>) {
        out.extend(&s.rules);
        s.properties.values().for_each(|p| rules(p, out));
        if let Some(items) = s.items.as_deref() {
            rules(items, out);
        }
        if let Some(values) = s.additional.as_deref() {
            rules(values, out);
        }
    }
    let mut all = Vec::new();
    rules(schema, &mut all);
    let over = all.iter().map(|r| r.total).sum::<f64>() / PER_OBJECT_LIMIT;
    if over > 1.0 {
        all.sort_by(|a, b| b.total.total_cmp(&a.total));
        for rule in all.iter().take(MOST_EXPENSIVE) {
            errors.forbidden(
                &Path::new(&rule.at),
                "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
            );
        }
        errors.forbidden(
            at,
            over_budget(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                over,
            ),
        );
    }
}

/// Runs the rules of `schema` and its nodes over `v` (whose old value, if any, is `old`); a
/// rule that does not read `oldSelf` and fails on an unchanged node is ratcheted (dropped), as
/// the apiserver ratchets it.
pub(super) fn run(
    schema: &Schema,
    v: &Value,
    old: Option<&Value>,
    unchanged: &Unchanged<'_>,
    at: &Path,
    errors: &mut Errors,
) {
    if v.is_null() {
        return;
    }
    if !schema.rules.is_empty() {
        let mut context = Context::with_env(ENV.clone());
        context.add_variable_from_value("self", to_cel(v));
        if let Some(old) = old {
            context.add_variable_from_value("oldSelf", to_cel(old));
        }
        for rule in &schema.rules {
            if rule.transition && old.is_none() {
                continue;
            }
            check(schema, rule, &context, v, unchanged, at, errors);
        }
    }
    match v {
        Value::Object(map) => {
            let old_map = old.and_then(Value::as_object);
            for (name, value) in map {
                let child = schema.properties.get(name).or(schema.additional.as_deref());
                if let Some(s) = child
                    && !(at.0.is_empty() && matches!(name.as_str(), "apiVersion" | "kind" | "metadata"))
                {
                    let before = old_map.and_then(|m| m.get(name));
                    let node = unchanged.child(value, before, true);
                    run(s, value, before, &node, &at.child(name), errors);
                }
            }
        }
        Value::Array(list) => {
            let Some(items) = &schema.items else { return };
            // Old items are matched by key in a map list, by value in a set (each old list
            // indexed once); an atomic list's items have no old value.
            let old_list = old.and_then(Value::as_array);
            let by_key: HashMap<Vec<ValueKey<'_>>, &Value> = match (&schema.list, old_list) {
                (ListType::Map(keys), Some(l)) => l.iter().map(|o| (validate::map_key(keys, o), o)).collect(),
                (ListType::Set, Some(l)) => l.iter().map(|o| (vec![ValueKey(o)], o)).collect(),
                _ => HashMap::new(),
            };
            for (i, value) in list.iter().enumerate() {
                let before = match &schema.list {
                    ListType::Map(keys) => by_key.get(&validate::map_key(keys, value)).copied(),
                    ListType::Set => by_key.get(&vec![ValueKey(value)]).copied(),
                    ListType::Atomic => None,
                };
                // A set's item has an old value (itself, if it was there) for `oldSelf`, but
                // ratchets only with its list, as an atomic list's does.
                let correlates = matches!(schema.list, ListType::Map(_));
                let node = unchanged.child(value, before, correlates);
                run(items, value, before, &node, &at.index(i), errors);
            }
        }
        _ => {}
    }
}

fn check(
    schema: &Schema,
    rule: &Rule,
    context: &Context,
    v: &Value,
    unchanged: &Unchanged<'_>,
    at: &Path,
    errors: &mut Errors,
) {
    let shown_type = match (schema.ty.name(), v) {
        ("", Value::Object(_)) => "object",
        ("", Value::Array(_)) => "array",
        ("", Value::String(_)) => "string",
        ("", Value::Number(_)) => "number",
        ("", _) => "object",
        (name, _) => name,
    };
    let mut path = at.clone();
    for p in &rule.field_path {
        path = path.child(p);
    }
    // A rule on the root object reports no field, as the apiserver's nil path prints.
    if path.0.is_empty() {
        path = Path::new("<nil>");
    }
    let failed = match rule.program.execute(context) {
        Ok(cel::Value::Bool(true)) => return,
        Ok(cel::Value::Bool(false)) => None,
        Ok(other) => Some(format!(
            "rule did not evaluate to a bool: {other:?}: {}",
            rule.text
        )),
        Err(ExecutionError::NoSuchOverload(e)) => Some(format!(
            "'{e}': call arguments did not match a supported operator, function or macro signature for rule: {}",
            rule.text
        )),
        Err(e) => Some(format!("{} evaluating rule: {}", error_text(&e), rule.text)),
    };
    if let Some(why) = failed {
        errors.invalid(&path, shown_type, why);
        return;
    }
    if !rule.transition && unchanged.get() {
        return;
    }
    let mut message = match &rule.message_expression {
        Some(p) => match p.execute(context) {
            Ok(cel::Value::String(s)) if !s.trim().is_empty() && !s.contains('\n') => s.to_string(),
            _ => String::new(),
        },
        None => String::new(),
    };
    if message.is_empty() {
        message = if rule.message.is_empty() {
            format!("failed rule: {}", rule.text)
        } else {
            rule.message.clone()
        };
    }
    match rule.reason {
        ErrorKind::Forbidden => errors.forbidden(&path, message),
        ErrorKind::Required => errors.required_because(&path, message),
        ErrorKind::Duplicate => errors.duplicate(&path, shown_type),
        _ => errors.invalid(&path, shown_type, message),
    }
}
