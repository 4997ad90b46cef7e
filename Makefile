# kmq: every target installs what it needs (venv, pip packages, Kafka jars) on a fresh machine.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: venv install test unit functional lint kafka-fetch kafka-up kafka-down demo bench bench-quick proto clean \
        test-audit-cluster bench-audit-scale

venv install: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "kmq needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark,bench]'
	@touch $@

kafka-fetch: $(STAMP)
	$(PY) -m kmq.testing.broker fetch
	$(PY) -c 'from kmq.ops.audit import connector_jars; connector_jars()'

test: kafka-fetch
	$(PY) -m pytest tests/unit tests/functional

unit: $(STAMP)
	$(PY) -m pytest tests/unit

functional: kafka-fetch
	$(PY) -m pytest tests/functional

# The audit on a Spark standalone cluster (a master and two workers from pyspark's own distribution) against local
# mode and the generator's ground truth.
test-audit-cluster: kafka-fetch
	$(PY) -m pytest tests/cluster -p no:cacheprovider -o testpaths=tests/cluster

# The audit on 1M, 3M and 10M generated messages: wall time, peak memory, equality with the ground truth.
bench-audit-scale: kafka-fetch
	$(PY) -m tests.bench.audit_scale $(if $(SIZES),--sizes $(SIZES),)

lint: $(STAMP)
	$(VENV)/bin/ruff check kmq tests
	$(VENV)/bin/mypy kmq
	$(VENV)/bin/lint-imports --no-cache

kafka-up: kafka-fetch
	@$(PY) -m kmq.testing.broker up

kafka-down: $(STAMP)
	@$(PY) -m kmq.testing.broker down

demo: kafka-fetch
	$(PY) -m kmq.demo

bench: kafka-fetch
	$(PY) -m pytest tests/bench -p no:cacheprovider -o testpaths=tests/bench -m bench -s

bench-quick: kafka-fetch
	KMQ_BENCH_QUICK=1 $(PY) -m pytest tests/bench -p no:cacheprovider -o testpaths=tests/bench -m bench -s

# Regenerates the committed protobuf modules from the .proto files.
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Ikmq/wire/proto --python_out=kmq/wire/_proto --pyi_out=kmq/wire/_proto kmq/wire/proto/kmq_marker.proto
	$(PY) -m grpc_tools.protoc -Itests/interop --python_out=tests/interop/_proto --pyi_out=tests/interop/_proto tests/interop/kafka_mq_v1.proto

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
