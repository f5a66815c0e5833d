"""Threads across forks and run options, through the real `langgraph-sdk`
client: history without duplicates, newest first, across two forks;
`before` as a checkpoint id; a fork's session never shown as a thread;
an interrupt kept through update_state and copy; the run options the server does not honour refused, naming them.

Usage: python sdk_threads.py URL

The SDK's own calls (and its `http` client for a field it has no
parameter for). Prints one JSON line of what it saw, which the Rust test
checks.
"""

import json
import sys

import httpx

from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import ConflictError, NotFoundError, UnprocessableEntityError

client = get_sync_client(url=sys.argv[1])
seen = {}


def refused(call):
    """The status, the field and the message of a refused call."""
    try:
        call()
    except (
        UnprocessableEntityError,
        ConflictError,
        NotFoundError,
        httpx.HTTPStatusError,
    ) as e:
        body = e.response.json()
        return [e.response.status_code, body.get("field"), body.get("message")]
    raise AssertionError("the call was not refused")


def ids(history):
    return [h["checkpoint"]["checkpoint_id"] for h in history]


# History across two forks: at the head, then at an earlier checkpoint.
t = client.threads.create()["thread_id"]
client.runs.wait(t, "ticket", input={"log": ["a"]})
client.runs.wait(t, "ticket", command={"resume": {"approve": True}})
before_forks = client.threads.get_history(t, limit=100)
cp1 = before_forks[-2]["checkpoint"]["checkpoint_id"]
client.threads.update_state(t, {"log": ["edited"]})
client.threads.update_state(t, {"log": ["f"]}, checkpoint_id=cp1)
history = client.threads.get_history(t, limit=100)
seen["history_len"] = [len(before_forks), len(history)]
seen["history_unique"] = len(set(ids(history))) == len(history)
times = [h["created_at"] for h in history]
seen["history_newest_first"] = times == sorted(times, reverse=True)
seen["history_has_all_before"] = set(ids(before_forks)) <= set(ids(history))
seen["history_head"] = history[0]["values"]["log"]
seen["history_head_is_state"] = (
    history[0]["checkpoint"]["checkpoint_id"]
    == client.threads.get_state(t)["checkpoint"]["checkpoint_id"]
)

# `before`: a checkpoint id, as the SDK's `str | Checkpoint` allows.
by_id = client.threads.get_history(t, limit=100, before=history[1]["checkpoint"]["checkpoint_id"])
by_object = client.threads.get_history(t, limit=100, before=history[1]["checkpoint"])
seen["before_by_id"] = ids(by_id) == ids(history)[2:]
seen["before_same"] = ids(by_id) == ids(by_object)
seen["before_unknown"] = refused(
    lambda: client.threads.get_history(t, before="0.no-such-session")
)[:2]

# A run from a checkpoint forks the thread; the fork's session is no
# thread, and what the server says names the thread only.
t = client.threads.create()["thread_id"]
client.runs.wait(t, "ticket", input={"log": ["x"]})
first = client.threads.get_history(t, limit=100)[-1]["checkpoint"]["checkpoint_id"]
client.runs.wait(t, "ticket", input={"log": ["y"]}, checkpoint_id=first)
fork = client.threads.get_state(t)["checkpoint"]["checkpoint_id"].split(".", 1)[1]
seen["fork_is_new_session"] = fork != t
busy = refused(lambda: client.runs.wait(t, "ticket", input={"log": ["z"]}))
seen["paused_input"] = busy[0]
seen["paused_message_names_fork"] = fork in busy[2]
seen["fork_get"] = refused(lambda: client.threads.get(fork))[0]
seen["fork_delete"] = refused(lambda: client.threads.delete(fork))[0]
seen["fork_run"] = refused(
    lambda: client.runs.wait(fork, "ticket", input={"log": ["w"]})
)[0]
seen["fork_listed"] = any(
    x["thread_id"] == fork for x in client.threads.search(limit=1000)
)
seen["thread_after"] = client.threads.get(t)["status"]

# A thread waiting on an interrupt still waits on it after update_state
# and in a copy; `command.resume` answers it on the updated state.
w = client.threads.create()["thread_id"]
client.runs.wait(w, "ticket", input={"log": ["w"]})
asked = [i["id"] for i in client.threads.get_state(w)["interrupts"]]
client.threads.update_state(w, {"log": ["edited while waiting"]})
after = client.threads.get_state(w)
seen["waiting_after_update"] = [
    client.threads.get(w)["status"],
    after["next"],
    [i["id"] for i in after["interrupts"]] == asked,
]
copied = client.threads.copy(w)["thread_id"]
in_copy = client.threads.get_state(copied)
seen["waiting_in_copy"] = [
    client.threads.get(copied)["status"],
    [i["id"] for i in in_copy["interrupts"]] == asked,
]
seen["answered_after_update"] = client.runs.wait(
    w, "ticket", command={"resume": {"approve": True}}
)["log"]
seen["answered_in_copy"] = client.runs.wait(
    copied, "ticket", command={"resume": {"approve": False}}
)["decision"]

# Run options not honoured: refused, naming them.
t = client.threads.create()["thread_id"]
seen["options_refused"] = [
    refused(lambda: client.runs.wait(t, "ticks", input={"limit": 3}, config={"recursion_limit": 1}))[:2],
    refused(lambda: client.runs.wait(t, "ticks", input={"limit": 3}, config={"configurable": {"user": "u"}}))[:2],
    refused(lambda: client.runs.wait(t, "ticks", input={"limit": 3}, context={"user": "u"}))[:2],
    refused(lambda: client.runs.wait(t, "ticks", input={"limit": 3}, durability="exit"))[:2],
    refused(lambda: client.runs.wait(t, "ticks", input={"limit": 3}, strict_resume=False))[:2],
    refused(lambda: list(client.runs.stream(t, "ticks", input={"limit": 3}, feedback_keys=["k"])))[:2],
    refused(lambda: client.http.post(f"/threads/{t}/runs/wait", json={"assistant_id": "ticks", "input": {"limit": 3}, "surprise": 1}))[:2],
]
seen["no_run_started"] = client.runs.list(t)
# What asks for nothing, or is honoured, is taken.
seen["options_taken"] = client.runs.wait(
    t,
    "ticks",
    input={"limit": 2},
    config={"configurable": {}},
    durability="sync",
    checkpoint_during=True,
    strict_resume=True,
)
seen["unknown_null_taken"] = client.http.post(
    f"/threads/{t}/runs/wait",
    json={"assistant_id": "ticks", "input": {"limit": 3}, "surprise": None},
)
print(json.dumps(seen))
