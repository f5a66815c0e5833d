"""The real `langgraph-sdk` store client against harness-server's memory.

Usage: python sdk_store.py URL

The server's memory embeds the `text` field of items (an offline embedder:
texts are close when they share words). Prints one JSON line.
"""

import json
import sys

from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import BadRequestError, NotFoundError, UnprocessableEntityError

client = get_sync_client(url=sys.argv[1])
store = client.store
seen = {}

prefs = ["users", "u1", "prefs"]
store.put_item(prefs, "hobby", {"text": "likes rust and hiking", "weight": 9})
store.put_item(prefs, "food", {"text": "prefers noodles", "weight": 3})
store.put_item(["users", "u2", "prefs"], "hobby", {"text": "plays chess", "weight": 5}, ttl=60)
store.put_item(["users", "u1", "notes"], "n1", {"text": "no index here"}, index=False)

item = store.get_item(prefs, "hobby")
seen["got"] = {"value": item["value"], "namespace": item["namespace"]}
assert item["created_at"] and item["updated_at"]

found = store.search_items(["users", "u1"], filter={"weight": {"$gt": 5}})
seen["filtered"] = [i["key"] for i in found["items"]]

found = store.search_items(["users"], query="hiking in the rust belt", limit=2)
seen["by_text_first"] = found["items"][0]["key"]
seen["by_text_scored"] = all(isinstance(i["score"], float) for i in found["items"])

names = store.list_namespaces(prefix=["users"], max_depth=2)
seen["namespaces"] = names["namespaces"]

store.delete_item(prefs, "food")
try:
    store.get_item(prefs, "food")
except NotFoundError:
    seen["deleted"] = 404

try:
    store.put_item(prefs, "bad", [1, 2, 3])
except UnprocessableEntityError as e:
    seen["bad_value_field"] = e.body["field"]
try:
    store.search_items(["users"], filter={"weight": {"$near": 3}})
except BadRequestError as e:
    seen["bad_op_field"] = e.body["field"]

print(json.dumps(seen))
