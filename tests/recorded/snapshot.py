"""A run folder reduced to what must not change when the code is refactored: every diagnosis, every
metric value except latencies, and the report's visible text with its numbers masked (so timings
and dates do not count, while every section, row, label, outcome and hypothesis does)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

_TAG = re.compile(r"<(script|style)\b.*?</\1>|<[^>]+>", re.S)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_SPACE = re.compile(r"\s+")


def report_text(page: str, root: Path | None = None) -> str:
    """The visible text of a report, numbers masked as ``#``, the folder it was made in as
    ``<root>``, and white space folded."""
    text = html.unescape(_TAG.sub(" ", page))
    if root is not None:
        text = text.replace(str(root), "<root>")
    return _SPACE.sub(" ", _NUMBER.sub("#", text)).strip()


def snapshot(folder: Path, root: Path | None = None) -> dict:
    """What must not change of the run folder ``folder`` (``root``: the folder the run's store
    and outputs were made in, masked in texts)."""
    diagnoses = [json.loads(line) for line in (folder / "diagnosis.jsonl").read_text(encoding="utf-8").splitlines()]
    metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))

    def values(block: dict) -> dict:
        return {name: round(a["value"], 9) for name, a in block["metrics"].items() if not name.startswith("latency")}

    return {
        "diagnoses": diagnoses,
        "metrics": {"overall": values(metrics["overall"]),
                    "by_tag": {tag: values(block) for tag, block in metrics["by_tag"].items()},
                    "outcomes": metrics["overall"]["outcomes"],
                    "first_failure": metrics["overall"]["first_failure"]},
        "report": report_text((folder / "report.html").read_text(encoding="utf-8"), root),
    }
