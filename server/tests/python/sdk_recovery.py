"""A server killed (SIGKILL) in the middle of two runs, then started again:
the threads are usable once their leases end. Driven by
tests/it/replicas.rs: prints `{"stage": "started"}` once both runs are
created, then reads the new server's URL from stdin."""

import json
import sys
import time

from langgraph_sdk import get_sync_client


def out(d):
    print(json.dumps(d), flush=True)


c = get_sync_client(url=sys.argv[1])
t1 = c.threads.create()["thread_id"]
t2 = c.threads.create()["thread_id"]
c.runs.create(t1, "steps", input={})
c.runs.create(t2, "steps", input={})
out({"stage": "started"})

c = get_sync_client(url=sys.stdin.readline().strip())
seen = {}
# Until the dead process's lease ends (1 s), the threads are busy.
deadline = time.time() + 30
while time.time() < deadline and c.threads.get(t1)["status"] == "busy":
    time.sleep(0.05)
seen["status_unfinished"] = c.threads.get(t1)["status"]
seen["next_unfinished"] = c.threads.get_state(t1)["next"]
seen["values_unfinished"] = c.threads.get_state(t2)["values"]

# No input: the unfinished run goes on from its last checkpoint.
seen["continued"] = c.runs.wait(t1, "steps")
seen["continued_runs"] = [r["status"] for r in c.runs.list(t1)]
seen["continued_status"] = c.threads.get(t1)["status"]
# An input: the unfinished rest is left; a run from the last checkpoint.
seen["restarted"] = c.runs.wait(t2, "steps", input={"trail": ["again"]})
seen["restarted_status"] = c.threads.get(t2)["status"]
history = c.threads.get_history(t2, limit=100)
ids = [h["checkpoint"]["checkpoint_id"] for h in history]
seen["restarted_history_unique"] = len(ids) == len(set(ids))
seen["restarted_history_head"] = history[0]["values"]["trail"]
# And the thread goes on as any other.
seen["again"] = c.runs.wait(t1, "steps", input={"trail": ["more"]})
out(seen)
