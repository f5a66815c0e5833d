"""A run's webhook, received by a local listener.

Usage: python sdk_webhook.py URL

The server signs its calls with the secret `whsec-test` and calls back to
127.0.0.1 only. The listener answers the first call with a 500 and the
next with a 200; the server must try again. Prints one JSON line.
"""

import hashlib
import hmac
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import UnprocessableEntityError

SECRET = b"whsec-test"
calls = []


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        calls.append((dict(self.headers), body))
        self.send_response(500 if len(calls) == 1 else 200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


listener = HTTPServer(("127.0.0.1", 0), Hook)
threading.Thread(target=listener.serve_forever, daemon=True).start()
hook_url = f"http://127.0.0.1:{listener.server_address[1]}/hook"

client = get_sync_client(url=sys.argv[1])
seen = {}
thread = client.threads.create()["thread_id"]
run = client.runs.create(thread, "ticks", input={"limit": 1}, webhook=hook_url)
client.runs.join(thread, run["run_id"])
deadline = time.monotonic() + 20
while len(calls) < 2 and time.monotonic() < deadline:
    time.sleep(0.02)
seen["calls"] = len(calls)


def valid(headers, body):
    ts = headers["x-harness-timestamp"]
    want = hmac.new(SECRET, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["x-harness-signature"], "sha256=" + want)


seen["signatures_valid"] = [valid(h, b) for h, b in calls]
payload = json.loads(calls[-1][1])
seen["status"] = payload["status"]
seen["values"] = payload["values"]
seen["same_run"] = payload["run_id"] == run["run_id"] and payload["thread_id"] == thread

try:
    client.runs.create(thread, "ticks", input={"limit": 1}, webhook="http://10.9.9.9/hook")
except UnprocessableEntityError as e:
    seen["refused_host_field"] = e.body["field"]

print(json.dumps(seen))
