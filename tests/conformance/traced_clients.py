#!/usr/bin/env python3
"""Clients instrumented with OpenTelemetry's official Python SDK, each call made inside a
span of its own, with its context injected the way OpenTelemetry injects it
(`opentelemetry.propagate.inject`: W3C `traceparent`): `requests` on REST, `tritonclient`
HTTP and gRPC (headers, metadata), OpenAI's `openai` package on `/v1/embeddings`, and
`nats-py` over JetStream (message headers). The server under test exports its spans to
the test's OTLP receiver, which checks each trace (tests/e2e/traces.rs).

    traced_clients.py --http HOST:PORT --grpc HOST:PORT [--nats nats://HOST:PORT]

Prints one JSON line per call: the client, its span's trace and span ids, and the
`traceparent` the answer carried back (where the client lets it be read); exits 1 on a
failed call.
"""

import argparse
import asyncio
import json
import sys

import numpy as np
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("tensorplug-traced-clients")

PIXELS = np.linspace(0.0, 16.0, 64, dtype=np.float32).reshape(1, 64)


def traced(client, call):
    """Runs `call(headers)` inside a span named `client`, the span's context in `headers`."""
    with tracer.start_as_current_span(client) as span:
        headers = {}
        propagate.inject(headers)
        answered = call(headers)
        context = span.get_span_context()
    print(
        json.dumps(
            {
                "client": client,
                "trace_id": format(context.trace_id, "032x"),
                "span_id": format(context.span_id, "016x"),
                "answered": answered,
            }
        ),
        flush=True,
    )


def rest_requests(http):
    import requests

    def call(headers):
        body = {"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, 64], "data": PIXELS.ravel().tolist()}]}
        answer = requests.post(f"http://{http}/v2/models/digits/infer", json=body, headers=headers, timeout=30)
        answer.raise_for_status()
        return answer.headers.get("traceparent")

    traced("requests", call)


def triton_http(http):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url=http)

    def call(headers):
        tensor = httpclient.InferInput("input-0", [1, 64], "FP32")
        tensor.set_data_from_numpy(PIXELS, binary_data=True)
        result = client.infer("digits", [tensor], headers=headers)
        assert result.as_numpy("label") is not None
        return None

    traced("tritonclient.http", call)


def triton_grpc(grpc):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url=grpc)

    def call(headers):
        tensor = grpcclient.InferInput("input-0", [1, 64], "FP32")
        tensor.set_data_from_numpy(PIXELS)
        result = client.infer("digits", [tensor], headers=headers)
        assert result.as_numpy("label") is not None
        return None

    traced("tritonclient.grpc", call)


def openai_embeddings(http):
    from openai import OpenAI

    client = OpenAI(base_url=f"http://{http}/v1", api_key="unused")

    def call(headers):
        raw = client.embeddings.with_raw_response.create(model="minilm", input=["traced"], extra_headers=headers)
        assert len(raw.parse().data) == 1
        return raw.headers.get("traceparent")

    traced("openai", call)


def nats_jetstream(url):
    import nats

    async def call_async(headers):
        client = await nats.connect(url)
        inbox = client.new_inbox()
        answers = await client.subscribe(inbox)
        body = {"inputs": [{"name": "input-0", "datatype": "FP32", "shape": [1, 64], "data": PIXELS.ravel().tolist()}]}
        await client.jetstream().publish(
            "tensorplug.infer.digits", json.dumps(body).encode(), headers={**headers, "Tensorplug-Reply-To": inbox}
        )
        answer = await answers.next_msg(timeout=30)
        await client.close()
        assert answer.headers["Tensorplug-Status"] == "200", answer.data
        return answer.headers.get("traceparent")

    traced("nats-py", lambda headers: asyncio.run(call_async(headers)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", required=True)
    parser.add_argument("--grpc", required=True)
    parser.add_argument("--nats")
    args = parser.parse_args()
    rest_requests(args.http)
    triton_http(args.http)
    triton_grpc(args.grpc)
    openai_embeddings(args.http)
    if args.nats:
        nats_jetstream(args.nats)


if __name__ == "__main__":
    try:
        main()
    except Exception as error:  # noqa: BLE001 - any failure is the test's
        print(f"FAIL {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        raise
