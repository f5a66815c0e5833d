//! Source helpers shared by diagnosis and patches: a lenient parse of one
//! cell, line lookup, the expressions that matter for a failure, and the
//! spots to edit for a rename.

use rustpython_ruff_python_ast::visitor::{self, Visitor};
use rustpython_ruff_python_ast::{self as ast, Expr, ExprContext, Number, Stmt};
use rustpython_ruff_text_size::{Ranged, TextRange, TextSize};

use crate::AnalysisOptions;
use crate::parse::parse_here;

/// What an expression's value comes from: a name (through attributes and
/// subscripts) or the result of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Base {
    /// `x`, `x.a`, `x[0]`: the root name.
    Name(String),
    /// `f(...)`, `x.m(...).a`: the callee as written and its root name.
    Call {
        /// The callee's source text, e.g. `re.match`.
        callee: String,
        /// The root name of the callee, e.g. `re`.
        root: Option<String>,
    },
    /// A literal or another expression without a name at its root.
    Other,
}

impl Base {
    /// The root name, for a name or a call on a name.
    pub(crate) fn root(&self) -> Option<&str> {
        match self {
            Self::Name(name) => Some(name),
            Self::Call { root, .. } => root.as_deref(),
            Self::Other => None,
        }
    }
}

/// A literal key of a subscript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Key {
    /// A string literal (the value, without quotes).
    Str(String),
    /// An integer literal, as written.
    Int(String),
}

/// `value.attr`.
#[derive(Debug, Clone)]
pub(crate) struct AttrUse {
    pub(crate) base: Base,
    pub(crate) base_text: String,
    pub(crate) attr: String,
    pub(crate) attr_range: TextRange,
    pub(crate) range: TextRange,
}

/// `value[key]`.
#[derive(Debug, Clone)]
pub(crate) struct SubscriptUse {
    pub(crate) base: Base,
    pub(crate) key: Option<Key>,
    pub(crate) key_range: TextRange,
    pub(crate) range: TextRange,
}

/// A binary operation, augmented assignment or comparison.
#[derive(Debug, Clone)]
pub(crate) struct OpUse {
    pub(crate) op: &'static str,
    pub(crate) left: Vec<String>,
    pub(crate) right: Vec<String>,
    pub(crate) range: TextRange,
}

/// `func(args)`.
#[derive(Debug, Clone)]
pub(crate) struct CallUse {
    pub(crate) callee: String,
    pub(crate) func: Base,
    /// The last segment of the callee (`merge` for `df.merge`).
    pub(crate) short_name: Option<String>,
    pub(crate) arg_names: Vec<String>,
    pub(crate) range: TextRange,
}

/// The iterable of a `for` loop or comprehension.
#[derive(Debug, Clone)]
pub(crate) struct IterUse {
    /// Names loaded by the iterable.
    pub(crate) names: Vec<String>,
    /// Names the loop's target binds to the items (`row` in `for row in
    /// rows`, `k` and `v` in `for k, v in d.items()`).
    pub(crate) targets: Vec<String>,
    pub(crate) range: TextRange,
}

/// A name node.
#[derive(Debug, Clone)]
pub(crate) struct NameUse {
    pub(crate) name: String,
    pub(crate) store: bool,
    pub(crate) range: TextRange,
}

/// A top-level `name = value` whose value is a call.
#[derive(Debug, Clone)]
pub(crate) struct CallAssign {
    pub(crate) callee: String,
    pub(crate) method: Option<String>,
    pub(crate) inplace: bool,
    pub(crate) line: u32,
}

/// A parsed cell.
#[derive(Debug)]
pub(crate) struct CellSource<'a> {
    text: &'a str,
    line_starts: Vec<usize>,
    module: Option<ast::ModModule>,
}

impl<'a> CellSource<'a> {
    /// Parses `text` leniently (IPython escapes allowed); code that does not
    /// parse, or that is too large for the current thread's stack (see
    /// [`parse_here`]), gives a source without syntax tree.
    pub(crate) fn parse(text: &'a str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(
            text.bytes()
                .enumerate()
                .filter(|(_, b)| *b == b'\n')
                .map(|(i, _)| i + 1),
        );
        let module = parse_here(text, AnalysisOptions { ipython: true });
        Self {
            text,
            line_starts,
            module,
        }
    }

    fn body(&self) -> &[Stmt] {
        self.module.as_ref().map_or(&[], |m| m.body.as_slice())
    }

    /// Number of lines.
    pub(crate) fn line_count(&self) -> u32 {
        to_u32(self.line_starts.len())
    }

    /// The 1-based line holding byte `offset`.
    pub(crate) fn line_of(&self, offset: TextSize) -> u32 {
        let offset = usize::from(offset);
        to_u32(self.line_starts.partition_point(|&start| start <= offset))
    }

    /// Byte range of 1-based `line`, without its line break.
    fn line_span(&self, line: u32) -> Option<(usize, usize)> {
        let index = usize::try_from(line).ok()?.checked_sub(1)?;
        let start = *self.line_starts.get(index)?;
        let end = self
            .line_starts
            .get(index + 1)
            .map_or(self.text.len(), |next| next - 1);
        Some((start, end))
    }

    /// The text of 1-based `line`, without its line break.
    pub(crate) fn line(&self, line: u32) -> Option<&'a str> {
        let (start, end) = self.line_span(line)?;
        self.text.get(start..end).map(|l| l.trim_end_matches('\r'))
    }

    /// Whether `range` touches `line` (always, without a line).
    pub(crate) fn on_line(&self, range: TextRange, line: Option<u32>) -> bool {
        let Some(line) = line else { return true };
        let Some((start, end)) = self.line_span(line) else {
            return false;
        };
        usize::from(range.start()) <= end && usize::from(range.end()) > start
    }

    /// The source text of `range`.
    pub(crate) fn slice(&self, range: TextRange) -> &'a str {
        self.text.get(range.to_std_range()).unwrap_or("")
    }

    /// Everything the failure rules look at, in source order.
    pub(crate) fn facts(&self) -> Facts {
        let mut collector = Collector {
            text: self.text,
            facts: Facts::default(),
            depth: 0,
        };
        collector.visit_body(self.body());
        collector.facts
    }

    /// Top-level `name = call(...)` assignments to `name`, in source order.
    pub(crate) fn call_assignments(&self, name: &str) -> Vec<CallAssign> {
        let mut out = Vec::new();
        for stmt in self.body() {
            let Stmt::Assign(assign) = stmt else { continue };
            let Expr::Call(call) = assign.value.as_ref() else {
                continue;
            };
            if !assign
                .targets
                .iter()
                .any(|t| matches!(t, Expr::Name(n) if n.id.as_str() == name))
            {
                continue;
            }
            let method = match call.func.as_ref() {
                Expr::Attribute(attribute) => Some(attribute.attr.id.to_string()),
                _ => None,
            };
            let inplace = call.arguments.keywords.iter().any(|k| {
                k.arg.as_ref().is_some_and(|a| a.id.as_str() == "inplace")
                    && matches!(k.value, Expr::BooleanLiteral(ref b) if b.value)
            });
            out.push(CallAssign {
                callee: self.slice(call.func.range()).to_owned(),
                method,
                inplace,
                line: self.line_of(assign.range.start()),
            });
        }
        out
    }

    /// For a function defined at the top level as `name`: whether its body
    /// returns a value anywhere (`None` if there is no such function).
    pub(crate) fn function_returns_value(&self, name: &str) -> Option<bool> {
        let function = self.body().iter().rev().find_map(|stmt| match stmt {
            Stmt::FunctionDef(def) if def.name.id.as_str() == name => Some(def),
            _ => None,
        })?;
        let mut finder = ReturnFinder { found: false };
        finder.visit_body(&function.body);
        Some(finder.found)
    }

    /// Byte ranges of the occurrences of the module-level name `name`:
    /// loads, stores and deletes, `global` declarations, and none inside a
    /// function, lambda or comprehension where `name` is local.
    pub(crate) fn global_name_spots(&self, name: &str) -> Vec<TextRange> {
        let mut finder = SpotFinder {
            name,
            spots: Vec::new(),
        };
        finder.visit_body(self.body());
        finder.spots.sort_by_key(|r| r.start());
        finder.spots.dedup();
        finder.spots
    }

    /// Ranges of module names in import statements whose module is `module`
    /// or starts with `module.`: the range covers the text `module`.
    pub(crate) fn import_module_spots(&self, module: &str) -> Vec<(TextRange, u32)> {
        let mut out = Vec::new();
        let mut visit = |identifier: &ast::Identifier| {
            let id = identifier.id.as_str();
            if id == module
                || id
                    .strip_prefix(module)
                    .is_some_and(|rest| rest.starts_with('.'))
            {
                let start = identifier.range.start();
                let end = start + TextSize::of(module);
                out.push((TextRange::new(start, end), self.line_of(start)));
            }
        };
        let mut stack: Vec<&Stmt> = self.body().iter().rev().collect();
        while let Some(stmt) = stack.pop() {
            match stmt {
                Stmt::Import(import) => import.names.iter().for_each(|a| visit(&a.name)),
                Stmt::ImportFrom(import) if import.level == 0 => {
                    if let Some(m) = &import.module {
                        visit(m);
                    }
                }
                Stmt::If(s) => {
                    stack.extend(s.body.iter().rev());
                    for clause in &s.elif_else_clauses {
                        stack.extend(clause.body.iter().rev());
                    }
                }
                Stmt::Try(s) => {
                    stack.extend(s.body.iter().rev());
                    for handler in &s.handlers {
                        let ast::ExceptHandler::ExceptHandler(h) = handler;
                        stack.extend(h.body.iter().rev());
                    }
                    stack.extend(s.orelse.iter().rev());
                    stack.extend(s.finalbody.iter().rev());
                }
                Stmt::With(s) => stack.extend(s.body.iter().rev()),
                Stmt::FunctionDef(s) => stack.extend(s.body.iter().rev()),
                Stmt::ClassDef(s) => stack.extend(s.body.iter().rev()),
                _ => {}
            }
        }
        out
    }

    /// Byte offset where an import added to the cell belongs: after a
    /// module docstring and `from __future__` imports.
    pub(crate) fn import_insertion_offset(&self) -> usize {
        let mut offset = 0;
        for (index, stmt) in self.body().iter().enumerate() {
            let docstring = index == 0
                && matches!(stmt, Stmt::Expr(e) if matches!(e.value.as_ref(), Expr::StringLiteral(_)));
            let future = matches!(stmt, Stmt::ImportFrom(i)
                if i.module.as_ref().is_some_and(|m| m.id.as_str() == "__future__"));
            if !(docstring || future) {
                break;
            }
            let end_line = self.line_of(stmt.range().end());
            offset = self
                .line_starts
                .get(usize::try_from(end_line).unwrap_or(usize::MAX))
                .copied()
                .unwrap_or(self.text.len());
        }
        offset
    }
}

/// The failure-relevant expressions of a cell.
#[derive(Debug, Default, Clone)]
pub(crate) struct Facts {
    pub(crate) names: Vec<NameUse>,
    pub(crate) attributes: Vec<AttrUse>,
    pub(crate) subscripts: Vec<SubscriptUse>,
    pub(crate) ops: Vec<OpUse>,
    pub(crate) calls: Vec<CallUse>,
    pub(crate) iters: Vec<IterUse>,
    /// String literals (value), anywhere.
    pub(crate) strings: Vec<String>,
}

struct Collector<'s> {
    text: &'s str,
    facts: Facts,
    depth: u32,
}

impl Collector<'_> {
    fn slice(&self, range: TextRange) -> String {
        self.text.get(range.to_std_range()).unwrap_or("").to_owned()
    }

    fn base(&self, expr: &Expr) -> Base {
        let mut current = expr;
        loop {
            match current {
                Expr::Name(name) => return Base::Name(name.id.to_string()),
                Expr::Attribute(attribute) => current = &attribute.value,
                Expr::Subscript(subscript) => current = &subscript.value,
                Expr::Call(call) => {
                    return Base::Call {
                        callee: self.slice(call.func.range()),
                        root: root_name(&call.func),
                    };
                }
                _ => return Base::Other,
            }
        }
    }
}

impl<'a> Visitor<'a> for Collector<'_> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::For(for_stmt) => self.facts.iters.push(IterUse {
                names: loaded_names(&for_stmt.iter),
                targets: stored_names(&for_stmt.target),
                range: for_stmt.iter.range(),
            }),
            Stmt::AugAssign(aug) => self.facts.ops.push(OpUse {
                op: aug.op.as_str(),
                left: loaded_names(&aug.target),
                right: loaded_names(&aug.value),
                range: aug.range,
            }),
            _ => {}
        }
        let nested = matches!(stmt, Stmt::FunctionDef(_) | Stmt::ClassDef(_));
        if nested {
            self.depth += 1;
        }
        visitor::walk_stmt(self, stmt);
        if nested {
            self.depth -= 1;
        }
    }

    fn visit_comprehension(&mut self, comprehension: &'a ast::Comprehension) {
        self.facts.iters.push(IterUse {
            names: loaded_names(&comprehension.iter),
            targets: stored_names(&comprehension.target),
            range: comprehension.iter.range(),
        });
        visitor::walk_comprehension(self, comprehension);
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Name(name) => self.facts.names.push(NameUse {
                name: name.id.to_string(),
                store: matches!(name.ctx, ExprContext::Store),
                range: name.range,
            }),
            Expr::Attribute(attribute) => self.facts.attributes.push(AttrUse {
                base: self.base(&attribute.value),
                base_text: self.slice(attribute.value.range()),
                attr: attribute.attr.id.to_string(),
                attr_range: attribute.attr.range,
                range: attribute.range,
            }),
            Expr::Subscript(subscript) => {
                let key = match subscript.slice.as_ref() {
                    Expr::StringLiteral(s) => Some(Key::Str(s.value.to_str().to_owned())),
                    Expr::NumberLiteral(n) => match &n.value {
                        Number::Int(_) => Some(Key::Int(self.slice(n.range))),
                        _ => None,
                    },
                    _ => None,
                };
                self.facts.subscripts.push(SubscriptUse {
                    base: self.base(&subscript.value),
                    key,
                    key_range: subscript.slice.range(),
                    range: subscript.range,
                });
            }
            Expr::BinOp(binop) => self.facts.ops.push(OpUse {
                op: binop.op.as_str(),
                left: loaded_names(&binop.left),
                right: loaded_names(&binop.right),
                range: binop.range,
            }),
            Expr::Compare(compare) => {
                let mut left = compare.left.as_ref();
                for (op, right) in compare.ops.iter().zip(compare.comparators.iter()) {
                    self.facts.ops.push(OpUse {
                        op: op.as_str(),
                        left: loaded_names(left),
                        right: loaded_names(right),
                        range: compare.range,
                    });
                    left = right;
                }
            }
            Expr::Call(call) => {
                let mut arg_names = Vec::new();
                for arg in &call.arguments.args {
                    arg_names.extend(loaded_names(arg));
                }
                for keyword in &call.arguments.keywords {
                    arg_names.extend(loaded_names(&keyword.value));
                }
                let short_name = match call.func.as_ref() {
                    Expr::Name(n) => Some(n.id.to_string()),
                    Expr::Attribute(a) => Some(a.attr.id.to_string()),
                    _ => None,
                };
                self.facts.calls.push(CallUse {
                    callee: self.slice(call.func.range()),
                    func: self.base(&call.func),
                    short_name,
                    arg_names,
                    range: call.range,
                });
            }
            Expr::StringLiteral(s) => self.facts.strings.push(s.value.to_str().to_owned()),
            _ => {}
        }
        visitor::walk_expr(self, expr);
    }
}

/// The root name of an attribute/subscript/call chain.
fn root_name(expr: &Expr) -> Option<String> {
    let mut current = expr;
    loop {
        match current {
            Expr::Name(name) => return Some(name.id.to_string()),
            Expr::Attribute(a) => current = &a.value,
            Expr::Subscript(s) => current = &s.value,
            Expr::Call(c) => current = &c.func,
            _ => return None,
        }
    }
}

/// Names loaded anywhere in `expr`, in source order, without repeats.
pub(crate) fn loaded_names(expr: &Expr) -> Vec<String> {
    struct Names(Vec<String>);
    impl<'a> Visitor<'a> for Names {
        fn visit_expr(&mut self, expr: &'a Expr) {
            if let Expr::Name(name) = expr
                && matches!(name.ctx, ExprContext::Load)
                && !self.0.iter().any(|n| n == name.id.as_str())
            {
                self.0.push(name.id.to_string());
            }
            visitor::walk_expr(self, expr);
        }
    }
    let mut names = Names(Vec::new());
    names.visit_expr(expr);
    names.0
}

/// Names bound by an assignment target (`row`, `k, v`, `(a, *rest)`), in
/// source order, without repeats; not the roots of attribute or subscript
/// targets.
pub(crate) fn stored_names(target: &Expr) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut pending = vec![target];
    while let Some(expr) = pending.pop() {
        match expr {
            Expr::Name(name) if !out.iter().any(|n| n == name.id.as_str()) => {
                out.push(name.id.to_string());
            }
            Expr::Tuple(tuple) => pending.extend(tuple.elts.iter().rev()),
            Expr::List(list) => pending.extend(list.elts.iter().rev()),
            Expr::Starred(starred) => pending.push(&starred.value),
            _ => {}
        }
    }
    out
}

struct ReturnFinder {
    found: bool,
}

impl<'a> Visitor<'a> for ReturnFinder {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::Return(ret) if ret.value.is_some() => self.found = true,
            // Returns of nested functions are theirs.
            Stmt::FunctionDef(_) | Stmt::ClassDef(_) => {}
            _ => visitor::walk_stmt(self, stmt),
        }
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        // A generator function returns a generator.
        if matches!(expr, Expr::Yield(_) | Expr::YieldFrom(_)) {
            self.found = true;
        }
        visitor::walk_expr(self, expr);
    }
}

struct SpotFinder<'n> {
    name: &'n str,
    spots: Vec<TextRange>,
}

impl SpotFinder<'_> {
    fn parameters_bind(&self, parameters: &ast::Parameters) -> bool {
        parameters.iter().any(|p| p.name().id.as_str() == self.name)
    }

    fn visit_parameter_defaults(&mut self, parameters: &ast::Parameters) {
        for parameter in parameters
            .posonlyargs
            .iter()
            .chain(&parameters.args)
            .chain(&parameters.kwonlyargs)
        {
            if let Some(default) = &parameter.default {
                self.visit_expr(default);
            }
        }
    }
}

impl<'a> Visitor<'a> for SpotFinder<'_> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::FunctionDef(def) => {
                for decorator in &def.decorator_list {
                    self.visit_decorator(decorator);
                }
                self.visit_parameter_defaults(&def.parameters);
                if !self.parameters_bind(&def.parameters) && !binds_locally(&def.body, self.name) {
                    self.visit_body(&def.body);
                }
            }
            Stmt::Global(global) => {
                for identifier in &global.names {
                    if identifier.id.as_str() == self.name {
                        self.spots.push(identifier.range);
                    }
                }
            }
            _ => visitor::walk_stmt(self, stmt),
        }
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Name(name) if name.id.as_str() == self.name => self.spots.push(name.range),
            Expr::Lambda(lambda) => {
                if let Some(parameters) = &lambda.parameters {
                    self.visit_parameter_defaults(parameters);
                    if self.parameters_bind(parameters) {
                        return;
                    }
                }
                self.visit_expr(&lambda.body);
            }
            Expr::ListComp(ast::ExprListComp {
                generators, elt, ..
            })
            | Expr::SetComp(ast::ExprSetComp {
                generators, elt, ..
            })
            | Expr::Generator(ast::ExprGenerator {
                generators, elt, ..
            }) => self.visit_comprehension_scope(generators, &[elt]),
            Expr::DictComp(dict) => {
                self.visit_comprehension_scope(&dict.generators, &[&dict.key, &dict.value]);
            }
            _ => visitor::walk_expr(self, expr),
        }
    }
}

impl SpotFinder<'_> {
    fn visit_comprehension_scope<'a>(
        &mut self,
        generators: &'a [ast::Comprehension],
        elements: &[&'a Expr],
    ) {
        // The first iterable is evaluated in the enclosing scope.
        if let Some(first) = generators.first() {
            self.visit_expr(&first.iter);
        }
        let shadowed = generators.iter().any(|g| {
            loaded_or_stored_names(&g.target)
                .iter()
                .any(|n| n == self.name)
        });
        if shadowed {
            return;
        }
        for (index, generator) in generators.iter().enumerate() {
            if index > 0 {
                self.visit_expr(&generator.iter);
            }
            for condition in &generator.ifs {
                self.visit_expr(condition);
            }
        }
        for element in elements {
            self.visit_expr(element);
        }
    }
}

/// Every name node in `expr`, whatever its context.
fn loaded_or_stored_names(expr: &Expr) -> Vec<String> {
    struct Names(Vec<String>);
    impl<'a> Visitor<'a> for Names {
        fn visit_expr(&mut self, expr: &'a Expr) {
            if let Expr::Name(name) = expr {
                self.0.push(name.id.to_string());
            }
            visitor::walk_expr(self, expr);
        }
    }
    let mut names = Names(Vec::new());
    names.visit_expr(expr);
    names.0
}

/// Whether a function body binds `name` as a local (and does not declare
/// it `global`): an assignment target, an import, a nested `def`/`class`
/// or an `except ... as` name.
fn binds_locally(body: &[Stmt], name: &str) -> bool {
    struct Binder<'n> {
        name: &'n str,
        binds: bool,
        global: bool,
    }
    impl<'a> Visitor<'a> for Binder<'_> {
        fn visit_stmt(&mut self, stmt: &'a Stmt) {
            match stmt {
                Stmt::Global(global) => {
                    if global.names.iter().any(|n| n.id.as_str() == self.name) {
                        self.global = true;
                    }
                }
                Stmt::FunctionDef(def) => {
                    if def.name.id.as_str() == self.name {
                        self.binds = true;
                    }
                }
                Stmt::ClassDef(class) => {
                    if class.name.id.as_str() == self.name {
                        self.binds = true;
                    }
                }
                Stmt::Import(import) => {
                    for alias in &import.names {
                        let bound = alias.asname.as_ref().map_or_else(
                            || alias.name.id.split('.').next().unwrap_or(""),
                            |a| a.id.as_str(),
                        );
                        if bound == self.name {
                            self.binds = true;
                        }
                    }
                }
                Stmt::ImportFrom(import) => {
                    for alias in &import.names {
                        let bound = alias.asname.as_ref().unwrap_or(&alias.name);
                        if bound.id.as_str() == self.name {
                            self.binds = true;
                        }
                    }
                }
                _ => visitor::walk_stmt(self, stmt),
            }
        }

        fn visit_except_handler(&mut self, handler: &'a ast::ExceptHandler) {
            let ast::ExceptHandler::ExceptHandler(h) = handler;
            if h.name.as_ref().is_some_and(|n| n.id.as_str() == self.name) {
                self.binds = true;
            }
            visitor::walk_except_handler(self, handler);
        }

        fn visit_expr(&mut self, expr: &'a Expr) {
            match expr {
                Expr::Name(n)
                    if n.id.as_str() == self.name && !matches!(n.ctx, ExprContext::Load) =>
                {
                    self.binds = true;
                }
                // Nested scopes bind their own names.
                Expr::Lambda(_)
                | Expr::ListComp(_)
                | Expr::SetComp(_)
                | Expr::DictComp(_)
                | Expr::Generator(_) => {}
                _ => visitor::walk_expr(self, expr),
            }
        }
    }
    let mut binder = Binder {
        name,
        binds: false,
        global: false,
    };
    binder.visit_body(body);
    binder.binds && !binder.global
}

/// Applies non-overlapping replacements to `text`; overlapping ones after
/// the first are dropped.
pub(crate) fn apply_edits(text: &str, mut edits: Vec<(TextRange, String)>) -> String {
    edits.sort_by_key(|(range, _)| (range.start(), range.end()));
    let mut out = String::with_capacity(text.len());
    let mut cursor = 0;
    for (range, replacement) in edits {
        let (start, end) = (usize::from(range.start()), usize::from(range.end()));
        if start < cursor || end > text.len() {
            continue;
        }
        out.push_str(text.get(cursor..start).unwrap_or(""));
        out.push_str(&replacement);
        cursor = end;
    }
    out.push_str(text.get(cursor..).unwrap_or(""));
    out
}

fn to_u32(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}
