"""A user's kernel: the contract file its repository declares, and the kernel as a plan
carries it to the payload (docs/kernel-contract.md).

The controller parses `bench-kernel.toml` (TOML is read on the laptop only, so the payload
needs no TOML parser) into `ContractFile`; `UserKernel` is what travels in plan.json: the
contract's content, where the tree lies in the payload, and the tree's identity.
"""

from __future__ import annotations

import hashlib
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from results_schema.implementations import BASELINE_SUFFIX, builtin_name_refusal

CONTRACT_FILE = "bench-kernel.toml"
# package.module:function, each part a Python identifier
ENTRY_PATTERN = r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$"
# The declared name is a CSV value, a report heading and an identity ('<name>@baseline'):
# no spaces, no '@' of its own, nothing a shell or a terminal would read twice.
KERNEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
DURATION_PATTERN = r"^(?=\d)(\d+h)?(\d+m)?(\d+s)?$"
DEFAULT_BUILD_TIMEOUT_SECONDS = 15 * 60
MAX_BUILD_TIMEOUT_SECONDS = 2 * 3600
MAX_CALL_TIMEOUT_SECONDS = 30 * 60
TIMEOUT_LIMITS = {
    "build_timeout": MAX_BUILD_TIMEOUT_SECONDS,
    "call_timeout": MAX_CALL_TIMEOUT_SECONDS,
}

# What a contract's env may not set, and why (docs/kernel-contract.md holds the same list):
# bench's own settings, whatever makes a program load or run code before its own (the
# dynamic loader's, the interpreter's, the shells' startup), and the GPU the run was given.
# The env reaches bench's own processes too: the requirements' pip, the build's bash, the
# worker's python before it imports the kernel.
REFUSED_ENV_PREFIXES = {
    "BENCH_": "BENCH_* are bench's own settings (the startup script's and the harness's)",
    "LD_": "LD_* are the dynamic loader's: they load or swap shared libraries before a "
    "program's own code",
    "PYTHON": "PYTHON* are the interpreter's: they change what python imports and runs before "
    "the kernel's import (bench's pip and worker are python)",
}
REFUSED_ENV = {
    "PATH": "it decides which programs run (the payload's python comes first)",
    "HOME": "tools read their configuration from it (pip.conf, .bashrc)",
    "PWD": "it is the working directory bench starts each step in",
    "SHELL": "programs start the shell it names",
    "BASH_ENV": "bash sources the file it names before the build's script",
    "ENV": "sh and bash source the file it names when they start interactive",
    "SHELLOPTS": "every bash started takes these options (xtrace runs PS4)",
    "BASHOPTS": "every bash started takes these options",
    "PS4": "bash expands it, command substitutions included, before each traced command",
    "PROMPT_COMMAND": "bash runs it before each prompt",
    "GCONV_PATH": "glibc's character-set conversion loads the shared objects it names",
    "CUDA_INJECTION64_PATH": "the CUDA driver loads the library it names into every process "
    "that starts CUDA",
    "CUDA_VISIBLE_DEVICES": "it picks the GPU, which bench gave the run",
    "CUDA_DEVICE_ORDER": "it renumbers the GPUs, which bench gave the run",
}
ENV_NAME_PATTERN = r"^[A-Z_][A-Z0-9_]{0,63}$"
MAX_ENV_VALUE_CHARS = 1000
TREE_PLACEHOLDER = "{tree}"
# A variant's name is part of an identity ('<name>[<variant>]'): a CSV value, a report
# heading, a worker's name; the bound keeps a run's variants one GPU's afternoon.
VARIANT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$"
MAX_VARIANTS = 16

# float8_e4m3fn: the call also takes q_descale, k_descale, v_descale and answers in bfloat16
# (docs/kernel-contract.md, "FP8").
ContractDtype = Literal["float16", "bfloat16", "float32", "float64", "float8_e4m3fn"]
ContractDevice = Literal["cpu", "cuda"]


def refused_env_reason(name: str) -> str | None:
    """Why a contract's env may not set `name`, if it may not."""
    prefix = next((p for p in REFUSED_ENV_PREFIXES if name.startswith(p)), None)
    return REFUSED_ENV.get(name) or (REFUSED_ENV_PREFIXES[prefix] if prefix else None)


class _Contract(BaseModel):
    # A typo in a key is an error, never a silently ignored setting.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def settable_env(env: dict[str, str]) -> dict[str, str]:
    """`env` when a contract (or a variant) may set every variable of it, else ValueError
    naming the first it may not."""
    for name, value in env.items():
        if not re.fullmatch(ENV_NAME_PATTERN, name):
            raise ValueError(f"{name!r} is no variable name (A-Z, 0-9 and _)")
        why = refused_env_reason(name)
        if why:
            raise ValueError(f"{name} is refused: {why}")
        if len(value) > MAX_ENV_VALUE_CHARS or not value.isprintable():
            raise ValueError(
                f"{name}: a value is one printable line of <= {MAX_ENV_VALUE_CHARS} characters"
            )
    return env


class KernelVariant(_Contract):
    """One line of [kernel.variants]: what selects the variant."""

    env: dict[str, str] = Field(
        default_factory=dict,
        description="environment variables set over the contract's env for this variant: "
        "for its worker process, and for its build unless build_shared is true",
    )

    @field_validator("env")
    @classmethod
    def _settable(cls, env: dict[str, str]) -> dict[str, str]:
        return settable_env(env)


def duration_seconds(text: str) -> int:
    """'15m', '1h30m', '90s' as seconds (a unit is required, as for --max-runtime)."""
    match = re.fullmatch(DURATION_PATTERN, text)
    if not match:
        raise ValueError(f"{text!r} is no duration: write e.g. 90s, 15m or 1h30m")
    hours, minutes, seconds = (int(part[:-1]) if part else 0 for part in match.groups())
    return hours * 3600 + minutes * 60 + seconds


class KernelSupports(_Contract):
    """What the kernel runs; a config outside it is reported 'unsupported: <reason>'."""

    dtypes: list[ContractDtype] = Field(
        default=["float16", "bfloat16"], min_length=1, description="input and output dtypes"
    )
    head_dims: list[int] | None = Field(default=None, description="head dims it runs (None: any)")
    causal: bool = Field(default=True, description="whether it takes causal=True")
    gqa: bool = Field(
        default=False, description="whether k and v may have fewer heads than q (GQA)"
    )
    devices: list[ContractDevice] = Field(
        default=["cuda"], min_length=1, description="torch device types it runs on"
    )
    min_compute_capability: str | None = Field(
        default=None,
        pattern=r"^\d+\.\d+$",
        description="the oldest CUDA compute capability it runs on, e.g. '8.0' (cuda only)",
    )
    check: str | None = Field(
        default=None,
        pattern=ENTRY_PATTERN,
        description="package.module:function called as fn(config) after the keys above "
        "allow a config; returns None (or True) where the kernel runs it, else a one-line "
        "reason. config has batch, heads, kv_heads, seq_len, head_dim, dtype, causal, device "
        "and compute_capability (a (major, minor) tuple, None off the GPU)",
    )

    def refuses(self, config) -> str | None:
        """Why these keys exclude `config` (an AttentionConfig), if they do."""
        if config.dtype not in self.dtypes:
            return f"unsupported: dtype {config.dtype} (it supports {', '.join(self.dtypes)})"
        if self.head_dims is not None and config.head_dim not in self.head_dims:
            dims = ", ".join(map(str, self.head_dims))
            return f"unsupported: head_dim {config.head_dim} (it supports {dims})"
        if config.causal and not self.causal:
            return "unsupported: causal"
        if config.key_heads != config.heads and not self.gqa:
            return "unsupported: grouped-query attention (k/v with fewer heads than q)"
        return None

    def min_capability(self) -> tuple[int, int] | None:
        if self.min_compute_capability is None:
            return None
        major, minor = self.min_compute_capability.split(".")
        return int(major), int(minor)


class KernelContract(_Contract):
    """The [kernel] table of bench-kernel.toml."""

    name: str = Field(
        pattern=KERNEL_NAME_PATTERN, description="the name reports and CSV rows give it"
    )
    entry: str = Field(
        pattern=ENTRY_PATTERN,
        description="package.module:function, called fn(q, k, v, *, causal, scale) on "
        "[batch, heads, seq, head_dim] tensors, returning o of q's shape and dtype",
    )
    build: str | None = Field(
        default=None,
        min_length=1,
        description="a shell command run inside the tree on the target before the gate "
        "(e.g. 'pip install -e .'), under build_timeout",
    )
    build_timeout: str = Field(default="15m", description="the build's time bound: 90s, 15m, 1h30m")
    call_timeout: str = Field(
        default="2m",
        description="the time bound of one request to the kernel's worker process (one gate "
        "call pair, one timed sample, the first call's compilation included): 90s, 2m",
    )
    requirements: list[str] = Field(
        default_factory=list,
        description="pip requirements installed before the build, each pinned with ==",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="environment variables set for the requirements' install, the build and "
        "the kernel's worker process; '{tree}' in a value is the tree's absolute path on the "
        "target (e.g. TORCH_EXTENSIONS_DIR = '{tree}/.torch-extensions': a build's output "
        "inside the tree is saved in the build cache with it)",
    )
    supports: KernelSupports = Field(
        default_factory=KernelSupports, description="what the kernel supports"
    )
    variants: dict[str, KernelVariant] = Field(
        default_factory=dict,
        description=f"at most {MAX_VARIANTS} variants of the kernel, each timed as its own "
        "implementation '<name>[<variant>]' in the same run: NAME = { env = { BLOCK_M = "
        '"64" } }; none: the kernel is timed as declared',
    )
    build_shared: bool = Field(
        default=False,
        description="the build does not read the variants' env: the tree is built once, "
        "with the contract's env, and every variant runs that build (false: each variant "
        "builds in its own copy of the tree, with its env)",
    )
    plan: str | None = Field(
        default=None,
        description="a plan of the kernel's own (the shapes its users care about): a JSON "
        "file of the tree, relative to its root, in bench's plan format; `bench launch` "
        "uses it unless --plan names another",
    )

    @field_validator("name")
    @classmethod
    def _not_builtin(cls, name: str) -> str:
        refusal = builtin_name_refusal(name)
        if refusal:
            raise ValueError(refusal)
        return name

    @field_validator("plan")
    @classmethod
    def _inside_the_tree(cls, path: str | None) -> str | None:
        # Read from the collected tree (what git sees, no link), so a plain relative name
        # without '..' is enough to keep it inside.
        if path is None:
            return None
        if path.startswith("/") or any(part in ("", ".", "..") for part in path.split("/")):
            raise ValueError(f"{path!r} is not a path inside the tree, e.g. 'bench-plan.json'")
        if not path.endswith(".json"):
            raise ValueError(f"{path!r} is no .json file (a plan is JSON)")
        return path

    @field_validator("requirements")
    @classmethod
    def _pinned(cls, requirements: list[str]) -> list[str]:
        for requirement in requirements:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._\[\],-]*==[A-Za-z0-9.+!_-]+", requirement):
                raise ValueError(f"{requirement!r} is not pinned as name==version")
        return requirements

    @field_validator("env")
    @classmethod
    def _settable(cls, env: dict[str, str]) -> dict[str, str]:
        return settable_env(env)

    @field_validator("variants")
    @classmethod
    def _few_and_named(cls, variants: dict[str, KernelVariant]) -> dict[str, KernelVariant]:
        if len(variants) > MAX_VARIANTS:
            raise ValueError(f"{len(variants)} variants: a run times at most {MAX_VARIANTS}")
        for name in variants:
            if not re.fullmatch(VARIANT_NAME_PATTERN, name):
                raise ValueError(
                    f"{name!r} is no variant name (a letter or digit, then letters, digits, "
                    "'_' or '-', at most 32)"
                )
        return variants

    def build_words(self) -> dict:
        """The requirements, the build command and the env's NAME=VALUE words (sorted,
        '{tree}' left in) as the build phase gets them (build.sh.j2): its cache key hashes
        them as they are here."""
        return {
            "requirements": " ".join(self.requirements),
            "command": self.build or "",
            "env": [f"{name}={value}" for name, value in sorted(self.env.items())],
        }

    def env_for(self, tree: str) -> dict[str, str]:
        """The env with '{tree}' replaced by the tree's path on the target."""
        return {name: value.replace(TREE_PLACEHOLDER, tree) for name, value in self.env.items()}

    def variant(self, name: str) -> tuple[KernelContract, dict[str, str]]:
        """The contract variant `name` runs under (its env over the contract's, where its
        build reads it too; no variants of its own), and the env its worker alone adds (a
        build_shared variant's, which its build must not see)."""
        env = self.variants[name].env
        if self.build_shared:
            return self.model_copy(update={"variants": {}}), dict(env)
        return self.model_copy(update={"variants": {}, "env": {**self.env, **env}}), {}

    @field_validator("build_timeout", "call_timeout")
    @classmethod
    def _bounded(cls, text: str, info) -> str:
        limit = TIMEOUT_LIMITS[info.field_name]
        if not 0 < duration_seconds(text) <= limit:
            most = f"{limit // 3600}h" if limit % 3600 == 0 else f"{limit // 60}m"
            raise ValueError(f"must lie between 1s and {most}")
        return text

    @property
    def build_timeout_seconds(self) -> int:
        return duration_seconds(self.build_timeout)

    @property
    def call_timeout_seconds(self) -> int:
        return duration_seconds(self.call_timeout)

    def entry_module_files(self, entry: str | None = None) -> tuple[str, str]:
        """The two files the entry's module (or another entry point's, such as the
        supports check's) may be, relative to the tree's root."""
        module = (entry or self.entry).split(":")[0].replace(".", "/")
        return f"{module}.py", f"{module}/__init__.py"

    def entry_points(self) -> list[tuple[str, str]]:
        """(key, package.module:function) of every entry point the harness imports."""
        points = [("entry", self.entry)]
        if self.supports.check:
            points.append(("supports.check", self.supports.check))
        return points


class ContractFile(_Contract):
    """bench-kernel.toml as a whole: one [kernel] table."""

    kernel: KernelContract = Field(description="the kernel this repository declares")


class KernelIdentity(_Contract):
    """Which tree ran: its content hash, and its git commit when it has one."""

    tree_sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="sha256 over the tree's sorted (name, sha256 of contents) pairs",
    )
    commit: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{40,64}$", description="the git commit, if any"
    )
    dirty: bool = Field(default=False, description="the tree has changes its commit does not hold")

    def label(self) -> str:
        """'<commit 12>[+dirty]', or 'tree-<sha 12>' outside git."""
        if self.commit is None:
            return f"tree-{self.tree_sha256[:12]}"
        return self.commit[:12] + ("+dirty" if self.dirty else "")


class UserKernel(_Contract):
    """A user's kernel as plan.json carries it: what the payload needs to build and call it."""

    identity: str = Field(
        description="the name it is timed under: the declared name, '<name>[<variant>]' for "
        "a declared variant, '<name>@<commit 7>' for a --candidates revision, or "
        "'<name>@baseline' for the A/B baseline's revision"
    )
    directory: str = Field(
        pattern=r"^[a-z_]+$", description="the tree's folder in the payload, e.g. user_kernel"
    )
    contract: KernelContract = Field(
        description="the tree's bench-kernel.toml (a variant's: its env merged, no variants)"
    )
    source: KernelIdentity = Field(description="which tree this is")
    worker_env: dict[str, str] = Field(
        default_factory=dict,
        description="a build_shared variant's env: set for its worker over the contract's, "
        "never for the build it shares",
    )

    @field_validator("worker_env")
    @classmethod
    def _settable(cls, env: dict[str, str]) -> dict[str, str]:
        return settable_env(env)

    def env_for(self, tree: str) -> dict[str, str]:
        """What the kernel's worker sets before it imports the kernel: the contract's env,
        then a shared build's variant env, '{tree}' replaced by the tree's path."""
        env = {**self.contract.env, **self.worker_env}
        return {name: value.replace(TREE_PLACEHOLDER, tree) for name, value in env.items()}

    def build_cache_prefix(self) -> str:
        """'user-kernels/<name>-<24 hex>': the hash of what the controller knows of the
        tree's build (its content, requirements, command and env, as the build phase gets
        them and user_build.sh.j2's user_build_cache_key hashes them), to which the target
        appends its toolchain's. The cache takes a tree's build under this prefix only."""
        words = self.contract.build_words()
        parts = [self.source.tree_sha256, words["requirements"], words["command"]]
        parts.append(" ".join(words["env"]))  # "${*:6}": the words joined by spaces
        digest = hashlib.sha256("".join(f"{part}\n" for part in parts).encode()).hexdigest()
        return f"user-kernels/{self.contract.name}-{digest[:24]}"

    @field_validator("identity")
    @classmethod
    def _not_builtin(cls, identity: str) -> str:
        # The registry holds a user kernel under its identity: never in a built-in's place.
        refusal = builtin_name_refusal(identity.removesuffix(BASELINE_SUFFIX))
        if refusal:
            raise ValueError(refusal)
        return identity


# What the startup script's build phase writes beside a tree whose build failed
# (<folder>.build-failed, partials/user_build.sh.j2), for the harness to read.
BUILD_FAILED_SUFFIX = ".build-failed"
# The longest build message kept: the build's last line, as `<tree>.build-failed` holds it.
MAX_BUILD_MESSAGE_CHARS = 300


class UserKernelBuild(_Contract):
    """How the build phase left one user kernel tree (user_builds.json, then the manifest's
    user_builds): what `bench status` and `bench report` say of a failed build."""

    identity: str = Field(max_length=80, description="the identity the tree is timed under")
    outcome: Literal["built", "cached", "failed", "nothing-to-build"] = Field(
        description="built: its requirements and build command ran and passed; cached: its "
        "build outputs came from the store's cache; failed: see message; nothing-to-build: "
        "the contract declares neither"
    )
    seconds: float = Field(ge=0, description="the requirements' install and the build, together")
    cache_key: str | None = Field(
        default=None,
        pattern=r"^user-kernels/[A-Za-z0-9][A-Za-z0-9._-]{0,199}$",
        description="the build cache entry it looked up, when it has a build command",
    )
    message: str = Field(
        default="",
        max_length=MAX_BUILD_MESSAGE_CHARS,
        description="failed: the build's last line, or 'timed out after Ns'",
    )

    def failure_line(self) -> str:
        """'<identity>: build failed: <its last line>', the one line `bench status` and
        `bench report` print of it (VM text: the caller escapes it)."""
        return f"{self.identity}: build failed: {self.message or 'no output'}"


def build_failure_lines(builds: list[UserKernelBuild] | None, timed: list[str]) -> list[str]:
    """One line per failed build of a kernel the plan times (a manifest may name others)."""
    return [b.failure_line() for b in builds or [] if b.outcome == "failed" and b.identity in timed]


def failed_builds(builds: list[UserKernelBuild] | None) -> set[str]:
    """The identities whose build failed: their one line says why for every config."""
    return {b.identity for b in builds or [] if b.outcome == "failed"}
