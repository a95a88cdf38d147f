"""``Runner``: runs remote tools for the kernel (as the rebuno SDK's).

``Runner("calc", tools=[mul]).run()``: publishes the tools, takes the jobs the kernel assigns,
reports each outcome. Inside a tool, ``current_job()`` gives the job, including the
``idempotency_key`` that stays the same across retries and re-runs of the same call (pass it on
to a payment or mail API). A refused credential (401) stops the runner.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import uuid
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from .client import Client, default_url
from .errors import KeelError, Unauthorized
from .tool import Tool

log = logging.getLogger("keel_sdk.runner")


@dataclass
class Job:
    """A job the kernel assigned."""

    id: str
    execution_id: str
    step_id: str
    tool_id: str
    arguments: Any
    attempt: int = 1
    #: Same for every retry and re-run of the same logical call (None from an older kernel).
    idempotency_key: str | None = None


_job: ContextVar[Job | None] = ContextVar("keel_job", default=None)


def current_job() -> Job:
    """The job the calling tool runs for (only inside a runner's tool)."""
    job = _job.get()
    if job is None:
        raise RuntimeError("current_job() is only available inside a runner's tool")
    return job


class Runner:
    """Serves ``tools`` (``@tool`` functions) as ``runner_id``."""

    def __init__(
        self,
        runner_id: str,
        *,
        tools: Iterable[Tool],
        base_url: str | None = None,
        api_key: str | None = None,
        consumer_id: str | None = None,
        reconnect_delay: float = 1.0,
    ) -> None:
        if not runner_id:
            raise ValueError("runner_id must not be empty")
        self.runner_id = runner_id
        self.consumer_id = consumer_id or f"{runner_id}-{uuid.uuid4().hex[:8]}"
        self.base_url = base_url or default_url()
        self.api_key = api_key or os.environ.get("KEEL_API_KEY") or os.environ.get("REBUNO_API_KEY")
        self.reconnect_delay = reconnect_delay
        self.tools = {tool.id: tool for tool in tools}

    def run(self) -> None:
        """Runs until interrupted (or a 401)."""
        asyncio.run(self.run_async())

    async def run_async(self) -> None:
        async with Client(self.base_url, api_key=self.api_key) as client:
            schemas = [
                {"id": tool.id, "description": tool.description, "input_schema": {"type": "object"}}
                for tool in self.tools.values()
            ]
            params = {
                "runner_id": self.runner_id,
                "consumer_id": self.consumer_id,
                "capabilities": ",".join(self.tools),
            }
            while True:
                try:
                    await client.request("POST", f"/v0/runners/{self.runner_id}/tools",
                                         json={"tools": schemas})
                    async for event in client.stream("/v0/runners/stream", params):
                        if event.type == "job.assigned":
                            asyncio.create_task(self._handle(client, event.data))
                except Unauthorized:
                    log.error("the kernel refused the credentials (401): stopping")
                    raise
                except Exception as error:  # noqa: BLE001 (reconnect)
                    log.warning("runner stream lost (%s); reconnecting", error)
                await asyncio.sleep(self.reconnect_delay)

    async def _handle(self, client: Client, data: dict[str, Any]) -> None:
        job = Job(
            id=str(data.get("id", "")),
            execution_id=str(data.get("execution_id", "")),
            step_id=str(data.get("step_id", "")),
            tool_id=str(data.get("tool_id", "")),
            arguments=data.get("arguments"),
            attempt=int(data.get("attempt", 1) or 1),
            idempotency_key=data.get("idempotency_key"),
        )
        result: dict[str, Any] = {
            "job_id": job.id, "execution_id": job.execution_id, "step_id": job.step_id,
            "consumer_id": self.consumer_id,
        }
        token = _job.set(job)
        try:
            await client.request(
                "POST", f"/v0/runners/steps/{job.step_id}/started",
                json={"execution_id": job.execution_id, "runner_id": self.runner_id},
            )
            tool = self.tools.get(job.tool_id)
            if tool is None:
                raise KeelError(f"runner {self.runner_id} has no tool {job.tool_id}")
            arguments = job.arguments if isinstance(job.arguments, dict) else {}
            output = tool.fn(**arguments)
            if inspect.isawaitable(output):
                output = await output
            result.update(success=True, data=output)
        except Exception as error:  # noqa: BLE001 (reported as the step's failure)
            result.update(success=False, error=str(error) or repr(error))
        finally:
            _job.reset(token)
        try:
            await client.request("POST", f"/v0/runners/{self.runner_id}/results", json=result)
        except KeelError as error:
            log.warning("could not report job %s: %s", job.id, error)
