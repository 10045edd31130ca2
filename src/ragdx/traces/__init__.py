"""Traces in and out: every way a trace enters ragdx or leaves it, in one package.

In (each becomes the diagnosis's :class:`~ragdx.diagnosis.locate.TraceView`):

- :mod:`ragdx.traces.jsonl`: ragdx's imported-trace format, one JSON object a line, from any
  system (docs/diagnosis.md, "Imported traces"; schema docs/schemas/imported-trace.schema.json);
- :mod:`ragdx.traces.openinference`: OpenInference / OpenTelemetry spans, as Phoenix exports
  them or as OTLP/JSON (``ragdx diagnose --spans``), with the component-to-stage mapping;
- written by a running framework: :mod:`ragdx.integrations` (a Haystack tracer, a LangChain
  callback handler) writes the imported-trace format as the pipeline runs;
- received live: :mod:`ragdx.serve` takes OTLP/HTTP and reads it with
  :mod:`ragdx.traces.openinference`;
- evaluation sets (RAGAS, DeepEval): :mod:`ragdx.label` turns their retrieved contexts and
  responses into the imported-trace format.

Out: :mod:`ragdx.traces.export` writes a run's traces as OpenInference spans (``ragdx export``),
which :mod:`ragdx.traces.openinference` reads back to the same diagnoses.

The use case that diagnoses imported traces and writes a run folder is
:func:`ragdx.experiments.imported.diagnose_imported` (``ragdx diagnose``).

Its layer: above :mod:`ragdx.diagnosis` (it builds the diagnosis's views), below ``experiments``,
``report``, ``serve``, ``label`` and the CLI; ``stages``, ``store``, ``ingest`` and ``index``
never import it (tests/test_public_api.py checks).
"""
