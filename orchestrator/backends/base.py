"""The Backend protocol the service layer talks to; it never imports a cloud SDK.

A backend declares what sets its runs apart (`Capabilities`, as dstack's backends declare
theirs) and the optional protocols it implements (`ChecksProject`, `SetsUpProject`,
`PricesRuns`, `SplitsBudget`, `ReportsBilledTime`, `GrantsRunAccess`): the service layer
reads those,
never a backend's name.
backends/registry.py names them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from orchestrator.spec import RunSpec

if TYPE_CHECKING:
    from orchestrator.config import BenchConfig
    from orchestrator.paths import StatePaths
    from orchestrator.registry import RunRegistry
    from orchestrator.stores.base import Store


@dataclass(frozen=True)
class Capabilities:
    """Every per-backend rule of the controller, declared by the backend."""

    # How messages name it ("stop-all: GCE was not searched") and what runs a run there
    # ("its VM runs, and bills, until ...", "deleted the VM ...").
    title: str
    machine_noun: str
    # Where a plan runs, as a refusal names it: "plan 'x' cannot run on this machine".
    target_phrase: str
    # Its machines bill at the price catalog's rates: the budget buys the time cap, the
    # monthly cap counts the run, and spot pricing applies. False: the run is free and
    # bounded by budget.LOCAL_DEFAULT_MAX_RUN_SECONDS.
    billed: bool
    # `launch --gpu` picks machine shapes from gpus.toml (several: a sweep); False: the run
    # has this machine's GPU, whichever it is.
    machine_from_catalog: bool
    # Its machine always carries a GPU; False: it has one when nvidia-smi answers here.
    always_has_gpu: bool
    # bench sets up the run's python on its machine (an image's, or a venv at exact pins)
    # and may install into it (public peers); False: the user's own python, used as it is.
    sets_up_python: bool
    # A run keeps files on this machine (its sandbox, its store copy) that `clean` frees.
    keeps_files_here: bool
    # After the manifest the machine may still exist (powered off, its disk billing):
    # `launch --wait` waits for it to end, then releases it.
    release_after_run: bool
    # The partial of startup_templates/partials/backend/ its startup script includes (a new
    # backend may share one: the script stays one script).
    script_partial: str
    # Its table in orchestrator/data/phases.toml, and whether that table is keyed by the
    # accelerator type (a cloud machine) or by the plan's device (this machine).
    phase_model: str
    phase_model_by_accelerator: bool
    # How often --wait and `logs --follow` look (the `poll_seconds` setting overrides it),
    # how often the script writes its heartbeat, how long a machine whose manifest could
    # not be uploaded stays up so its console can say why, and how long after its machine
    # ended a manifest may still arrive.
    poll_seconds: float
    heartbeat_seconds: int
    reason_window_seconds: int
    manifest_grace_seconds: float
    # Its log still says why a run ended once its machine has ended (Cloud Batch: the job's
    # status events), so `status` reads the reason then too; False: only while it runs
    # (GCE serves the serial console only then).
    log_outlives_machine: bool = False
    # Its machine is the run's own and its startup script runs as root there: each kernel
    # tree is built and run as an unprivileged user of its own (docs/security.md). False:
    # the script runs as whoever launched it, and so does every kernel.
    confines_kernels: bool = False


@dataclass
class Placement:
    """Where a launched run landed, and what the backend tried on the way."""

    location: str  # zone, or "localhost"
    handle: str  # instance name, or the pid of the local script
    attempts: list[str] = field(default_factory=list)  # "us-central1-a: no capacity", ...
    spot: bool = True


@dataclass
class Machine:
    """A machine bench manages, as the backend sees it now."""

    run_id: str
    name: str
    location: str
    state: str  # RUNNING, TERMINATED, ...
    rate_usd_per_hour: float = 0.0
    owner: str = ""  # its bench-owner label: whose run it is


@dataclass(frozen=True)
class Check:
    """One line of `bench doctor`: a question about the project, answered, with its fix."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    # Set when the check was not run: what it needs first ("credentials", "project").
    needs: str = ""
    # False for advice a launch can do without (gcloud, where credentials come otherwise).
    required: bool = True


def not_run(names, needs: str) -> list[Check]:
    """The checks of a checklist a failed or missing prerequisite left unasked."""
    return [Check(name, False, "", needs=needs) for name in names]


@dataclass(frozen=True)
class SetupStep:
    """One step of `bench setup`: the command a reader can check, and what `--apply` does."""

    title: str
    command: list[str]  # the CLI equivalent, one argument per item
    apply: Callable[[Any], str]  # performs the step on the backend's client; what it did
    names_account: bool = False  # a grant to a new account: retried while it propagates


class BackendHost(Protocol):
    """What a backend is built from: the controller's settings, state and stores (the
    service layer's Context)."""

    config: BenchConfig

    @property
    def paths(self) -> StatePaths: ...

    @property
    def registry(self) -> RunRegistry: ...

    def store(self, name: str) -> Store: ...

    def local_store_root(self) -> Path: ...


class Backend(Protocol):
    """Everything the service layer calls on a backend, and nothing more."""

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    # Why each machine the last `stop` could not stop is still there, by machine name.
    stop_failures: dict[str, str]

    @classmethod
    def create(cls, host: BackendHost) -> Backend:
        """The backend for these settings (UsageError when they lack what it needs)."""
        ...

    @classmethod
    def create_store(cls, host: BackendHost) -> Store:
        """The store its runs write to."""
        ...

    @classmethod
    def require_settings(cls, config: BenchConfig) -> None:
        """UsageError naming each setting it needs that is missing (nothing created)."""
        ...

    @classmethod
    def unsearched_reason(cls, config: BenchConfig) -> str | None:
        """Why `stop-all` cannot look for its machines with these settings; None: it can."""
        ...

    @classmethod
    def chosen_by_auto(cls, config: BenchConfig) -> str | None:
        """Why `backend = "auto"` picks it with these settings; None: auto does not."""
        ...

    def work_dir(self, run_id: str) -> str:
        """Where the run's script keeps its files on its machine."""
        ...

    def template_vars(self) -> dict:
        """What this backend's partial (startup_templates/partials/backend/) needs."""
        ...

    def instance_request_json(
        self, spec: RunSpec, startup_script: str, shutdown_script: str
    ) -> str | None:
        """The request `start` would send, as JSON, for `bench render`; None if none."""
        ...

    def refuse_leftovers(self) -> None:
        """UsageError (nothing created yet) when a machine of this backend could go on
        billing after its run ends and the user has not accepted that."""
        ...

    def leftover_note(
        self, run_id: str, disk_usd_per_hour: float, disk_gb: int, cap_seconds: int, most_usd: float
    ) -> str | None:
        """What an accepted leftover will bill, to print at launch; None when nothing can."""
        ...

    def boot_disk_gb(self) -> int:
        """The boot disk a machine of this backend bills for, in GB, as `start` will ask for
        it: what launch prices (0: no disk is billed)."""
        ...

    def start(self, spec: RunSpec, startup_script: str, shutdown_script: str) -> Placement: ...

    def machine_state(self, run_id: str, placement: Placement) -> str:
        """RUNNING, WAITING (the cloud holds the run until it has capacity for it: no
        machine exists or bills yet), STOPPING, TERMINATED, PREEMPTED or GONE."""
        ...

    def log_lines(self, run_id: str, placement: Placement, follow: bool) -> Iterator[str]: ...

    def log_since(self, run_id: str, placement: Placement, offset: int) -> tuple[str, int]:
        """Log text from byte `offset` (serial port 1 on gce), and the next offset."""
        ...

    def release(self, run_id: str, placement: Placement) -> bool:
        """Delete what the run leaves behind; True when something was deleted (already
        gone is fine, and False)."""
        ...

    def list_machines(self) -> list[Machine]:
        """Every machine bench manages that is still there."""
        ...

    def stop(self, machines: list[Machine]) -> list[Machine]:
        """Stop/delete these, in parallel, wait, and return those that were stopped."""
        ...

    def powered_off(self) -> list[Machine]:
        """Its machines that no longer run but still bill (a powered-off VM's disk), priced;
        [] where a machine cannot outlive its run."""
        ...

    def delete_command(self, machine: Machine) -> str:
        """The one command, outside bench, that deletes this machine."""
        ...

    def local_files(self, run_id: str, run_key: str) -> list[Path]:
        """What a run keeps on this machine (`clean` removes it once the run ended)."""
        ...


@dataclass(frozen=True)
class BudgetTerms:
    """How a budget is spent where the cloud bounds each attempt of a run and retries it:
    what `bench prices` shows and launch configures, in one line for both."""

    attempt_seconds: int  # the cloud's cap of one attempt
    attempts: int  # how many attempts the budget pays for, retries included
    worst_case_usd: float  # every attempt at its worst, at the rate
    setup_seconds: int  # billed before each attempt's cap starts (a VM's boot)
    region: str  # the region whose rate priced it
    summary: str


class Rate(Protocol):
    """A billed machine's price per hour, as the service reads it (a backend's own rate
    carries more: gce's `HourlyRate` names its items and its catalog)."""

    @property
    def total(self) -> float: ...

    @property
    def disk(self) -> float:
        """The boot disk's share of `total`: what a powered-off machine still bills."""
        ...

    @property
    def disk_gb(self) -> int: ...


@runtime_checkable
class PricesRuns(Protocol):
    """A backend whose machines bill (`Capabilities.billed`): it prices its machine and says
    what time cap a budget buys there. The service asks it for rate, cap and worst case and
    holds no cloud's prices itself (gce and batch: backends/gce/pricing.py)."""

    @classmethod
    def run_rate(cls, config: BenchConfig, spot: bool, disk_gb: int | None = None) -> Rate:
        """The configured machine's rate, the dearest of the places it may land in, its
        boot disk priced at `disk_gb` (None: before the image is read, an assumed size)."""
        ...

    @classmethod
    def max_run_seconds_for(cls, budget_usd: float, rate: Rate) -> int:
        """The longest time cap whose worst case stays within `budget_usd`."""
        ...

    @classmethod
    def worst_case_usd(cls, rate: Rate, cap_seconds: int) -> float:
        """The most a run capped at `cap_seconds` can bill at `rate`."""
        ...

    @classmethod
    def check_buys_a_start(cls, budget_usd: float, rate: Rate, boot_seconds: float) -> None:
        """UsageError (exit 2) when the budget cannot even boot the machine."""
        ...

    @classmethod
    def check_covers(
        cls, budget_usd: float, rate: Rate, estimated_seconds: int, cap_seconds: int
    ) -> None:
        """RefusedError (exit 3) when the cap is shorter than the plan needs."""
        ...


@dataclass(frozen=True)
class CatalogRead:
    """What a fresh read of a cloud's price list found, and where it was kept."""

    source: str  # the list read ("Cloud Billing Catalog API")
    entries_read: int  # what the source listed (SKUs)
    items_priced: int  # the catalog's items it gave a price
    saved_to: Path


@runtime_checkable
class ShowsPriceCatalog(Protocol):
    """A billed backend whose rates come from a dated price catalog it can show and read
    again (`bench prices`; gce and batch: backends/gce/pricing.py)."""

    @classmethod
    def price_catalog(cls, config: BenchConfig) -> dict[str, Any]:
        """The catalog its rates come from now: its date, currency, sources and each
        region's items (machines, gpus, disks) with their prices and zones."""
        ...

    @classmethod
    def refresh_price_catalog(cls, config: BenchConfig) -> CatalogRead:
        """Read the cloud's price list again and keep what it priced for later rates."""
        ...

    @classmethod
    def rate_text(cls, rate: Rate) -> str:
        """The rate as a refusal names it."""
        ...


@runtime_checkable
class GrantsRunAccess(Protocol):
    """A backend whose machine reaches the store only through grants signed for its run
    (backends/gce/signing.py): launch asks for them just before it renders the script."""

    def run_access_vars(self, spec: RunSpec) -> dict[str, Any]:
        """Template variables holding this run's own grants, replacing template_vars' empty
        ones."""
        ...


@runtime_checkable
class SplitsBudget(Protocol):
    """A backend whose runs are retried by the cloud, each attempt under its own cap."""

    @classmethod
    def budget_terms(
        cls,
        config: BenchConfig,
        budget_usd: float,
        rate: Rate,
        estimated_seconds: int,
        cap_seconds: int,
    ) -> BudgetTerms:
        """What `budget_usd` buys at `rate` for a plan of `estimated_seconds` whose time cap
        is `cap_seconds`; RefusedError when not even one attempt fits."""
        ...


@runtime_checkable
class ReportsBilledTime(Protocol):
    """A backend whose cloud records how long each machine of a run existed (Cloud Batch: a
    VM per attempt), so a run's cost is priced from that, not from its life since launch."""

    def billed_seconds(self, run_id: str, placement: Placement) -> list[float] | None:
        """Seconds each machine of the run has billed so far, one per machine; None when
        the cloud no longer knows (the service then prices the run's life)."""
        ...


@runtime_checkable
class ChecksProject(Protocol):
    """A backend whose project `bench doctor` can check before money is spent."""

    def doctor_checks(self, gpu_keys: list[str] | None, probe: bool) -> Iterator[Check]:
        """Every check, in order; `gpu_keys` (launch --gpu): each GPU type's shape in its
        own zones; `probe`: then a tiny machine proves the run's account works."""
        ...


@runtime_checkable
class SetsUpProject(Protocol):
    """A backend with a one-time, least-privilege setup of its project (`bench setup`)."""

    def setup_steps(self, launchers: Sequence[str] = ()) -> list[SetupStep]:
        """Every step, in order; `launchers`: the IAM members `bench setup --launcher`
        named, who will launch runs (a backend that needs no grant for them ignores it)."""
        ...

    def apply_setup(
        self,
        steps: list[SetupStep],
        on_done: Callable[[SetupStep, str], None],
        on_wait: Callable[[SetupStep, float], None],
    ) -> None:
        """Each step in order; `on_wait(step, seconds)` before a retry of a grant that a
        new account is not visible to yet."""
        ...

    def setup_followups(self, launchers: Sequence[str] = ()) -> list[str]:
        """What the user does once the steps are done, one line each."""
        ...
