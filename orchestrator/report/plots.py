"""The report's figures: latency distributions, speedups with their intervals, TFLOP/s
against sequence length (a run's, report/*.png), and a sweep's GPUs side by side (gpus.png).

matplotlib is imported when a figure is drawn (Agg backend), never on import. What a run
holds never sets how long drawing takes or how large an image grows: a figure shows at most
MAX_PLOTTED_CONFIGS configs and MAX_PLOTTED_IMPLEMENTATIONS implementations and is at most
MAX_FIGURE_INCHES at PLOT_DPI. Names from a run are plot text (plot_label), never mathtext.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import textwrap
from collections import defaultdict
from pathlib import Path

import numpy as np

from orchestrator import boundary
from orchestrator.report.labels import implementation_label
from orchestrator.report.load import RunResults
from results_schema import AttentionConfig
from results_schema.sampling import level

# 1,200 configs once took 695 s to draw into a 1848 × 112288 px PNG. A figure now shows the
# first configs and implementations in the run's order (the table lists every row), and is
# never larger than MAX_FIGURE_INCHES: at PLOT_DPI, 2200 × 3300 px.
MAX_PLOTTED_CONFIGS = 24  # the default plan's 12, twice over
MAX_PLOTTED_IMPLEMENTATIONS = 8  # an A/B plan with its A/A control times 5
MAX_FIGURE_INCHES = (20.0, 30.0)  # width, height
PLOT_DPI = 110
# Characters of a 10-point label a figure inch holds, with room to spare (DejaVu Sans).
LABEL_CHARS_PER_INCH = 11


# Every figure a run's report/ may hold, by name: what a report reuses is one of these.
PLOT_NAMES = ("latency.png", "speedup.png", "tflops.png")


@functools.cache
def drawing_identity() -> str:
    """What the figures of given results depend on besides them: this package's code (the
    figures, the labels, how results load), bench's and matplotlib's versions. Figures
    drawn under another identity are drawn again."""
    digest = hashlib.sha256(importlib.metadata.version("matplotlib").encode())
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):  # a source checkout
        digest.update(importlib.metadata.version("bench").encode())
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()


def load_pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display on a server or in CI
    # Config and implementation names come from a run: "$...$" in one must stay text, not
    # mathtext that fails to parse.
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt


def plot_all(run: RunResults, out_dir: Path) -> list[Path]:
    if not run.summary:
        return []
    plt = load_pyplot()
    run = plotted_part(run)
    latency, speedup, tflops = (out_dir / name for name in PLOT_NAMES)
    plots = [save(plt, latency_figure(plt, run), latency)]
    if any(s.speedup is not None for s in run.summary):
        plots.append(save(plt, speedup_figure(plt, run), speedup))
    if run.plan is not None:
        plots.append(save(plt, tflops_figure(plt, run), tflops))
    return plots


def plotted_part(run: RunResults) -> RunResults:
    """The run as its plots show it: the first MAX_PLOTTED_CONFIGS configs and
    MAX_PLOTTED_IMPLEMENTATIONS implementations, in the run's order, and a note of the rest."""
    configs = set(_config_order(run)[:MAX_PLOTTED_CONFIGS])
    implementations = set(_implementations(run)[:MAX_PLOTTED_IMPLEMENTATIONS])

    def shown(config: str, implementation: str) -> bool:
        return config in configs and implementation in implementations

    return dataclasses.replace(
        run,
        summary=[s for s in run.summary if shown(s.config, s.implementation)],
        latencies={key: value for key, value in run.latencies.items() if shown(*key)},
        plot_note=plot_note(run),
    )


def plot_note(run: RunResults) -> str | None:
    """What the plots leave out of the run, or None when they show all of it."""
    omitted = [
        f"the first {most} of {count} {what}"
        for what, count, most in (
            ("configs", len(_config_order(run)), MAX_PLOTTED_CONFIGS),
            ("implementations", len(_implementations(run)), MAX_PLOTTED_IMPLEMENTATIONS),
        )
        if count > most
    ]
    return f"plots show {' and '.join(omitted)}; the table has every row" if omitted else None


def figure_size(width: float, height: float) -> tuple[float, float]:
    """Inches as a figure's content asks, within MAX_FIGURE_INCHES whatever the run holds."""
    return min(width, MAX_FIGURE_INCHES[0]), min(height, MAX_FIGURE_INCHES[1])


def plot_label(name: str) -> str:
    """A name from the run, as plot text: control characters escaped (and reported by no
    missing-glyph warning on the terminal)."""
    return boundary.printable(name, max_chars=80)


def _labels(names: list[str]) -> list[str]:
    return [plot_label(name) for name in names]


def _config_order(run: RunResults) -> list[str]:
    return list(dict.fromkeys(s.config for s in run.summary))


def _implementations(run: RunResults) -> list[str]:
    return list(dict.fromkeys(s.implementation for s in run.summary))


def _implementation_labels(run: RunResults) -> dict[str, str]:
    """Each implementation as the plots name it: with the backends it ran, escaped."""
    backends: dict[str, list[str]] = defaultdict(list)
    for s in run.summary:
        backends[s.implementation].append(s.backend)
    return {impl: plot_label(implementation_label(impl, b)) for impl, b in backends.items()}


def _title(fig, what: str, run: RunResults) -> None:
    """The plot's title names the run and the candidate; wrapped to the figure's width
    (a one-panel figure is narrow), never clipped."""
    labels = _implementation_labels(run)
    candidate = run.plan.candidate if run.plan else None
    text = f"{what}, run {plot_label(run.run_id)} ({plot_label(run.status)})"
    if candidate:
        text += f"; candidate {labels.get(candidate, plot_label(candidate))}"
    if run.plot_note:
        text += f" ({run.plot_note})"
    fig.suptitle(text, wrap=True, fontsize=11)


def save(plt, fig, path: Path) -> Path:
    fig.savefig(path, dpi=PLOT_DPI)
    plt.close(fig)
    return path


def latency_figure(plt, run: RunResults):
    """One panel per config: each implementation's sample distribution."""
    configs, impls, lat = _config_order(run), _implementations(run), run.latencies
    names = _implementation_labels(run)
    cols = min(4, len(configs))
    rows = -(-len(configs) // cols)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=figure_size(max(4.2 * cols, 7.0), 3.4 * rows + 0.8),
        squeeze=False,
        layout="constrained",
    )
    for ax, config in zip(axes.flat, configs, strict=False):
        present = [i for i in impls if (config, i) in lat]
        if not present:  # a summary row whose samples measurements.csv lacks
            _no_samples(ax, config)
            continue
        ax.boxplot([lat[(config, i)] for i in present], showfliers=True)
        # Names wrapped under their box (a panel is ~4 in wide), not rotated into the next.
        ax.set_xticks(
            range(1, len(present) + 1),
            [textwrap.fill(names[i], 14) for i in present],
            fontsize=7,
        )
        ax.set_title(textwrap.fill(plot_label(config), 48), fontsize=9)
        ax.set_ylabel("ms per call", fontsize=8)
        values = np.concatenate([lat[(config, i)] for i in present])
        if values.min() > 0 and values.max() / values.min() > 20:
            ax.set_yscale("log")  # outliers would flatten the boxes
            plain_tick_labels(ax.yaxis)
        ax.tick_params(axis="y", labelsize=8)
    for ax in list(axes.flat)[len(configs) :]:
        ax.remove()  # no empty frame where the grid has more cells than configs
    _title(fig, "Latency per sample", run)
    return fig


def _no_samples(ax, config: str) -> None:
    ax.set_title(textwrap.fill(plot_label(config), 48), fontsize=9)
    ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _width_for(configs: list[str]) -> float:
    """Inches for a plot with config names along its y axis: 8, plus room for long names
    (about 0.07 in per character at the tick font size) so the axes keep their width."""
    longest = max((len(plot_label(c)) for c in configs), default=0)
    return 8.0 + max(longest - 24, 0) * 0.07


def plain_tick_labels(axis) -> None:
    """Log-axis ticks as plain numbers: the default labels are mathtext, which the
    `text.parse_math = False` that keeps run names literal would print as source."""
    from matplotlib import ticker

    if axis.get_scale() == "log":
        # The default log ticks are decades: an axis of speedups from 0.4 to 2.5 was
        # labelled at 1 alone.
        axis.set_major_locator(_readable_log_locator())
    axis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def _readable_log_locator():
    """Ticks at 1, 1.5, 2, 3, 5, 7 of each decade on an axis spanning about one, at 1, 2, 5
    on one of up to two and a half, at the decades beyond: three or more in view."""
    import math

    from matplotlib import ticker

    class ReadableLogLocator(ticker.Locator):
        def __call__(self):
            low, high = self.axis.get_view_interval()
            return self.tick_values(low, high)

        def tick_values(self, vmin, vmax):
            low, high = sorted((vmin, vmax))
            if high <= 0:
                return []
            low = low if low > 0 else high / 1000
            decades = math.log10(high / low)
            subs = (1, 1.5, 2, 3, 5, 7) if decades < 1.2 else (1, 2, 5) if decades < 2.5 else (1,)
            first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
            ticks = [round(m * 10.0**e, 12) for e in range(first, last + 1) for m in subs]
            return [t for t in ticks if low <= t <= high]

    return ReadableLogLocator()


def speedup_figure(plt, run: RunResults):
    """The candidate's speedup over each baseline with its interval, per config."""
    configs = _config_order(run)
    names = _implementation_labels(run)
    baselines = list(dict.fromkeys(s.implementation for s in run.summary if s.speedup is not None))
    fig, ax = plt.subplots(
        figsize=figure_size(_width_for(configs), 0.3 * len(configs) * max(len(baselines), 1) + 2.0),
        layout="constrained",
    )
    height = 0.8 / max(len(baselines), 1)
    for b_index, baseline in enumerate(baselines):
        rows = {s.config: s for s in run.summary if s.implementation == baseline and s.speedup}
        ys = [i + b_index * height for i, c in enumerate(configs) if c in rows]
        points = [rows[c] for c in configs if c in rows]
        # A bootstrap interval need not contain its point: draw what lies on each side.
        xerr = [
            [max(p.speedup - p.speedup_ci_low, 0.0) for p in points],
            [max(p.speedup_ci_high - p.speedup, 0.0) for p in points],
        ]
        control = run.plan is not None and baseline == run.plan.control_identity
        ax.errorbar(
            [p.speedup for p in points],
            ys,
            xerr=xerr,
            fmt="s" if control else "o",
            capsize=3,
            # The control's row is its twin against itself, never the candidate's speedup.
            label=_control_label(run, names) if control else f"over {names[baseline]}",
            **({"color": "grey"} if control else {}),
        )
    ax.axvline(1.0, color="grey", linestyle="--", linewidth=1)
    bounds = [b for s in run.summary if s.speedup for b in (s.speedup_ci_low, s.speedup_ci_high)]
    if bounds and max(bounds) / min(bounds) > 4:
        ax.set_xscale("log")  # ratios: 0.5x and 2x equally far from 1
        plain_tick_labels(ax.xaxis)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(configs))], _labels(configs), fontsize=8)
    ax.invert_yaxis()
    confidence = run.statistics.confidence if run.statistics else None
    candidate = names.get(run.plan.candidate, run.plan.candidate) if run.plan else None
    candidate = plot_label(candidate) if candidate else "the candidate"
    label = (
        f"speedup of {candidate} over each implementation: how many times as fast it ran "
        f"(median of paired ratios, {level(confidence)} CI); > 1: {candidate} faster; grey: "
        "the A/A control, its twin over it"
    )
    # Wrapped to the figure's width: a constrained layout makes room for a label's height,
    # never its width, and cut the one-line label off at both ends.
    ax.set_xlabel(textwrap.fill(label, int(fig.get_figwidth() * LABEL_CHARS_PER_INCH)))
    ax.legend(fontsize=8)
    _title(fig, "Speedup", run)
    return fig


def _control_label(run: RunResults, names: dict[str, str]) -> str:
    twin = names.get(run.plan.control) or plot_label(run.plan.control)
    return f"A/A control: {twin} against itself"


def _shape_panels(run: RunResults) -> dict[tuple[bool, int], list[AttentionConfig]]:
    """The measured configs by (causal, head dim), non-causal and smaller heads first: a
    causal config does half the work, a larger head more per byte, so each gets its panel."""
    measured = set(_config_order(run))
    panels: dict[tuple[bool, int], list[AttentionConfig]] = defaultdict(list)
    for config in run.plan.configs:
        if config.name in measured:
            panels[(config.causal, config.head_dim)].append(config)
    return dict(sorted(panels.items()))


def tflops_figure(plt, run: RunResults):
    """TFLOP/s at the median against sequence length (log 2), a panel per (causal, head
    dim). Markers, not lines: a panel's configs may differ in batch, heads and dtype too,
    so a line through them would draw a trend that no single shape has. Each
    implementation's markers sit a little apart so that equal values stay visible."""
    panels, impls = _shape_panels(run), _implementations(run)
    names = _implementation_labels(run)
    tflops = {(s.config, s.implementation): s.tflops for s in run.summary}
    cols = min(2, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=figure_size(6.0 * cols, 3.8 * rows + 1.2),
        squeeze=False,
        layout="constrained",
    )
    markers = "osD^vP*X"
    drawn = {}
    for ax, ((causal, head_dim), configs) in zip(axes.flat, panels.items(), strict=False):
        for index, impl in enumerate(impls):
            shown = [c for c in configs if (c.name, impl) in tflops]
            nudge = 2 ** (0.06 * (index - (len(impls) - 1) / 2))
            drawn[impl] = ax.plot(
                [c.seq_len * nudge for c in shown],
                [tflops[(c.name, impl)] for c in shown],
                linestyle="none",
                marker=markers[index % len(markers)],
                color=f"C{index % 10}",
            )[0]
        lengths = sorted({c.seq_len for c in configs})
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [str(n) for n in lengths], fontsize=8)
        ax.xaxis.set_minor_formatter(_null_formatter())
        ax.set_xlim(min(lengths) / 1.6, max(lengths) * 1.6)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("sequence length", fontsize=8)
        ax.set_ylabel("TFLOP/s at the median", fontsize=8)
        ax.tick_params(axis="y", labelsize=8)
        kind = "causal (half the work counted)" if causal else "not causal"
        ax.set_title(f"head dim {head_dim}, {kind}", fontsize=9)
    for ax in list(axes.flat)[len(panels) :]:
        ax.remove()  # no empty frame where the grid has more cells than panels
    # One legend for the figure's implementations, on its first panel.
    axes.flat[0].legend(
        [drawn[i] for i in impls if i in drawn], [names[i] for i in impls if i in drawn], fontsize=8
    )
    _title(fig, "Throughput", run)
    return fig


def _null_formatter():
    from matplotlib import ticker

    return ticker.NullFormatter()
