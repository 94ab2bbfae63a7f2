//! The layout keeps its promise: within core, encoders and server, no top-level module imports
//! from a module that (directly or through others) imports it back.
//!
//! A module depends on every top-level module its files name as `crate::name` (in `use` lines,
//! grouped `use crate::{…}` or inline paths) or, in a top-level file, as `super::name`; comments
//! are not read. Files under `src/name/` belong to module `name`. The graph is checked for
//! cycles with Tarjan's strongly connected components; a failure prints each cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Code without comments: `//` lines, and the rest of a line after ` //`.
fn code_of(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| l.find(" //").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first path segment after every `prefix` in `code`, with `prefix{a, b::c}` giving `a`, `b`.
fn names_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices(prefix) {
        // `crate::` inside a longer path (`watchcache_core::crate::`) cannot occur; `super::`
        // after `super::` is a deeper path, handled by whoever asks for it.
        let rest = &code[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = 0;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.insert(ident_at(group[start..].trim_start()).to_owned());
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(ident_at(group[start..j].trim_start()).to_owned());
                        start = j + 1;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident_at(rest).to_owned());
        }
    }
    out.remove("");
    out
}

/// The module graph of a crate from its files: `(path relative to src/, contents)`.
fn graph_of(files: &[(PathBuf, String)]) -> Graph {
    let module_of = |p: &Path| -> Option<String> {
        let first = p.components().next()?.as_os_str().to_str()?;
        let name = first.strip_suffix(".rs").unwrap_or(first);
        (name != "lib" && name != "main").then(|| name.to_owned())
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|(p, _)| module_of(p)).collect();
    let mut graph: Graph = modules.iter().map(|m| (m.clone(), BTreeSet::new())).collect();
    for (path, text) in files {
        let Some(from) = module_of(path) else { continue };
        let code = code_of(text);
        let mut named = names_after(&code, "crate::");
        if path.components().count() == 1 {
            named.extend(names_after(&code, "super::"));
        }
        let deps = graph.get_mut(&from).expect("every module is a node");
        deps.extend(named.into_iter().filter(|m| *m != from && modules.contains(m)));
    }
    graph
}

/// The strongly connected components with more than one module: each one holds a cycle.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in &self.graph[v] {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    scc.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    self.out.push(scc);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

fn rust_files(dir: &Path, under: &Path, out: &mut Vec<(PathBuf, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let rel = under.join(path.file_name().expect("a file name"));
        if path.is_dir() {
            rust_files(&path, &rel, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("a readable source file");
            out.push((rel, text));
        }
    }
}

fn crate_graph(name: &str) -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src");
    let mut files = Vec::new();
    rust_files(&src, Path::new(""), &mut files);
    assert!(files.len() > 3, "{} has the crate's sources", src.display());
    graph_of(&files)
}

#[test]
fn no_top_level_module_of_core_encoders_or_server_imports_one_that_imports_it() {
    let mut found = Vec::new();
    for krate in ["core", "encoders", "server"] {
        let graph = crate_graph(krate);
        for cycle in cycles(&graph) {
            let edges: Vec<String> = cycle
                .iter()
                .flat_map(|m| {
                    graph[m]
                        .iter()
                        .filter(|d| cycle.contains(d))
                        .map(move |d| format!("{m} -> {d}"))
                })
                .collect();
            found.push(format!(
                "{krate}: {{{}}} via {}",
                cycle.join(", "),
                edges.join(", ")
            ));
        }
    }
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn the_graph_sees_every_import_form_and_a_planted_cycle() {
    let file = |p: &str, t: &str| (PathBuf::from(p), t.to_owned());
    let files = [
        file("lib.rs", "mod a; mod b; mod c; mod d;"),
        file(
            "a.rs",
            "use crate::{b::B, c};\n// use crate::d;\nfn f() { crate::d::g() }",
        ),
        file("b.rs", "use super::c::C; // crate::a in a comment"),
        file("c.rs", "use crate::a::A;"),
        file("d.rs", "use std::fmt;"),
        file("d/e.rs", "use super::helper;"),
    ];
    let graph = graph_of(&files);
    let deps = |m: &str| graph[m].iter().cloned().collect::<Vec<_>>();
    assert_eq!(deps("a"), ["b", "c", "d"]);
    assert_eq!(deps("b"), ["c"], "comments are not read");
    assert_eq!(deps("c"), ["a"]);
    assert!(
        deps("d").is_empty(),
        "super:: in a submodule is the module itself"
    );
    assert_eq!(cycles(&graph), [["a", "b", "c"]]);

    let acyclic = graph_of(&files[..2]);
    assert!(cycles(&acyclic).is_empty());
}
