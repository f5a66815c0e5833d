"""A small MCP server for harness-mcp's tests, on the official Python SDK.

    python harness_test_server.py stdio
    python harness_test_server.py http PORT
    HARNESS_MCP_TOKEN=secret python harness_test_server.py http PORT

Over HTTP with `HARNESS_MCP_TOKEN` set, requests without
`Authorization: Bearer <token>` are refused with 401.

Tools: `add`, `echo`, `fail` (an isError result), `unlock` (adds the tool
`bonus` and says the tool list changed), `die` (the process exits in the
middle of the call), `exit_later` (the process exits with code 4 just after
answering), `environment` (the process's environment, as JSON), `slow`
(answers after some seconds), `huge` (answers a text of `n` bytes after
`delay` seconds, in which the server does nothing else) and `request_url`
(over HTTP, the URL the request was sent to, as the server saw it; empty
over stdio).
"""

import asyncio
import json
import os
import sys
import threading
import time

from mcp import types
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.lowlevel.server import NotificationOptions

server = FastMCP(
    "harness-test",
    port=int(sys.argv[2]) if len(sys.argv) > 2 else 8000,
    log_level="WARNING",
)

# Advertise `tools.listChanged`, which FastMCP leaves off.
_options = server._mcp_server.create_initialization_options
server._mcp_server.create_initialization_options = lambda notification_options=None, experimental=None: _options(
    NotificationOptions(tools_changed=True), experimental
)


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Returns the text unchanged."""
    return text


@server.tool()
def fail(reason: str) -> str:
    """Always fails, with the given reason."""
    raise ToolError(f"failed on purpose: {reason}")


def bonus(word: str) -> str:
    """Shouts the word (offered only after `unlock`)."""
    return word.upper() + "!"


@server.tool()
async def unlock(ctx: Context) -> str:
    """Offers the `bonus` tool and tells the client the tool list changed."""
    server.add_tool(bonus, name="bonus")
    # Sent on this request's stream, so that it reaches the client on either
    # transport before the call's result.
    await ctx.session.send_notification(
        types.ServerNotification(types.ToolListChangedNotification()),
        related_request_id=ctx.request_id,
    )
    return "unlocked"


@server.tool()
def die() -> str:
    """Exits the server's process in the middle of the call."""
    sys.stdout.flush()
    os._exit(3)


@server.tool()
def exit_later() -> str:
    """Exits the server's process with code 4 a moment after answering."""
    threading.Timer(0.2, os._exit, [4]).start()
    return "exiting"


@server.tool()
def environment() -> str:
    """The server process's environment variables, as a JSON object."""
    return json.dumps(dict(os.environ))


@server.tool()
async def slow(seconds: float) -> str:
    """Answers after `seconds`."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def huge(n: int, delay: float = 0.0) -> str:
    """Answers a text of `n` bytes after `delay` seconds, in which the
    server does nothing else (not even read a cancellation)."""
    time.sleep(delay)
    return "y" * n


@server.tool()
def request_url(ctx: Context) -> str:
    """The URL the HTTP request was sent to (empty over stdio)."""
    request = ctx.request_context.request
    return str(request.url) if request is not None else ""


def require_token(app, token):
    """The ASGI app `app`, refusing HTTP requests without the bearer token."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")],
                }
            )
            await send({"type": "http.response.body", "body": b"missing or wrong bearer token"})
            return
        await app(scope, receive, send)

    return guarded


if __name__ == "__main__":
    transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    token = os.environ.get("HARNESS_MCP_TOKEN")
    if transport == "http" and token:
        import uvicorn

        app = require_token(server.streamable_http_app(), token)
        uvicorn.run(app, host="127.0.0.1", port=server.settings.port, log_level="warning")
    else:
        server.run("streamable-http" if transport == "http" else "stdio")
