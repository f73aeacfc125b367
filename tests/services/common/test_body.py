"""Bodies parsed from their bytes (``services.common.body``): the same 422 as FastAPI's own
parse for every malformed body, and the OpenAPI document still states each body's schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field

from privbandit.services.common.body import JsonBody, body_openapi, json_response
from privbandit.services.common.web import install_error_handlers
from privbandit.services.device.app import create_app as create_device
from privbandit.services.shuffler.app import create_app as create_shuffler
from privbandit.shared.protocol.messages import DecideRequest, FeedbackRequest, ReportUpload
from privbandit.shared.protocol.paillier import PaillierUpload
from tests.helpers import make_settings


class Inner(BaseModel):
    v: float = Field(allow_inf_nan=False)


class Outer(BaseModel):
    items: list[Inner] = Field(min_length=1)


def app_with_body() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/echo", openapi_extra=body_openapi(Outer))
    async def echo(body: JsonBody[Outer]) -> Any:
        return json_response(body, 201)

    return app


@pytest.mark.parametrize(("raw", "where"), [
    (b"", "body"),                                   # no body at all
    (b"{not json", "body"),                          # not JSON
    (b'{"items": []}', "body.items"),                # schema: too short
    (b'{"items": [{"v": NaN}]}', "body"),            # NaN is not JSON
    (b'{"items": [{"v": "x"}]}', "body.items.0.v"),  # wrong type
    (b'{"items": [{"v": 1}], "extra": 1', "body"),   # truncated
])
def test_a_bad_body_is_a_422_invalid_request_naming_where(raw: bytes, where: str) -> None:
    with TestClient(app_with_body()) as c:
        resp = c.post("/echo", content=raw, headers={"content-type": "application/json"})
    assert resp.status_code == 422, resp.text
    assert resp.json()["code"] == "invalid_request"
    assert resp.json()["message"].startswith(where), resp.text


def test_a_good_body_is_parsed_and_answered_once_serialised() -> None:
    with TestClient(app_with_body()) as c:
        resp = c.post("/echo", json={"items": [{"v": 1.5}]})
    assert resp.status_code == 201
    assert resp.json() == {"items": [{"v": 1.5}]}


def _no_local_refs(node: Any) -> bool:
    if isinstance(node, dict):
        return "$defs" not in node and all(
            not (k == "$ref" and str(v).startswith("#/$defs/")) and _no_local_refs(v)
            for k, v in node.items())
    if isinstance(node, list):
        return all(_no_local_refs(v) for v in node)
    return True


@pytest.mark.parametrize(("service", "path", "model"), [
    ("device", "/v1/tasks/{task}/decide", DecideRequest),
    ("device", "/v1/tasks/{task}/feedback", FeedbackRequest),
    ("shuffler", "/v1/tasks/{task}/reports", ReportUpload),
    ("shuffler", "/v1/tasks/{task}/encrypted-counts", PaillierUpload),
])
def test_openapi_states_each_parsed_body(
    tmp_path: Path, service: str, path: str, model: type[BaseModel]
) -> None:
    create = create_device if service == "device" else create_shuffler
    doc = create(make_settings(tmp_path)).openapi()
    body = doc["paths"][path]["post"]["requestBody"]
    assert body["required"] is True
    schema = body["content"]["application/json"]["schema"]
    assert schema["title"] == model.__name__
    assert set(schema["properties"]) == set(model.model_fields)
    assert _no_local_refs(schema)  # nested models inlined: every $ref resolves in the document
