"""mcp_server.py's tools served over Streamable HTTP (the official Python MCP SDK's app under
uvicorn), for `keel runner --mcp --mcp-url`. A request without the expected Authorization
header (MCP_HTTP_TOKEN) is answered 401, so a test can tell the runner sent it.

Usage: mcp_http_server.py PORT
"""

from __future__ import annotations

import os
import sys

import uvicorn
from starlette.responses import JSONResponse

from mcp_server import server

TOKEN = os.environ.get("MCP_HTTP_TOKEN", "")


def guarded(app):
    async def guard(scope, receive, send):
        if scope["type"] == "http" and TOKEN:
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization", b"").decode() != f"Bearer {TOKEN}":
                await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
                return
        await app(scope, receive, send)

    return guard


if __name__ == "__main__":
    app = server.streamable_http_app()
    uvicorn.run(guarded(app), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
