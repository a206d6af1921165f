"""A recorded Prometheus for unit tests: answers to /api/v1/query by query text, the label
values of __name__ and job, and /api/v1/alerts, in the shapes Prometheus's HTTP API sends,
through an httpx.MockTransport."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

Row = tuple[dict[str, str], float | str]  # labels, value (a string such as "NaN" as sent)


def vector(rows: list[Row]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": labels, "value": [1764600000.0, str(value)]} for labels, value in rows
            ],
        },
    }


@dataclass
class FakeProm:
    vectors: dict[str, list[Row]] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)
    jobs: dict[str, list[str]] = field(default_factory=dict)  # match[] -> job values
    alerts: list[dict[str, Any]] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # query -> error
    asked: list[str] = field(default_factory=list)

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        params = request.url.params
        if path == "/api/v1/query":
            query = params["query"]
            self.asked.append(query)
            if query in self.refused:
                body = {"status": "error", "errorType": "bad_data", "error": self.refused[query]}
                return httpx.Response(400, json=body)
            if query == "1":
                return httpx.Response(
                    200,
                    json={
                        "status": "success",
                        "data": {"resultType": "scalar", "result": [0, "1"]},
                    },
                )
            return httpx.Response(200, json=vector(self.vectors.get(query, [])))
        if path == "/api/v1/label/__name__/values":
            return httpx.Response(200, json={"status": "success", "data": self.names})
        if path == "/api/v1/label/job/values":
            jobs = self.jobs.get(params.get("match[]", ""), [])
            return httpx.Response(200, json={"status": "success", "data": jobs})
        if path == "/api/v1/alerts":
            return httpx.Response(200, json={"status": "success", "data": {"alerts": self.alerts}})
        return httpx.Response(404, text="404 page not found")

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self.handler))
