#!/usr/bin/env python3
"""LangGraph's side of the scale comparisons that `benchmarks/run` prints.

Each mode does, with LangGraph's async API, the work one of the Rust
programs in benchmarks/src/bin/ does with harness, and prints its figures as
lines `RESULT <name> <value>`:

  durable     --levels 1,100,1000 --steps-total N --min-steps M --dir D
              N durable steps spread over 1, 100, 1000 concurrent sessions
              (at least M, default 50, a session),
              AsyncSqliteSaver, durability="sync" (durable_sessions.rs)
  many        --phase inflight|paused --runs N --steps S --saver sqlite|postgres
              [--url U] [--dir D]: N concurrent runs of a loop whose model call
              sleeps 20-50 ms (the same latencies as harness), a durable
              checkpoint at every step; wall time and memory (many_runs.rs)
  pg-workers  --url U --sessions N --steps S --workers W --concurrency C:
              W processes, each running C sessions at a time with
              AsyncPostgresSaver over a connection pool, every step durable;
              steps/s from the first step to the last, and the time between
              consecutive steps of a session (pg_workers.rs)
  resume      --steps N --dir D: a thread of N steps paused on an interrupt,
              resumed; the time to resume (resume.rs)

Run it with the virtual environment benchmarks/run makes (LangGraph, its
SQLite and PostgreSQL savers, psycopg, aiosqlite).
"""

import asyncio
import operator
import os
import statistics
import subprocess
import sys
import time
from typing import Annotated, TypedDict


def result(name, value):
    print(f"RESULT {name} {value}", flush=True)


def arg(name, default, kind=str):
    if name in sys.argv:
        return kind(sys.argv[sys.argv.index(name) + 1])
    return default


def model_latency_ms(run, step):
    """As harness_benchmarks::model_latency_ms: 20..=50 ms by a fixed hash."""
    return 20 + (run * 7919 + step * 104729) % 31


def latency_bound_s(runs, steps):
    return max(sum(model_latency_ms(r, s) for s in range(steps)) for r in range(runs)) / 1000


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def percentile(sorted_values, p):
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), -(-int(p * len(sorted_values)) // 100)))
    return sorted_values[rank - 1]


async def sqlite_saver(path):
    """An AsyncSqliteSaver on `path` that fsyncs at every commit (WAL,
    synchronous=FULL): the durability of a flushed harness step."""
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    os.makedirs(os.path.dirname(path), exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    conn = await aiosqlite.connect(path)
    await conn.execute("PRAGMA journal_mode=WAL")
    await conn.execute("PRAGMA synchronous=FULL")
    saver = AsyncSqliteSaver(conn)
    await saver.setup()
    return saver, conn.close


async def postgres_saver(url, size):
    """An AsyncPostgresSaver over a pool of `size` connections, as its
    documentation sets them up (autocommit, dict rows, no prepared
    statements); durable commits with the server's synchronous_commit."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(
        url,
        min_size=size,
        max_size=size,
        open=False,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
    )
    await pool.open(wait=True)
    saver = AsyncPostgresSaver(pool)
    await saver.setup()
    return saver, pool.close


# --- durable: concurrent durable sessions on SQLite -------------------------


class Counter(TypedDict):
    n: Annotated[int, operator.add]
    limit: int


def counter_graph(checkpointer):
    from langgraph.graph import END, START, StateGraph

    def step(state):
        return {"n": 1}

    g = StateGraph(Counter)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges(
        "step", lambda s: "again" if s["n"] < s["limit"] else "done", {"again": "step", "done": END}
    )
    return g.compile(checkpointer=checkpointer)


async def durable():
    levels = [int(x) for x in arg("--levels", "1,100,1000").split(",")]
    total = arg("--steps-total", 2000, int)
    min_steps = arg("--min-steps", 50, int)
    directory = arg("--dir", "target/harness-bench")
    saver, close = await sqlite_saver(os.path.join(directory, "lg-durable", "lg.sqlite"))
    app = counter_graph(saver)
    for sessions in levels:
        steps = max(min_steps, total // sessions)
        start = time.perf_counter()

        async def one(i):
            config = {"configurable": {"thread_id": f"d{sessions}-{i}"}, "recursion_limit": steps + 10}
            out = await app.ainvoke({"n": 0, "limit": steps}, config, durability="sync")
            assert out["n"] == steps

        await asyncio.gather(*(one(i) for i in range(sessions)))
        rate = sessions * steps / (time.perf_counter() - start)
        print(f"{sessions} sessions x {steps} durable steps: {rate:.0f} steps/s", flush=True)
        result(f"lg_durable_steps_per_s_{sessions}", rate)
    await close()


# --- many: 10 000 concurrent runs with simulated model latency --------------


class Chat(TypedDict):
    run: int
    n: Annotated[int, operator.add]
    steps: int
    pause: bool
    reply: str
    answers: Annotated[list, operator.add]


def chat_graph(checkpointer):
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    async def model(state):
        await asyncio.sleep(model_latency_ms(state["run"], state["n"]) / 1000)
        return {"n": 1, "reply": f"reply {state['n']} of run {state['run']}"}

    def ask(state):
        answer = interrupt("go on?")
        return {"answers": [answer]}

    def route(state):
        if state["n"] < state["steps"]:
            return "again"
        if state["pause"] and not state["answers"]:
            return "ask"
        return "done"

    g = StateGraph(Chat)
    g.add_node("model", model)
    g.add_node("ask", ask)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route, {"again": "model", "ask": "ask", "done": END})
    g.add_edge("ask", END)
    return g.compile(checkpointer=checkpointer)


def chat(run, steps, pause):
    return {"run": run, "n": 0, "steps": steps, "pause": pause, "reply": "", "answers": []}


async def many():
    phase = arg("--phase", "inflight")
    runs = arg("--runs", 10000, int)
    steps = arg("--steps", 5, int)
    kind = arg("--saver", "sqlite")
    directory = arg("--dir", "target/harness-bench")
    if kind == "sqlite":
        saver, close = await sqlite_saver(os.path.join(directory, f"lg-many-{phase}", "lg.sqlite"))
    else:
        saver, close = await postgres_saver(arg("--url", ""), arg("--pool", 16, int))
    from langgraph.types import Command

    app = chat_graph(saver)
    tag = f"{os.getpid()}-{time.time_ns()}"

    def config(run):
        return {"configurable": {"thread_id": f"m{tag}-{run}"}, "recursion_limit": steps + 10}

    # Warm up, as harness does.
    await app.ainvoke(chat(10**9, 1, False), config(-1), durability="sync")
    before = rss_bytes()
    if phase == "inflight":
        peak = before
        done = False

        async def sample():
            nonlocal peak
            while not done:
                peak = max(peak, rss_bytes())
                await asyncio.sleep(0.005)

        sampler = asyncio.create_task(sample())
        start = time.perf_counter()

        async def one(run):
            out = await app.ainvoke(chat(run, steps, False), config(run), durability="sync")
            assert out["n"] == steps

        await asyncio.gather(*(one(r) for r in range(runs)))
        wall = time.perf_counter() - start
        done = True
        await sampler
        bound = latency_bound_s(runs, steps)
        per = max(0, peak - before) / runs
        print(
            f"{kind}: {runs} runs x {steps} steps: {wall:.2f} s (latency bound {bound:.3f} s, "
            f"{wall / bound:.2f}x); {per / 1024:.1f} KiB per in-flight run",
            flush=True,
        )
        result(f"lg_{kind}_many_runs_wall_s", wall)
        result(f"lg_{kind}_many_runs_bound_s", bound)
        result(f"lg_{kind}_many_runs_bytes_per_inflight", per)
    else:

        async def one(run):
            out = await app.ainvoke(chat(run, 1, True), config(run), durability="sync")
            assert "__interrupt__" in out, "a run ended without pausing"

        await asyncio.gather(*(one(r) for r in range(runs)))
        per = max(0, rss_bytes() - before) / runs
        print(f"{kind}: {runs} sessions paused: {per / 1024:.1f} KiB per paused session", flush=True)
        result(f"lg_{kind}_many_runs_bytes_per_paused", per)
        out = await app.ainvoke(Command(resume="yes"), config(0), durability="sync")
        assert out["answers"] == ["yes"]
    await close()


# --- pg-workers: processes sharing one PostgreSQL ---------------------------


class Job(TypedDict):
    steps: int
    ticks: Annotated[list, operator.add]


def job_graph(checkpointer):
    from langgraph.graph import END, START, StateGraph

    def tick(state):
        return {"ticks": [time.time_ns() // 1000]}

    g = StateGraph(Job)
    g.add_node("tick", tick)
    g.add_edge(START, "tick")
    g.add_conditional_edges(
        "tick",
        lambda s: "again" if len(s["ticks"]) < s["steps"] else "done",
        {"again": "tick", "done": END},
    )
    return g.compile(checkpointer=checkpointer)


async def pg_worker():
    """One process: its share of the sessions, `--concurrency` at a time."""
    url = arg("--url", "")
    index, workers = arg("--index", 0, int), arg("--workers", 4, int)
    sessions, steps = arg("--sessions", 1000, int), arg("--steps", 20, int)
    concurrency = arg("--concurrency", 16, int)
    tag, start_at = arg("--tag", ""), arg("--start-at", 0, int)
    saver, close = await postgres_saver(url, concurrency)
    app = job_graph(saver)
    mine = list(range(index, sessions, workers))
    await asyncio.sleep(max(0, start_at / 1e6 - time.time()))

    async def lane():
        while mine:
            i = mine.pop()
            config = {"configurable": {"thread_id": f"{tag}-{i}"}, "recursion_limit": steps + 10}
            await app.ainvoke({"steps": steps, "ticks": []}, config, durability="sync")

    await asyncio.gather(*(lane() for _ in range(concurrency)))
    await close()


async def pg_workers_read(url, tag, sessions, steps):
    saver, close = await postgres_saver(url, 4)
    app = job_graph(saver)
    gaps, first, last = [], None, 0
    for i in range(sessions):
        state = await app.aget_state({"configurable": {"thread_id": f"{tag}-{i}"}})
        ticks = state.values["ticks"]
        assert len(ticks) == steps, f"session {i} ran {len(ticks)} of {steps} steps"
        first = ticks[0] if first is None else min(first, ticks[0])
        last = max(last, ticks[-1])
        gaps.extend((b - a) / 1000 for a, b in zip(ticks, ticks[1:]))
    await close()
    return sorted(gaps), first, last


def pg_workers():
    url = arg("--url", "")
    sessions, steps = arg("--sessions", 1000, int), arg("--steps", 20, int)
    workers, concurrency = arg("--workers", 4, int), arg("--concurrency", 16, int)
    tag = f"w{os.getpid()}-{time.time_ns()}"
    asyncio.run(setup_only(url))
    # Python's imports and pools take a while: every process starts its
    # sessions at this agreed time, once ready.
    start_at = int((time.time() + 4) * 1e6)
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "pg-worker", "--url", url, "--index", str(i),
             "--workers", str(workers), "--sessions", str(sessions), "--steps", str(steps),
             "--concurrency", str(concurrency), "--tag", tag, "--start-at", str(start_at)]
        )
        for i in range(workers)
    ]
    for p in procs:
        if p.wait() != 0:
            raise SystemExit(f"a LangGraph worker process failed: {p.returncode}")
    gaps, first, last = asyncio.run(pg_workers_read(url, tag, sessions, steps))
    # From the first step anywhere (not the agreed start: a process still
    # importing would count against LangGraph) to the last.
    secs = (last - first) / 1e6
    rate = sessions * steps / secs
    print(
        f"{sessions} sessions x {steps} steps, {workers} processes x {concurrency} at once: "
        f"{secs:.2f} s, {rate:.0f} steps/s, step latency p50 {percentile(gaps, 50):.2f} ms "
        f"p99 {percentile(gaps, 99):.2f} ms",
        flush=True,
    )
    result("lg_pg_steps_per_s", rate)
    result("lg_pg_p50_ms", percentile(gaps, 50))
    result("lg_pg_p99_ms", percentile(gaps, 99))


async def setup_only(url):
    saver, close = await postgres_saver(url, 1)
    await close()


# --- resume: a long thread paused on an interrupt ---------------------------


class Notes(TypedDict):
    n: Annotated[int, operator.add]
    last: str
    answers: Annotated[list, operator.add]


async def resume():
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt

    steps = arg("--steps", 1000, int)
    samples = arg("--samples", 20, int)
    directory = arg("--dir", "target/harness-bench")
    path = os.path.join(directory, "lg-resume", "lg.sqlite")
    saver, close = await sqlite_saver(path)

    def work(state):
        return {"n": 1, "last": f"note {state['n']} " + "x" * 200}

    def ask(state):
        answer = interrupt("more?")
        return {"answers": [answer]}

    g = StateGraph(Notes)
    g.add_node("work", work)
    g.add_node("ask", ask)
    g.add_edge(START, "work")
    g.add_conditional_edges("work", lambda s: "again" if s["n"] < steps else "ask",
                            {"again": "work", "ask": "ask"})
    g.add_conditional_edges("ask", lambda s: "done" if s["answers"][-1:] == ["stop"] else "more",
                            {"more": "ask", "done": END})
    app = g.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "long"}, "recursion_limit": steps + samples * 2 + 10}
    out = await app.ainvoke({"n": 0, "last": "", "answers": []}, config, durability="sync")
    assert "__interrupt__" in out
    times = []
    for _ in range(samples):
        # Timed as in harness: until the resumed run is back at the next
        # interrupt, less nothing (LangGraph has no separate "resumed" point:
        # its run is the one call).
        start = time.perf_counter()
        out = await app.ainvoke(Command(resume="yes"), config, durability="sync")
        times.append(time.perf_counter() - start)
        assert "__interrupt__" in out
    size = sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))
    med = statistics.median(times) * 1000
    print(f"resume of a {steps}-step thread: {med:.3f} ms (median of {samples}); {size} bytes on disk", flush=True)
    result("lg_resume_ms", med)
    result("lg_resume_bytes", size)
    await close()


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "durable":
        asyncio.run(durable())
    elif mode == "many":
        asyncio.run(many())
    elif mode == "pg-workers":
        pg_workers()
    elif mode == "pg-worker":
        asyncio.run(pg_worker())
    elif mode == "resume":
        asyncio.run(resume())
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
