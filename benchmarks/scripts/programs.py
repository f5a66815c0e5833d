"""Where the benchmarks' Rust programs come from.

By default each benchmark builds its programs here, in release
(`cargo build --release --locked -q …`), and runs them from the target
directory's `release/`. With HARNESS_BENCH_BIN_DIR naming a directory, the
programs are taken from it as they are and nothing is built: the test
suite's smoke runs (scripts/test) build every program once, in the dev
profile beside the tests, and pass `target/debug`, so a fresh machine does
not build the whole workspace a second time with optimisations. Figures
from such programs are no measurement; the smoke runs only check that
every program builds and runs.
"""

import os
import subprocess


def programs(root, *cargo_args):
    """Builds the programs `cargo_args` selects (or takes them from
    HARNESS_BENCH_BIN_DIR) and returns a function from a program's name to
    its path; a program missing from the given directory is an error that
    names it."""
    given = os.environ.get("HARNESS_BENCH_BIN_DIR")
    if given:
        where = given
    else:
        subprocess.run(["cargo", "build", "--release", "--locked", "-q", *cargo_args], cwd=root, check=True)
        where = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target")), "release")

    def path(name):
        full = os.path.join(where, name)
        if not os.access(full, os.X_OK):
            source = "HARNESS_BENCH_BIN_DIR" if given else "the release build"
            raise SystemExit(f"benchmarks: no program {name} in {where} ({source})")
        return full

    return path
