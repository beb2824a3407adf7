"""The gate's rules at its defaults, on runs made up row by row, and its markdown's safety
and size bound."""

from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest

from orchestrator.cli.gate_markdown import code, render_markdown
from orchestrator.report import RunResults
from orchestrator.service.gate import MAX_REPORTED_CONFIGS, GateOptions, judge
from results_schema import (
    AttentionConfig,
    Comparison,
    CorrectnessRow,
    Manifest,
    OverallSpeedup,
    Plan,
    SummaryRow,
)
from results_schema.models import ControlInterval, Noise

RUN = "20261125-120000-abcdef"


def split_row(line: str) -> list[str]:
    """A markdown table row's cells as GitHub splits them: at each pipe that is not the
    second half of a backslash pair (pairs are read left to right)."""
    masked = re.sub(r"\\.", "..", line)
    edges = [i for i, ch in enumerate(masked) if ch == "|"]
    return [line[a + 1 : b].strip() for a, b in zip(edges, edges[1:], strict=False)]


PR_COMMENT_CHARS = 65_536


def made_up_run(
    speedups: dict[str, tuple[float, float, float]],
    control: tuple[float, float, float] | None = (1.0, 0.995, 1.005),
    geomean: tuple[float, float, float] | None = None,
    names: list[str] | None = None,
    noise: Noise | None | str = "from control",
) -> RunResults:
    """flash against flash@baseline, each config's speedup (point, low, high) given; the
    run's noise decision made from `control`'s interval on every config and their mean,
    unless given."""
    names = names or list(speedups)
    configs = [
        AttentionConfig(
            name=n, batch=1, heads=1, seq_len=128, head_dim=64, dtype="float16", causal=False
        )
        for n in names
    ]
    plan = Plan(
        name="made-up",
        description="",
        device="cuda",
        candidate="flash",
        compared_with=["sdpa"],
        reference="reference",
        samples_per_config=10,
        control="sdpa" if control else None,
        comparison=Comparison(baseline="flash@baseline", source="tree", ref="../old"),
        configs=configs,
    )
    summary = []
    for name, (point, low, high) in speedups.items():
        summary.append(_row(name, "flash", None))
        summary.append(_row(name, "flash@baseline", (point, low, high), versus="flash"))
        if control:
            summary.append(_row(name, "sdpa@aa", control, versus="sdpa"))
    lines = []
    if geomean:
        lines.append(_overall("flash@baseline", "flash", geomean, len(speedups)))
    if control:
        lines.append(_overall("sdpa@aa", "sdpa", control, len(speedups)))
    if noise == "from control":
        noise = _noise([*speedups, None], control) if control else None
    manifest = Manifest(
        schema_version="1",
        run_id=RUN,
        status="complete",
        finished_at=datetime.now(timezone.utc),
        plan=plan,
        comparison=lines or None,
        noise=noise,
    )
    return RunResults(RUN, "complete", plan, summary, {}, manifest=manifest)


def _row(config, implementation, speedup, versus=None) -> SummaryRow:
    point, low, high = speedup or (None, None, None)
    return SummaryRow(
        run_id=RUN,
        config=config,
        implementation=implementation,
        backend="x",
        mode="single",
        n=10,
        median_ms=1.0,
        p10_ms=0.9,
        p90_ms=1.1,
        mean_ms=1.0,
        std_ms=0.1,
        iqr_over_median=0.1,
        tflops=1.0,
        speedup=point,
        speedup_ci_low=low,
        speedup_ci_high=high,
        verdict="equivalent" if speedup else None,
        versus=versus,
    )


def _noise(configs: list[str | None], interval: tuple[float, float, float]) -> Noise:
    """The A/A control's decision on a run whose control had `interval` on each config."""
    point, low, high = interval
    intervals = [
        ControlInterval(config=c, speedup=point, ci_low=low, ci_high=high) for c in configs
    ]
    return Noise(
        control="sdpa@aa",
        verdict="noisy" if high < 0.99 or low > 1.01 else "quiet",
        reason="made up",
        margin=0.01,
        confidence=0.95,
        intervals=intervals,
        method="made up",
    )


def _overall(identity, versus, speedup, configs) -> OverallSpeedup:
    point, low, high = speedup
    return OverallSpeedup(
        identity=identity,
        versus=versus,
        configs=configs,
        geomean=point,
        ci_low=low,
        ci_high=high,
        verdict="equivalent",
        method="made up",
    )


SAME = (1.0, 0.99, 1.01)
SLOWER_3PCT = (0.97, 0.965, 0.975)  # beyond the 2% margin
SLOWER_1PCT = (0.99, 0.985, 0.995)  # within it
HOLDS = (0.985, 0.981, 0.99)  # a geometric mean shown within the margin


@pytest.mark.parametrize(
    "speedups, geomean, options, outcome",
    [
        ({"a": SAME, "b": SAME}, SAME, GateOptions(), "pass"),
        ({"a": SLOWER_3PCT, "b": SLOWER_3PCT}, SLOWER_3PCT, GateOptions(), "regression"),
        ({"a": SLOWER_1PCT, "b": SLOWER_1PCT}, SLOWER_1PCT, GateOptions(), "pass"),
        # across 1 - margin: not shown slower, but not shown not slower either
        ({"a": (0.97, 0.9, 1.05), "b": SAME}, (0.98, 0.9, 1.05), GateOptions(), "inconclusive"),
        # not shown faster, but shown not slower: a pass
        ({"a": (1.05, 0.99, 1.2)}, (1.05, 0.99, 1.2), GateOptions(), "pass"),
        # one slower config: the geometric mean holds, `any` fails it
        ({"a": SLOWER_3PCT, "b": SAME}, HOLDS, GateOptions(), "pass"),
        ({"a": SLOWER_3PCT, "b": SAME}, HOLDS, GateOptions(gate_on="any"), "regression"),
        ({"a": SLOWER_3PCT}, SLOWER_3PCT, GateOptions(margin=0.05), "pass"),
    ],
)  # fmt: skip
def test_regression_needs_slower_beyond_the_margin(speedups, geomean, options, outcome):
    report = judge(made_up_run(speedups, geomean=geomean), [], options)
    assert report.outcome == outcome, report.reasons
    assert report.exit_code == {"pass": 0, "regression": 6, "inconclusive": 7}[outcome]


def test_a_run_too_noisy_to_see_a_25_percent_slowdown_is_undecided_not_a_pass():
    """Issue 49: 4 of 4 such runs passed, 'no change detected', at 0.609x [0.32, 1.04]."""
    seen = (0.609, 0.32, 1.04)
    report = judge(made_up_run({"a": seen}, geomean=seen), [], GateOptions())
    assert (report.outcome, report.exit_code) == ("inconclusive", 7)
    assert report.overall.verdict == "undecided"
    assert report.reasons == [
        "undecided: the geometric mean 0.609x [0.320, 1.040] lies across 0.98 (1 - 2%): "
        "neither shown slower nor shown not slower"
    ]
    more, shapes = report.to_decide  # the made-up plan is a GPU's: no "a GPU" advice
    needed = int(more.removeprefix("more samples: --samples ").split()[0])
    assert needed > 10  # the made-up plan's samples a config
    assert shapes.startswith("a plan of larger shapes")
    markdown = render_markdown(report)
    assert markdown.startswith("### bench gate: inconclusive (exit 7)")
    assert f"- to decide: more samples: --samples {needed} " in markdown
    assert "| **geomean** (1 config) |  |  | 0.609x [0.320, 1.040] | **undecided** |" in markdown


def test_a_pass_needs_the_control_shown_equivalent_not_merely_not_different():
    # Issue 49: a control at [0.62, 2.0] counted as indistinguishable, and so the run could
    # vouch for a pass. Not different is not enough: it must be shown within the margin.
    run = made_up_run({"a": SAME}, control=(0.935, 0.779, 1.072), geomean=SAME)
    assert run.manifest.noise.verdict == "quiet"  # not judged different: the run may tell
    report = judge(run, [], GateOptions())
    assert (report.outcome, report.exit_code) == ("inconclusive", 7)
    assert report.reasons == [
        "undecided: the A/A control 0.935x [0.779, 1.072] is not shown equivalent within ±2%: "
        "the run did not show that it tells identical implementations apart by less than "
        "the margin"
    ]
    assert report.control.verdict == "undecided"
    passed = judge(made_up_run({"a": SAME}, geomean=SAME), [], GateOptions())
    assert passed.reasons == [
        "shown not slower: the geometric mean 1.000x [0.990, 1.010] starts at or above 0.98 "
        "(1 - 2%); the A/A control 1.000x [0.995, 1.005] is equivalent within ±2%"
    ]


def test_with_gate_on_any_every_config_must_be_decided():
    run = made_up_run({"a": SAME, "b": (0.99, 0.95, 1.03)}, geomean=SAME)
    assert judge(run, [], GateOptions()).outcome == "pass"  # the mean is decided
    report = judge(run, [], GateOptions(gate_on="any"))
    assert (report.outcome, report.undecided_configs) == ("inconclusive", ["b"])
    assert "- undecided configs (1): `b`" in render_markdown(report)


def test_a_noisy_control_makes_it_inconclusive_before_any_regression():
    run = made_up_run({"a": SLOWER_3PCT}, control=(0.95, 0.94, 0.96), geomean=SLOWER_3PCT)
    report = judge(run, [], GateOptions())
    assert (report.outcome, report.exit_code) == ("inconclusive", 7)
    assert report.reasons == [
        "the A/A control judged two identical implementations different beyond the 2% margin "
        "on 2 of its 2 simultaneous intervals (a, their geometric mean): the machine was too "
        "noisy to judge"
    ]
    assert report.control_configs_different == ["a"]


def test_the_gate_re_judges_the_runs_noise_decision_at_its_own_margin():
    # The control strayed 3%: noisy at the plan's 1% and the gate's 2%, not at 5%. The gate
    # reads the run's family-wise decision (manifest.noise), not the control's rows.
    run = made_up_run({"a": SAME}, control=SLOWER_3PCT, geomean=SAME)
    assert run.manifest.noise.verdict == "noisy"
    assert judge(run, [], GateOptions()).outcome == "inconclusive"
    assert judge(run, [], GateOptions(margin=0.05)).outcome == "pass"
    quiet_rows = made_up_run(
        {"a": SAME}, control=SAME, geomean=SAME, noise=_noise(["a"], SLOWER_3PCT)
    )
    assert judge(quiet_rows, [], GateOptions(gate_on="any")).outcome == "inconclusive"


@pytest.mark.parametrize(
    ("noise", "reason"),
    [
        (None, "the run carries no A/A noise decision"),
        (_noise([], SAME).model_copy(update={"verdict": "noisy", "reason": "no config could be "
         "judged"}), "the machine was too noisy to judge: no config could be judged"),
    ],
)  # fmt: skip
def test_without_a_noise_decision_to_read_the_gate_is_inconclusive(noise, reason):
    report = judge(made_up_run({"a": SAME}, geomean=SAME, noise=noise), [], GateOptions())
    assert report.outcome == "inconclusive" and report.reasons[0].startswith(reason)


def test_a_config_whose_candidate_row_is_flagged_is_not_compared():
    run = made_up_run({"a": SLOWER_3PCT, "b": SAME}, geomean=SAME)
    run.summary[0] = run.summary[0].model_copy(update={"flag": "bimodal"})  # flash on "a"
    report = judge(run, [], GateOptions(gate_on="any"))
    assert report.configs_compared == 1 and report.slower_configs == []
    assert report.configs[0].note == "the candidate flagged bimodal"
    # gated on every config, one without an interval is undecided
    assert (report.outcome, report.undecided_configs) == ("inconclusive", ["a"])
    assert "undecided: a: flagged bimodal: no interval" in report.reasons


def test_too_few_configs_compared_or_no_control_is_inconclusive():
    run = made_up_run({"a": SAME}, geomean=SAME, names=["a", "b", "c"])
    assert judge(run, [], GateOptions()).reasons == [
        "only 1 of 3 configs were compared (at least 2 needed)"
    ]
    no_control = judge(made_up_run({"a": SAME}, control=None, geomean=SAME), [], GateOptions())
    assert no_control.outcome == "inconclusive" and "no A/A control" in no_control.reasons[0]


def test_a_wrong_candidate_has_its_own_code_but_an_unavailable_one_not():
    checks = [
        CorrectnessRow(run_id=RUN, config="a", implementation="flash", backend="x", passed=False),
        CorrectnessRow(
            run_id=RUN, config="b", implementation="flash", backend="unavailable", passed=False
        ),
    ]
    run = made_up_run({"a": SAME, "b": SAME}, geomean=SAME)
    report = judge(run, checks, GateOptions())
    assert (report.outcome, report.exit_code, report.incorrect_configs) == (
        "candidate-incorrect",
        8,
        ["a"],
    )
    assert judge(run, checks[1:], GateOptions()).outcome == "pass"


def test_a_wrong_candidate_names_each_failed_config_its_error_and_the_tolerance():
    """Issue 49: a kernel off by x1.05 exited 8 with a gate.md that did not say what its
    error was; one that raised said nothing of the exception."""
    off = CorrectnessRow(
        run_id=RUN, config="a", implementation="flash", backend="x", passed=False,
        max_abs_error=0.0123, tolerance=0.00534, message="max error 0.0123 over tolerance 0.00534",
    )  # fmt: skip
    raised = CorrectnessRow(
        run_id=RUN, config="b", implementation="flash", backend="error", passed=False,
        message="NotImplementedError: causal | <b>not</b>\ndone",
    )  # fmt: skip
    later = CorrectnessRow(
        run_id=RUN, config="b", implementation="flash", backend="x", passed=False,
        stage="timed-first", max_abs_error=1.0, tolerance=0.5,
    )  # fmt: skip
    run = made_up_run({"c": SAME}, geomean=SAME, names=["a", "b", "c"])  # a, b not timed
    report = judge(run, [off, raised, later], GateOptions())
    assert (report.outcome, report.exit_code) == ("candidate-incorrect", 8)
    assert [(f.config, f.stage, f.reason) for f in report.failures] == [
        ("a", "gate", "max error 0.0123 over tolerance 0.00534"),
        ("b", "gate", "NotImplementedError: causal | <b>not</b> done"),  # the first, one line
    ]
    assert (report.failures[0].max_abs_error, report.failures[0].tolerance) == (0.0123, 0.00534)
    markdown = render_markdown(report)
    assert "- configs where the candidate failed correctness (2):" in markdown
    assert "  - `a` (gate): `max error 0.0123 over tolerance 0.00534`" in markdown
    assert "  - `b` (gate): `NotImplementedError: causal \\| <b>not</b> done`" in markdown
    rows = {row[0]: row for row in map(split_row, markdown.splitlines()) if row}
    assert rows["`a`"][4] == (
        "the candidate failed correctness (gate): `max error 0.0123 over tolerance 0.00534`"
    )
    assert later.reason() == "failed, no reason recorded (max error 1, tolerance 0.5)"


def test_names_from_a_run_are_inert_in_markdown():
    assert code("a|b") == "`a\\|b`"
    assert code("a\\|b") == "`a\\\\\\|b`"  # no escaped backslash swallows the pipe's escape
    assert code("x`y") == "``x`y``"
    assert code("`") == "`` ` ``"
    assert code("line\nbreak") == "`line\\x0abreak`"
    assert code("<img src=x> @octocat [l](http://e)").startswith("`<img")  # a code span


def test_markdown_fits_a_pull_request_comment_whatever_the_run_holds():
    hostile = [f"{i:05d}" + "\\|`<@x>" * 40 for i in range(3 * MAX_REPORTED_CONFIGS)]
    speedups = {name: SLOWER_3PCT for name in hostile}
    report = judge(made_up_run(speedups, geomean=SLOWER_3PCT), [], GateOptions())
    markdown = render_markdown(report)
    assert len(markdown) < PR_COMMENT_CHARS
    assert report.configs_omitted == 2 * MAX_REPORTED_CONFIGS
    assert f"{2 * MAX_REPORTED_CONFIGS} more configs not shown" in markdown
    table = [line for line in markdown.splitlines() if line.startswith("|")]
    assert len(table) == 2 + 2 + MAX_REPORTED_CONFIGS  # header, rule, geomean, control
    assert all(len(split_row(line)) == 5 for line in table)


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--wait"], "--fail-on needs an A/B run"),
        (["--candidate", "sdpa", "--baseline-impl", "sdpa-math"], "add --wait"),
        (["--wait", "--baseline-impl", "sdpa-math", "--margin", "2"], "write 2% for 2 percent"),
    ],
)
def test_a_gate_that_could_not_judge_is_refused_before_launch(bench_env, capsys, extra, expected):
    from orchestrator.cli import main

    args = ["launch", "--backend", "local", "--budget", "1", "--fail-on", "slower", *extra]
    assert main(args) == 2
    assert expected in capsys.readouterr().err
    assert not (bench_env / "state" / "sandboxes").exists()  # nothing was launched


def test_the_geometric_means_row_counts_its_configs_in_words():
    """'(1 config)', never '(1 configs)': the gate's markdown lands in a pull request."""
    both_slower = {"a": SLOWER_3PCT, "b": SLOWER_3PCT}
    for speedups, words in (({"a": SLOWER_3PCT}, "(1 config)"), (both_slower, "(2 configs)")):
        run = made_up_run(speedups, geomean=SLOWER_3PCT)
        assert f"| **geomean** {words} |" in render_markdown(judge(run, [], GateOptions()))
    one_slower = judge(
        made_up_run({"a": SLOWER_3PCT, "b": SAME}, geomean=HOLDS), [], GateOptions(gate_on="any")
    )
    assert one_slower.reasons == ["1 config is slower beyond the 2% margin"]
