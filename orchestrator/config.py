"""Settings: bench.toml files, BENCH_* environment variables and flags, merged and validated.

Later sources win: the user config dir's bench.toml, then ./bench.toml, then the
environment, then flags. Every key is validated by `BenchConfig` (extra="forbid"), and a
bad value becomes one ConfigError line naming the source, key, value and what is allowed.
A hand-written merge rather than pydantic-settings: we want that error to name the source.
"""

from __future__ import annotations

import os
import re
import sys
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchestrator.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ENV_PREFIX = "BENCH_"
# BENCH_* variables that are not settings (BENCH_LOCAL_RUN marks a local run's processes,
# so a bench started inside a run still reads its settings).
NON_SETTING_ENV = {"BENCH_DEBUG", "BENCH_LOCAL_RUN"}

# Every pattern below is used with fullmatch: `$` would also match before a final newline.
ZONE_RE = re.compile(r"[a-z]+-[a-z]+[0-9]+-[a-z]")


def region_of(zone: str) -> str:
    """us-central1-a -> us-central1 (a zone name is its region plus one letter)."""
    return zone.rsplit("-", 1)[0]


def regions_of(zones: list[str]) -> list[str]:
    """The regions of these zones, in the zones' order, each once."""
    return list(dict.fromkeys(region_of(zone) for zone in zones))


PROJECT_RE = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")
# An image project may be a legacy domain-scoped one, `example.com:my-images`
# (https://cloud.google.com/resource-manager/docs/creating-managing-projects#identifying_projects).
IMAGE_PROJECT_RE = re.compile(r"([a-z0-9][a-z0-9.-]{0,61}[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]")
BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")
IPV4_RE = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}")
# GCE's rule for resource names (machine and accelerator types, image families): RFC 1035,
# 1-63 lowercase letters, digits and '-'.
RESOURCE_NAME_RE = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
# The VM's account: `default`, a user-managed account ACCOUNT@PROJECT.iam.gserviceaccount.com
# (IAM account ids are 6-30 of [a-z0-9-], starting with a letter; a domain-scoped project
# puts its domain after the project), or the Compute Engine default account written out.
SERVICE_ACCOUNT_RE = re.compile(
    r"default"
    r"|[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z][a-z0-9-]{0,61}(\.[a-z0-9-]{1,63})*\.iam\.gserviceaccount\.com"
    r"|[0-9]{1,20}-compute@developer\.gserviceaccount\.com"
)
# The store prefix is both a Cloud Storage object-name prefix and a directory path under the
# state dir: segments of ASCII letters, digits, '.', '_' and '-', none empty, none starting
# with '.' or '-' (so never '.', '..', a hidden name or an option), 200 characters at most.
PREFIX_SEGMENT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
MAX_PREFIX_CHARS = 200
# An endpoint override: http(s), a host name or address, a port, a plain path; nothing a
# shell or a URL parser could read two ways.
ENDPOINT_RE = re.compile(
    r"https?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?(/[A-Za-z0-9._~%/-]*)?"
)
# A path on the VM: absolute, plain characters, no '.' or '..' segments.
VM_PATH_SEGMENT_RE = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,99}")
# Large enough for any team's month, small enough that every sum stays an ordinary number.
MAX_MONTHLY_CAP_USD = 100_000.0


def bucket_name_problem(name: str) -> str | None:
    """What Cloud Storage would refuse in this bucket name, or None (its naming rules: a
    refused name must stop here, not after a round trip)."""
    if not BUCKET_RE.fullmatch(name) or ".." in name:
        return "a bucket name is 3-63 lowercase letters, digits, '-', '_' or '.'"
    if IPV4_RE.fullmatch(name):
        return "a bucket name cannot look like an IP address"
    if name.startswith("goog") or "google" in name or "g00gle" in name:
        return "a bucket name cannot start with 'goog' or contain 'google'"
    return None


def store_prefix_problem(prefix: str) -> str | None:
    """Why this store prefix could lead out of the store or be read two ways, or None."""
    if prefix.startswith("/"):
        return "the prefix is a relative path inside the bucket, e.g. bench or team/bench"
    if len(prefix) > MAX_PREFIX_CHARS:
        return f"the prefix is at most {MAX_PREFIX_CHARS} characters"
    for segment in prefix.split("/"):
        if not PREFIX_SEGMENT_RE.fullmatch(segment):
            return (
                f"folder {segment!r}: each is ASCII letters, digits, '.', '_' or '-', not empty "
                "and not starting with '.' or '-' (so never '..'), e.g. team/bench"
            )
    return None


def vm_path_problem(path: str) -> str | None:
    """Why this path on the VM is refused, or None: absolute, plain, no '.' or '..'."""
    segments = path.rstrip("/").split("/")
    if not path.startswith("/") or len(segments) < 2:
        return "must be an absolute path below /, e.g. /var/lib/bench"
    if len(path) > MAX_PREFIX_CHARS:
        return f"must be at most {MAX_PREFIX_CHARS} characters"
    if not all(VM_PATH_SEGMENT_RE.fullmatch(segment) for segment in segments[1:]):
        return (
            "use folder names of ASCII letters, digits, '.', '_', '+' and '-' (none empty, "
            "none '.' or '..')"
        )
    return None


# A Deep Learning VM family that already carries torch, so a run installs nothing.
# Source: "Choose an image", https://docs.cloud.google.com/deep-learning-vm/docs/images
# (names pytorch-2-9-cu129-ubuntu-2204-nvidia-580-v20260416 as an image of this family; the
# nvidia-580 suffix means the driver is pre-installed). PyTorch 2.9 (>= the payload's torch
# 2.4), CUDA 12.9, Ubuntu 22.04 (Python 3.10). Support: that page, as captured 2026-04, gives
# the common-cu129-*-nvidia-580 families patches to 2028-08-04; the pytorch-2-9 family's own
# end-of-support date was not found in the captured pages: re-check the page above and the
# framework support policy (https://docs.cloud.google.com/deep-learning-vm/docs/framework-support-policy).
DEFAULT_IMAGE_FAMILY = "pytorch-2-9-cu129-ubuntu-2204-nvidia-580"


# The poll setting's bounds (each backend's default is its Capabilities.poll_seconds).
# Faster than a tenth of a second is a busy loop (and on gce a stream of API calls);
# slower than five minutes and --wait would miss most of a short run.
MIN_POLL_SECONDS, MAX_POLL_SECONDS = 0.1, 300.0


# Machine families that come with their GPUs attached (the GPU table's g2, a2 and a3 rows),
# https://cloud.google.com/compute/docs/accelerator-optimized-machines
ACCELERATOR_OPTIMIZED_FAMILIES = ("a2-", "a3-", "a4-", "g2-", "g4-")


class BenchConfig(BaseModel):
    """Everything bench can be told, with defaults that launch a spot L4 in us-central1."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    backend: str = Field(
        "auto", description="where runs go; auto = gce when a project is set, else local"
    )
    project: str | None = Field(None, description="GCP project id")
    zones: list[str] = Field(
        ["us-central1-a", "us-central1-b", "us-central1-c"],
        min_length=1,
        description="zones to try, in order, on stockouts",
    )
    machine_type: str = Field("g2-standard-4", description="GCE machine type")
    accelerator_type: str = Field("nvidia-l4", description="GPU type attached to the VM")
    accelerator_count: int = Field(1, ge=1, le=8, description="GPUs attached to the VM")
    image_project: str = Field("deeplearning-platform-release", description="boot image project")
    image_family: str = Field(
        DEFAULT_IMAGE_FAMILY,
        description="boot image family (driver baked in; a pytorch-* family also carries torch)",
    )
    disk_gb: int | None = Field(
        None,
        ge=10,
        le=2000,
        description="boot disk size in GB (pd-balanced); default: the image's own size, the "
        "smallest it allows",
    )
    spot: bool = Field(True, description="spot (preemptible) pricing")
    on_demand_fallback: bool = Field(False, description="retry on-demand if spot has no capacity")
    bucket: str | None = Field(None, description="GCS bucket for payloads and results")
    prefix: str = Field("bench", description="object prefix inside the bucket")
    runs_retention_days: int = Field(
        30,
        ge=1,
        le=36500,
        description="`bench setup`'s lifecycle rule: objects under <prefix>/runs/ (payloads, "
        "results) are deleted this many days after they were written",
    )
    service_account: str = Field(
        "default",
        description="VM service account email, or default; with the account `bench setup` "
        "creates, each VM deletes itself when its run ends",
    )
    allow_leftover_disk: bool = Field(
        False,
        description="gce with the default service account: launch anyway (refused otherwise); "
        "each VM then powers off at its end and its boot disk bills until fetch, --wait or "
        "stop-all deletes it",
    )
    owner: str | None = Field(None, description="bench-owner label (default: your user name)")
    monthly_cap: float | None = Field(
        None,
        gt=0,
        le=MAX_MONTHLY_CAP_USD,
        allow_inf_nan=False,
        description="refuse launches that would take this month's spend past it (USD)",
    )
    state_dir: Path | None = Field(None, description="registry, local store and sandboxes")
    payload_python: str | None = Field(
        None, description="local backend: python that runs the payload (default: this one)"
    )
    vm_work_dir: str = Field("/var/lib/bench", description="where the VM keeps a run's files")
    poll_seconds: float | None = Field(
        None,
        ge=MIN_POLL_SECONDS,
        le=MAX_POLL_SECONDS,
        allow_inf_nan=False,
        description="how often --wait and logs --follow poll (default: 10 s on gce, 0.5 s locally)",
    )
    compute_endpoint: str | None = Field(None, description="Compute API endpoint override")
    storage_endpoint: str | None = Field(None, description="Cloud Storage endpoint override")
    metadata_endpoint: str | None = Field(None, description="VM metadata server override")
    iam_endpoint: str | None = Field(None, description="IAM API endpoint override (bench setup)")
    iamcredentials_endpoint: str | None = Field(
        None, description="IAM Service Account Credentials endpoint override (signBlob)"
    )
    signer_account: str | None = Field(
        None,
        description="the service account whose signature grants each run its own objects "
        "(default: bench-signer@<project>, made by `bench setup`)",
    )
    batch_endpoint: str | None = Field(None, description="Cloud Batch API endpoint override")
    batch_queue_minutes: float = Field(
        60.0, gt=0, description="batch: a job still QUEUED this long is deleted, its share freed"
    )
    resourcemanager_endpoint: str | None = Field(
        None, description="Resource Manager API endpoint override (bench setup)"
    )
    billing_endpoint: str | None = Field(
        None, description="Cloud Billing Catalog API endpoint override (bench prices --refresh)"
    )

    @field_validator("backend")
    @classmethod
    def _registered_backend(cls, value: str) -> str:
        from orchestrator.backends.names import BACKENDS

        choices = ("auto", *BACKENDS)
        if value not in choices:
            quoted = [f"'{c}'" for c in choices]
            raise ValueError(f"Input should be {', '.join(quoted[:-1])} or {quoted[-1]}")
        return value

    @field_validator("zones")
    @classmethod
    def _zones_look_like_zones(cls, zones: list[str]) -> list[str]:
        for zone in zones:
            if not ZONE_RE.fullmatch(zone):
                raise ValueError(f"{zone!r} is not a zone name like us-central1-a")
        return zones

    @field_validator("project")
    @classmethod
    def _project_id(cls, value: str | None) -> str | None:
        if value is not None and not PROJECT_RE.fullmatch(value):
            raise ValueError(
                "a project id is 6-30 lowercase letters, digits or hyphens, starting with a letter"
            )
        return value

    @field_validator("image_project")
    @classmethod
    def _image_project_id(cls, value: str) -> str:
        if not IMAGE_PROJECT_RE.fullmatch(value):
            raise ValueError(
                "an image project is a project id (6-30 lowercase letters, digits or hyphens, "
                "starting with a letter), e.g. deeplearning-platform-release"
            )
        return value

    @field_validator("signer_account")
    @classmethod
    def _signer_account(cls, value: str | None) -> str | None:
        if value is not None and (value == "default" or not SERVICE_ACCOUNT_RE.fullmatch(value)):
            raise ValueError(
                "a service account email like bench-signer@my-project.iam.gserviceaccount.com"
            )
        return value

    @field_validator("service_account")
    @classmethod
    def _service_account(cls, value: str) -> str:
        if not SERVICE_ACCOUNT_RE.fullmatch(value):
            raise ValueError(
                "use default, or a service account email like "
                "bench-vm@my-project.iam.gserviceaccount.com"
            )
        return value

    @field_validator("bucket")
    @classmethod
    def _bucket_name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        name = value.removeprefix("gs://").rstrip("/")
        problem = bucket_name_problem(name)
        if problem:
            raise ValueError(problem)
        return name

    @field_validator("vm_work_dir")
    @classmethod
    def _vm_path(cls, value: str) -> str:
        problem = vm_path_problem(value)
        if problem:
            raise ValueError(problem)
        return value.rstrip("/")

    @field_validator("machine_type", "accelerator_type", "image_family")
    @classmethod
    def _gce_name(cls, value: str) -> str:
        if not RESOURCE_NAME_RE.fullmatch(value):
            raise ValueError(
                "a GCE name is 1-63 lowercase letters, digits and '-', starting with a letter "
                "and not ending with '-' (e.g. g2-standard-4, nvidia-l4)"
            )
        return value

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        value = value.rstrip("/")  # `bench/` names the same folder as `bench`
        problem = store_prefix_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator(
        "compute_endpoint",
        "storage_endpoint",
        "metadata_endpoint",
        "iam_endpoint",
        "iamcredentials_endpoint",
        "batch_endpoint",
        "resourcemanager_endpoint",
        "billing_endpoint",
    )
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None and not ENDPOINT_RE.fullmatch(value):
            raise ValueError("an endpoint is an http(s) URL like https://host:port/path")
        return value

    @field_validator("owner", "payload_python", "state_dir")
    @classmethod
    def _no_control_characters(cls, value):
        # A line break here would end up in a script or a label as a second line.
        if value is not None and any(unicodedata.category(c) == "Cc" for c in str(value)):
            raise ValueError("contains a control character (a line break, a tab, ...)")
        return value

    @model_validator(mode="after")
    def _gpus_the_machine_comes_with(self):
        """An accelerator-optimized machine type comes with its GPUs (g2-standard-4: one L4):
        Compute Engine attaches that many, whatever else is asked, and refuses the VM
        otherwise (https://cloud.google.com/compute/docs/accelerator-optimized-machines), so a
        count or type that differs would only be priced wrong until launch failed."""
        from orchestrator.gpu_catalog import load_gpu_catalog

        if not self.machine_type.startswith(ACCELERATOR_OPTIMIZED_FAMILIES):
            return self  # n1 takes 1, 2 or 4 of a GPU type: Compute Engine says which
        for gpu in load_gpu_catalog().values():
            if gpu.machine_type != self.machine_type:
                continue
            asked = (self.accelerator_type, self.accelerator_count)
            if asked != (gpu.accelerator_type, gpu.accelerator_count):
                raise ValueError(
                    f"{self.machine_type} comes with {gpu.accelerator_count} x "
                    f"{gpu.accelerator_type}: set accelerator_type = "
                    f'"{gpu.accelerator_type}" and accelerator_count = '
                    f"{gpu.accelerator_count}, or choose another machine_type"
                )
        return self


def config_files(cwd: Path) -> list[Path]:
    """bench.toml files in increasing priority: the user config dir, then the working dir."""
    from platformdirs import user_config_dir

    return [Path(user_config_dir("bench")) / "bench.toml", cwd / "bench.toml"]


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path} is not valid TOML: {e}; fix the file or remove it") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{path} is not UTF-8 text (byte {e.start}); TOML files are UTF-8: save it as UTF-8"
        ) from None
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None


def _env_settings(env: Mapping[str, str]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name in NON_SETTING_ENV:
            continue
        key = name[len(ENV_PREFIX) :].lower()
        if key not in BenchConfig.model_fields:
            raise ConfigError(
                f"unknown environment variable {name}; bench settings are "
                + ", ".join(ENV_PREFIX + k.upper() for k in BenchConfig.model_fields)
            )
        is_list = BenchConfig.model_fields[key].annotation == list[str]
        settings[key] = [v.strip() for v in value.split(",") if v.strip()] if is_list else value
    return settings


def load_config(
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> BenchConfig:
    """Merge every source (files < environment < flags) and validate once."""
    env = os.environ if env is None else env
    merged: dict[str, Any] = {}
    source_of: dict[str, str] = {}
    for path in config_files(cwd or Path.cwd()):
        if path.is_file():
            for key, value in _read_toml(path).items():
                merged[key], source_of[key] = value, str(path)
    for key, value in _env_settings(env).items():
        merged[key], source_of[key] = value, f"environment variable {ENV_PREFIX}{key.upper()}"
    for key, value in (flags or {}).items():
        if value is not None:
            merged[key], source_of[key] = value, f"option --{key.replace('_', '-')}"
    try:
        return BenchConfig.model_validate(merged)
    except ValidationError as e:
        raise ConfigError(_one_line(e, merged, source_of)) from None


def _one_line(error: ValidationError, merged: dict, source_of: dict[str, str]) -> str:
    first = error.errors()[0]
    key = str(first["loc"][0]) if first["loc"] else "?"
    source = source_of.get(key, "settings")
    if first["type"] == "extra_forbidden":
        known = ", ".join(BenchConfig.model_fields)
        return f"unknown setting {key!r} in {source}; known settings: {known}"
    message = first["msg"].removeprefix("Value error, ")
    return f"invalid setting {key} = {merged.get(key)!r} in {source}: {message}"
