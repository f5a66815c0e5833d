"""A hostile or broken MCP server for harness-mcp's tests: raw JSON-RPC over
stdio (MCP's stdio transport: one JSON message per line), no SDK, so that it
can send what an SDK never would.

    python hostile_server.py MODE

MODE shapes `tools/list`:
  normal        one page: the tools below
  pages         every page 1000 tools of 1000-character descriptions, and a next cursor
  empty-pages   every page empty, with a next cursor
  many          one page of 5000 small tools
  names         the tools below, and tools whose names the model APIs refuse
  refresh-hang  the first listing answered, no later one
  big-list      one answer line of 20 MiB

Tools (`tools/call`), by name:
  say    {"text", "repeat"}: answers the text repeated
  raw    {"lines", "answer"}: writes each line as is, then answers "after" if `answer`
  big    {"bytes", "delay"}: answers with a text of that many bytes, after
         `delay` seconds (default none) in which it reads nothing
  flood  {"n"}: sends n `notifications/tools/list_changed`, then answers "flooded"
  count  answers how many `tools/list` requests it has read
"""

import json
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "normal"
lists = 0
out = sys.stdout


def send(obj):
    out.write(json.dumps(obj) + "\n")
    out.flush()


def tool(name, description="A tool."):
    return {"name": name, "description": description, "inputSchema": {"type": "object"}}


TOOLS = [tool(n) for n in ["say", "raw", "big", "flood", "count"]]
BAD_NAMES = ["has space", "x" * 65, "", "1starts_with_digit", "dot.ted", "ünïcode", "dup", "dup", "read_file"]


def listing(request_id, cursor):
    global lists
    lists += 1
    if mode == "pages":
        tools = [tool(f"t{lists}_{k}", "d" * 1000) for k in range(1000)]
        return {"tools": tools, "nextCursor": str(lists)}
    if mode == "empty-pages":
        return {"tools": [], "nextCursor": str(lists)}
    if mode == "many":
        return {"tools": [tool(f"t{k}") for k in range(5000)]}
    if mode == "names":
        return {"tools": TOOLS + [tool(n) for n in BAD_NAMES]}
    if mode == "refresh-hang" and lists > 1:
        return None
    if mode == "big-list":
        return {"tools": [tool("huge", "h" * (20 << 20))]}
    return {"tools": TOOLS}


def call(name, args):
    if name == "say":
        return str(args.get("text", "")) * int(args.get("repeat", 1))
    if name == "raw":
        for line in args.get("lines", []):
            out.write(line + "\n")
        out.flush()
        return "after" if args.get("answer") else None
    if name == "big":
        time.sleep(float(args.get("delay", 0)))
        return "x" * int(args["bytes"])
    if name == "flood":
        for _ in range(int(args.get("n", 1))):
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return "flooded"
    if name == "count":
        return str(lists)
    return "unknown"


for line in sys.stdin:
    message = json.loads(line)
    method, request_id = message.get("method"), message.get("id")
    if method == "initialize":
        send({
            "jsonrpc": "2.0",
            "id": request_id,
            "result": {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "hostile", "version": "1"},
            },
        })
    elif method == "tools/list":
        result = listing(request_id, (message.get("params") or {}).get("cursor"))
        if result is not None:
            send({"jsonrpc": "2.0", "id": request_id, "result": result})
    elif method == "tools/call":
        params = message["params"]
        text = call(params["name"], params.get("arguments") or {})
        if text is not None:
            send({
                "jsonrpc": "2.0",
                "id": request_id,
                "result": {"content": [{"type": "text", "text": text}], "isError": False},
            })
    elif request_id is not None:
        send({"jsonrpc": "2.0", "id": request_id, "result": {}})
