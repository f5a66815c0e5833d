#!/usr/bin/env python3
"""Per-step overhead of the same two-step loop in harness and in LangGraph.

The loop: `work` increments a counter and appends to a list through reducers,
`check` routes back to `work` until the counter reaches N, then ends.

Usage: python3 benchmarks/langgraph_loop.py
Installs LangGraph into benchmarks/.venv on first use, runs the criterion
benchmark `step_overhead` of the harness crate, runs the LangGraph loop
(without a checkpointer) in the same invocation, and prints both figures and
their ratio.
"""

import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VENV = os.path.join(HERE, ".venv")
N = 1000  # loop iterations per run; two steps each, as in the Rust benchmark
RUNS = 15


def venv_python():
    return os.path.join(VENV, "bin", "python")


def ensure_venv():
    if not os.path.exists(venv_python()):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
    probe = subprocess.run([venv_python(), "-c", "import langgraph"], capture_output=True)
    if probe.returncode != 0:
        subprocess.run(
            [venv_python(), "-m", "pip", "install", "--quiet", "langgraph>=0.2"],
            check=True,
        )


def langgraph_per_step_us():
    """Runs in the venv: the loop in LangGraph, µs per step (median of runs)."""
    import operator
    from typing import Annotated, TypedDict

    from importlib.metadata import version
    from langgraph.graph import END, START, StateGraph

    class Loop(TypedDict):
        count: Annotated[int, operator.add]
        items: Annotated[list, operator.add]

    def work(state):
        return {"count": 1, "items": [state["count"] + 1]}

    def check(state):
        return {}

    def route(state):
        return "again" if state["count"] < N else "done"

    g = StateGraph(Loop)
    g.add_node("work", work)
    g.add_node("check", check)
    g.add_edge(START, "work")
    g.add_edge("work", "check")
    g.add_conditional_edges("check", route, {"again": "work", "done": END})
    app = g.compile()
    config = {"recursion_limit": 2 * N + 10}

    app.invoke({"count": 0, "items": []}, config)  # warm-up
    samples = []
    for _ in range(RUNS):
        start = time.perf_counter()
        out = app.invoke({"count": 0, "items": []}, config)
        samples.append((time.perf_counter() - start) / (2 * N) * 1e6)
        assert out["count"] == N and len(out["items"]) == N
    return statistics.median(samples), version("langgraph")


def harness_per_step_us():
    cmd = [
        "cargo", "bench", "-p", "harness", "--bench", "step_overhead", "--",
        "--output-format", "bencher",
    ]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    m = re.search(r"two_step_loop_1000 \.\.\. bench:\s+([\d,]+) ns/iter", out)
    if not m:
        sys.exit(f"could not read the criterion result from:\n{out}")
    ns_per_run = int(m.group(1).replace(",", ""))
    return ns_per_run / (2 * N) / 1000


def main():
    if "--langgraph-only" in sys.argv:
        us, ver = langgraph_per_step_us()
        print(f"{us} {ver}")
        return
    ensure_venv()
    print(f"loop: 2 steps x {N} iterations per run")
    ours = harness_per_step_us()
    print(f"harness:   {ours * 1000:10.1f} ns per step (criterion, release)")
    lg = subprocess.run(
        [venv_python(), os.path.abspath(__file__), "--langgraph-only"],
        check=True, capture_output=True, text=True,
    ).stdout.split()
    theirs, ver = float(lg[0]), lg[1]
    print(f"langgraph: {theirs * 1000:10.1f} ns per step (langgraph {ver}, no checkpointer, median of {RUNS})")
    print(f"ratio:     {theirs / ours:10.0f}x less overhead per step in harness")


if __name__ == "__main__":
    main()
