"""Issue 52 item 10: a log axis of speedups (the A/B plot's, the latency boxes') is labelled
at useful ticks, not only at 1."""

from __future__ import annotations

import pytest

from orchestrator.report import load_pyplot, plain_tick_labels


@pytest.mark.parametrize(("low", "high"), [(0.4, 2.5), (0.7, 3.2), (1.5, 9.0), (0.05, 40.0)])
def test_a_log_axis_of_speedups_is_labelled_at_several_ticks(low, high):
    plt = load_pyplot()
    fig, ax = plt.subplots()
    try:
        ax.set_xscale("log")
        ax.set_xlim(low, high)
        plain_tick_labels(ax.xaxis)
        fig.canvas.draw()
        shown = [t.get_text() for t in ax.get_xticklabels() if t.get_text() and low <= t._x <= high]
        assert len(shown) >= 3, shown
        assert len(shown) <= 12, shown  # still readable
        assert all(float(text) > 0 for text in shown)
    finally:
        plt.close(fig)
