"""HTTP client of the Keel kernel (httpx): the rebuno protocol plus the Keel extensions.

Every agent request carries ``Keel-Capabilities: modify, replay``: the kernel may then answer
an accepted local call with the arguments a hook gave it, a step result with the result a hook
put in its place, and a call already in the journal with its recorded outcome. A kernel that
does not know the header ignores it.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from .errors import KeelError, Unauthorized, from_response

CAPABILITIES = "modify, replay"


def default_url() -> str:
    """``KEEL_URL``, else ``REBUNO_URL`` (as the rebuno SDK), else the local default."""
    return os.environ.get("KEEL_URL") or os.environ.get("REBUNO_URL") or "http://127.0.0.1:8080"
TERMINAL = ("completed", "failed", "cancelled", "timed_out")


@dataclass
class IntentResult:
    """The kernel's answer to an intent."""

    accepted: bool
    step_id: str = ""
    pending_approval: bool = False
    error: str = ""
    #: The arguments a pre_tool hook gave this local call (None: unchanged).
    arguments: Any = None
    #: A recorded outcome to return instead of running the tool (None: run it).
    replay: dict[str, Any] | None = None


@dataclass
class StepResultAnswer:
    """The kernel's answer to a local step result."""

    #: Whether a post_tool hook replaced the result (then ``result`` is what the agent gets).
    replaced: bool = False
    result: Any = None


@dataclass
class Execution:
    """An execution as ``GET /v0/executions/{id}`` returns it."""

    id: str
    agent_id: str
    status: str
    input: Any = None
    output: Any = None
    labels: dict[str, str] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Execution:
        return cls(
            id=str(body.get("id", "")),
            agent_id=str(body.get("agent_id", "")),
            status=str(body.get("status", "")),
            input=body.get("input"),
            output=body.get("output"),
            labels=dict(body.get("labels") or {}),
            raw=body,
        )


@dataclass
class SSEEvent:
    """One server-sent event."""

    type: str
    data: dict[str, Any]


class Client:
    """Async client. ``async with Client(url) as client: ...``"""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 3,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Keel-Capabilities": CAPABILITIES}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.base_url = (base_url or default_url()).rstrip("/")
        self.max_retries = max_retries
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Any kernel request (JSON answer, typed errors, retries as below)."""
        return await self._request(method, path, **kwargs)

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Sends a request; retries connection errors, 429 and 5xx; raises typed errors."""
        attempt = 0
        while True:
            try:
                response = await self._http.request(method, path, **kwargs)
            except (httpx.ConnectError, httpx.ReadError, httpx.TimeoutException) as error:
                if attempt >= self.max_retries:
                    raise KeelError(f"kernel unreachable: {error}") from error
            else:
                if response.status_code < 400:
                    return response.json() if response.content else None
                retryable = response.status_code == 429 or response.status_code >= 500
                if not retryable or attempt >= self.max_retries:
                    body: Any = None
                    try:
                        body = response.json()
                    except ValueError:
                        pass
                    raise from_response(response.status_code, body)
            attempt += 1
            await asyncio.sleep(min(0.2 * 2**attempt, 5.0))

    # Executions.

    async def create(
        self,
        agent_id: str,
        input: Any = None,
        *,
        labels: dict[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> Execution:
        body: dict[str, Any] = {"agent_id": agent_id, "input": input}
        if labels:
            body["labels"] = labels
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        answer = await self._request("POST", "/v0/executions", json=body, headers=headers)
        return Execution.from_json(answer)

    async def get(self, execution_id: str) -> Execution:
        return Execution.from_json(await self._request("GET", f"/v0/executions/{execution_id}"))

    async def cancel(self, execution_id: str) -> Execution:
        answer = await self._request("POST", f"/v0/executions/{execution_id}/cancel")
        return Execution.from_json(answer)

    async def send_signal(self, execution_id: str, signal_type: str, payload: Any = None) -> None:
        body = {"signal_type": signal_type, "payload": payload}
        await self._request("POST", f"/v0/executions/{execution_id}/signal", json=body)

    async def events(self, execution_id: str, limit: int = 1000) -> list[dict[str, Any]]:
        answer = await self._request(
            "GET", f"/v0/executions/{execution_id}/events", params={"limit": limit}
        )
        return list(answer.get("events", []))

    async def wait(self, execution_id: str, timeout: float = 60.0) -> Execution:
        """Polls until the execution is terminal (bounded by ``timeout``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            execution = await self.get(execution_id)
            if execution.status in TERMINAL:
                return execution
            if loop.time() > deadline:
                raise KeelError(f"execution {execution_id} still {execution.status} after {timeout}s")
            await asyncio.sleep(0.1)

    async def run_until_complete(
        self, agent_id: str, input: Any = None, *, labels: dict[str, str] | None = None,
        timeout: float = 60.0,
    ) -> Execution:
        created = await self.create(agent_id, input, labels=labels)
        return await self.wait(created.id, timeout)

    # The agent protocol.

    async def submit_intent(
        self, execution_id: str, session_id: str, intent: dict[str, Any]
    ) -> IntentResult:
        body = {"execution_id": execution_id, "session_id": session_id, "intent": intent}
        answer = await self._request("POST", "/v0/agents/intent", json=body)
        return IntentResult(
            accepted=bool(answer.get("accepted")),
            step_id=str(answer.get("step_id") or ""),
            pending_approval=bool(answer.get("pending_approval")),
            error=str(answer.get("error") or ""),
            arguments=answer.get("arguments"),
            replay=answer.get("replay"),
        )

    async def report_step_result(
        self,
        execution_id: str,
        session_id: str,
        step_id: str,
        *,
        success: bool,
        data: Any = None,
        error: str = "",
    ) -> StepResultAnswer:
        body: dict[str, Any] = {
            "execution_id": execution_id,
            "session_id": session_id,
            "step_id": step_id,
            "success": success,
        }
        if data is not None:
            body["data"] = data
        if error:
            body["error"] = error
        answer = await self._request("POST", "/v0/agents/step-result", json=body) or {}
        if "result" in answer:
            return StepResultAnswer(replaced=True, result=answer["result"])
        return StepResultAnswer()

    async def stream(self, path: str, params: dict[str, str]) -> AsyncIterator[SSEEvent]:
        """Yields the events of a push stream until it ends. A 401 raises ``Unauthorized``."""
        async with self._http.stream(
            "GET", path, params=params, headers={"Accept": "text/event-stream"}, timeout=None
        ) as response:
            if response.status_code >= 400:
                await response.aread()
                try:
                    body = response.json()
                except ValueError:
                    body = None
                raise from_response(response.status_code, body)
            kind = "message"
            lines: list[str] = []
            async for line in response.aiter_lines():
                if not line:
                    if lines:
                        try:
                            data = json.loads("\n".join(lines))
                        except ValueError:
                            data = {}
                        yield SSEEvent(kind, data if isinstance(data, dict) else {})
                    kind, lines = "message", []
                elif line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    lines.append(line[5:].lstrip())


__all__ = ["Client", "Execution", "IntentResult", "SSEEvent", "StepResultAnswer", "Unauthorized"]
