# The two set-up commands of the README:
#   make demo   installs ragdx into .venv and runs the bundled example
#   make test   installs ragdx and its test dependencies into .venv and runs the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(BIN)/ragdx demo

# pytest exits 5 when it collected no test: that is a failure too.
test: $(VENV)/.installed
	$(BIN)/python -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "no tests were collected" >&2; exit 1; fi; exit $$rc

bench: $(VENV)/.installed
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) build src/*.egg-info
