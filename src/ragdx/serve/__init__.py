"""``ragdx serve``: receive a running system's OpenTelemetry/OpenInference traces over OTLP/HTTP,
store them durably, diagnose its labelled questions live with the engine of ``ragdx diagnose``,
watch label-free signals over time windows, and browse it all in a web UI (docs/serve.md).

Needs the extra ``serve`` (Starlette, uvicorn, opentelemetry-proto).
"""
