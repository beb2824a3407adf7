"""Sampling until decided: the timing loop's looks and when it stops (benches/runner.py).

An A/B run times every config to the first look's samples, as a run always did, then judges
what its gate will judge (results_schema/gate_rule.py: the candidate's geometric mean over
its baseline, with `decide_on` any every config too, and the A/A control), from intervals
made at that look's confidence. While something is undecided it takes the next look: every
config gets samples up to the next count set before the run, on fresh placements, as many
more as the samples it adds. It stops when nothing is left to decide (every gated statistic
shown slower or not slower and the control equivalent, or a slowdown or a noisy control
fixing the outcome), when the candidate failed a check (its gate fails whatever the samples
say), at the last look (the plan's bound on samples), or when the next look would end after
the plan's `sampling.max_seconds` or the run's time cap. Why the intervals stay valid however
it stops: results_schema/sampling.py. The run records why it stopped (sampling.json).

A run without an A/B comparison, a repro of a few rows (`--config`, `--implementation`) and
a `--measurements N` run take one look, at 95%, as before.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from benches.noise import control_noise
from benches.stats import overall_speedups, summarize
from results_schema import CorrectnessRow, Measurement, Plan, SummaryRow
from results_schema.gate_rule import judge_statistics
from results_schema.models import UNAVAILABLE_BACKEND, SamplingRecord
from results_schema.sampling import FAMILY_ALPHA, STOPS, look_confidence


@dataclass
class Sampling:
    """The looks of one run and where it stands: which look, why it stopped."""

    plan: Plan
    first: list[int]  # each config's samples at the first look
    schedule: list[int]  # samples per config at each look (the plan's, or one look)
    deadline: float | None = None  # time.monotonic() after which no look may end
    deadline_stop: str = "time-cap"  # which bound that is: the run's, or the plan's seconds
    look: int = 0
    stopped: str | None = None
    undecided: list[str] = field(default_factory=list)
    statistics: int = 0  # what the last look judged: the gated statistics and the control
    family: int = 1  # gated statistics sharing the error (Plan.gate_family; 1 for one look)
    _started: float = field(default_factory=time.monotonic)

    @classmethod
    def of(cls, plan: Plan, counts: list[int], one_look: bool, seconds_left: float | None):
        """The looks `plan` sets, or one look of `counts` samples per config; no look may end
        after `seconds_left` from now (the run's time cap) or the plan's max_seconds."""
        schedule = [min(counts)] if one_look else plan.look_schedule()
        now = time.monotonic()
        bounds = [("time-cap", seconds_left)]
        bounds.append(("max-seconds", plan.sampling.max_seconds if plan.sampling else None))
        known = sorted((seconds, stop) for stop, seconds in bounds if seconds is not None)
        family = 1 if one_look or plan.comparison is None else plan.gate_family()
        sampling = cls(plan, counts, schedule, family=family, _started=now)
        if known:
            sampling.deadline, sampling.deadline_stop = now + known[0][0], known[0][1]
        if len(schedule) == 1:
            sampling.stopped = "nothing-to-decide" if one_look or not plan.comparison else None
        return sampling

    def targets(self) -> list[int]:
        """Each config's samples at the end of this look (the first look's are `first`)."""
        scale = self.schedule[self.look] / self.schedule[0]
        return [round(n * scale) for n in self.first]

    def blocks(self, placements: int) -> int:
        """Placements a config gets in this look: the plan's for the first look's samples,
        as many more for as many more samples."""
        added = self.schedule[self.look] - (self.schedule[self.look - 1] if self.look else 0)
        return max(1, round(placements * added / self.schedule[0]))

    @property
    def confidence(self) -> float:
        """This look's share of the error, split evenly over the gated statistics (with
        `--gate-on any` each config is one: 6 configs at 95 % each called identical trees
        slower in 4 of 36 runs, 2026-11-29; results_schema/sampling.py)."""
        return look_confidence(self.schedule, self.look, FAMILY_ALPHA / self.family)

    def after_look(
        self,
        run_id: str,
        measurements: list[Measurement],
        gate: list[CorrectnessRow],
        wrong: set[tuple[str, str]],
        peaks: tuple,
    ) -> bool:
        """Whether to take another look, judged on what this one measured; if not, why."""
        if self.stopped is not None:
            return False
        if _candidate_failed(self.plan, gate, wrong):
            self.stopped = "incorrect"
            return False
        self.undecided = self._open(run_id, measurements, gate, wrong, peaks)
        if not self.undecided:
            self.stopped = "decided"
            return False
        if self.look == len(self.schedule) - 1:
            self.stopped = "max-samples"
            return False
        late = self._next_look_ends_late()
        if late:
            self.stopped = late
            return False
        self.look += 1
        return True

    def _open(self, run_id, measurements, gate, wrong, peaks) -> list[str]:
        """What is undecided at this look's confidence, by the gate's rule; [] when the
        outcome is fixed already (a slowdown, a noisy control)."""
        plan, confidence = self.plan, self.confidence
        backends = {(r.config, r.implementation): r.backend for r in gate}
        summary: list[SummaryRow] = summarize(
            run_id, plan, measurements, backends, *peaks, wrong, confidence=confidence
        )
        overall = overall_speedups(plan, measurements, summary, confidence=confidence)
        noise = control_noise(plan, measurements, summary, alpha=1 - confidence)
        judged = judge_statistics(plan, summary, overall, noise, plan.margin, plan.decide_on)
        self.statistics = len(judged.gated) + judged.has_control
        return [] if judged.settled() else judged.open_labels()

    def _next_look_ends_late(self) -> str | None:
        """ "max-seconds" or "time-cap" when the next look, at this pace, would end after the
        deadline; None when it fits (or nothing bounds it but the samples)."""
        if self.deadline is None:
            return None
        now = time.monotonic()
        per_sample = (now - self._started) / self.schedule[self.look]
        added = self.schedule[self.look + 1] - self.schedule[self.look]
        if now + per_sample * added <= self.deadline:
            return None
        return self.deadline_stop

    def interrupted(self) -> None:
        self.stopped = "interrupted"

    def message(self) -> str:
        """Where sampling stands, for the progress display (status.json): the look, and
        from the second on how many of the statistics the last one judged were decided."""
        of = f"look {self.look + 1}/{len(self.schedule)}"
        if not self.statistics:
            return of
        decided = self.statistics - len(self.undecided)
        return f"{of}, {decided}/{self.statistics} decided"

    def open_line(self) -> str:
        """What is undecided, by name, for the log (the progress display shows its lines)."""
        shown = ", ".join(self.undecided[:5])
        more = f" and {len(self.undecided) - 5} more" if len(self.undecided) > 5 else ""
        return f"undecided: {shown}{more}" if self.undecided else "nothing undecided"

    def record(self) -> SamplingRecord:
        stopped = self.stopped or "interrupted"
        open_ = f"; undecided: {', '.join(self.undecided)}" if self.undecided else ""
        return SamplingRecord(
            stopped=stopped,
            reason=f"{STOPS[stopped]} (look {self.look + 1} of {len(self.schedule)}){open_}",
            schedule=self.schedule,
            looks=self.look + 1,
            samples_per_config=self.schedule[self.look],
            confidence=self.confidence,
            family=self.family,
            undecided=self.undecided,
        )


def _candidate_failed(plan: Plan, gate: list[CorrectnessRow], wrong) -> bool:
    """The candidate failed a check somewhere: its gate exits 8 whatever more samples say."""
    failed = any(
        r.implementation == plan.candidate and not r.passed and r.backend != UNAVAILABLE_BACKEND
        for r in gate
    )
    return failed or any(name == plan.candidate for _, name in wrong)
