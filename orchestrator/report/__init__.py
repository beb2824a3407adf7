"""`bench report`: a table and plots from a fetched run, optionally checked against another.

Controller side: numpy and matplotlib (imported lazily, Agg backend), never torch.

    load      which folder, one published copy of it, its results through the boundary
    ab        the A/B comparison a run leads with
    compare   `--compare`: where two runs disagree
    labels    an implementation's name with the backend that ran
    telemetry the GPU's clocks, power and temperature per round (NVML's readings)
    service   make_report: the rows, the sections and the plots swapped into report/
    plots     the figures (latency, speedup, tflops; a sweep's gpus.png)
    sweep     `bench report SWEEP`: the GPU types of one sweep side by side

The names below are the package's interface; the plots' helpers are here too for
`bench history`, which draws with them.
"""

from orchestrator.report.ab import ABResults, ABRow, ab_results
from orchestrator.report.compare import (
    MIN_RELATIVE_DIFFERENCE,
    Disagreement,
    candidate_mismatch,
    compare_runs,
)
from orchestrator.report.labels import implementation_label
from orchestrator.report.load import RunResults, load_run, published_run_dir, read_snapshot
from orchestrator.report.plots import (
    MAX_FIGURE_INCHES,
    MAX_PLOTTED_CONFIGS,
    MAX_PLOTTED_IMPLEMENTATIONS,
    PLOT_DPI,
    figure_size,
    load_pyplot,
    plain_tick_labels,
    plot_label,
)
from orchestrator.report.service import REPORT_SUBDIR, Report, ReportRow, make_report

__all__ = [
    "ABResults",
    "ABRow",
    "Disagreement",
    "MAX_FIGURE_INCHES",
    "MAX_PLOTTED_CONFIGS",
    "MAX_PLOTTED_IMPLEMENTATIONS",
    "MIN_RELATIVE_DIFFERENCE",
    "PLOT_DPI",
    "REPORT_SUBDIR",
    "Report",
    "ReportRow",
    "RunResults",
    "ab_results",
    "candidate_mismatch",
    "compare_runs",
    "figure_size",
    "implementation_label",
    "load_pyplot",
    "load_run",
    "make_report",
    "plain_tick_labels",
    "plot_label",
    "published_run_dir",
    "read_snapshot",
]
