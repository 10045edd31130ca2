"""Each adapter names the extra to install when its framework is absent (run in every environment:
the framework is hidden from a fresh interpreter)."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module, hidden, extra", [("ragdx.integrations.haystack", "haystack", "haystack"),
                                                   ("ragdx.integrations.langchain", "langchain_core", "langchain"),
                                                   ("ragdx.integrations.llamaindex", "llama_index", "llamaindex")])
def test_a_missing_framework_names_the_extra(module, hidden, extra):
    code = (f"import sys; sys.modules[{hidden!r}] = None\n"
            "from ragdx.errors import MissingExtraError\n"
            f"try:\n    import {module}\nexcept MissingExtraError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert f"pip install 'ragdx[{extra}]'" in out
