#!/usr/bin/env python3
"""Per-step overhead of the same two-step loop in harness and in LangGraph,
in memory and with a durable checkpoint at every step.

The loop: `work` increments a counter and appends to a list through reducers,
`check` routes back to `work` until the counter reaches N, then ends.

Usage: python3 benchmarks/langgraph_loop.py [--memory-only | --durable-only]
Installs LangGraph into benchmarks/.venv on first use, then in one run:
1. in memory: the criterion benchmark `step_overhead` of the harness crate
   and the LangGraph loop without a checkpointer;
2. durable: the criterion benchmark `durable_step` of harness-stores (sled,
   flushed at every step), the LangGraph loop with SqliteSaver and
   durability="sync", and this machine's fsync latency (a flushed step
   cannot be cheaper than one fsync);
and prints each figure and the ratios.
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
DURABLE_N = 100  # as in the durable Rust benchmark
DURABLE_RUNS = 5


def venv_python():
    return os.path.join(VENV, "bin", "python")


def ensure_venv():
    if not os.path.exists(venv_python()):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
    probe = subprocess.run(
        [venv_python(), "-c", "import langgraph, langgraph.checkpoint.sqlite"], capture_output=True
    )
    if probe.returncode != 0:
        subprocess.run(
            [venv_python(), "-m", "pip", "install", "--quiet", "langgraph>=0.6",
             "langgraph-checkpoint-sqlite"],
            check=True,
        )


def langgraph_per_step_us(durable=False):
    """Runs in the venv: the loop in LangGraph, µs per step (median of runs).

    With `durable`, a SqliteSaver checkpoint is written synchronously at
    every step (the same durability as a flushed sled checkpoint)."""
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

    limit = DURABLE_N if durable else N

    def route(state):
        return "again" if state["count"] < limit else "done"

    g = StateGraph(Loop)
    g.add_node("work", work)
    g.add_node("check", check)
    g.add_edge(START, "work")
    g.add_edge("work", "check")
    g.add_conditional_edges("check", route, {"again": "work", "done": END})
    if not durable:
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

    import sqlite3
    import tempfile
    from langgraph.checkpoint.sqlite import SqliteSaver

    with tempfile.TemporaryDirectory(dir=os.path.join(ROOT, "target")) as d:
        conn = sqlite3.connect(os.path.join(d, "lg.sqlite"), check_same_thread=False)
        saver = SqliteSaver(conn)
        app = g.compile(checkpointer=saver)
        samples = []
        for run in range(DURABLE_RUNS + 1):
            config = {"recursion_limit": 2 * DURABLE_N + 10,
                      "configurable": {"thread_id": f"t{run}"}}
            start = time.perf_counter()
            out = app.invoke({"count": 0, "items": []}, config, durability="sync")
            if run > 0:  # the first run is a warm-up
                samples.append((time.perf_counter() - start) / (2 * DURABLE_N) * 1e6)
            assert out["count"] == DURABLE_N
        return statistics.median(samples), version("langgraph")


def criterion_ns_per_iter(package, bench, name):
    cmd = ["cargo", "bench", "-p", package, "--bench", bench, "--", "--output-format", "bencher"]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    m = re.search(re.escape(name) + r" \.\.\. bench:\s+([\d,]+) ns/iter", out)
    if not m:
        sys.exit(f"could not read the criterion result from:\n{out}")
    return int(m.group(1).replace(",", ""))


def harness_per_step_us():
    ns = criterion_ns_per_iter("harness", "step_overhead", "two_step_loop_1000")
    return ns / (2 * N) / 1000


def harness_durable_per_step_us():
    ns = criterion_ns_per_iter(
        "harness-stores", "durable_step", "two_step_loop_100_sled_flush_every_step"
    )
    return ns / (2 * DURABLE_N) / 1000


def fsync_latency_us(samples=300):
    """Median time to write 4 KiB to a file and fsync it, on the disk the
    benchmarks use (target/)."""
    os.makedirs(os.path.join(ROOT, "target"), exist_ok=True)
    path = os.path.join(ROOT, "target", "fsync-probe")
    times = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        block = b"x" * 4096
        for _ in range(samples):
            start = time.perf_counter()
            os.write(fd, block)
            os.fsync(fd)
            times.append((time.perf_counter() - start) * 1e6)
    finally:
        os.close(fd)
        os.remove(path)
    return statistics.median(times)


def run_langgraph(durable):
    args = [venv_python(), os.path.abspath(__file__), "--langgraph-only"]
    if durable:
        args.append("--durable")
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), out[1]


def main():
    if "--langgraph-only" in sys.argv:
        us, ver = langgraph_per_step_us(durable="--durable" in sys.argv)
        print(f"{us} {ver}")
        return
    ensure_venv()
    if "--durable-only" not in sys.argv:
        memory()
    if "--memory-only" not in sys.argv:
        durable()


def memory():
    print(f"loop: 2 steps x {N} iterations per run")
    ours = harness_per_step_us()
    print(f"harness:   {ours * 1000:10.1f} ns per step (criterion, release)")
    theirs, ver = run_langgraph(durable=False)
    print(f"langgraph: {theirs * 1000:10.1f} ns per step (langgraph {ver}, no checkpointer, median of {RUNS})")
    print(f"ratio:     {theirs / ours:10.0f}x less overhead per step in harness")


def durable():
    print(f"\ndurable: 2 steps x {DURABLE_N} iterations per run, a synchronous checkpoint per step")
    fsync = fsync_latency_us()
    print(f"fsync:     {fsync:10.1f} us (4 KiB write + fsync, median, this disk)")
    ours = harness_durable_per_step_us()
    print(f"harness:   {ours:10.1f} us per step (sled, flushed every step; criterion)")
    theirs, ver = run_langgraph(durable=True)
    print(f"langgraph: {theirs:10.1f} us per step (langgraph {ver}, SqliteSaver, durability=sync)")
    print(f"harness / fsync:     {ours / fsync:6.2f}x")
    print(f"langgraph / harness: {theirs / ours:6.2f}x")


if __name__ == "__main__":
    main()
