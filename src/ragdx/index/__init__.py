"""The index as a maintained data product: everything ``ragdx index`` does, in one place.

- :mod:`ragdx.index.spaces`: embedding spaces built beside the active one, verified, switched
  and rolled back;
- :mod:`ragdx.index.versions`: index versions (chunks, parses, the keyword index and their
  vectors) built beside the live one, verified, switched and rolled back (docs/ingest.md,
  "Index versions");
- :mod:`ragdx.index.checks`: the checks a version passes before it may go live (BM25 latency
  against the live index, permission probes, the query set's required spans).

Internal (not in ``ragdx.__all__``; the CLI is its interface). Its layer is that of the use
cases: it imports the store, ingest and stages, and ``ragdx.diagnosis`` (a verify resolves a
query set's required spans), never ``evaluation``, ``experiments``, ``report``, ``runfolder``,
``build`` or the CLI (tests/test_public_api.py checks).
"""
