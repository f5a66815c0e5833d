"""The load generator of `benchmarks/scripts/bench-server`: streaming
clients on the real `langgraph-sdk` async client, unmodified, driving one
server (harness-server or LangGraph's own) the same way.

    python load.py --url URL --assistant bench --clients N --warmup S --duration S --out FILE

Each client is an application of its own: its own `get_client(url=...)`
(so its own connection pool: the SDK's shared pool would cap the process at
httpx's 100 connections), its own thread (`threads.create`), and a loop of
`runs.stream(thread, assistant, input={"input": "go", "steps": 0},
stream_mode="values")` runs, one after another, each read to its end; a
run whose last `values` event does not say `steps == 3`, or that ends with
an `error` event, counts as an error. A run's latency is the time from the
call to the end of its stream, as the client sees it.

The process first makes its clients and their threads, prints `ready`,
and waits for a line on its standard input (so that every generator
process starts together); then it runs for `--warmup` seconds, then for
`--duration` seconds (the window), and stops starting runs at the window's
end. Only the runs that end inside the window count. It writes one JSON
object to `--out`: the window's runs (their latencies, in seconds), its
errors (the first few messages), how many runs it made in all (warm-up
and the runs that ended after the window included), and its own CPU time over the window (to
tell when the generator, not the server, is the bottleneck). It runs on
uvloop where uvloop is installed, to spend less of the machine itself.
"""

import argparse
import asyncio
import json
import sys
import time

from langgraph_sdk import get_client

INPUT = {"input": "go", "steps": 0}


async def one_client(url, assistant, ready, go, window, record, errors, total):
    client = get_client(url=url, api_key=None)
    try:
        thread = await client.threads.create()
        tid = thread["thread_id"]
        ready()
        await go.wait()
        start, end = window
        while time.monotonic() < end:
            t0 = time.monotonic()
            last = None
            failure = None
            try:
                async for part in client.runs.stream(tid, assistant, input=INPUT, stream_mode="values"):
                    if part.event == "values":
                        last = part.data
                    elif part.event == "error":
                        failure = f"error event: {part.data}"
            except Exception as e:  # a failed run is counted, and the loop goes on
                failure = f"{type(e).__name__}: {e}"
            t1 = time.monotonic()
            total[0] += 1
            if failure is None and (not isinstance(last, dict) or last.get("steps") != 3):
                failure = f"the run ended with {last!r}, not steps == 3"
            if start <= t1 <= end:
                if failure is None:
                    record.append(t1 - t0)
                else:
                    errors.append(failure)
            elif failure is not None and t1 < start:
                errors.append(f"(warm-up) {failure}")
    finally:
        await client.aclose()


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--assistant", default="bench")
    p.add_argument("--clients", type=int, required=True)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()

    go = asyncio.Event()
    n_ready = 0
    all_ready = asyncio.Event()

    def ready():
        nonlocal n_ready
        n_ready += 1
        if n_ready == a.clients:
            all_ready.set()

    window = [0.0, 0.0]
    record, errors, total = [], [], [0]
    tasks = [
        asyncio.create_task(one_client(a.url, a.assistant, ready, go, window, record, errors, total))
        for _ in range(a.clients)
    ]
    waiting = asyncio.create_task(all_ready.wait())
    done, _ = await asyncio.wait([waiting, *tasks], return_when=asyncio.FIRST_COMPLETED)
    if waiting not in done:
        for t in done:
            t.result()  # a client failed to set up: raise it
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    now = time.monotonic()
    window[0] = now + a.warmup
    window[1] = window[0] + a.duration
    go.set()
    await asyncio.sleep(max(0.0, window[0] - time.monotonic()))
    cpu0 = time.process_time()
    await asyncio.sleep(max(0.0, window[1] - time.monotonic()))
    cpu1 = time.process_time()
    await asyncio.gather(*tasks)
    with open(a.out, "w") as f:
        json.dump(
            {
                "clients": a.clients,
                "window_s": a.duration,
                "latencies_s": record,
                "errors": len([e for e in errors if not e.startswith("(warm-up)")]),
                "warmup_errors": len([e for e in errors if e.startswith("(warm-up)")]),
                "error_samples": errors[:5],
                "cpu_s": cpu1 - cpu0,
                "all_runs": total[0],
            },
            f,
        )


if __name__ == "__main__":
    try:  # the cheaper event loop where it is installed (langgraph-api brings it)
        import uvloop
    except ImportError:
        uvloop = None
    (uvloop.run if uvloop else asyncio.run)(main())
