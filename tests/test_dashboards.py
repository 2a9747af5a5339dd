"""The Grafana dashboard and the Prometheus alerting rules under deploy/: every metric their PromQL names is one
that `/metrics` exports (scraped over HTTP from the app, with a real worker and Redis, after jobs ran), and the
rules file has the shape Prometheus loads."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tasks_backend.running.stats import JobStats, Tally
from tasks_backend.service.runtime import Runtime
from tests.conftest import ALICE, wait_until

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "tasks-backend.json"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"

#: PromQL's functions (https://prometheus.io/docs/prometheus/latest/querying/functions/) and aggregations.
FUNCTIONS = frozenset("""
abs absent absent_over_time ceil changes clamp clamp_max clamp_min day_of_month day_of_week day_of_year
days_in_month delta deriv exp floor histogram_avg histogram_count histogram_fraction histogram_quantile
histogram_stddev histogram_stdvar histogram_sum holt_winters double_exponential_smoothing hour idelta increase
irate label_join label_replace ln log2 log10 minute month predict_linear rate resets round scalar sgn sort
sort_desc sort_by_label sort_by_label_desc sqrt time timestamp vector year avg_over_time min_over_time
max_over_time sum_over_time count_over_time quantile_over_time stddev_over_time stdvar_over_time last_over_time
present_over_time mad_over_time acos acosh asin asinh atan atanh cos cosh sin sinh tan tanh deg rad pi
sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio
""".split())  # noqa: SIM905 (a word list reads better as prose)
#: Words that take a parenthesised list of label names, and the other keywords.
LABEL_LISTS = ("by", "without", "on", "ignoring", "group_left", "group_right")
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "atan2", *LABEL_LISTS})


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: string literals, label matchers (`{...}`), label lists after
    `by`/`without`/`on`/`ignoring`/`group_left`/`group_right`, ranges and durations (`[5m]`, `offset 1h`),
    numbers and Grafana's `$variables` dropped; what is left is functions (followed by `(`), keywords, and
    metric names. An identifier called like a function must be one PromQL has."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    text = re.sub(r"\{[^{}]*\}", " ", text)
    text = re.sub(r"\[[^\[\]]*\]", " ", text)
    text = re.sub(rf"\b({'|'.join(LABEL_LISTS)})\s*\([^()]*\)", " ", text)
    text = re.sub(r"\boffset\s+-?[0-9a-z]+", " ", text)
    text = re.sub(r"\$\{?\w+\}?", " ", text)
    text = re.sub(r"(?<![\w:])[0-9][0-9.eE+]*\b", " ", text)
    names: set[str] = set()
    for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        word = match[0]
        called = text[match.end():].lstrip().startswith("(")
        if called:
            assert word in FUNCTIONS, f"{word!r} is not a PromQL function (in {expr!r})"
        elif word not in KEYWORDS:
            names.add(word)
    return names


def test_the_tokenizer_finds_metrics_and_nothing_else() -> None:
    assert metric_names('sum by (operation, le) (rate(a_total{outcome="failed",x=~"by|rate"}[$__rate_interval]))'
                        ' / on(operation) group_left(le) sum without (queue) (b offset 5m) > bool 0.5 and c') \
        == {"a_total", "b", "c"}
    assert metric_names("histogram_quantile(0.95, sum by (le) (rate(d_bucket[5m]))) > 1e3 unless absent(e)") \
        == {"d_bucket", "e"}
    with pytest.raises(AssertionError, match="not a PromQL function"):
        metric_names("no_such_function(x)")


def _exprs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from _exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _exprs(item)


def dashboard_exprs() -> list[str]:
    return list(_exprs(json.loads(DASHBOARD.read_text())))


def rule_exprs() -> list[str]:
    return [rule["expr"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


SUFFIXES = {"counter": ("", "_total"), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported(text: str) -> set[str]:
    """Names of the samples a Prometheus text exposition carries, and of those its `# TYPE` lines declare (a family
    without samples yet, such as the sweeper's actions before any pass found work)."""
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    for family, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE):
        names.update(family + suffix for suffix in SUFFIXES.get(kind, ("",)))
    return names


@pytest.fixture(scope="module")
def scraped(worker: Any, runtime: Runtime, live_url: str) -> set[str]:
    """`/metrics` over HTTP once a job completed and one failed, a push POST failed and the worker published its
    slots: every family then has samples."""
    with httpx.Client(base_url=live_url, headers=ALICE, timeout=10) as http:
        ids = [http.post("/v1/jobs", json={"operation": "test.counted", "params": {"fail": fail}}).json()["taskId"]
               for fail in (False, True)]
        for job_id in ids:
            wait_until(lambda j=job_id: http.get(f"/v1/jobs/{j}").json()["status"] in ("completed", "failed"), 30,
                       message="the jobs to end")
        tally = Tally(JobStats(runtime.store), "push")  # what push delivery counts its POSTs with
        tally.add("failed")
        tally.write()

        def complete() -> set[str] | None:
            text = http.get("/metrics").text
            names = exported(text)
            wanted = {"tasks_backend_jobs_finished_total", "tasks_backend_job_duration_seconds_bucket",
                      "tasks_backend_push_deliveries_total", "tasks_backend_workers_alive"}
            # Both jobs' counts written (a worker writes them about once a second): none lands in a later test's
            # figures.
            both = all(f'operation="test.counted",outcome="{o}"' in text for o in ("completed", "failed"))
            return names if wanted <= names and both else None

        found: set[str] = wait_until(complete, 15, message="every metric family in /metrics")
        return found


def test_every_dashboard_query_names_only_exported_metrics(scraped: set[str]) -> None:
    exprs = dashboard_exprs()
    assert len(exprs) >= 15
    named = set().union(*(metric_names(e) for e in exprs))
    assert named and named <= scraped, sorted(named - scraped)
    for family in ("backlog_oldest_seconds", "jobs_running", "jobs_finished_total", "job_duration_seconds_bucket",
                   "workers_alive", "push_deliveries_total", "queue_depth", "jobs_held"):
        assert f"tasks_backend_{family}" in named, family  # what the issue asks the dashboard to show


def test_every_alert_names_only_exported_metrics(scraped: set[str]) -> None:
    named = set().union(*(metric_names(e) for e in rule_exprs()))
    assert named and named <= scraped, sorted(named - scraped)


def test_the_rules_file_has_the_shape_prometheus_loads() -> None:
    document = yaml.safe_load(RULES.read_text())
    assert set(document) == {"groups"}
    names: set[str] = set()
    for group in document["groups"]:
        assert set(group) <= {"name", "interval", "rules", "limit"} and group["name"] and group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}, rule
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule["alert"]) and rule["alert"] not in names
            names.add(rule["alert"])
            assert isinstance(rule["expr"], str) and rule["expr"].strip()
            assert rule["expr"].count("(") == rule["expr"].count(")")
            if "for" in rule:
                assert re.fullmatch(r"([0-9]+(ms|s|m|h|d|w|y))+", str(rule["for"])), rule["for"]
            assert rule["labels"]["severity"] in ("critical", "warning", "info")
            assert all(isinstance(v, str) for v in rule["labels"].values())
            assert {"summary", "description"} <= set(rule["annotations"])
            assert all(isinstance(v, str) for v in rule["annotations"].values())
    assert len(names) >= 8


def test_the_dashboard_is_grafana_json_with_a_prometheus_source() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 30
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    (source,) = dashboard["templating"]["list"]
    assert source["type"] == "datasource" and source["query"] == "prometheus"
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
