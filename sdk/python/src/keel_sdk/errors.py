"""Typed errors. Each keeps the kernel's reason: a policy denial is a PolicyDenied with the
rule's reason (not "HTTP 403"), an approval denial carries the approver's reason."""

from __future__ import annotations

import re

_DENIAL = re.compile(r"^policy denied: (?P<reason>.*) \(rule: (?P<rule>[^()]+)\)$", re.DOTALL)


class KeelError(Exception):
    """Base of every error this SDK raises."""


class APIError(KeelError):
    """The kernel answered an error envelope ``{"error", "code"}``."""

    def __init__(self, message: str, code: str = "", status_code: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status_code = status_code


class ValidationError(APIError):
    """400: the request was malformed."""


class Unauthorized(APIError):
    """401: the credentials were refused. Agents and runners stop instead of reconnecting."""


class NotFound(APIError):
    """404."""


class Conflict(APIError):
    """409: the state does not allow the request."""


class PolicyDenied(KeelError):
    """The policy (or a hook) refused a call; ``reason`` is the kernel's, ``rule_id`` the rule
    (``hook:<id>`` for a hook) when the kernel names it."""

    def __init__(self, reason: str, rule_id: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.rule_id = rule_id


class ApprovalDenied(PolicyDenied):
    """A human denied the call; ``reason`` is what the approver wrote (empty when none)."""

    def __init__(self, reason: str, step_id: str = "") -> None:
        super().__init__(reason or "denied by human approval", "approval")
        self.step_id = step_id


class ToolError(KeelError):
    """A tool failed (or its failure was replayed from the journal)."""

    def __init__(self, message: str, tool_id: str = "", step_id: str = "") -> None:
        super().__init__(message)
        self.tool_id = tool_id
        self.step_id = step_id


def from_response(status: int, body: object) -> KeelError:
    """Maps an error response to its typed error."""
    message, code, rule_id = f"HTTP {status}", "", ""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):  # a nested envelope
            message = str(error.get("message", message))
            code = str(error.get("code", ""))
        elif isinstance(error, str):
            message = error
        code = str(body.get("code", code) or code)
        rule_id = str(body.get("rule_id", "") or "")
    if status == 403:
        return PolicyDenied(message, rule_id)
    kinds: dict[int, type[APIError]] = {
        400: ValidationError,
        401: Unauthorized,
        404: NotFound,
        409: Conflict,
    }
    return kinds.get(status, APIError)(message, code, status)


def denial(text: str) -> PolicyDenied:
    """The typed error of an intent's denial text (``policy denied: <reason> (rule: <id>)``)."""
    found = _DENIAL.match(text)
    if found is None:
        return PolicyDenied(text or "denied by policy")
    return PolicyDenied(found.group("reason"), found.group("rule"))
