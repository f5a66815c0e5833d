"""The real `langgraph-sdk` client, unmodified, against two harness-server
replicas sharing one PostgreSQL (the `replica` example).

Usage: python sdk_replicas.py URL_A URL_B

1. Across replicas: a run on A makes the thread busy for B (`reject` is
   refused there), B queues one (`enqueue`), B cancels A's run, and the
   queued run then runs; either replica sees both runs settle.
2. Failover: a run on A, joined from B; the Rust test kills A with SIGKILL
   mid-run once this script says it has joined. The joined stream must end
   with the run's outcome, which B finishes.

Prints one JSON line per stage (`stage`), which the Rust test reads as they
come; the last line is everything it saw.
"""

import json
import sys

from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import ConflictError

a = get_sync_client(url=sys.argv[1])
b = get_sync_client(url=sys.argv[2])
seen = {}


def say(stage, **fields):
    print(json.dumps({"stage": stage, **fields}), flush=True)


# ---- 1. one thread, runs on both replicas ----
thread = a.threads.create()["thread_id"]
first = a.runs.create(thread, "steps", input={"trail": []})
try:
    b.runs.create(thread, "steps", input={}, multitask_strategy="reject")
    seen["reject"] = "accepted"
except ConflictError:
    seen["reject"] = 409
queued = b.runs.create(thread, "steps", input={}, multitask_strategy="enqueue")
seen["queued_status"] = b.runs.get(thread, queued["run_id"])["status"]
# B cancels the run A runs, and waits for it to stop.
b.runs.cancel(thread, first["run_id"], wait=True)
seen["cancelled_on_a"] = a.runs.get(thread, first["run_id"])["status"]
seen["cancelled_on_b"] = b.runs.get(thread, first["run_id"])["status"]
# The queued run (B's) is joined from A.
a.runs.join(thread, queued["run_id"])
seen["queued_on_a"] = a.runs.get(thread, queued["run_id"])["status"]
seen["trail_1"] = b.threads.get_state(thread)["values"]["trail"]
seen["runs_listed_on_a"] = sorted(r["run_id"] for r in a.runs.list(thread))
seen["runs_created"] = sorted([first["run_id"], queued["run_id"]])
say("shared", **seen)

# ---- 2. failover: A is killed mid-run; B finishes the run ----
thread = a.threads.create()["thread_id"]
run = a.runs.create(thread, "steps", input={"trail": []})
seen["failover_thread"] = thread
seen["failover_run"] = run["run_id"]
events = []
updated = []
last_values = None
for part in b.runs.join_stream(thread, run["run_id"], stream_mode=["values", "updates"]):
    if not events:
        say("joined", thread=thread, run=run["run_id"])
    events.append(part.event)
    if part.event == "updates":
        updated.extend(part.data.keys())
    if part.event == "values":
        last_values = part.data
seen["events"] = events
seen["updated"] = updated
seen["last_values"] = last_values
seen["failover_status"] = b.runs.get(thread, run["run_id"])["status"]
seen["failover_state"] = b.threads.get_state(thread)["values"]
history = b.threads.get_history(thread, limit=50)
# Each checkpoint names the step that wrote it, newest first.
seen["history_steps"] = [k for h in reversed(history) for k in (h["metadata"].get("writes") or {})]
seen["history_len"] = len(history)
say("done", **seen)
