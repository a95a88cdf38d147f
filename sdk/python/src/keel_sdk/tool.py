"""``@tool("id")``: a local tool. Called inside a handler it goes through the kernel (policy,
hooks, journal) and runs here; called outside one it is the plain function."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from .execution import _current

F = TypeVar("F", bound=Callable[..., Any])


class Tool:
    """A registered local tool."""

    def __init__(self, tool_id: str, fn: Callable[..., Any]) -> None:
        self.id = tool_id
        self.fn = fn
        self.description = inspect.getdoc(fn) or ""
        functools.update_wrapper(self, fn)

    async def __call__(self, **arguments: Any) -> Any:
        state = _current.get()
        if state is None:
            output = self.fn(**arguments)
            return await output if inspect.isawaitable(output) else output
        return await state.invoke_tool(self.id, arguments, local=self.fn)


def tool(tool_id: str) -> Callable[[Callable[..., Any]], Tool]:
    """Registers ``fn`` as the local tool ``tool_id``."""

    def register(fn: Callable[..., Any]) -> Tool:
        return Tool(tool_id, fn)

    return register
