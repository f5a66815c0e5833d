"""One server on a sled store, stopped (SIGINT) while a run is under way
and two more wait behind it on the same thread (`enqueue`), then started
again on the same store: every run finishes there. Driven by
tests/it/replicas.rs: prints `{"stage": "started", …}` once the three runs
are created, then reads the new server's URL from stdin."""

import json
import sys

from langgraph_sdk import get_sync_client


def out(d):
    print(json.dumps(d), flush=True)


c = get_sync_client(url=sys.argv[1])
thread = c.threads.create()["thread_id"]
runs = [c.runs.create(thread, "steps", input={})["run_id"]]
for _ in range(2):
    run = c.runs.create(thread, "steps", input={}, multitask_strategy="enqueue")
    runs.append(run["run_id"])
out({"stage": "started", "statuses": [c.runs.get(thread, r)["status"] for r in runs]})

c = get_sync_client(url=sys.stdin.readline().strip())
seen = {"stage": "done"}
for run in runs:
    c.runs.join(thread, run)
seen["statuses"] = [c.runs.get(thread, r)["status"] for r in runs]
seen["trail"] = c.threads.get_state(thread)["values"]["trail"]
seen["thread_status"] = c.threads.get(thread)["status"]
out(seen)
