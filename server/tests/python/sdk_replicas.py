"""The real `langgraph-sdk` client, unmodified, against two harness-server
replicas sharing one PostgreSQL (the `replica` example).

Usage: python sdk_replicas.py URL_A URL_B URL_C

1. Across replicas: a run on A makes the thread busy for B (`reject` is
   refused there), B queues one (`enqueue`), B cancels A's run, and the
   queued run then runs; either replica sees both runs settle.
   C, which runs none of them, follows the thread's event stream to both
   runs' ends and lists them with `/runs/search` (the Agent Protocol's;
   these two calls are plain HTTP, as the SDK has none for them).
   A run on A is interrupted by one B starts (`interrupt`), and another is
   rolled back by one B starts (`rollback`).
2. Handing over: a run on C, joined from B; the Rust test stops C (SIGINT)
   mid-step; C stops the run at the step's end and releases it, and B
   goes on with the next step at once (no step run twice). A client joined
   on C sees its stream end with an `error` event, `ServerStopping`.
3. Failover: a run on A, joined from B; the Rust test kills A with SIGKILL
   mid-run once this script says it has joined. The joined stream must end
   with the run's outcome, which B finishes.

Prints one JSON line per stage (`stage`), which the Rust test reads as they
come; the last line is everything it saw.
"""

import json
import sys
import threading
import time
import urllib.request

from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import ConflictError

a = get_sync_client(url=sys.argv[1])
b = get_sync_client(url=sys.argv[2])
c = get_sync_client(url=sys.argv[3])
seen = {}


def say(stage, **fields):
    print(json.dumps({"stage": stage, **fields}), flush=True)


def thread_events(url, thread, runs, connected, out):
    """Reads the streaming protocol's events of `thread` on `url` (`POST
    /threads/{id}/stream`, which the SDK has no call for) into `out` until
    `runs` runs have ended there, or 30 s have passed."""
    body = json.dumps({"channels": ["updates", "lifecycle"]}).encode()
    request = urllib.request.Request(f"{url}/threads/{thread}/stream", data=body,
                                     headers={"content-type": "application/json"})
    deadline = time.monotonic() + 30
    with urllib.request.urlopen(request, timeout=30) as response:
        connected.set()
        ended = 0
        for raw in response:
            if time.monotonic() > deadline:
                return
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            event = json.loads(line[len("data:"):])
            out.append(event)
            if event["method"] == "lifecycle" and event["params"]["data"]["event"] != "running":
                ended += 1
                if ended == runs:
                    return


# ---- 1. one thread, runs on both replicas ----
thread = a.threads.create()["thread_id"]
# C follows the thread's events, though A and B run its runs.
on_c, connected = [], threading.Event()
following = threading.Thread(target=thread_events, args=(sys.argv[3], thread, 2, connected, on_c))
following.start()
connected.wait(30)
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
following.join(40)
seen["c_stream_ended"] = [[e["params"]["data"]["run_id"], e["params"]["data"]["event"]]
                          for e in on_c if e["method"] == "lifecycle"
                          and e["params"]["data"]["event"] != "running"]
seen["c_stream_updated"] = [k for e in on_c if e["method"] == "updates" for k in e["params"]["data"]]
seen["first_run"], seen["queued_run"] = first["run_id"], queued["run_id"]


def search_runs(url, **body):
    """The Agent Protocol's `POST /runs/search`, which the LangGraph SDK
    has no call for."""
    request = urllib.request.Request(url + "/runs/search", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request) as response:
        return json.load(response)


# C never saw this thread: it lists the runs A and B ran from the store.
found = search_runs(sys.argv[3], thread_id=thread)
seen["searched_on_c"] = {r["run_id"]: r["status"] for r in found}
seen["searched_first"] = seen["searched_on_c"].get(first["run_id"])
seen["searched_queued"] = seen["searched_on_c"].get(queued["run_id"])
found = search_runs(sys.argv[3], limit=1000)
seen["searched_all_on_c"] = sorted(r["run_id"] for r in found if r["run_id"] in seen["runs_created"])

# `interrupt`: B's run stops A's at a step boundary, then runs.
thread = a.threads.create()["thread_id"]
stopped = a.runs.create(thread, "steps", input={"trail": []})
time.sleep(0.3)
taking = b.runs.create(thread, "steps", input={}, multitask_strategy="interrupt")
b.runs.join(thread, taking["run_id"])
seen["interrupted_status"] = b.runs.get(thread, stopped["run_id"])["status"]
seen["interrupting_status"] = a.runs.get(thread, taking["run_id"])["status"]
seen["trail_interrupt"] = a.threads.get_state(thread)["values"]["trail"]

# `rollback`: B's run stops A's, takes the thread back to before it, and
# the rolled-back run is gone.
thread = a.threads.create()["thread_id"]
rolled = a.runs.create(thread, "steps", input={"trail": []})
time.sleep(0.3)
rolling = b.runs.create(thread, "steps", input={}, multitask_strategy="rollback")
a.runs.join(thread, rolling["run_id"])
seen["rollback_listed"] = [r["run_id"] for r in b.runs.list(thread)]
seen["rollback_run"] = rolling["run_id"]
seen["trail_rollback"] = b.threads.get_state(thread)["values"]["trail"]

# Deleting a thread on B cancels its run on A.
thread = a.threads.create()["thread_id"]
doomed = a.runs.create(thread, "steps", input={"trail": []})
time.sleep(0.3)
b.threads.delete(thread)
a.runs.join(thread, doomed["run_id"])
seen["deleted_thread_run"] = a.runs.get(thread, doomed["run_id"])["status"]
say("shared", **seen)


def joined(client, stage, thread, run_id):
    """Joins the run's stream on `client`; what it saw."""
    events, updated, last = [], [], None
    for part in client.runs.join_stream(thread, run_id, stream_mode=["values", "updates"]):
        if not events:
            say(stage, thread=thread, run=run_id)
        events.append(part.event)
        if part.event == "updates":
            updated.extend(part.data.keys())
        if part.event == "values":
            last = part.data
    return events, updated, last


# ---- 2. handing over: C stops; B goes on with C's run ----
thread = c.threads.create()["thread_id"]
run = c.runs.create(thread, "steps", input={"trail": []})
# Queued on C behind it: not started when C stops, released at once.
behind = c.runs.create(thread, "steps", input={}, multitask_strategy="enqueue")
# A client joined on C itself: its stream ends with an event that says C
# handed the run over (after which it would join elsewhere).
on_c, following_c = {}, threading.Event()


def follow_c():
    parts = []
    try:
        for part in c.runs.join_stream(thread, run["run_id"], stream_mode=["updates"]):
            parts.append(part)
            following_c.set()
    except Exception as e:  # noqa: BLE001 - recorded for the Rust test
        on_c["raised"] = repr(e)
    following_c.set()
    if parts:
        on_c["last_event"] = parts[-1].event
        data = parts[-1].data
        on_c["last_error"] = data.get("error") if isinstance(data, dict) else None


c_follower = threading.Thread(target=follow_c)
c_follower.start()
following_c.wait(timeout=60)
events, updated, last = joined(b, "joined-c", thread, run["run_id"])
c_follower.join(timeout=60)
seen["handover_on_c"] = on_c
seen["handover_updated"] = updated
seen["handover_last"] = last
seen["handover_status"] = b.runs.get(thread, run["run_id"])["status"]
b.runs.join(thread, behind["run_id"])
seen["handover_queued_status"] = a.runs.get(thread, behind["run_id"])["status"]
seen["handover_trail"] = b.threads.get_state(thread)["values"]["trail"]
say("handed-over", **seen)

# ---- 3. failover: A is killed mid-run; B finishes the run ----
thread = a.threads.create()["thread_id"]
run = a.runs.create(thread, "steps", input={"trail": []})
seen["failover_thread"] = thread
seen["failover_run"] = run["run_id"]
events, updated, last_values = joined(b, "joined", thread, run["run_id"])
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
