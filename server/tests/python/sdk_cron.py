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
from langgraph_sdk.errors import BadRequestError, NotFoundError, UnprocessableEntityError

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
# A tick taken before the delete may still make its run, later on a busy
# machine: wait until the count holds for two seconds (at most 15), then
# expect it to hold on.
deadline = time.monotonic() + 15
before, held_since = len(client.runs.list(thread, limit=100)), time.monotonic()
while time.monotonic() < deadline and time.monotonic() - held_since < 2:
    time.sleep(0.2)
    now = len(client.runs.list(thread, limit=100))
    if now != before:
        before, held_since = now, time.monotonic()
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

# A schedule in a time zone: 09:00 in Tokyo (UTC+9, no summer time) is
# 00:00 UTC; 09:00 in New York is 13:00 or 14:00 UTC, as the clocks go.
tokyo = client.crons.create("ticks", schedule="0 9 * * *", timezone="Asia/Tokyo", input={"limit": 0})
seen["zone_kept"] = tokyo["timezone"]
seen["tokyo_next"] = tokyo["next_run_date"][11:19]
new_york = client.crons.create(
    "ticks", schedule="0 9 * * *", timezone="America/New_York", input={"limit": 0}
)
seen["new_york_next"] = new_york["next_run_date"][11:19] in ("13:00:00", "14:00:00")
utc = client.crons.create("ticks", schedule="0 9 * * *", timezone="UTC", input={"limit": 0})
seen["utc_next"] = utc["next_run_date"][11:19]
for cron in [tokyo, new_york, utc]:
    client.crons.delete(cron["cron_id"])
seen["bad_zones"] = []
for zone in ["Mars/Olympus_Mons", "", "+25:00"]:
    try:
        client.crons.create("ticks", schedule="0 9 * * *", timezone=zone)
        seen["bad_zones"].append("accepted")
    except UnprocessableEntityError as e:
        seen["bad_zones"].append(e.body["field"])

print(json.dumps(seen))
