"""The documentation cannot rot silently: every fenced block is a tested snippet (or output, a diagram, a ``make``
target, or marked as not run, with a reason), the README's example is the tested quickstart, and the reference pages
name every setting, metric and command the code has. The snippets themselves run against a broker in
tests/functional/test_docs_samples.py; the ones that need none run here."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from kmq import Config
from kmq.cli import COMMANDS
from kmq.redelivery.metrics import TrackerMetrics
from kmq.worker.metrics import WorkerMetrics

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SNIPPETS = DOCS / "snippets"
PAGES = sorted(DOCS.rglob("*.md"))
INCLUDE = re.compile(r'^--8<-- "(?P<path>[^"]+)"$')
NOT_RUN = re.compile(r"^<!-- not-run: (?P<reason>.{10,}) -->$")
#: Fence languages that are never code to run: program output, tables drawn as text, diagrams.
INERT = {"text", "mermaid"}
SAMPLE_TESTS = (ROOT / "tests" / "functional" / "test_docs_samples.py",
                ROOT / "tests" / "functional" / "test_aio_docs_samples.py", Path(__file__))


@dataclass(frozen=True)
class Fence:
    page: Path
    line: int
    lang: str
    body: list[str]
    before: str  # the nearest non-blank line above the fence


def fences(page: Path) -> list[Fence]:
    lines = page.read_text().splitlines()
    found: list[Fence] = []
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith("```"):
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            lang = stripped[3:].strip()
            before = next((line.strip() for line in reversed(lines[:i]) if line.strip()), "")
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            body = [line.removeprefix(indent) for line in lines[i + 1:end]]
            found.append(Fence(page, i + 1, lang, body, before))
            i = end
        i += 1
    return found


ALL_FENCES = [f for page in [*PAGES, ROOT / "README.md"] for f in fences(page)]


def included(fence: Fence) -> list[str]:
    """The snippet paths a fence includes, or [] if it holds anything else."""
    matches = [INCLUDE.match(line.strip()) for line in fence.body if line.strip()]
    return [m["path"] for m in matches if m] if matches and all(matches) else []


def make_targets(fence: Fence) -> list[str]:
    commands = [line.split("#")[0].split() for line in fence.body if line.strip()]
    if commands and all(len(c) == 2 and c[0] == "make" for c in commands):
        return [c[1] for c in commands]
    return []


def where(fence: Fence) -> str:
    return f"{fence.page.relative_to(ROOT)}:{fence.line}"


@pytest.mark.parametrize("fence", ALL_FENCES, ids=where)
def test_every_fenced_block_is_a_tested_sample_or_says_why_not(fence: Fence) -> None:
    if fence.lang in INERT or NOT_RUN.match(fence.before):
        return
    if make_targets(fence):
        return  # test_make_targets_in_the_docs_exist
    if fence.page.name == "README.md" and fence.lang == "python":
        return  # test_the_readme_example_is_the_tested_quickstart
    assert fence.lang, f"{where(fence)}: a fence needs a language (text for output)"
    assert included(fence), (f"{where(fence)}: a {fence.lang} sample must be a file in docs/snippets included with "
                             f'--8<-- "name", so a test runs it (or say <!-- not-run: why --> above it)')


def test_the_readme_example_is_the_tested_quickstart() -> None:
    readme = [f for f in ALL_FENCES if f.page.name == "README.md" and f.lang == "python"]
    assert len(readme) == 1
    assert "\n".join(readme[0].body) + "\n" == (SNIPPETS / "quickstart.py").read_text()


def test_make_targets_in_the_docs_exist() -> None:
    targets = sorted({t for f in ALL_FENCES for t in make_targets(f)})
    assert {"demo", "test", "bench", "docs"} <= set(targets)
    for target in targets:
        dry = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, check=False)
        assert dry.returncode == 0, f"make {target}: {dry.stderr.strip()}"


def test_every_snippet_is_shown_and_tested() -> None:
    shown = {path for f in ALL_FENCES for path in included(f)}
    files = {str(p.relative_to(SNIPPETS)) for p in SNIPPETS.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert files - shown == set(), "snippets no page includes"
    source = "".join(test.read_text() for test in SAMPLE_TESTS)
    for shown_path in shown:
        path = shown_path.split(":")[0]  # "file:section" includes a marked section of a file
        if (SNIPPETS / path).is_file():
            assert f'"{path}"' in source, f"docs/snippets/{path} is shown in the docs but no test runs it"
        else:
            assert (ROOT / path).is_file(), f"{path}: included, but neither a snippet nor a file of the repository"


def test_yaml_samples_load() -> None:
    config = Config.from_yaml(SNIPPETS / "kmq.yaml", env={})
    assert config.max_deliveries == 5
    assert config.queue_ttl_ms["emails"] == 3_600_000
    assert config.at_most_once_queues == ("metrics",)
    assert config.redacted_kafka()["sasl.password"] == "***"
    assert config.consumer_kafka["session.timeout.ms"] == "10000"
    go = Config.from_yaml(SNIPPETS / "kafka-mq-go.yaml", env={})
    assert (go.redelivery_timeout_ms, go.num_offsets_per_commit, go.marker_format) == (60_000, 1000, "kafka-mq-go")
    assert go.eager_rebalance
    routed = Config.from_yaml(SNIPPETS / "topic-sets.yaml", env={})
    assert [s.name for s in routed.all_topic_sets] == ["default", "tenant-a", "reports"]
    assert routed.topics_for("reports-daily").messages == "acme.reports.messages"
    tenants = Config.from_yaml(SNIPPETS / "tenants.yaml", env={})
    assert tenants.topics_for("tenant-a.emails").acl_prefix == "kmq.tenant-a."
    assert tenants.redacted_kafka()["sasl.password"] == "***"
    moving = Config.from_yaml(SNIPPETS / "topic-sets-move.yaml", env={})
    assert [s.name for s in moving.reading_sets("reports")] == ["reports", "default"]


def test_config_in_code_sample() -> None:
    done = subprocess.run([sys.executable, "config_in_code.py"], cwd=SNIPPETS, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "kmq.messages.dlq kafka-mq-emails ***",
        "invalid config: redelivery_timeout_ms: must be a positive integer, got 0",
    ]


def test_the_configuration_page_names_every_setting() -> None:
    page = (DOCS / "reference" / "configuration.md").read_text()
    missing = [f.name for f in fields(Config) if f.init and f"| `{f.name}`" not in page]
    assert not missing, f"settings missing from docs/reference/configuration.md: {missing}"


def test_the_metrics_page_names_every_metric() -> None:
    page = (DOCS / "reference" / "metrics.md").read_text()
    names = set()
    for registry in (WorkerMetrics().registry, TrackerMetrics().registry):
        for family in registry.collect():
            names.add(family.name + ("_total" if family.type == "counter" else ""))
    missing = sorted(n for n in names if not re.search(rf"`{n}[`{{]", page))
    assert not missing, f"metrics missing from docs/reference/metrics.md: {missing}"


def test_the_cli_page_has_every_command() -> None:
    page = (DOCS / "reference" / "cli.md").read_text()
    missing = [c for c in COMMANDS if f"<!-- kmq-help {c} -->" not in page]
    assert not missing, f"commands missing from docs/reference/cli.md: {missing}"
