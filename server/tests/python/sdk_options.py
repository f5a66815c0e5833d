"""Run options through the real `langgraph-sdk` client: delayed runs
(`after_seconds`), `Command(update=...)`, and the `messages` stream mode.

Usage: python sdk_options.py URL

The SDK's own calls only: no hand-written HTTP. Prints one JSON line of
what it saw, which the Rust test checks.
"""

import json
import sys
import time

import httpx

from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import ConflictError, UnprocessableEntityError

client = get_sync_client(url=sys.argv[1])
seen = {}


def refused(call):
    """The status and the field named by a refused call."""
    try:
        call()
    except (UnprocessableEntityError, ConflictError, httpx.HTTPStatusError) as e:
        # `runs.wait` raises httpx's own error, the other calls the SDK's.
        status = e.response.status_code
        return [status, e.response.json()["field"] if status == 422 else None]
    raise AssertionError("the call was not refused")


# after_seconds: the run waits, pending, then runs.
thread = client.threads.create()["thread_id"]
began = time.monotonic()
# Three seconds, so that a busy machine's stall does not let it start
# before it is looked at.
run = client.runs.create(thread, "ticks", input={"limit": 1}, after_seconds=3)
seen["delayed_created"] = run["status"]
time.sleep(0.4)
seen["delayed_before"] = client.runs.get(thread, run["run_id"])["status"]
seen["delayed_state_before"] = client.threads.get_state(thread)["values"]
seen["delayed_joined"] = client.runs.join(thread, run["run_id"])
seen["delayed_waited"] = time.monotonic() - began >= 3.0
seen["delayed_after"] = client.runs.get(thread, run["run_id"])["status"]

# A delayed run cancelled before its time never runs.
thread = client.threads.create()["thread_id"]
began = time.monotonic()
run = client.runs.create(thread, "ticks", input={"limit": 1}, after_seconds=30)
client.runs.cancel(thread, run["run_id"], wait=True)
seen["cancelled_quickly"] = time.monotonic() - began < 10
seen["cancelled_status"] = client.runs.get(thread, run["run_id"])["status"]
seen["cancelled_state"] = client.threads.get_state(thread)["values"]
# The thread is free again: a run goes through at once.
seen["after_cancel"] = client.runs.wait(thread, "ticks", input={"limit": 2})

# Bad delays, each named.
seen["bad_delays"] = [
    refused(lambda s=s: client.runs.create(thread, "ticks", input={"limit": 1}, after_seconds=s))
    for s in [-1, "soon", 10**12]
]

# command.update alone: merged into the state, then the run goes on.
thread = client.threads.create()["thread_id"]
seen["update_before"] = client.runs.wait(thread, "ticks", input={"limit": 2})
seen["update_object"] = client.runs.wait(thread, "ticks", command={"update": {"limit": 4}})
seen["update_pairs"] = client.runs.wait(thread, "ticks", command={"update": [["limit", 5]]})
seen["update_history_max"] = max(
    (c["values"].get("ticks", 0) for c in client.threads.get_history(thread, limit=100)),
    default=0,
)
# Wrongly shaped updates, each named.
seen["bad_updates"] = [
    refused(lambda u=u: client.runs.wait(thread, "ticks", command={"update": u}))
    for u in ["limit", {"limit": "many"}, {"nope": 1}, [["limit"]], [[1, 2]]]
]

# A thread that waits for an answer: an update alone does not skip it;
# with the answer, it is merged as the interrupt is answered (a wrongly
# shaped one is refused, and the interrupt still waits).
thread = client.threads.create()["thread_id"]
client.runs.wait(thread, "ticket", input={"log": ["hello"]})
seen["update_while_paused"] = refused(
    lambda: client.runs.wait(thread, "ticket", command={"update": {"log": ["note"]}})
)
seen["bad_update_with_resume"] = refused(
    lambda: client.runs.wait(
        thread, "ticket", command={"update": {"nope": 1}, "resume": {"approve": True}}
    )
)
seen["still_waiting"] = [
    i["value"]["question"] for i in client.threads.get_state(thread)["interrupts"]
]
seen["update_with_resume"] = client.runs.wait(
    thread, "ticket", command={"update": {"log": ["note"]}, "resume": {"approve": True}}
)

# Breakpoints: a run pauses before (or after) the steps named, with no
# interrupt of a step to show; a run with no input goes on from there.
thread = client.threads.create()["thread_id"]
out = client.runs.wait(thread, "ticket", input={"log": ["bp"]}, interrupt_before=["review"])
state = client.threads.get_state(thread)
seen["before_review"] = {
    "log": out["log"],
    "interrupt_shown": "__interrupt__" in out,
    "next": state["next"],
    "interrupts": state["interrupts"],
    "status": client.threads.get(thread)["status"],
}
out = client.runs.wait(thread, "ticket", input=None)
seen["past_before"] = [i["value"]["question"] for i in out.get("__interrupt__", [])]
thread = client.threads.create()["thread_id"]
out = client.runs.wait(thread, "ticket", input={"log": ["all"]}, interrupt_before="*")
seen["before_all_next"] = client.threads.get_state(thread)["next"]
seen["before_all_log"] = out["log"]
thread = client.threads.create()["thread_id"]
client.runs.wait(thread, "ticket", input={"log": ["after"]}, interrupt_after=["draft"])
seen["after_draft_next"] = client.threads.get_state(thread)["next"]
# Going on with Command(resume=…) works as well; the review then asks.
out = client.runs.wait(thread, "ticket", command={"resume": "go on"})
seen["past_after"] = [i["value"]["question"] for i in out.get("__interrupt__", [])]
out = client.runs.wait(thread, "ticket", command={"resume": {"approve": True}})
seen["after_done"] = out["log"]

# The `messages` stream mode: metadata once, the message so far at each
# token, the whole message at the end of its step.
parts = list(client.runs.stream(None, "chat", input={"messages": ["hi"]}, stream_mode="messages"))
seen["messages_events"] = [p.event for p in parts]
partial = [p.data for p in parts if p.event == "messages/partial"]
seen["messages_partial"] = [m[0]["content"] for m in partial]
seen["messages_complete"] = [
    m["content"] for p in parts if p.event == "messages/complete" for m in p.data
]
meta = [p.data for p in parts if p.event == "messages/metadata"]
ids = {m[0]["id"] for m in partial}
seen["messages_one_id"] = len(ids) == 1 and list(meta[0]) == list(ids)
seen["messages_node"] = next(iter(meta[0].values()))["metadata"]["langgraph_node"]
# Both token modes at once.
parts = list(
    client.runs.stream(
        None, "chat", input={"messages": ["hi"]}, stream_mode=["messages", "messages-tuple"]
    )
)
seen["both_modes"] = sorted({p.event for p in parts})

print(json.dumps(seen))
