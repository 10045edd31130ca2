"""Adapters that write ragdx's imported traces straight from a running framework pipeline
(docs/integrations.md): :mod:`ragdx.integrations.haystack` (a Haystack 2 tracer, extra
``haystack``) and :mod:`ragdx.integrations.langchain` (a LangChain callback handler, extra
``langchain``). Each imports its framework when imported, and raises
:class:`~ragdx.errors.MissingExtraError` naming the extra when it is absent.
"""
