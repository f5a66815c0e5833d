#!/usr/bin/env python3
"""Analysis throughput: harness (Rust, Ruff's parser) vs a CPython `ast` analyzer.

Both analyse the same files: every `.py` file of the local CPython standard
library (site-packages excluded) that is UTF-8 and that `ast.parse` accepts.
The Rust side runs the release build of `harness bench-analyze`; the Python
side parses with `ast.parse` and walks the tree with a scope-aware
`ast.NodeVisitor` that computes the same kind of result (reads, writes,
mutations, imports, definitions, dynamic features). File reading is not timed
on either side. Prints MB/s of each and the ratio.

Usage: python3 benchmarks/analyze_throughput.py [--rounds N] [--py-rounds N] [--stdlib DIR]

The Python side runs in the interpreter that runs this script; to compare
against another CPython build on the same files, run the script with it and
pass --stdlib, e.g. `/usr/bin/python3 benchmarks/analyze_throughput.py
--stdlib "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')"`.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BUILTINS = frozenset(dir(__builtins__) if isinstance(__builtins__, type(sys)) else __builtins__)
MUTATING = frozenset(
    "append extend insert pop remove clear update setdefault sort reverse add discard "
    "popitem difference_update intersection_update symmetric_difference_update appendleft "
    "extendleft popleft rotate fit partial_fit fit_transform set_params load_state_dict "
    "__setitem__ __delitem__".split()
)
DYNAMIC = frozenset(("exec", "eval", "globals"))


class Scope:
    __slots__ = ("kind", "locals", "globals", "nonlocals")

    def __init__(self, kind: str):
        self.kind = kind
        self.locals: set[str] = set()
        self.globals: set[str] = set()
        self.nonlocals: set[str] = set()


def root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


class BindingCollector(ast.NodeVisitor):
    """Names bound anywhere in a function body (not in nested scopes)."""

    def __init__(self, scope: Scope):
        self.scope = scope

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            self.scope.locals.add(node.id)

    def visit_FunctionDef(self, node) -> None:
        self.scope.locals.add(node.name)
        for d in node.decorator_list:
            self.visit(d)
        for d in node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(d)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.locals.add(node.name)
        for e in node.decorator_list + node.bases + [k.value for k in node.keywords]:
            self.visit(e)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for d in node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(d)

    def _comp(self, node) -> None:
        for g in node.generators:
            self.visit(g.iter)
            for c in g.ifs:
                self.visit(c)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comp

    def visit_Global(self, node: ast.Global) -> None:
        self.scope.globals.update(node.names)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.scope.nonlocals.update(node.names)

    def visit_Import(self, node) -> None:
        for a in node.names:
            if a.name != "*":
                self.scope.locals.add(a.asname or a.name.split(".")[0])

    visit_ImportFrom = visit_Import

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.scope.locals.add(node.name)
        self.generic_visit(node)


class StepAnalyzer(ast.NodeVisitor):
    def __init__(self) -> None:
        self.scopes = [Scope("module")]
        self.reads: set[str] = set()
        self.writes: set[str] = set()
        self.mutations: set[str] = set()
        self.builtins: set[str] = set()
        self.imports: list[tuple[str, str | None]] = []
        self.definitions: list[str] = []
        self.dynamic: list[str] = []

    def is_local(self, name: str) -> bool:
        last = len(self.scopes) - 1
        for i in range(last, -1, -1):
            s = self.scopes[i]
            if s.kind == "module":
                return False
            if s.kind == "class" and i != last:
                continue
            if name in s.globals:
                return False
            if name in s.locals or name in s.nonlocals:
                return True
        return False

    def load(self, name: str) -> None:
        if self.is_local(name):
            return
        if name in DYNAMIC:
            self.dynamic.append(name)
        if name in self.writes:
            return
        (self.builtins if name in BUILTINS else self.reads).add(name)

    def store(self, name: str) -> None:
        s = self.scopes[-1]
        if s.kind == "module" or name in s.globals:
            self.writes.add(name)
        elif s.kind == "class":
            s.locals.add(name)

    def mutate(self, node: ast.AST) -> None:
        name = root_name(node)
        if name and not self.is_local(name) and name not in self.writes:
            self.mutations.add(name)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.load(node.id)
        else:
            if isinstance(node.ctx, ast.Del):
                self.load(node.id)
            self.store(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.visit(node.value)
        if not isinstance(node.ctx, ast.Load):
            self.mutate(node.value)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.visit(node.value)
        self.visit(node.slice)
        if not isinstance(node.ctx, ast.Load):
            self.mutate(node.value)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for t in node.targets:
            self.visit(t)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        if isinstance(node.target, ast.Name):
            self.load(node.target.id)
        self.visit(node.target)

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and (
            f.attr in MUTATING
            or any(k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value is True for k in node.keywords)
        ):
            self.mutate(f.value)

    def visit_Import(self, node) -> None:
        for a in node.names:
            module = getattr(node, "module", None) or a.name
            if a.name == "*":
                self.dynamic.append("star_import")
                continue
            self.imports.append((module, a.asname or a.name))
            self.store(a.asname or a.name.split(".")[0])

    visit_ImportFrom = visit_Import

    def visit_Global(self, node: ast.Global) -> None:
        self.scopes[-1].globals.update(node.names)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.scopes[-1].nonlocals.update(node.names)

    def _function(self, node, body) -> None:
        scope = Scope("function")
        args = node.args
        for a in args.posonlyargs + args.args + args.kwonlyargs + [x for x in (args.vararg, args.kwarg) if x]:
            scope.locals.add(a.arg)
        collector = BindingCollector(scope)
        for stmt in body if isinstance(body, list) else [body]:
            collector.visit(stmt)
        self.scopes.append(scope)
        for stmt in body if isinstance(body, list) else [body]:
            self.visit(stmt)
        self.scopes.pop()

    def visit_FunctionDef(self, node) -> None:
        for e in node.decorator_list + node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(e)
        for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
            if a.annotation:
                self.visit(a.annotation)
        if node.returns:
            self.visit(node.returns)
        if len(self.scopes) == 1:
            self.definitions.append(node.name)
        self._function(node, node.body)
        self.store(node.name)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for e in node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(e)
        self._function(node, node.body)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for e in node.decorator_list + node.bases + [k.value for k in node.keywords]:
            self.visit(e)
        if len(self.scopes) == 1:
            self.definitions.append(node.name)
        self.scopes.append(Scope("class"))
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()
        self.store(node.name)

    def _comp(self, node) -> None:
        gens = node.generators
        self.visit(gens[0].iter)
        scope = Scope("comprehension")
        for g in gens:
            for n in ast.walk(g.target):
                if isinstance(n, ast.Name):
                    scope.locals.add(n.id)
        self.scopes.append(scope)
        for i, g in enumerate(gens):
            if i:
                self.visit(g.iter)
            self.visit(g.target)
            for c in g.ifs:
                self.visit(c)
        if isinstance(node, ast.DictComp):
            self.visit(node.key)
            self.visit(node.value)
        else:
            self.visit(node.elt)
        self.scopes.pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comp

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        i = len(self.scopes) - 1
        while self.scopes[i].kind == "comprehension":
            i -= 1
        s = self.scopes[i]
        if s.kind == "module" or node.target.id in s.globals:
            self.writes.add(node.target.id)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type:
            self.visit(node.type)
        if node.name:
            self.store(node.name)
        for stmt in node.body:
            self.visit(stmt)


def analyze(source: str) -> StepAnalyzer:
    analyzer = StepAnalyzer()
    analyzer.visit(ast.parse(source))
    return analyzer


def stdlib_files(stdlib: Path) -> list[Path]:
    files = []
    for dirpath, dirnames, filenames in os.walk(stdlib):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "dist-packages", "__pycache__"))
        files.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py"))
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="timed passes for the Rust analyzer (best is kept)")
    parser.add_argument("--py-rounds", type=int, default=3, help="timed passes for the Python analyzer (best is kept)")
    parser.add_argument("--stdlib", type=Path, default=Path(sysconfig.get_paths()["stdlib"]))
    args = parser.parse_args()

    sources: list[tuple[Path, str]] = []
    for path in stdlib_files(args.stdlib):
        try:
            text = path.read_bytes().decode("utf-8")
            ast.parse(text)
        except (UnicodeDecodeError, SyntaxError, ValueError):
            continue
        sources.append((path, text))
    total_bytes = sum(len(text.encode("utf-8")) for _, text in sources)

    target_dir = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "harness-cli"],
        cwd=ROOT, check=True,
    )
    binary = target_dir / "release" / "harness"
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as listing:
        listing.write("".join(f"{p}\n" for p, _ in sources))
    try:
        out = subprocess.run(
            [str(binary), "bench-analyze", listing.name, "--rounds", str(args.rounds)],
            check=True, capture_output=True, text=True,
        ).stdout
    finally:
        os.unlink(listing.name)
    rust = json.loads(out)
    if rust["bytes"] != total_bytes or rust["files"] != len(sources):
        print(f"warning: file sets differ: rust {rust['files']} files/{rust['bytes']} B, "
              f"python {len(sources)} files/{total_bytes} B", file=sys.stderr)

    best = float("inf")
    for _ in range(max(1, args.py_rounds)):
        start = time.perf_counter()
        for _, text in sources:
            analyze(text)
        best = min(best, time.perf_counter() - start)
    py_mbps = total_bytes / 1e6 / best

    print(f"files: {len(sources)} ({total_bytes / 1e6:.1f} MB) from {args.stdlib}")
    print(f"python: {sys.version.split()[0]} ({sys.executable})")
    print(f"harness (Rust, ruff parser):  {rust['mb_per_s']:8.2f} MB/s  ({rust['seconds']:.3f} s, best of {rust['rounds']}, {rust['errors']} parse errors)")
    print(f"CPython ast + NodeVisitor:    {py_mbps:8.2f} MB/s  ({best:.3f} s, best of {max(1, args.py_rounds)})")
    print(f"ratio: {rust['mb_per_s'] / py_mbps:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
