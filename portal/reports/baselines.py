"""Published fleet failure figures the reliability report sets beside the lab's own.

Only figures a paper states as counts over a stated fleet and period are turned into rates per
GPU-year here; a study that reports its findings in another form is cited for what it says, and
no rate is made up for it. Each figure names its source, so an auditor can check it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.utils.translation import gettext_noop

# The failure categories: the portal's one table of them (portal.maintenance.failures).
from portal.maintenance.failures import (
    CATEGORIES,
    CATEGORY_LABELS,
    HARDWARE_XID,
    INTERCONNECT,
    MEMORY,
    OTHER,
    THERMAL,
)

__all__ = ["CATEGORIES", "CATEGORY_LABELS", "HARDWARE_XID", "INTERCONNECT", "MEMORY", "OTHER", "THERMAL"]

HOURS_PER_YEAR = 24 * 365.25
ALL = "all"


@dataclass(frozen=True)
class PublishedFigure:
    """A count of failures of one kind over a fleet and period, as the source states it."""

    category: str  # one of CATEGORIES, or ALL
    failures: int
    what: str  # the source's own name for what it counted (English, gettext_noop)

    def per_gpu_year(self, gpu_years: float) -> float:
        return self.failures / gpu_years


@dataclass(frozen=True)
class PublishedStudy:
    key: str
    label: str  # a short name for tables (a reference, never translated)
    citation: str  # authors, title, venue, year: a reference, never translated
    url: str
    summary: str  # what the study found, in a sentence (English, gettext_noop)
    gpus: int | None = None
    days: float | None = None
    figures: tuple[PublishedFigure, ...] = field(default_factory=tuple)

    @property
    def gpu_years(self) -> float | None:
        if self.gpus is None or self.days is None:
            return None
        return self.gpus * self.days / 365.25


STUDIES = (
    PublishedStudy(
        key="llama3",
        label="Llama 3 (Meta, 2024)",
        citation="Llama Team, AI @ Meta. The Llama 3 Herd of Models. arXiv:2407.21783, 2024 (section 3.3.4, table 5).",
        url="https://arxiv.org/abs/2407.21783",
        summary=gettext_noop(
            "419 unexpected interruptions in 54 days of pre-training on 16,384 H100 GPUs; 148 were faulty GPUs "
            "(NVLink failures included) and 72 GPU HBM3 memory. The rest were software, network and host faults."
        ),
        gpus=16_384,
        days=54,
        figures=(
            PublishedFigure(HARDWARE_XID, 148, gettext_noop("faulty GPU (NVLink failures included)")),
            PublishedFigure(MEMORY, 72, gettext_noop("GPU HBM3 memory")),
            PublishedFigure(ALL, 419, gettext_noop("every unexpected interruption (software and network too)")),
        ),
    ),
    PublishedStudy(
        key="meta-rsc",
        label="Meta RSC (HPCA 2025)",
        citation=(
            "A. Kokolis, M. Kuchnik, J. Hoffman et al. Revisiting Reliability in Large-Scale Machine Learning "
            "Research Clusters. IEEE HPCA 2025 (arXiv:2410.21680, 2024)."
        ),
        url="https://arxiv.org/abs/2410.21680",
        summary=gettext_noop(
            "11 months of two research clusters of 16,000 and 8,000 A100 GPUs (over 150 million GPU hours, 4 "
            "million jobs): large jobs are the most exposed to failures, and finding and removing lemon nodes is "
            "one of the mitigations that pays. The report's lemon flag follows that practice."
        ),
    ),
    PublishedStudy(
        key="ncsa-delta",
        label="NCSA Delta (2025)",
        citation=(
            "S. Cui, A. Patke, H. Nguyen et al. Characterizing GPU Resilience and Impact on AI/HPC Systems "
            "(NCSA Delta, 1,056 A100 and H100 GPUs). arXiv:2503.11901, 2025."
        ),
        url="https://arxiv.org/abs/2503.11901",
        summary=gettext_noop(
            "2.5 years and 11.7 million GPU hours on Delta: H100 memory had a 3.2 times lower mean time between "
            "errors per GPU than A100 memory, while H100 hardware was more resilient than A100's; GPU errors "
            "often failed the jobs running on them."
        ),
    ),
)


def published_rates() -> dict[str, list[dict]]:
    """{category or ALL: [{"source", "per_gpu_year", "failures", "gpu_years", "what"}]} for every figure
    a study states as a count over a stated fleet and period."""
    rates: dict[str, list[dict]] = {}
    for study in STUDIES:
        if study.gpu_years is None:
            continue
        for figure in study.figures:
            rates.setdefault(figure.category, []).append(
                {
                    "source": study.key,
                    "label": study.label,
                    "per_gpu_year": figure.per_gpu_year(study.gpu_years),
                    "failures": figure.failures,
                    "gpu_years": study.gpu_years,
                    "what": figure.what,
                }
            )
    return rates


def studies_as_json() -> list[dict]:
    return [  # fmt: skip
        {
            "key": s.key,
            "label": s.label,
            "citation": s.citation,
            "url": s.url,
            "summary": s.summary,
            "gpus": s.gpus,
            "days": s.days,
        }
        for s in STUDIES
    ]
