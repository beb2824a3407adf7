"""Issue 52 item 7: no word of bench's own without its meaning, no warning without what to
do about it: each flag in the legend names its remedy, and a summary that says "no verdict"
or shows a flag says what they mean."""

from __future__ import annotations

import pytest

from orchestrator.cli.report_table import MEANINGS, flag_legend, verdict_legend

FLAGS = ("impossible", "wrong-timed-output", "quantised", "bimodal")


@pytest.mark.parametrize("flag", FLAGS)
def test_every_flag_says_what_to_do(flag):
    (line,) = verdict_legend([flag], 0.02)
    assert line.startswith("flags: ") and f"{flag}: " in line
    assert "to fix: " in MEANINGS[flag] and "no verdict" in MEANINGS[flag]


def test_a_short_verdict_is_spelled_out_once():
    (line,) = verdict_legend(["indistinguishable", "faster"], 0.02)
    assert "indist. = indistinguishable" in line


def test_the_summarys_legend_explains_its_flags_and_no_verdict():
    lines = flag_legend(["bimodal", "quantised"], no_verdict=True)
    text = "\n".join(lines)
    assert "bimodal: timings in two groups" in text and "quantised: few distinct" in text
    assert "to fix: " in text
    assert "no verdict: " in text and "--samples N" in text and "as that flag says" in text
    assert flag_legend([], no_verdict=False) == []
