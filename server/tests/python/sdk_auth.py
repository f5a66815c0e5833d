"""The real `langgraph-sdk` client against a harness-server with API keys.

Usage: python sdk_auth.py URL

The server has three keys: `key-read-...` (scope read), `key-run-...`
(run) and `key-admin-...` (admin). Prints one JSON line of what each
client could do.
"""

import json
import sys

import httpx
from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import AuthenticationError, NotFoundError, PermissionDeniedError

url = sys.argv[1]
seen = {}


def client(key=None):
    return get_sync_client(url=url, api_key=key)


try:
    client().threads.search()
except AuthenticationError:
    seen["no_key"] = 401
try:
    client("not-a-key").assistants.search()
except AuthenticationError:
    seen["wrong_key"] = 401
# The health check needs no key.
seen["health"] = httpx.get(url + "/ok").json()["ok"]

reader = client("key-read-0123456789")
seen["reader_reads"] = [a["assistant_id"] for a in reader.assistants.search()] == [
    "chat",
    "ticket",
    "ticks",
]
try:
    reader.threads.create()
except PermissionDeniedError:
    seen["reader_creates"] = 403

runner = client("key-run-0123456789")
thread = runner.threads.create()["thread_id"]
seen["runner_runs"] = runner.runs.wait(thread, "ticks", input={"limit": 1})
try:
    runner.threads.delete(thread)
except PermissionDeniedError:
    seen["runner_deletes"] = 403

admin = client("key-admin-0123456789")
admin.threads.delete(thread)
try:
    admin.threads.get(thread)
except NotFoundError:
    seen["admin_deletes"] = 404

print(json.dumps(seen))
