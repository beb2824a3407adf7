"""A run's manifest and heartbeat, read from a store or a fetched folder, held to the run.

Every number a run hands back is bounded by what the run could have done: its phases by
its duration, its duration by its time cap, its cost by the registry's rate over that
time (the controller's own figure replaces the VM's), its rows by the plan launch built
(read back from the payload whose sha256 the registry holds), its tree checks by the
trees and digests launch packed.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from orchestrator.boundary.limits import (
    LIMITS,
    OPTIONAL_PATHS,
    RESULT_PATHS,
    Limits,
    is_profile_report,
    parse_json,
    result_name,
    validated,
)
from orchestrator.errors import NotFoundError, ResultsError
from orchestrator.registry import RunRecord
from orchestrator.regular_file import NotRegularFileError, read_regular
from orchestrator.text import printable
from results_schema import Manifest, Plan, Status
from results_schema.record import (
    HARNESS_TREE,
    MAX_PROFILE_REPORTS,
    billed_usd,
    payload_tree_digests,
)


def _read_object(store, key: str, max_bytes: int) -> bytes | None:
    try:
        return store.get_bytes(key, max_bytes=max_bytes)
    except NotFoundError:
        return None


def read_manifest(store, record: RunRecord, limits: Limits = LIMITS) -> Manifest | None:
    """The run's manifest, validated against the schema and the registry; None if the run
    has none yet."""
    raw = _read_object(store, f"{record.run_key}/manifest.json", limits.manifest_bytes)
    if raw is None:
        return None
    return manifest_from(raw, record.run_id, record, limits)


def manifest_from(
    raw: bytes, run_id: str | None, record: RunRecord | None = None, limits: Limits = LIMITS
) -> Manifest:
    """A manifest of run_id (None: of whichever run it names) that passed every check."""
    try:
        manifest = validated(parse_json(raw, limits.manifest_bytes, limits), Manifest)
        _check_manifest(manifest, run_id or manifest.run_id, limits)
        if record is not None:
            _check_against_registry(manifest, record, limits)
            manifest = _with_billed_cost(manifest, record, limits)
    except ValueError as e:
        where = f"run {run_id}" if run_id else "a fetched run"
        raise ResultsError(f"{where}: manifest.json is invalid: {printable(e)}") from None
    return manifest


def read_status(store, record: RunRecord, limits: Limits = LIMITS) -> Status | None:
    raw = _read_object(store, f"{record.run_key}/status.json", limits.status_bytes)
    if raw is None:
        return None
    try:
        status = validated(parse_json(raw, limits.status_bytes, limits), Status)
        if status.run_id != record.run_id:
            raise ValueError(f"it belongs to run {printable(status.run_id, 40)!r}")
    except ValueError as e:
        raise ResultsError(f"run {record.run_id}: status.json is invalid: {printable(e)}") from None
    return status


def _check_manifest(manifest: Manifest, run_id: str, limits: Limits) -> None:
    if manifest.run_id != run_id:
        raise ValueError(f"it belongs to run {printable(manifest.run_id, 40)!r}")
    seen = set()
    for entry in manifest.files:
        name = result_name(entry.path)
        if name is None:
            raise ValueError(
                f"it lists {printable(entry.path, 80)!r}; a run may only hold "
                f"{', '.join(sorted(RESULT_PATHS | OPTIONAL_PATHS))} and "
                "results/profile-NNN.ncu-rep"
            )
        if entry.path in seen:
            raise ValueError(f"it lists {entry.path} twice")
        seen.add(entry.path)
        if entry.bytes > limits.bytes_of(name):
            raise ValueError(f"{entry.path} has {entry.bytes} bytes (most {limits.bytes_of(name)})")
        if is_profile_report(name):
            if entry.rows is not None:
                raise ValueError(f"{entry.path} is a binary report, not rows")
        elif entry.rows is not None and entry.rows > limits.rows_of(name):
            raise ValueError(f"{entry.path} has {entry.rows} rows (most {limits.rows_of(name)})")
    _check_profile_reports(manifest, limits)
    if manifest.status == "complete" and not seen >= set(RESULT_PATHS):
        raise ValueError(f"a complete run lacks {', '.join(sorted(set(RESULT_PATHS) - seen))}")
    measured = manifest.file("results/measurements.csv")
    if manifest.status == "partial" and not (measured and measured.rows):
        raise ValueError("a partial run lists no measurements")
    if manifest.plan is not None and len(manifest.plan.configs) > limits.configs:
        raise ValueError(
            f"its plan has {len(manifest.plan.configs)} configs (most {limits.configs})"
        )
    if manifest.started_at is not None and manifest.started_at > manifest.finished_at:
        raise ValueError("it finished before it started")
    _check_phase_times(manifest, limits)
    _check_sampling(manifest)
    _check_ranking(manifest)


def _check_ranking(manifest: Manifest) -> None:
    """Its ranking (ranking.json: results_schema/ranking.py) names only what its plan
    times: the baseline and the candidates among its identities, the configs among its
    configs, each once."""
    ranking, plan = manifest.ranking, manifest.plan
    if ranking is None:
        return
    if plan is None:
        raise ValueError("it carries a ranking without the plan it ranks")
    identities = set(plan.identities)
    named = [ranking.baseline, *(c.identity for c in ranking.candidates)]
    named += [u.identity for u in ranking.unranked]
    strangers = [n for n in named if n not in identities]
    if strangers:
        raise ValueError(
            f"its ranking names {printable(strangers[0], 80)!r}, which its plan does not time"
        )
    if len(set(named)) != len(named):
        raise ValueError("its ranking names an identity twice")
    if set(ranking.configs) - {c.name for c in plan.configs}:
        raise ValueError("its ranking names configs its plan does not have")


def _check_sampling(manifest: Manifest) -> None:
    """Its sampling record (sampling.json: results_schema/sampling.py) holds to its plan:
    the looks that plan sets (one for a run with nothing to decide), its error split over
    the statistics the plan gates, no more samples a config than the look it stopped at, its
    statistics at that look's confidence."""
    sampling, plan = manifest.sampling, manifest.plan
    if sampling is None or plan is None:
        return
    sets = [plan.samples_per_config] if sampling.stopped == "nothing-to-decide" else None
    sets = sets or plan.look_schedule()
    if sampling.schedule != sets:
        raise ValueError(
            f"its sampling set looks at {sampling.schedule[:8]} samples a config; its plan "
            f"sets {sets}"
        )
    family = 1 if sampling.stopped == "nothing-to-decide" else plan.gate_family()
    if sampling.family != family:
        raise ValueError(
            f"its sampling split its error over {sampling.family} statistics; its plan "
            f"gates {family}"
        )
    measured = manifest.file("results/measurements.csv")
    most = sampling.samples_per_config * len(plan.configs) * len(plan.identities)
    if measured is not None and measured.rows is not None and measured.rows > most:
        raise ValueError(
            f"results/measurements.csv has {measured.rows} rows, more than its sampling took "
            f"({sampling.samples_per_config} a config: {most})"
        )
    statistics = manifest.statistics
    if statistics is not None and abs(statistics.confidence - sampling.confidence) > 1e-9:
        raise ValueError(
            f"its intervals are at {statistics.confidence:.6g}, its last look's at "
            f"{sampling.confidence:.6g}"
        )


def _check_phase_times(manifest: Manifest, limits: Limits) -> None:
    """Phases run one after another inside the run: together no longer than it lasted."""
    if manifest.started_at is None:
        return  # the registry's time cap bounds them (_check_duration)
    lasted = (manifest.finished_at - manifest.started_at).total_seconds()
    total = sum(phase.seconds for phase in manifest.phases)
    if total > lasted + limits.phase_rounding_seconds * (len(manifest.phases) + 1):
        raise ValueError(f"its phases took {total:g} s, longer than the run's {lasted:g} s")


def _check_profile_reports(manifest: Manifest, limits: Limits) -> None:
    reports = [e for e in manifest.files if is_profile_report(e.path.removeprefix("results/"))]
    if len(reports) > MAX_PROFILE_REPORTS:
        raise ValueError(f"it lists {len(reports)} profile reports (most {MAX_PROFILE_REPORTS})")
    total = sum(e.bytes for e in reports)
    if total > limits.profile_reports_bytes:
        raise ValueError(
            f"its profile reports hold {total} bytes (most {limits.profile_reports_bytes})"
        )


def _check_against_registry(manifest: Manifest, record: RunRecord, limits: Limits) -> None:
    """Times within the run's life as the registry saw it, cost within what it could buy."""
    earliest = record.created - limits.clock_skew
    latest = datetime.now(timezone.utc) + limits.clock_skew
    for name in ("started_at", "finished_at"):
        moment = getattr(manifest, name)
        if moment is not None and not earliest <= moment <= latest:
            raise ValueError(
                f"{name} {moment.isoformat()} lies outside the run's life "
                f"(launched {record.created_at})"
            )
    _check_duration(manifest, record, limits)
    cost = manifest.cost
    if cost is None:
        return
    if cost.backend != record.backend:
        raise ValueError(f"cost.backend is {printable(cost.backend, 20)!r}, not {record.backend}")
    if abs(cost.rate_usd_per_hour - record.rate_usd_per_hour) > 1e-9:
        raise ValueError(
            f"cost.rate_usd_per_hour {cost.rate_usd_per_hour} is not the launched rate "
            f"{record.rate_usd_per_hour}"
        )
    # The run cannot outlive its own time cap by more than the clock skew.
    ceiling = billed_usd(
        record.rate_usd_per_hour,
        record.max_run_seconds + limits.clock_skew.total_seconds(),
    )
    if cost.estimated_usd is not None and cost.estimated_usd > ceiling + 1e-6:
        raise ValueError(
            f"cost.estimated_usd {cost.estimated_usd} is more than the run could cost "
            f"({ceiling:.6f})"
        )


def _check_duration(manifest: Manifest, record: RunRecord, limits: Limits) -> None:
    """No run outlives its time cap (by more than the clocks' skew): not the script, and
    not its phases together when it never said when it started."""
    cap = record.max_run_seconds + limits.clock_skew.total_seconds()
    if manifest.started_at is not None:
        lasted = (manifest.finished_at - manifest.started_at).total_seconds()
        what = f"it ran {lasted:g} s"
    else:
        lasted = sum(phase.seconds for phase in manifest.phases)
        what = f"its phases took {lasted:g} s"
    if lasted > cap:
        raise ValueError(f"{what}, longer than its time cap of {record.max_run_seconds} s")


def billed_cost(manifest: Manifest, record: RunRecord, limits: Limits = LIMITS) -> float:
    """What the run cost as the controller reckons it: the registry's rate over the run's
    life, from the launch to the manifest's finish (which the boundary held inside that
    life), at most its time cap. Never the VM's own figure: a VM can claim $0."""
    life = (manifest.finished_at - record.created).total_seconds()
    seconds = min(max(life, 0.0), record.max_run_seconds + limits.clock_skew.total_seconds())
    return round(billed_usd(record.rate_usd_per_hour, seconds), 6)


def _with_billed_cost(manifest: Manifest, record: RunRecord, limits: Limits) -> Manifest:
    """The manifest with its cost as the controller reckons it, for everything that shows it."""
    if manifest.cost is None:
        return manifest
    cost = manifest.cost.model_copy(update={"estimated_usd": billed_cost(manifest, record, limits)})
    return manifest.model_copy(update={"cost": cost})


# --- the plan launch built ---------------------------------------------------------------

# The placeholder launch records before the payload is built, and a run from before the
# registry kept the payload's sha256: neither names a payload to read the plan from.
UNKNOWN_PAYLOADS = ("", "0" * 64)


@dataclass(frozen=True)
class LaunchedPayload:
    """What launch packed, read back: the plan, and each tree's digest (the harness's, each
    kernel tree's folder's), which the run's manifest says it checked its trees against."""

    plan: Plan
    tree_sha256s: dict[str, str]


def launched_payload(store, record: RunRecord, limits: Limits = LIMITS) -> LaunchedPayload | None:
    """The run's payload read back from the store and held to the sha256 the registry
    recorded at launch, so a VM that rewrote its payload is caught; None for a run whose
    payload the registry does not know."""
    if record.payload_sha256 in UNKNOWN_PAYLOADS:
        return None
    where = f"run {record.run_id}: payload.tar.gz"
    try:
        raw = store.get_bytes(f"{record.run_key}/payload.tar.gz", max_bytes=limits.payload_bytes)
    except NotFoundError:
        raise ResultsError(
            f"{where} is gone from the store: the run's plan cannot be checked"
        ) from None
    if hashlib.sha256(raw).hexdigest() != record.payload_sha256:
        raise ResultsError(f"{where} is not the one launch built (its sha256 differs)")
    try:
        plan_json, digests = read_payload(raw, limits)
        return LaunchedPayload(
            validated(parse_json(plan_json, limits.manifest_bytes, limits), Plan), digests
        )
    except (ValueError, KeyError, OSError, EOFError, tarfile.TarError) as e:
        raise ResultsError(f"{where} holds no valid plan.json: {printable(e, 200)}") from None


def read_payload(payload: bytes, limits: Limits = LIMITS) -> tuple[bytes, dict[str, str]]:
    """A payload tarball's plan.json and its trees' digests (results_schema.record)."""
    plan_json, members = None, []
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r|gz") as tar:
        for member in tar:
            if not member.isfile():
                continue
            if member.name == "plan.json" and member.size > limits.manifest_bytes:
                raise ValueError(f"plan.json has {member.size} bytes")
            data = tar.extractfile(member).read()
            plan_json = data if member.name == "plan.json" else plan_json
            members.append((member.name, hashlib.sha256(data).hexdigest()))
    if plan_json is None:
        raise ValueError("it holds no plan.json")
    return plan_json, payload_tree_digests(members)


def with_launched_payload(
    manifest: Manifest, launched: LaunchedPayload | None, run_id: str
) -> Manifest:
    """The manifest carrying the plan launch built. The payload writes that plan back
    unchanged, so a manifest naming another is refused; one that names none gets it. Its
    tree checks must name launch's trees and digests (`_check_trees`)."""
    if launched is None:
        return manifest
    plan = launched.plan
    if manifest.plan is not None and manifest.plan.content_sha256() != plan.content_sha256():
        raise ResultsError(
            f"run {run_id}: manifest.json names a plan other than the one launched "
            f"({printable(manifest.plan.name, 60)!r}, not {printable(plan.name, 60)!r})"
        )
    try:
        _check_trees(manifest, launched.tree_sha256s)
    except ValueError as e:
        raise ResultsError(f"run {run_id}: manifest.json is invalid: {printable(e)}") from None
    return manifest.model_copy(update={"plan": plan})


def _check_trees(manifest: Manifest, launched: dict[str, str]) -> None:
    """The manifest's trees, leftovers and kernel users name only trees launch packed; each
    check against launch's digest names that digest; a complete run failed none."""
    named = [c.tree for c in manifest.trees or []]
    named += [s.tree for s in manifest.leftovers or [] if s.tree is not None]
    named += list(manifest.containment.kernel_users) if manifest.containment else []
    strangers = sorted(set(named) - set(launched))
    if strangers:
        raise ValueError(f"it names trees launch did not pack: {', '.join(strangers)}")
    for check in manifest.trees or []:
        against_launch = check.stage == "build" or (
            check.stage == "measure" and check.tree == HARNESS_TREE
        )
        if against_launch and check.expected_sha256 != launched[check.tree]:
            raise ValueError(
                f"it checked {check.tree} ({check.stage}) against a digest launch did not pack"
            )
        if manifest.status == "complete" and not check.passed:
            raise ValueError(f"a complete run failed its check of {check.tree} ({check.stage})")


def fetched_manifest(run_dir: Path, limits: Limits = LIMITS) -> Manifest | None:
    """The manifest in a fetched run's directory, or None: the same checks as at fetch
    (but for the registry's, which a copied or renamed folder may not match)."""
    path = run_dir / "manifest.json"
    try:
        raw = read_regular(path, limits.manifest_bytes)
    except FileNotFoundError:
        return None
    except NotRegularFileError:
        raise ResultsError(f"run {run_dir.name}: {path} is not a regular file") from None
    return manifest_from(raw, None, None, limits)
