//! The core's modules depend on each other in one direction, which a reader
//! can see in `lib.rs`: each module uses only modules declared above it, and
//! within a module the files use each other without a circle.
//!
//! Read from the source, without comments: a path `crate::m::..` (or
//! `crate::Name` re-exported from `m` by `lib.rs`) in module `n` is an edge
//! `n → m`; inside a module, `super::f::..` or an item that the module's
//! `mod.rs` re-exports from file `f` is an edge to `f`, any other
//! `super::Item` an edge to `mod.rs`. Re-exports (`pub use`) are the
//! module's face, not a dependency of it.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The modules in dependency order: each may use only those before it.
const ORDER: &[&str] = &[
    "ids", "signal", "state", "slots", "error", "effect", "step", "session", "observe", "graph",
    "run", "agent", "worker", "cli",
];
/// Modules that use no module of [`ORDER`], only leaves before them; any
/// module may use them.
const LEAVES: &[&str] = &[
    "clock",
    "type_name",
    "secrets",
    "panics",
    "durable",
    "llm",
    "memory",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The source without comments and string literals, which may mention paths
/// that are not uses.
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < b.len() {
        match (b[i], b.get(i + 1)) {
            ('/', Some('/')) => {
                while i < b.len() && b[i] != '\n' {
                    i += 1;
                }
            }
            ('/', Some('*')) => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            ('"', _) => {
                i += 1;
                while i < b.len() && b[i] != '"' {
                    i += if b[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The statements of `code` that are re-exports (`pub use`, `pub(crate) use`).
fn is_reexport(statement: &str) -> bool {
    let s = statement.trim_start();
    s.starts_with("pub use") || s.starts_with("pub(crate) use") || s.starts_with("pub(super) use")
}

/// Every path that starts with `prefix` (`crate` or `super`), as its
/// segments after the prefix, skipping re-export statements. A group
/// `prefix::{a::b, c}` gives each member.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for statement in code.split(';') {
        if is_reexport(statement) {
            continue;
        }
        let needle = format!("{prefix}::");
        let mut rest = statement;
        while let Some(at) = rest.find(&needle) {
            let before = rest[..at].chars().last();
            rest = &rest[at + needle.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for member in group[..end].split(',') {
                    let segs = segments(member.trim());
                    if !segs.is_empty() {
                        found.push(segs);
                    }
                }
            } else {
                found.push(segments(rest));
            }
        }
    }
    found
}

fn segments(path: &str) -> Vec<String> {
    let mut segs = Vec::new();
    let mut rest = path;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        segs.push(rest[..end].to_string());
        match rest[end..].strip_prefix("::") {
            Some(r) if !r.starts_with('{') => rest = r,
            _ => break,
        }
    }
    segs
}

/// `pub use m::{A, B}` and `pub use m::A` of a facade file: name → module.
fn reexports(facade: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for statement in code_of(facade).split(';') {
        if !is_reexport(statement) {
            continue;
        }
        let Some(path) = statement.split(" use ").nth(1) else {
            continue;
        };
        let path = path.trim().trim_start_matches("crate::");
        let Some((module, items)) = path.split_once("::") else {
            continue;
        };
        let items = items.trim().trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let item = item.trim();
            let name = item.rsplit("::").next().unwrap_or(item);
            let name = name.split(" as ").last().unwrap_or(name).trim();
            if !name.is_empty() {
                map.insert(name.to_string(), module.trim().to_string());
            }
        }
    }
    map
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The top-level module a file belongs to.
fn module_of(file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src()).ok()?;
    let first = rel.components().next()?.as_os_str().to_string_lossy();
    let first = first.trim_end_matches(".rs").to_string();
    (first != "lib").then_some(first)
}

#[test]
fn each_module_uses_only_modules_declared_before_it() {
    let root = reexports(&fs::read_to_string(src().join("lib.rs")).unwrap());
    let mut wrong = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for file in rust_files(&src()) {
        let Some(module) = module_of(&file) else {
            continue;
        };
        seen.insert(module.clone());
        let rank = ORDER.iter().position(|m| *m == module);
        let code = code_of(&fs::read_to_string(&file).unwrap());
        for path in paths_after(&code, "crate") {
            let first = &path[0];
            let used = if ORDER.contains(&first.as_str()) || LEAVES.contains(&first.as_str()) {
                first.clone()
            } else if let Some(m) = root.get(first) {
                m.clone()
            } else {
                continue;
            };
            if used == module {
                continue;
            }
            let leaf = |m: &str| LEAVES.iter().position(|l| *l == m);
            let allowed = match (rank, ORDER.iter().position(|m| *m == used)) {
                (Some(r), Some(u)) => u < r,
                // Anything may use a leaf; a leaf only the leaves before it.
                (Some(_), None) => leaf(&used).is_some(),
                (None, _) => matches!((leaf(&module), leaf(&used)), (Some(m), Some(u)) if u < m),
            };
            if !allowed {
                wrong.insert(format!(
                    "{} (module `{module}`) uses `crate::{}` (module `{used}`)",
                    file.strip_prefix(src()).unwrap().display(),
                    path.join("::"),
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "imports against the order:\n{wrong:#?}");
    // Every module of the crate is placed in the order: a new one must be.
    let placed: BTreeSet<String> = ORDER.iter().chain(LEAVES).map(|m| m.to_string()).collect();
    assert_eq!(seen, placed, "modules and the declared order differ");
}

#[test]
fn the_files_of_each_module_use_each_other_without_a_circle() {
    let mut circles = Vec::new();
    for entry in fs::read_dir(src()).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let module = dir.file_name().unwrap().to_string_lossy().to_string();
        // Not a module (the docs folder).
        let Ok(facade) = fs::read_to_string(dir.join("mod.rs")) else {
            continue;
        };
        let exported = reexports(&facade);
        let files: BTreeSet<String> = fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| {
                let p = e.unwrap().path();
                p.extension()
                    .is_some_and(|x| x == "rs")
                    .then(|| p.file_stem().unwrap().to_string_lossy().to_string())
            })
            .collect();
        // Where an item named through the module (`super::X`,
        // `crate::module::X`) is defined: the file it is re-exported from,
        // a file module of that name, or mod.rs.
        let home = |segs: &[String]| -> Option<String> {
            let first = segs.first()?;
            if files.contains(first) && first != "mod" {
                Some(first.clone())
            } else if let Some(f) = exported.get(first) {
                files.contains(f).then(|| f.clone())
            } else {
                Some("mod".to_string())
            }
        };
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in &files {
            let code = code_of(&fs::read_to_string(dir.join(format!("{file}.rs"))).unwrap());
            let mut uses: Vec<Vec<String>> = paths_after(&code, "crate")
                .into_iter()
                .filter(|p| p.first() == Some(&module))
                .map(|p| p[1..].to_vec())
                .collect();
            if file == "mod" {
                // mod.rs names its files directly (`engine::start`), outside
                // its `mod` declarations and re-exports.
                for f in files.iter().filter(|f| *f != "mod") {
                    let named = code
                        .split(';')
                        .filter(|s| !is_reexport(s))
                        .any(|s| s.contains(&format!("{f}::")) && !s.contains(&format!("mod {f}")));
                    if named {
                        uses.push(vec![f.clone()]);
                    }
                }
            } else {
                uses.extend(paths_after(&code, "super"));
            }
            for segs in uses {
                if let Some(to) = home(&segs)
                    && to != *file
                {
                    edges.entry(file.clone()).or_default().insert(to);
                }
            }
        }
        if let Some(circle) = find_circle(&edges) {
            circles.push(format!("{module}: {}", circle.join(" → ")));
        }
    }
    assert!(
        circles.is_empty(),
        "files that use each other in a circle: {circles:#?}"
    );
}

/// A circle in `edges`, if there is one, as the files along it.
fn find_circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_string());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        if let Some(c) = visit(node, edges, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn the_checker_sees_an_import_against_the_order() {
    // The checker itself must be able to fail: an upward import in a
    // session file, and a grouped import of a root re-export.
    let code = code_of(
        "use crate::agent::Agent;\n// use crate::worker::Worker;\nuse crate::{Cx, ids::RunId};",
    );
    let paths = paths_after(&code, "crate");
    assert_eq!(
        paths,
        [
            vec!["agent".to_string(), "Agent".into()],
            vec!["Cx".into()],
            vec!["ids".into(), "RunId".into()]
        ]
    );
    let root = reexports("pub use step::{Cx, StepError};\npub use agent::{Agent, create_agent};");
    assert_eq!(root.get("Cx").map(String::as_str), Some("step"));
    let mut edges = BTreeMap::new();
    edges.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    edges.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(
        find_circle(&edges),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
}
