"""``Agent``: a long-lived consumer of one agent id's executions (as the rebuno SDK's).

``Agent("assistant", base_url=...).run(handler)``: each assigned execution runs ``handler``
with its input (the whole input for a single untyped/``dict`` parameter, else by field name);
the return value completes the execution, an exception fails it with its message. A dropped
stream reconnects; a refused credential (401) stops with ``Unauthorized`` instead.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import uuid
from typing import Any

from .client import Client, SSEEvent, default_url
from .errors import KeelError, Unauthorized
from .execution import ExecutionState, Handler, _current

log = logging.getLogger("keel_sdk.agent")


def bind(handler: Handler, value: Any) -> dict[str, Any]:
    """The keyword arguments ``handler`` gets for an execution's input."""
    parameters = list(inspect.signature(handler).parameters.values())
    if len(parameters) == 1 and parameters[0].annotation in (inspect.Parameter.empty, Any, dict, "dict", "Any", "dict[str, Any]"):
        return {parameters[0].name: value}
    data = value if isinstance(value, dict) else {}
    missing = [
        p.name for p in parameters if p.default is inspect.Parameter.empty and p.name not in data
    ]
    if missing:
        raise ValueError(f"missing required input fields: {', '.join(missing)}")
    return {p.name: data[p.name] for p in parameters if p.name in data}


class Agent:
    """Consumes the executions of ``agent_id``."""

    def __init__(
        self,
        agent_id: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        consumer_id: str | None = None,
        reconnect_delay: float = 1.0,
    ) -> None:
        self.agent_id = agent_id
        self.consumer_id = consumer_id or f"{agent_id}-{uuid.uuid4().hex[:8]}"
        self.base_url = base_url or default_url()
        self.api_key = api_key or os.environ.get("KEEL_API_KEY") or os.environ.get("REBUNO_API_KEY")
        self.reconnect_delay = reconnect_delay
        self._states: dict[str, ExecutionState] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def run(self, handler: Handler) -> None:
        """Runs until interrupted (or a 401)."""
        asyncio.run(self.run_async(handler))

    async def run_async(self, handler: Handler) -> None:
        async with Client(self.base_url, api_key=self.api_key) as client:
            params = {"agent_id": self.agent_id, "consumer_id": self.consumer_id}
            while True:
                try:
                    async for event in client.stream("/v0/agents/stream", params):
                        self._dispatch(client, handler, event)
                except Unauthorized:
                    log.error("the kernel refused the credentials (401): stopping")
                    raise
                except (KeelError, OSError, Exception) as error:  # noqa: BLE001 (reconnect)
                    if isinstance(error, asyncio.CancelledError):
                        raise
                    log.warning("agent stream lost (%s); reconnecting", error)
                await asyncio.sleep(self.reconnect_delay)

    def _dispatch(self, client: Client, handler: Handler, event: SSEEvent) -> None:
        data = event.data
        execution_id = str(data.get("execution_id", ""))
        if event.type == "execution.assigned":
            state = ExecutionState(client, data)
            self._states[execution_id] = state
            task = asyncio.create_task(self._execute(handler, state))
            self._tasks[execution_id] = task
            return
        if event.type == "execution.cancelled":
            running = self._tasks.get(execution_id)
            if running is not None:
                running.cancel()
            return
        state_of = self._states.get(execution_id)
        if state_of is None:
            return
        if event.type == "tool.result":
            state_of.resolve("result", str(data.get("step_id", "")), data)
        elif event.type == "signal.received":
            state_of.resolve("signal", str(data.get("signal_type", "")), data.get("payload"))
        elif event.type == "approval.resolved":
            state_of.resolve("approval", str(data.get("step_id", "")), data)

    async def _execute(self, handler: Handler, state: ExecutionState) -> None:
        token = _current.set(state)
        try:
            try:
                output = handler(**bind(handler, state.input))
                if inspect.isawaitable(output):
                    output = await output
            except asyncio.CancelledError:
                return
            except Unauthorized:
                raise
            except Exception as error:  # noqa: BLE001 (the execution fails with it)
                log.warning("execution %s failed: %s", state.id, error)
                await self._quietly(state.fail(str(error) or repr(error)))
                return
            await self._quietly(state.complete(output))
        finally:
            _current.reset(token)
            state.cancel_all()
            self._states.pop(state.id, None)
            self._tasks.pop(state.id, None)

    @staticmethod
    async def _quietly(call: Any) -> None:
        try:
            await call
        except KeelError as error:
            log.warning("could not finish the execution: %s", error)
