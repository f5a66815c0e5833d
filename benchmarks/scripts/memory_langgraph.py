"""LangGraph's side of the memory benchmark (benchmarks/scripts/bench-memory):
the same puts and filtered top-10 searches as `memory_search`, on
LangGraph's `InMemoryStore` with a semantic index (`dims` 384, `embed` a
function answering "item i" and "query j" with their precomputed rows of the
same file, `fields` ["text"]).

    python memory_langgraph.py --vectors FILE [--items 100000] [--queries 1000] [--seconds 60]

Searches run until `--queries` are done or `--seconds` have passed (a search
compares the query with every admitted item in Python and numpy: slow at
this size). Recall@10 is measured against the exact answer computed with
numpy, outside the timing. Prints `RESULT name value` lines.
"""

import argparse
import sys
import time

import numpy as np
from langgraph.store.memory import InMemoryStore

DIMS = 384


def result(name, value):
    print(f"RESULT {name} {value}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vectors", required=True)
    p.add_argument("--items", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=1_000)
    p.add_argument("--seconds", type=float, default=60.0)
    a = p.parse_args()
    rows = np.fromfile(a.vectors, dtype="<f4").reshape(-1, DIMS)
    assert len(rows) >= a.items + a.queries, f"{a.vectors} has {len(rows)} rows"
    items, queries = rows[:a.items], rows[a.items:a.items + a.queries]

    def embed(texts):
        out = []
        for t in texts:
            kind, n = t.split(" ", 1)
            out.append((items if kind == "item" else queries)[int(n)].tolist())
        return out

    store = InMemoryStore(index={"dims": DIMS, "embed": embed, "fields": ["text"]})
    start = time.perf_counter()
    for i in range(a.items):
        store.put(("bench", f"u{i % 7}"), f"k{i}", {"text": f"item {i}", "cat": i % 10})
    put_s = time.perf_counter() - start
    print(f"{a.items} puts in {put_s:.2f} s")
    result("lg_memory_put_per_s", a.items / put_s)

    found = []
    start = time.perf_counter()
    for j in range(a.queries):
        hits = store.search(("bench",), query=f"query {j}", filter={"cat": j % 10}, limit=10)
        found.append([h.key for h in hits])
        if time.perf_counter() - start > a.seconds:
            break
    search_s = time.perf_counter() - start
    done = len(found)
    print(f"{done} filtered top-10 searches in {search_s:.2f} s")
    result("lg_memory_search_per_s", done / search_s)

    cats = np.arange(a.items) % 10
    recall = 0.0
    for j, got in enumerate(found):
        scores = items @ queries[j]
        scores[cats != j % 10] = -np.inf
        truth = {f"k{i}" for i in np.argsort(-scores)[:10]}
        recall += len(truth & set(got)) / 10
    result("lg_memory_recall_at_10", recall / max(done, 1))


if __name__ == "__main__":
    sys.exit(main())
