# kmq: every target installs what it needs (venv, pip packages, Kafka jars) on a fresh machine.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# The consumer's per-record hot path compiled by mypyc: setup.py's HOT_PATH, and a stamp of their build in place.
HOT_PATH := $(shell sed -n '/^HOT_PATH = \[/,/^\]/s/^ *"\(.*\)",.*/\1/p' setup.py)
COMPILED_STAMP := $(VENV)/.compiled-stamp

.PHONY: venv install test unit functional lint kafka-fetch kafka-up kafka-down demo bench bench-quick proto clean
.PHONY: compiled pure-python dist
.PHONY: test-celery celery-install cluster-up cluster-down test-cluster
.PHONY: test-audit-cluster bench-audit-scale test-secure test-groups

venv install: $(COMPILED_STAMP)

# pip install -e builds pure Python in seconds (every install of the extras below does it again); the hot path is
# compiled once, next.
$(STAMP): pyproject.toml setup.py
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "kmq needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark,bench,console]'
	@touch $@

# The compiled modules (setup.py's HOT_PATH, KMQ_COMPILE=1: mypyc) sit beside their .py files and shadow them: an
# edit of one rebuilds them in place (~25 s), or the edit would not run. Without a C compiler it builds nothing and
# says so. `make pure-python` removes them (the package then runs its .py).

compiled: $(COMPILED_STAMP)

# (setuptools copies an extension it did not need to recompile with its old time: touched, so that it is not taken
# for one older than its source.)
$(COMPILED_STAMP): $(STAMP) $(HOT_PATH)
	KMQ_COMPILE=1 $(PY) setup.py -q build_ext --inplace
	@for f in kmq/_hot_path__mypyc.*.so $(HOT_PATH:.py=.*.so); do if [ -e "$$f" ]; then touch "$$f"; fi; done
	@touch $@

pure-python:
	rm -f kmq/_hot_path__mypyc.*.so $(HOT_PATH:.py=.*.so) $(COMPILED_STAMP)

# An sdist and a wheel as a release has them (python -m build: the wheel from the sdist, in a clean environment,
# compiled); the check fails unless the wheel holds every compiled module and the sdist the sources and setup.py.
dist: $(STAMP)
	rm -rf dist
	KMQ_COMPILE=1 $(PY) -m build --outdir dist .
	$(PY) -m tests.check_dist dist

kafka-fetch: $(COMPILED_STAMP)
	$(PY) -m kmq.testing.broker fetch
	$(PY) -c 'from kmq.ops.audit import connector_jars; connector_jars()'

# The functional tests mostly wait (timeouts, group joins): four at a time on one broker (pytest-xdist).
XDIST := -n 4 --dist loadgroup

# The audit's Spark tests (about 4 min of CPU for a Spark JVM, on a 2-core machine) run in make test-audit.
test: kafka-fetch
	$(PY) -m pytest $(XDIST) --durations=15 -m "not spark" tests/unit tests/functional

.PHONY: test-audit
test-audit: kafka-fetch
	$(PY) -m pytest -n 2 --dist loadgroup --durations=10 -m spark tests/unit tests/functional

unit: $(COMPILED_STAMP)
	$(PY) -m pytest tests/unit

functional: kafka-fetch
	$(PY) -m pytest $(XDIST) tests/functional

# Message groups at scale: 200 groups x 50 messages under three kmq workers, one SIGKILLed and one added, in three
# handler modes (tests/groups; make test runs a small version).
test-groups: kafka-fetch
	$(PY) -m pytest tests/groups -p no:cacheprovider -o testpaths=tests/groups -s

# Issue #34's long scenarios on one broker (~2.5 min): 1,000 deduplicated sends across a SIGKILLed worker, and a
# 2 s schedule fired by two trackers across a SIGKILLed one (the leader kill is in test-cluster).
.PHONY: test-dedup
test-dedup: kafka-fetch
	$(PY) -m pytest tests/dedup -p no:cacheprovider -o testpaths=tests/dedup -s

# The audit on a Spark standalone cluster (a master and two workers from pyspark's own distribution) against local
# mode and the generator's ground truth.
test-audit-cluster: kafka-fetch
	$(PY) -m pytest tests/audit_cluster -p no:cacheprovider -o testpaths=tests/audit_cluster

# The audit on 1M, 3M and 10M generated messages: wall time, peak memory, equality with the ground truth.
bench-audit-scale: kafka-fetch
	$(PY) -m tests.bench.audit_scale $(if $(SIZES),--sizes $(SIZES),)

lint: $(COMPILED_STAMP)
	$(VENV)/bin/ruff check kmq tests docs/snippets docs/hooks build_backend setup.py
	$(VENV)/bin/mypy kmq
	$(VENV)/bin/lint-imports --no-cache

kafka-up: kafka-fetch
	@$(PY) -m kmq.testing.broker up

kafka-down: $(STAMP)
	@$(PY) -m kmq.testing.broker down

# A replicated three-node KRaft cluster (RF 3, min.insync.replicas 2); `python -m kmq.testing.cluster status|kill N|restart N`.
cluster-up: kafka-fetch
	@$(PY) -m kmq.testing.cluster up

cluster-down: $(STAMP)
	@$(PY) -m kmq.testing.cluster down

# Failover tests on a three-node cluster (their own, or `make cluster-up`'s with KMQ_CLUSTER_BOOTSTRAP_SERVERS).
test-cluster: kafka-fetch
	$(PY) -m pytest tests/cluster -p no:cacheprovider -s

# Quiet faults (docs/guides/operations.md): freezes of a broker, the tracker and a worker, network partitions in
# namespaces (a worker, the tracker, a flapping link; one broker of three), each under load. Needs root (ip netns).
.PHONY: test-faults
# Each process's log and the handlers' own log of the last run stay here (the run starts by emptying it).
FAULT_DIR ?= /tmp/kmq-faults
test-faults: kafka-fetch
	$(PY) -m pytest tests/faults -p no:cacheprovider -o testpaths=tests/faults -s -m "not soak" --basetemp=$(FAULT_DIR)

# Bursts and idle minutes (~10 min; SOAK_CYCLES=2 SOAK_BURST=1000 for ~5 min; not in .ci/run): idle CPU per process
# <= 1% of a core, resident memory flat after warm-up, nothing lost.
.PHONY: test-soak
test-soak: kafka-fetch
	$(PY) -m pytest tests/faults/test_soak.py -p no:cacheprovider -o testpaths=tests/faults -s -m soak --basetemp=$(FAULT_DIR)
# Tenants on a secured broker (SASL_SSL, SCRAM-SHA-512, a throwaway CA, the StandardAuthorizer): each tenant's
# credentials do its own work, every attempt on another tenant's queues fails in one line, no secret is logged.
test-secure: kafka-fetch
	$(PY) -m pytest tests/secure -p no:cacheprovider -o testpaths=tests/secure

demo: kafka-fetch
	$(PY) -m kmq.demo

bench: kafka-fetch redis-server
	$(PY) -m pytest tests/bench -p no:cacheprovider -o testpaths=tests/bench -m bench -s

bench-quick: kafka-fetch redis-server
	KMQ_BENCH_QUICK=1 $(PY) -m pytest tests/bench -p no:cacheprovider -o testpaths=tests/bench -m bench -s

# Dramatiq 2.2.1's own test suite (its sdist, fetched at run time into ~/.cache/kmq) against kmq's Dramatiq broker,
# then our tests of that broker (retries, dead letters, time limits, worker SIGTERM and SIGKILL).
.PHONY: test-dramatiq
DRAMATIQ_STAMP := $(VENV)/.dramatiq-installed-stamp

$(DRAMATIQ_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[dev,dramatiq-tests]'
	@touch $@

test-dramatiq: kafka-fetch $(DRAMATIQ_STAMP)
	$(PY) -m tests.frameworks.dramatiq.run_suite
	$(PY) -m pytest tests/frameworks/dramatiq

# Celery/kombu on kmq: kombu's own generic transport tests (t/integration/common.py of the pinned kombu sdist,
# downloaded into ~/.cache/kmq by pip at test time, never copied here) and Celery worker tests, on a real broker.
CELERY_STAMP := $(VENV)/.celery-stamp

celery-install: $(CELERY_STAMP)

$(CELERY_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[dev,celery,bench]'
	@touch $@

# The bench compares Celery on kmq with Celery on Redis (tests/bench/test_bench_celery.py), and Dramatiq likewise: a
# redis-server from the machine's packages is their baseline's broker.
.PHONY: redis-server
redis-server:
	@command -v redis-server >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends redis-server; }

bench bench-quick: $(CELERY_STAMP)

test-celery: kafka-fetch $(CELERY_STAMP)
	$(PY) -m tests.frameworks.kombu.sdist
	$(PY) -m pytest tests/frameworks/kombu -p no:cacheprovider

# Regenerates the committed protobuf modules from the .proto files.
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Ikmq/wire/proto --python_out=kmq/wire/_proto --pyi_out=kmq/wire/_proto kmq/wire/proto/kmq_marker.proto
	$(PY) -m grpc_tools.protoc -Itests/interop --python_out=tests/interop/_proto --pyi_out=tests/interop/_proto tests/interop/kafka_mq_v1.proto

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache

# The documentation site (docs/, mkdocs.yml): every page, link, snippet and docstring must build cleanly.
.PHONY: docs
DOCS_STAMP := $(VENV)/.docs-installed-stamp

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[docs]'
	@touch $@

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# The web console in a real browser against a real broker (tests/console): Playwright drives Debian's chromium,
# installed here from the machine's packages (Playwright's own browser download is never used). Screenshots of the
# main pages land in docs/images/console/ (docs/guides/console.md).
.PHONY: test-console
CONSOLE_STAMP := $(VENV)/.console-stamp

$(CONSOLE_STAMP): $(STAMP)
	@test -x /usr/bin/chromium || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; }
	$(PY) -m pip install -q -e '.[dev,console,console-tests]'
	@touch $@

test-console: kafka-fetch $(CONSOLE_STAMP)
	$(PY) -m pytest tests/console -p no:cacheprovider -o testpaths=tests/console
