"""The current execution, as the rebuno SDK's ``execution`` proxy: ``execution.id``,
``execution.input``, ``execution.invoke_tool(...)``, ``execution.wait_signal(...)``."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from .client import Client
from .errors import ApprovalDenied, KeelError, PolicyDenied, ToolError, denial


class ExecutionState:
    """One assigned execution: its ids, input, and the futures its pushes resolve."""

    def __init__(
        self, client: Client, data: dict[str, Any], wait_timeout: float = 3600.0
    ) -> None:
        self._client = client
        self.id = str(data.get("execution_id", ""))
        self.session_id = str(data.get("session_id", ""))
        self.agent_id = str(data.get("agent_id", ""))
        self.input: Any = data.get("input")
        self.labels: dict[str, str] = dict(data.get("labels") or {})
        self._wait_timeout = wait_timeout
        self._futures: dict[tuple[str, str], asyncio.Future[Any]] = {}
        self._early: dict[tuple[str, str], Any] = {}

    def _future(self, kind: str, key: str) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if (kind, key) in self._early:
            future.set_result(self._early.pop((kind, key)))
        else:
            self._futures[(kind, key)] = future
        return future

    def resolve(self, kind: str, key: str, value: Any) -> None:
        """Hands a push to whoever waits for it (kept if it arrives first)."""
        future = self._futures.pop((kind, key), None)
        if future is None:
            self._early[(kind, key)] = value
        elif not future.done():
            future.set_result(value)

    def cancel_all(self) -> None:
        for future in self._futures.values():
            future.cancel()
        self._futures.clear()

    async def _wait(self, kind: str, key: str) -> Any:
        try:
            return await asyncio.wait_for(self._future(kind, key), self._wait_timeout)
        except asyncio.TimeoutError as error:
            raise KeelError(f"timed out waiting for {kind} {key}") from error

    async def invoke_tool(
        self,
        tool_id: str,
        arguments: Any = None,
        *,
        idempotency_key: str = "",
        local: Callable[..., Any] | None = None,
    ) -> Any:
        """Proposes a call and returns its result. With ``local`` (a function) the tool runs
        here, with the arguments the kernel answers (a hook may have changed them), unless the
        kernel replays an outcome recorded by an earlier run."""
        intent: dict[str, Any] = {
            "type": "invoke_tool",
            "tool_id": tool_id,
            "arguments": arguments,
            "idempotency_key": idempotency_key or f"{self.id}:{tool_id}:{uuid.uuid4().hex[:12]}",
            "remote": local is None,
        }
        answer = await self._client.submit_intent(self.id, self.session_id, intent)
        if not answer.accepted:
            raise denial(answer.error)
        if answer.pending_approval:
            decision = await self._wait("approval", answer.step_id)
            if not decision.get("approved"):
                raise ApprovalDenied(str(decision.get("reason") or ""), answer.step_id)
        if answer.replay is not None:
            return _replayed(answer.replay, tool_id, answer.step_id)
        if local is None:
            pushed = await self._wait("result", answer.step_id)
            if pushed.get("status") == "failed":
                raise ToolError(str(pushed.get("error") or "tool failed"), tool_id, answer.step_id)
            return pushed.get("result")
        if answer.arguments is not None:
            arguments = answer.arguments
        return await self._run_local(answer.step_id, tool_id, arguments, local)

    async def _run_local(
        self, step_id: str, tool_id: str, arguments: Any, fn: Callable[..., Any]
    ) -> Any:
        try:
            output = fn(**arguments) if isinstance(arguments, dict) else fn()
            if inspect.isawaitable(output):
                output = await output
        except Exception as error:
            await self._client.report_step_result(
                self.id, self.session_id, step_id, success=False, error=str(error) or repr(error)
            )
            if isinstance(error, ToolError):
                raise
            raise ToolError(str(error), tool_id, step_id) from error
        answer = await self._client.report_step_result(
            self.id, self.session_id, step_id, success=True, data=output
        )
        return answer.result if answer.replaced else output

    async def wait_signal(self, signal_type: str) -> Any:
        """Waits for a signal of ``signal_type`` and returns its payload."""
        intent = {"type": "wait", "signal_type": signal_type}
        answer = await self._client.submit_intent(self.id, self.session_id, intent)
        if not answer.accepted:
            raise PolicyDenied(answer.error or "wait refused")
        return await self._wait("signal", signal_type)

    async def complete(self, output: Any = None) -> None:
        await self._client.submit_intent(
            self.id, self.session_id, {"type": "complete", "output": output}
        )

    async def fail(self, error: str) -> None:
        await self._client.submit_intent(self.id, self.session_id, {"type": "fail", "error": error})


def _replayed(replay: dict[str, Any], tool_id: str, step_id: str) -> Any:
    if replay.get("status") == "failed":
        raise ToolError(str(replay.get("error") or "tool failed"), tool_id, step_id)
    return replay.get("result")


_current: ContextVar[ExecutionState | None] = ContextVar("keel_execution", default=None)


def current() -> ExecutionState:
    state = _current.get()
    if state is None:
        raise RuntimeError("keel_sdk.execution is only available inside an agent's handler")
    return state


class _Proxy:
    """Resolves attribute access to the current execution."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        return getattr(current(), name)

    async def invoke_tool(self, tool_id: str, arguments: Any = None, **kwargs: Any) -> Any:
        return await current().invoke_tool(tool_id, arguments, **kwargs)

    async def wait_signal(self, signal_type: str) -> Any:
        return await current().wait_signal(signal_type)


execution = _Proxy()

Handler = Callable[..., Awaitable[Any] | Any]
