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
  compact       every message without spaces, the one tool `say`, and as
                small a handshake as can be (for tiny message limits)
  schemas       the tools below, and tools whose input schemas the model
                APIs refuse (and one without a `type`)
  extra         the tools below, the three unlisted ones too
  init-error    `initialize` answered with an error whose message has `n`
                bytes, `n` from the environment's HARNESS_MCP_ERROR_BYTES
  list-error    `tools/list` answered so

Tools (`tools/call`), by name (the last three are listed only in mode
`extra`, so that the other listings stay as the tests of lists expect):
  say    {"text", "repeat"}: answers the text repeated
  raw    {"lines", "answer"}: writes each line as is, then answers "after" if `answer`
  big    {"bytes", "delay"}: answers with a text of that many bytes, after
         `delay` seconds (default none) in which it reads nothing
  flood  {"n"}: sends n `notifications/tools/list_changed`, then answers "flooded"
  count  answers how many `tools/list` requests it has read
  reply  {"line", "fill", "times"}: writes `line` in place of the answer,
         with `"$ID"` (quoted) replaced by the request's id and `$FILL` by
         `fill` repeated `times` times; nothing else
  spawn  {"n"}: starts `n` processes (default 2) that ignore SIGTERM and
         never end, its stdio not theirs; answers their pids, as JSON
  exit   answers "bye", then exits (what it started stays)
"""

import json
import os
import subprocess
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "normal"
lists = 0
out = sys.stdout


def send(obj):
    if mode == "compact":
        out.write(json.dumps(obj, separators=(",", ":")) + "\n")
    else:
        out.write(json.dumps(obj) + "\n")
    out.flush()


def tool(name, description="A tool.", schema=None):
    return {"name": name, "description": description, "inputSchema": schema or {"type": "object"}}


TOOLS = [tool(n) for n in ["say", "raw", "big", "flood", "count"]]
EXTRA = [tool(n) for n in ["reply", "spawn", "exit"]]
BAD_SCHEMAS = {
    "string_schema": {"type": "string"},
    "array_schema": {"type": "array", "items": {}},
    "nullable_schema": {"type": ["object", "null"]},
    "true_properties": {"properties": True},
    "list_properties": {"type": "object", "properties": []},
    "string_required": {"type": "object", "properties": {"a": {}}, "required": "a"},
}
# No `type`, but properties: an object's schema, offered as one.
UNTYPED = tool("untyped", schema={"properties": {"a": {"type": "string"}}})
# What a process started by `spawn` runs: SIGTERM ignored, forever.
STUBBORN = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    time.sleep(1)\n"
BAD_NAMES = ["has space", "x" * 65, "", "1starts_with_digit", "dot.ted", "ünïcode", "dup", "dup", "read_file"]


def send_error(request_id):
    size = int(os.environ.get("HARNESS_MCP_ERROR_BYTES", "100"))
    send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32000, "message": "L" * size}})


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
    if mode == "extra":
        return {"tools": TOOLS + EXTRA}
    if mode == "compact":
        return {"tools": [{"name": "say", "inputSchema": {"type": "object"}}]}
    if mode == "schemas":
        bad = [tool(name, schema=schema) for name, schema in BAD_SCHEMAS.items()]
        return {"tools": TOOLS + bad + [UNTYPED]}
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
    if name == "spawn":
        pids = []
        for _ in range(int(args.get("n", 2))):
            process = subprocess.Popen(
                [sys.executable, "-c", STUBBORN],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            pids.append(process.pid)
        return json.dumps(pids)
    return "unknown"


for line in sys.stdin:
    message = json.loads(line)
    method, request_id = message.get("method"), message.get("id")
    if method == "initialize":
        if mode == "init-error":
            send_error(request_id)
            continue
        if mode == "compact":
            capabilities, info = {"tools": {}}, {"name": "h", "version": "1"}
        else:
            capabilities, info = {"tools": {"listChanged": True}}, {"name": "hostile", "version": "1"}
        send({
            "jsonrpc": "2.0",
            "id": request_id,
            "result": {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": capabilities,
                "serverInfo": info,
            },
        })
    elif method == "tools/list":
        if mode == "list-error":
            send_error(request_id)
            continue
        result = listing(request_id, (message.get("params") or {}).get("cursor"))
        if result is not None:
            send({"jsonrpc": "2.0", "id": request_id, "result": result})
    elif method == "tools/call":
        params = message["params"]
        args = params.get("arguments") or {}
        if params["name"] == "reply":
            line = args["line"].replace('"$ID"', json.dumps(request_id))
            line = line.replace("$FILL", str(args.get("fill", "")) * int(args.get("times", 1)))
            out.write(line + "\n")
            out.flush()
            continue
        if params["name"] == "exit":
            send({
                "jsonrpc": "2.0",
                "id": request_id,
                "result": {"content": [{"type": "text", "text": "bye"}]},
            })
            sys.exit(0)
        text = call(params["name"], args)
        if text is not None:
            send({
                "jsonrpc": "2.0",
                "id": request_id,
                "result": {"content": [{"type": "text", "text": text}], "isError": False},
            })
    elif request_id is not None:
        send({"jsonrpc": "2.0", "id": request_id, "result": {}})
