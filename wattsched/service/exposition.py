"""Prometheus exposition for both daemons: a set of collectors rendered, at each scrape, in the
format the scraper asks for (OpenMetrics when its Accept header names it, else the text format)."""

from __future__ import annotations

from collections.abc import Iterable

from fastapi import Request
from fastapi.responses import Response
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry


def render(request: Request, collectors: Iterable[Collector]) -> Response:
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encoder(registry), media_type=content_type)
