"""The gate's report as GitHub-flavoured markdown: a job summary, a pull-request comment.

Every name in it comes from a run, so every one passes `printable` (control characters,
newlines included, shown as escapes) and is set as a code span: no markup, link, HTML or
@mention in a name renders, a backtick in it lengthens the span's fence, and a `|` is
escaped, which GitHub's tables require even inside code spans. The size is bounded by
construction (service.gate: at most MAX_REPORTED_CONFIGS rows of names at most
MAX_NAME_CHARS long), far below the 65,536 characters of a comment.
"""

from __future__ import annotations

import re

from orchestrator.service.gate import MAX_NAME_CHARS, config_count, percent
from orchestrator.text import printable
from results_schema.gate_report import GateOverall, GateReport, GateSpeedup
from results_schema.sampling import level

HEADLINES = {
    "pass": "pass",
    "regression": "REGRESSION",
    "inconclusive": "inconclusive",
    "candidate-incorrect": "candidate INCORRECT",
}
TABLE_COLUMNS = ("config", "baseline ms", "candidate ms", "speedup [{level} CI]", "verdict")


def table_header(confidence: float) -> tuple[str, ...]:
    """The table's header: its interval column names the intervals' confidence level."""
    return tuple(column.format(level=level(confidence)) for column in TABLE_COLUMNS)


def code(value: object, max_chars: int = MAX_NAME_CHARS) -> str:
    """A name from a run as an inert code span, safe in a table cell."""
    # Each pipe escaped, and a backslash run before one doubled, so that no `\\` pair can
    # swallow the escape: GitHub splits a row at any pipe not escaped.
    text = re.sub(r"(\\*)\|", lambda m: m.group(1) * 2 + "\\|", printable(value, max_chars))
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _names(configs: list[str], most: int = 20) -> str:
    """At most `most` names: the list's length stays bounded whatever the run holds."""
    shown = ", ".join(code(c) for c in configs[:most])
    return shown + (f" and {len(configs) - most} more" if len(configs) > most else "")


def _speedup(s: GateSpeedup | None) -> str:
    if s is None:
        return "-"
    return f"{s.speedup:.3f}x [{s.ci_low:.3f}, {s.ci_high:.3f}]"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _row(cells) -> str:
    return "| " + " | ".join(cells) + " |"


def _overall_row(label: str, line: GateOverall | None) -> str:
    if line is None:
        return _row([label, "", "", "-", "no verdict"])
    return _row([label, "", "", _speedup(line), f"**{line.verdict}**"])


def render_markdown(report: GateReport) -> str:
    lines = [
        f"### bench gate: {HEADLINES[report.outcome]} (exit {report.exit_code})",
        "",
        f"{code(report.candidate)} against {code(report.baseline)} "
        f"({code(report.baseline_source, 200)}) · run {code(report.run_id)} "
        f"({code(report.run_status, 20)}) · margin ±{percent(report.margin)} · "
        f"gate on {report.gate_on}",
        "",
    ]
    lines += [f"- {printable(reason, 1200)}" for reason in report.reasons]
    for what, configs in (
        ("slower configs", report.slower_configs),
        ("undecided configs", report.undecided_configs),
        ("configs where the A/A control was judged different", report.control_configs_different),
    ):
        if configs:
            lines.append(f"- {what} ({len(configs)}): {_names(configs)}")
    lines += _failures(report)
    lines += [f"- to decide: {printable(way, 400)}" for way in report.to_decide]
    lines += _ranking(report)
    lines += [
        "",
        _row(table_header(report.confidence)),
        _row(["---", "---:", "---:", "---", "---"]),
    ]
    overall = report.overall
    geomean = f"**geomean** ({config_count(overall.configs)})" if overall else "**geomean**"
    lines.append(_overall_row(geomean, report.overall))
    if report.control is not None:
        label = f"A/A control {code(report.control.identity)}"
        lines.append(_overall_row(label, report.control))
    reasons = {failure.config: failure.reason for failure in report.failures}
    for row in report.configs:
        verdict = row.comparison.verdict if row.comparison else printable(row.note, 120)
        if row.comparison is None and row.config in reasons:
            verdict += ": " + code(reasons[row.config], 120)
        lines.append(
            _row(
                [
                    code(row.config),
                    _ms(row.baseline_ms),
                    _ms(row.candidate_ms),
                    _speedup(row.comparison),
                    verdict,
                ]
            )
        )
    lines.append("")
    if report.configs_omitted:
        lines.append(
            f"{report.configs_omitted} more configs not shown (a pull-request comment holds "
            "65,536 characters); the run's results/summary.csv has every row."
        )
    lines.append(_run_line(report))
    floor = f"1 - {percent(report.margin)}"
    lines.append(
        f"speedup = baseline time / candidate time (> 1: the candidate is faster); verdicts at "
        f"the ±{percent(report.margin)} margin: slower, the whole interval below {floor}; "
        f"not slower (faster, equivalent, not-slower), its lower bound at or above {floor}; "
        "else undecided. A pass needs every gated statistic shown not slower and the A/A "
        "control (one implementation timed twice under two names, the run's noise floor) "
        "equivalent."
    )
    return "\n".join(lines) + "\n"


def _ranking(report: GateReport) -> list[str]:
    """A run of several candidates: their ranking (results_schema/ranking.py), fastest
    first, with the best or the tie; at most MAX_RANKED rows by the schema."""
    ranking = report.ranking
    if ranking is None or not ranking.leads_report():
        return []
    if ranking.best is not None:
        answer = f"best {code(ranking.best)}, shown faster than the runner-up"
    elif ranking.tied:
        answer = f"no best: tied {_names(ranking.tied)}"
    else:
        answer = "no candidate could be ranked"
    lines = [
        "",
        f"**Ranking** by speedup over {code(ranking.baseline)} (geometric mean over "
        f"{config_count(len(ranking.configs))}; {level(ranking.confidence)} simultaneous "
        f"intervals): {answer}",
        "",
        _row(["#", "candidate", "speedup", "leader over it"]),
        _row(["---:", "---", "---:", "---:"]),
    ]
    for c in ranking.candidates:
        lines.append(
            _row([str(c.rank), code(c.identity), _speedup(c.geomean), _speedup(c.versus_leader)])
        )
    lines += [
        f"- not ranked: {code(u.identity)}: {printable(u.reason, 300)}" for u in ranking.unranked
    ]
    return lines


def _failures(report: GateReport, most: int = 20) -> list[str]:
    """Each config where the candidate failed a check, with the check's reason: bounded
    like every list here (at most `most` lines, reasons of bounded length)."""
    if not report.failures:
        return []
    lines = [f"- configs where the candidate failed correctness ({len(report.failures)}):"]
    for failure in report.failures[:most]:
        lines.append(f"  - {code(failure.config)} ({failure.stage}): {code(failure.reason, 300)}")
    if len(report.failures) > most:
        lines.append(f"  - and {len(report.failures) - most} more")
    return lines


def _run_line(report: GateReport) -> str:
    run = report.run
    parts = [f"{report.configs_compared} of {report.configs_total} configs compared"]
    if run.backend:
        parts.append(f"backend {code(run.backend, 20)}")
    if run.gpu:
        parts.append(f"on {code(run.gpu)}")
    sampling = report.sampling
    if sampling is not None and sampling.stopped != "nothing-to-decide":
        parts.append(
            f"{sampling.samples_per_config} samples a config, look {sampling.looks} of "
            f"{len(sampling.schedule)} (stopped: {sampling.stopped})"
        )
    if run.wall_seconds is not None:
        parts.append(f"wall {run.wall_seconds:.0f} s")
    if run.cost_usd is not None:
        rate = f" at ${run.rate_usd_per_hour:.4f}/h" if run.rate_usd_per_hour else ""
        parts.append(f"cost ${run.cost_usd:.4f}{rate}")
    return "Run: " + " · ".join(parts) + "."


def render_json(report: GateReport) -> str:
    """ASCII-escaped, like every JSON bench prints: what a run wrote stays inert."""
    import json

    return json.dumps(report.model_dump(mode="json"), indent=2, ensure_ascii=True) + "\n"
