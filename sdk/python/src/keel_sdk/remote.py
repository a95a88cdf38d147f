"""Remote tools (run by a runner), as the rebuno SDK's ``remote.Tools(prefix)``:
``await remote.Tools("weather")["weather_forecast"](city="Oslo")``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .execution import current


class Tools:
    """A handle on remote tools; ``tools[tool_id]`` is an async callable."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix

    def __getitem__(self, tool_id: str) -> Callable[..., Awaitable[Any]]:
        async def call(**arguments: Any) -> Any:
            return await current().invoke_tool(tool_id, arguments)

        return call
