"""The real `langgraph-sdk` client, unmodified, against harness-server.

Usage: python sdk_flow.py URL

Drives the `ticket` agent (draft -> review, which asks a human), the
`ticks` agent (a counter ticking every 50 ms up to `limit`) and the `chat`
agent (one step whose model streams "Hello there" in pieces) through the
SDK's own calls only: no hand-written HTTP. Asserts as it goes and prints
one JSON line of what it saw, which the Rust test checks again.
"""

import json
import sys
import time

import httpx

from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import ConflictError, NotFoundError, UnprocessableEntityError
from langgraph_sdk.schema import Command

client = get_sync_client(url=sys.argv[1])
seen = {}

# Assistants: one per registered agent, with the loop's graph and schemas.
assistants = client.assistants.search()
seen["assistants"] = sorted(a["assistant_id"] for a in assistants)
assert seen["assistants"] == ["chat", "ticket", "ticks"], seen["assistants"]
ticket = client.assistants.get("ticket")
assert ticket["graph_id"] == "ticket"
graph = client.assistants.get_graph("ticket")
seen["graph_nodes"] = sorted(n["id"] for n in graph["nodes"])
seen["graph_edges"] = sorted((e["source"], e["target"]) for e in graph["edges"])
schemas = client.assistants.get_schemas("ticket")
seen["state_fields"] = sorted(schemas["state_schema"]["properties"])
seen["input_fields"] = sorted(schemas["input_schema"]["properties"])
try:
    client.assistants.get("nobody")
    raise AssertionError("an unknown assistant was found")
except NotFoundError:
    seen["unknown_assistant"] = 404

# A thread, and a run streamed in two modes at once, up to the interrupt.
thread = client.threads.create(metadata={"user": "ada"})
tid = thread["thread_id"]
assert thread["status"] == "idle", thread
parts = list(
    client.runs.stream(
        tid,
        "ticket",
        input={"log": ["hello"]},
        stream_mode=["values", "updates", "custom"],
    )
)
seen["first_event"] = parts[0].event
seen["events"] = [p.event for p in parts]
ids = [int(p.id) for p in parts]
seen["ids_increase"] = ids == sorted(ids) and len(set(ids)) == len(ids)
assert parts[0].event == "metadata" and "run_id" in parts[0].data, parts[0]
values = [p.data for p in parts if p.event == "values"]
updates = [p.data for p in parts if p.event == "updates"]
custom = [p.data for p in parts if p.event == "custom"]
assert values[0]["log"] == ["hello"], values[0]
assert values[1]["log"] == ["hello", "draft 1"] and values[1]["drafts"] == 1, values[1]
seen["updates"] = [sorted(u) for u in updates]
# Only the fields the step wrote.
assert updates[0] == {"draft": {"log": ["draft 1"], "drafts": 1}}, updates[0]
interrupt = updates[-1]["__interrupt__"][0]
assert interrupt["value"] == {"question": "approve this draft?", "drafts": 1}, interrupt
assert values[-1]["__interrupt__"][0]["id"] == interrupt["id"]
seen["custom"] = custom
assert custom == [{"kind": "progress", "step": "draft", "payload": {"drafted": 1}}], custom

# The thread waits for an answer: its status, its state's interrupt.
thread = client.threads.get(tid)
seen["status_paused"] = thread["status"]
assert thread["metadata"] == {"user": "ada"}, thread["metadata"]
state = client.threads.get_state(tid)
seen["paused_next"] = state["next"]
assert state["interrupts"][0]["id"] == interrupt["id"], state
assert state["values"]["log"] == ["hello", "draft 1"], state["values"]

# A new input while the thread waits is refused.
try:
    client.runs.wait(tid, "ticket", input={"log": ["again"]})
    raise AssertionError("a new input on an interrupted thread was accepted")
except httpx.HTTPStatusError as e:
    # `wait` reads its response with httpx's own check, not the SDK's
    # typed errors.
    seen["input_while_paused"] = e.response.status_code

# An answer of the wrong shape fails that run and leaves the interrupt.
try:
    client.runs.wait(tid, "ticket", command=Command(resume="yes please"))
    raise AssertionError("an answer of the wrong shape was accepted")
except httpx.HTTPStatusError as e:
    seen["bad_resume"] = [e.response.status_code, e.response.json()["field"]]
# Streamed, the same mistake is an `error` event.
parts = list(client.runs.stream(tid, "ticket", command=Command(resume=[1, 2])))
seen["bad_resume_stream"] = [p.event for p in parts]
assert parts[-1].data["error"] == "AnswerRejected", parts[-1]
# ... after the state with the interrupt, still pending.
assert parts[-2].data["__interrupt__"][0]["id"] == interrupt["id"], parts[-2]
state = client.threads.get_state(tid)
assert state["interrupts"][0]["id"] == interrupt["id"], state

# The right answer, by interrupt id, streamed.
parts = list(
    client.runs.stream(
        tid,
        "ticket",
        command=Command(resume={interrupt["id"]: {"approve": True}}),
        stream_mode="updates",
    )
)
seen["resume_events"] = [p.event for p in parts]
final = [p.data for p in parts if p.event == "updates"][-1]
assert final["review"]["decision"] == "approved", final
state = client.threads.get_state(tid)
seen["final_values"] = state["values"]
assert state["next"] == [] and state["interrupts"] == [], state
seen["status_done"] = client.threads.get(tid)["status"]

# History: newest first, each with its checkpoint; a state at a checkpoint.
history = client.threads.get_history(tid, limit=20)
seen["history_steps"] = [h["metadata"]["step"] for h in history]
seen["history_logs"] = [h["values"]["log"] for h in history]
first_draft = next(h for h in history if h["values"]["log"] == ["hello", "draft 1"])
old = client.threads.get_state(tid, checkpoint_id=first_draft["checkpoint"]["checkpoint_id"])
assert old["values"]["log"] == ["hello", "draft 1"], old

# update_state: a fork at that checkpoint, with the values merged in.
update = client.threads.update_state(
    tid, {"log": ["edited"]}, checkpoint_id=first_draft["checkpoint"]["checkpoint_id"]
)
state = client.threads.get_state(tid)
seen["forked_log"] = state["values"]["log"]
assert state["checkpoint"]["checkpoint_id"] == update["checkpoint"]["checkpoint_id"]
forked_history = client.threads.get_history(tid, limit=50)
seen["forked_history_len"] = len(forked_history)
try:
    client.threads.update_state(tid, {"log": 3})
    raise AssertionError("a value of the wrong type was merged")
except UnprocessableEntityError as e:
    seen["bad_update_field"] = e.body["field"]

# Background run, then join.
tthread = client.threads.create()
ttid = tthread["thread_id"]
run = client.runs.create(ttid, "ticks", input={"limit": 3})
assert run["status"] in ("pending", "running"), run
joined = client.runs.join(ttid, run["run_id"])
seen["joined"] = joined
got = client.runs.get(ttid, run["run_id"])
seen["background_status"] = got["status"]

# Cancel: a long run stopped at its next step boundary.
long = client.runs.create(ttid, "ticks", input={"limit": 1000})
try:
    client.runs.create(ttid, "ticks", input={"limit": 1})
    raise AssertionError("a second run on a busy thread was accepted")
except ConflictError:
    seen["busy_refused"] = 409
stream = client.runs.join_stream(ttid, long["run_id"], stream_mode="values")
first = None
for part in stream:
    if part.event == "values" and part.data.get("ticks", 0) > 3:
        first = part.data
        break
client.runs.cancel(ttid, long["run_id"], wait=True)
cancelled = client.runs.get(ttid, long["run_id"])
seen["cancelled_status"] = cancelled["status"]
after = client.runs.join(ttid, long["run_id"])
seen["cancelled_ticks"] = after["ticks"]
assert 3 < after["ticks"] < 1000 + 3, after
runs = client.runs.list(ttid)
seen["runs_listed"] = [r["status"] for r in runs]

# Stateless run, waited for.
out = client.runs.wait(None, "ticks", input={"limit": 2})
seen["stateless"] = out

# Debug and events modes: a task and its result per step.
parts = list(
    client.runs.stream(None, "ticks", input={"limit": 1}, stream_mode=["debug", "events"])
)
seen["debug_types"] = [p.data["type"] for p in parts if p.event == "debug"]
seen["events_kinds"] = [p.data["event"] for p in parts if p.event == "events"]
assert all(p.data["payload"]["name"] == "tick" for p in parts if p.event == "debug")

# Model tokens as they stream (messages-tuple).
parts = list(
    client.runs.stream(None, "chat", input={"messages": ["hi"]}, stream_mode="messages-tuple")
)
messages = [p.data for p in parts if p.event == "messages"]
seen["tokens"] = [m[0]["content"] for m in messages]
seen["token_node"] = messages[0][1]["langgraph_node"]

# join_stream from an event id gets only what came after it.
rthread = client.threads.create()["thread_id"]
run = client.runs.create(rthread, "ticks", input={"limit": 2})
client.runs.join(rthread, run["run_id"])
whole = list(client.runs.join_stream(rthread, run["run_id"], stream_mode="values"))
later = list(
    client.runs.join_stream(
        rthread, run["run_id"], stream_mode="values", last_event_id=whole[1].id
    )
)
seen["replay"] = [[p.id for p in whole], [p.id for p in later]]
assert [p.id for p in later] == [p.id for p in whole[2:]], seen["replay"]
assert [p.data for p in later] == [p.data for p in whole[2:]]

# A resumable stream tells the SDK where to reconnect (it checks the run
# when the stream ends); joining it again without modes gets the run's own.
rs = client.threads.create()["thread_id"]
parts = list(
    client.runs.stream(rs, "ticks", input={"limit": 2}, stream_mode="updates", stream_resumable=True)
)
seen["resumable_events"] = [p.event for p in parts]
rejoined = list(client.runs.join_stream(rs, parts[0].data["run_id"]))
seen["rejoined_events"] = sorted({p.event for p in rejoined})

# A client that goes away with on_disconnect="cancel" stops its run.
dthread = client.threads.create()["thread_id"]
for part in client.runs.stream(
    dthread, "ticks", input={"limit": 1000}, stream_mode="values", on_disconnect="cancel"
):
    if part.event == "values" and part.data["ticks"] >= 2:
        break
deadline = time.monotonic() + 10
while True:
    status = client.runs.list(dthread)[0]["status"]
    if status not in ("pending", "running") or time.monotonic() > deadline:
        break
    time.sleep(0.05)
seen["disconnected_status"] = status
seen["disconnected_ticks"] = client.threads.get_state(dthread)["values"]["ticks"]

# A copy: a new thread with the same state and history.
copied = client.threads.copy(tid)
assert copied["thread_id"] != tid
seen["copy_values_equal"] = (
    client.threads.get_state(copied["thread_id"])["values"]
    == client.threads.get_state(tid)["values"]
)
seen["copy_history_len"] = len(client.threads.get_history(copied["thread_id"], limit=50))

# Double-texting: the four multitask strategies.
def wait_for_ticks(thread_id, run_id, at_least):
    for part in client.runs.join_stream(thread_id, run_id, stream_mode="values"):
        if part.event == "values" and part.data["ticks"] >= at_least:
            return


# enqueue: the second run waits for the first, then goes on from its state.
qthread = client.threads.create()["thread_id"]
r1 = client.runs.create(qthread, "ticks", input={"limit": 4})
r2 = client.runs.create(qthread, "ticks", input={"limit": 6}, multitask_strategy="enqueue")
assert r2["status"] == "pending" and r2["multitask_strategy"] == "enqueue", r2
seen["enqueue"] = [client.runs.join(qthread, r2["run_id"]), client.runs.join(qthread, r1["run_id"])]
seen["enqueue_status"] = [client.runs.get(qthread, r["run_id"])["status"] for r in (r1, r2)]

# interrupt: the first run stops where it is; the second goes on from there.
ithread = client.threads.create()["thread_id"]
r1 = client.runs.create(ithread, "ticks", input={"limit": 1000})
wait_for_ticks(ithread, r1["run_id"], 2)
r2 = client.runs.create(ithread, "ticks", input={"limit": 0}, multitask_strategy="interrupt")
out = client.runs.join(ithread, r2["run_id"])
seen["interrupt"] = {
    "first": client.runs.get(ithread, r1["run_id"])["status"],
    "second": client.runs.get(ithread, r2["run_id"])["status"],
    "ticks": out["ticks"],
}

# rollback: the first run is undone and forgotten.
bthread = client.threads.create()["thread_id"]
client.runs.wait(bthread, "ticks", input={"limit": 2})
r1 = client.runs.create(bthread, "ticks", input={"limit": 1000})
wait_for_ticks(bthread, r1["run_id"], 5)
r2 = client.runs.create(bthread, "ticks", input={"limit": 0}, multitask_strategy="rollback")
out = client.runs.join(bthread, r2["run_id"])
try:
    client.runs.get(bthread, r1["run_id"])
    seen["rollback_forgot"] = False
except NotFoundError:
    seen["rollback_forgot"] = True
seen["rollback_ticks"] = out["ticks"]
seen["rollback_history_max_ticks"] = max(
    h["values"]["ticks"] for h in client.threads.get_history(bthread, limit=100)
)

# Search finds the first thread by its metadata.
found = client.threads.search(metadata={"user": "ada"})
seen["search"] = sorted(t["thread_id"] in (tid, copied["thread_id"]) for t in found)

# Delete: gone afterwards.
client.threads.delete(ttid)
try:
    client.threads.get(ttid)
    raise AssertionError("a deleted thread was found")
except NotFoundError:
    seen["deleted"] = 404

print(json.dumps(seen))
