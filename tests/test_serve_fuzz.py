"""The serve API fuzzed from its own OpenAPI schema (schemathesis): whatever a client sends, no answer is a
server error, the service still answers afterwards, and no instance a fuzzed request started is left behind."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402

from flowpipe.serve.api import create_app  # noqa: E402
from flowpipe.serve.instances import Instances  # noqa: E402

# a graph that starts at once and touches no model: what a fuzzed start request may start, many times
TEMPLATE = """# Frames made up and dropped: a template a client may start with any parameters.
params:
  count: 20
nodes:
  - {id: src, type: synthetic_source, config: {count: "${params.count}", width: 64, height: 48}}
  - {id: sink, type: null_sink, inputs: {in: src}}
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Instances, Path]]:
    root = tmp_path_factory.mktemp("fuzz")
    graphs = root / "graphs"
    graphs.mkdir()
    (graphs / "made_up.yaml").write_text(TEMPLATE)
    instances = Instances([graphs], root / "out")
    with TestClient(create_app(instances)) as client:  # one instance for the fuzzed ids to find
        assert client.post("/pipelines/made_up", json={}).status_code == 201
    yield instances, root
    for inst in list(instances.instances.values()):
        instances.stop(inst)


@pytest.fixture(scope="module")
def api_schema(served: tuple[Instances, Path]) -> object:
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(served[0]))


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_gets_a_server_error(case: Any, served: tuple[Instances, Path]) -> None:
    """Random bodies and parameters against the real template and the instances started so far (a random
    name or id alone would only ever meet a 404)."""
    where = case.path_parameters or {}
    if "name" in where and case.method == "POST":
        where["name"] = "made_up"
    started = list(served[0].instances)
    if "iid" in where and started and len(str(where["iid"])) % 2 == 0:
        where["iid"] = started[len(started) // 2]
    response = case.call()
    case.validate_response(response, checks=(not_a_server_error,))


def test_the_service_answers_after_the_fuzz_and_keeps_no_instance_it_started(served: tuple[Instances, Path]) -> None:
    instances, _ = served
    with TestClient(create_app(instances)) as client:
        assert client.get("/pipelines").status_code == 200
        for iid in list(instances.instances):
            assert client.delete(f"/pipelines/{iid}").status_code in (200, 404)
        statuses = client.get("/pipelines/status").json()
        assert all(s["state"] not in ("QUEUED", "RUNNING") for s in statuses), statuses
