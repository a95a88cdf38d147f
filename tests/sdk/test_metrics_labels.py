"""`/metrics` with hostile ids (issue 38, item 2): agent ids holding `"`, `\\` and line feeds
are escaped as the exposition format says, so the page parses with Prometheus' own
OpenMetrics parser and no id forges a line; past `--metrics-max-ids` distinct ids, the later
ones share the label value `other`."""

from __future__ import annotations

import httpx
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from harness import Sandbox, unique, wait_until

FORGED = 'x"} 99\nkeel_forged_total 1\n# EOF\n'
HOSTILE = ['quo"te', "back\\slash\\", FORGED]


def scrape(url: str) -> dict[str, list]:
    r = httpx.get(url + "/metrics", timeout=5)
    assert r.status_code == 200, r.text
    # The OpenMetrics parser is strict: a raw quote or line feed in a label value fails it.
    families = text_string_to_metric_families(r.text)
    return {family.name: family.samples for family in families}


def test_hostile_ids_are_escaped_and_bounded(sandbox: Sandbox) -> None:
    kernel = sandbox.kernel("--metrics-max-ids", "3")

    def create(agent_id: str) -> None:
        r = httpx.post(
            kernel.url + "/v0/executions",
            json={"agent_id": agent_id, "input": {}},
            timeout=5,
        )
        assert r.status_code in (200, 201), r.text

    def pending(total: int):
        def probe() -> dict[str, float] | None:
            samples = scrape(kernel.url).get("keel_pending_executions", [])
            values = {sample.labels["agent_id"]: sample.value for sample in samples}
            return values if sum(values.values()) == total else None

        return wait_until(f"{total} pending executions in /metrics", probe)

    for agent_id in HOSTILE:
        create(agent_id)
    assert pending(3) == {agent_id: 1 for agent_id in HOSTILE}
    # Two more agents: past the bound of three distinct ids they share `other`.
    for agent_id in [unique("plain"), unique("plain")]:
        create(agent_id)
    assert pending(5) == {**{agent_id: 1 for agent_id in HOSTILE}, "other": 2}
    families = scrape(kernel.url)
    assert not any("forged" in name for name in families), sorted(families)
    # The ids are unchanged everywhere else: the executions list them as they were sent.
    for agent_id in HOSTILE:
        listed = kernel.get("/v0/executions", agent_id=agent_id)["executions"]
        assert [e["agent_id"] for e in listed] == [agent_id], listed
