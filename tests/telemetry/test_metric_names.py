"""Which files of the portal name a reading metric's field (issue #46, part 1).

A metric is declared once, in the registry (portal/telemetry/metrics.py); the rest of the portal names
it through the registry (`metrics.TEMPERATURE.name`, or the registry's attributes: label, unit, chart
group, live, latest, rollup), so renaming or adding a field is one place. Besides the registry, its
tests, the agent and the docs (not scanned here), the files below still spell metric fields out, each
for the reason given and with the names given: a new file that names one, or a new name in one of
these, fails here. Go through the registry instead (docs/architecture.md, "A metric").
"""

import re
from pathlib import Path

from portal.telemetry import metrics

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("portal", "static", "templates")
SUFFIXES = {".py", ".js", ".html", ".txt", ".css", ".json", ".sql"}
EVERY = frozenset(metric.name for metric in metrics.BUILT_IN)

ALLOWED: dict[str, frozenset[str]] = {
    # The registry itself.
    "portal/telemetry/metrics.py": EVERY,
    # The readings table: each metric is a column of the model (a migration adds it).
    "portal/telemetry/models.py": EVERY,
    # The ingest and rollup hot paths read their positions and SQL by name (ingest speed, issue #46).
    "portal/telemetry/services/ingest.py": frozenset({"throttle_reasons"}),
    "portal/telemetry/services/rollups.py": frozenset({"energy_mj", "throttle_reasons"}),
    "portal/telemetry/services/rollup_chunks.py": frozenset({"power_w"}),
    # Fields of other tables that share a metric's name: wear's and jobs' energy totals.
    "portal/wear/models.py": frozenset({"energy_mj"}),
    "portal/wear/meters.py": frozenset({"energy_mj"}),
    "portal/wear/services.py": frozenset({"energy_mj"}),
    "portal/wear/selectors.py": frozenset({"energy_mj"}),
    "portal/wear/packing.py": frozenset({"energy_mj"}),
    "portal/jobs/models.py": frozenset({"energy_mj"}),
    "portal/jobs/spans.py": frozenset({"energy_mj"}),
    "portal/jobs/selectors.py": frozenset({"energy_mj"}),
    "portal/jobs/figures.py": frozenset({"energy_mj"}),
    "portal/jobs/views.py": frozenset({"energy_mj"}),
    "portal/jobs/templates/jobs/job.html": frozenset({"energy_mj"}),
    "portal/reports/usage.py": frozenset({"energy_mj"}),
    "portal/demo/jobs.py": frozenset({"energy_mj"}),
    "portal/demo/wear.py": frozenset({"energy_mj"}),
    # Keys of a checklist run's stored evidence, which its page reads (stored data keeps its keys).
    "portal/checklists/autochecks.py": frozenset({"temperature_c", "power_w"}),
    "static/checklists/run.js": frozenset({"power_w"}),
    "templates/checklists/run.html": frozenset({"temperature_c"}),
}


def named_fields(root: Path = REPO) -> dict[str, set[str]]:
    """{file: the metric fields it names as words}, over the scanned trees (migrations left out:
    a migration names the columns it adds, and is never edited again)."""
    word = re.compile(r"\b(" + "|".join(sorted(EVERY, key=len, reverse=True)) + r")\b")
    found = {}
    for top in SCANNED:
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in SUFFIXES or "migrations" in path.parts or "__pycache__" in path.parts:
                continue
            names = set(word.findall(path.read_text(encoding="utf-8", errors="replace")))
            if names:
                found[path.relative_to(root).as_posix()] = names
    return found


def test_only_the_registry_and_the_listed_files_name_metric_fields():
    unexpected = {
        path: sorted(names - ALLOWED.get(path, frozenset()))
        for path, names in named_fields().items()
        if names - ALLOWED.get(path, frozenset())
    }
    assert not unexpected, (
        "these files name reading metrics by hand; name them through portal/telemetry/metrics.py "
        f"(metrics.TEMPERATURE.name, the registry's attributes) instead: {unexpected}"
    )


def test_the_list_holds_no_file_that_no_longer_names_them():
    found = named_fields()
    stale = {
        path: sorted(allowed - found.get(path, set())) for path, allowed in ALLOWED.items()
        if allowed - found.get(path, set())
    }  # fmt: skip
    assert not stale, f"these no longer name what ALLOWED lets them: take it off the list: {stale}"


def test_the_scan_finds_a_field_named_by_hand(tmp_path):
    (tmp_path / "portal" / "rules").mkdir(parents=True)
    (tmp_path / "portal" / "rules" / "fan.py").write_text('metric = "fan_speed_pct"\n')
    (tmp_path / "portal" / "rules" / "ok.py").write_text("metric = metrics.FAN.name  # fan_speed_pct_mean\n")
    for top in ("static", "templates"):
        (tmp_path / top).mkdir()
    assert named_fields(tmp_path) == {"portal/rules/fan.py": {"fan_speed_pct"}}
