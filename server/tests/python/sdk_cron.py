"""Crons through the real `langgraph-sdk` client.

Usage: python sdk_cron.py URL

A cron on a thread fires every second (six fields: seconds first), each
tick a run of the `ticks` agent that adds one tick; once deleted it fires
no more. Prints one JSON line.
"""

import json
import sys
import time

from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import BadRequestError, NotFoundError

client = get_sync_client(url=sys.argv[1])
seen = {}

thread = client.threads.create()["thread_id"]
cron = client.crons.create_for_thread(thread, "ticks", schedule="* * * * * *", input={"limit": 0})
seen["next_run_set"] = cron["next_run_date"] is not None
deadline = time.monotonic() + 15
while time.monotonic() < deadline:
    runs = client.runs.list(thread, limit=100)
    if sum(r["status"] == "success" for r in runs) >= 2:
        break
    time.sleep(0.1)
seen["ticked"] = sum(r["status"] == "success" for r in runs) >= 2
seen["run_metadata"] = runs[-1]["metadata"].get("cron_id") == cron["cron_id"]
found = client.crons.search(thread_id=thread)
seen["searched"] = [c["cron_id"] == cron["cron_id"] for c in found]
client.crons.delete(cron["cron_id"])
time.sleep(0.5)
before = len(client.runs.list(thread, limit=100))
time.sleep(1.5)
seen["quiet_after_delete"] = len(client.runs.list(thread, limit=100)) == before
try:
    client.crons.delete(cron["cron_id"])
except NotFoundError:
    seen["deleted_twice"] = 404

try:
    client.crons.create("ticks", schedule="61 * * * *")
except BadRequestError as e:
    seen["bad_schedule"] = e.body["field"]
try:
    client.crons.create("nobody", schedule="* * * * *")
except NotFoundError:
    seen["unknown_assistant"] = 404

print(json.dumps(seen))
