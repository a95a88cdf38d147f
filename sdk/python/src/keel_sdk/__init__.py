"""Keel Python SDK: the rebuno SDK's API (``Agent``, ``@tool``, ``Client``, ``execution``)
plus what Keel adds — hook modifications of local tools are applied, local tools whose call is
in the journal are replayed instead of run again, and errors are typed and keep the kernel's
reason."""

from . import remote
from .agent import Agent
from .client import Client, Execution, IntentResult
from .errors import (
    APIError,
    ApprovalDenied,
    Conflict,
    KeelError,
    NotFound,
    PolicyDenied,
    ToolError,
    Unauthorized,
    ValidationError,
)
from .execution import execution
from .runner import Job, Runner, current_job
from .tool import Tool, tool

#: Aliases for code written against the rebuno SDK.
PolicyError = PolicyDenied
RebunoError = KeelError
UnauthorizedError = Unauthorized

__all__ = [
    "APIError",
    "Agent",
    "ApprovalDenied",
    "Client",
    "Conflict",
    "Execution",
    "IntentResult",
    "Job",
    "KeelError",
    "NotFound",
    "PolicyDenied",
    "PolicyError",
    "RebunoError",
    "Runner",
    "Tool",
    "ToolError",
    "Unauthorized",
    "UnauthorizedError",
    "ValidationError",
    "current_job",
    "execution",
    "remote",
    "tool",
]
