"""What a run records of how it kept kernel code away from the rest of the run
(docs/security.md, "No tree writes another"): the manifest's `trees`, `containment` and
`leftovers`. Each comes from the target, so each is bounded for the trust boundary."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from results_schema.record import MAX_COMMAND_CHARS, MAX_NAMED_LEFTOVERS, TREE_STAGES

SHA256_PATTERN = r"^[0-9a-f]{64}$"
# A kernel tree's folder in the payload (UserKernel.directory), or the harness.
TREE_PATTERN = r"^[a-z_]+$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class TreeCheck(_Strict):
    """One look at a tree's files just before it is used (trees.json): before a kernel
    tree's build, against the digest the controller computed at launch; after it, the
    digest the measure phase then holds it to; before the measure phase imports it (the
    harness against launch's digest, a kernel tree against its build's)."""

    tree: str = Field(pattern=TREE_PATTERN, description="'harness' or a kernel tree's folder")
    stage: Literal[TREE_STAGES]  # type: ignore[valid-type]
    expected_sha256: str | None = Field(
        default=None, pattern=SHA256_PATTERN, description="what it must be; None at 'built'"
    )
    found_sha256: str = Field(pattern=SHA256_PATTERN, description="what its files were")
    problem: str | None = Field(
        default=None, max_length=300, description="why the check failed the run; None: passed"
    )

    @property
    def passed(self) -> bool:
        return self.problem is None


class LeftoverProcess(_Strict):
    pid: int = Field(gt=1)
    command: str = Field(max_length=MAX_COMMAND_CHARS, description="its command line, cut")


class LeftoverSweep(_Strict):
    """Processes a build command or the measure phase's workers left running, ended when
    that step ended (leftovers.json): each as its pid and command line."""

    phase: Literal["build", "measure", "finish"]
    tree: str | None = Field(
        default=None, pattern=TREE_PATTERN, description="the kernel tree whose step left them"
    )
    ended: int = Field(ge=1, description="how many processes were ended")
    processes: list[LeftoverProcess] = Field(max_length=MAX_NAMED_LEFTOVERS)


class Containment(_Strict):
    """How the run's kernel trees were held apart from the harness, each other and the
    run's results (containment.json)."""

    kernel_users: dict[str, str] = Field(
        default_factory=dict,
        max_length=16,
        description="each kernel tree's folder and the unprivileged user it was built and "
        "run as; empty where the run could not drop privileges (the local backend)",
    )
    note: str = Field(max_length=300, description="what that means for this run, in a line")
