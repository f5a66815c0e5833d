#!/usr/bin/env python3
"""The LangGraph side of the composition benchmark (harness side:
harness/benches/compose.rs; benchmarks/compose.sh runs both and prints the
ratios). The same shapes, in memory (no checkpointer), on LangGraph's async
API:

- fan_out_1000: `split` fans out 1 000 `Send("work", {"item": i})` (items
  0 to 999, made from the state's `n`); each `work` adds its item to
  `total` (an `operator.add` reducer); `reduce` copies the total.
  Per branch: the run's time / 1 000.
- sub_agent_loop_1000: the parent's `child` node is a compiled one-node
  subgraph that adds one to `count`; the parent routes back to `child`
  until the count is 1 000. Per sub-agent step: the run's time / 1 000.
  plain_loop_1000 is the same loop with the subgraph's node as the
  parent's own.

Prints one line per figure: `NAME MICROSECONDS_PER_ITEM`, then
`langgraph VERSION`. Median of RUNS runs, after a warm-up run.
Usage: python3 benchmarks/compose_langgraph.py [RUNS]   (needs langgraph)
"""

import asyncio
import operator
import statistics
import sys
import time
from importlib.metadata import version
from typing import Annotated, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

N = 1000


class MapReduce(TypedDict):
    n: int
    total: Annotated[int, operator.add]
    result: int


class Item(TypedDict):
    item: int


def map_reduce():
    async def split(state):
        return {}

    def fan(state):
        return [Send("work", {"item": i}) for i in range(state["n"])]

    async def work(inp: Item):
        return {"total": inp["item"]}

    async def reduce(state):
        return {"result": state["total"]}

    g = StateGraph(MapReduce)
    g.add_node("split", split)
    g.add_node("work", work)
    g.add_node("reduce", reduce)
    g.add_edge(START, "split")
    g.add_conditional_edges("split", fan, ["work"])
    g.add_edge("work", "reduce")
    g.add_edge("reduce", END)
    app = g.compile()

    async def once():
        out = await app.ainvoke({"n": N, "total": 0, "result": 0})
        assert out["result"] == N * (N - 1) // 2, out

    return once


class Count(TypedDict):
    count: int


async def add_one(state):
    return {"count": state["count"] + 1}


def again(state):
    return "again" if state["count"] < N else "done"


def counting(nested):
    g = StateGraph(Count)
    if nested:
        child = StateGraph(Count)
        child.add_node("work", add_one)
        child.add_edge(START, "work")
        child.add_edge("work", END)
        g.add_node("child", child.compile())
    else:
        g.add_node("child", add_one)
    g.add_edge(START, "child")
    g.add_conditional_edges("child", again, {"again": "child", "done": END})
    app = g.compile()
    config = {"recursion_limit": 2 * N + 10}

    async def once():
        out = await app.ainvoke({"count": 0}, config)
        assert out["count"] == N, out

    return once


async def median_us_per_item(once, runs):
    await once()  # warm-up
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        await once()
        samples.append((time.perf_counter() - start) / N * 1e6)
    return statistics.median(samples)


async def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    figures = [
        ("fan_out_1000", map_reduce()),
        ("sub_agent_loop_1000", counting(nested=True)),
        ("plain_loop_1000", counting(nested=False)),
    ]
    for name, once in figures:
        us = await median_us_per_item(once, runs)
        print(f"{name} {us:.3f}", flush=True)
    print(f"langgraph {version('langgraph')}")


if __name__ == "__main__":
    asyncio.run(main())
