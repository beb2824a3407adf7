"""The payload: the exact code a run executes, as one reproducible tarball with a sha256.

Built from the working tree (uncommitted edits included) on every launch, so a VM can never
run stale code; identical trees give identical bytes wherever they sit (sorted entries,
relative names, zeroed times/owners/modes). Only what the VM runs goes in: no caches, no
docs, no schema exports; tests and developer tools live outside the payload packages.

Every source tree bench ships (the candidate's packages, an A/B baseline's kernels/ as a
directory or a git revision, next a user's kernel repository) is read by one function,
`collect_tree`, under one set of rules:

- The tree as git sees it. In a git work tree: the tracked files and the untracked ones git
  does not ignore (a tracked file deleted from the disk is left out). At a revision: what
  `git archive` gives. Outside any work tree (bench installed from a wheel): every file
  under the root but those of a folder whose own .gitignore ignores all of it (`*`: bench's
  results folder, paths.mark_as_outputs). Never `.git`, never a file git ignores.
- No symbolic links. A link anywhere below the root (to a file or a directory, leading out
  of the tree or staying inside it) is refused with a UsageError naming it, and so is a
  file whose parent directory is a link: no content is ever read through a link, and the
  payload holds none, so unpacking it on the VM cannot be steered outside its directory
  either. The root itself is the one path resolved: the user named it. Anything else that
  is not a regular file (a FIFO, a device, a submodule or nested repository that git
  lists as a directory) is refused the same way.
- Bounded: at most MAX_TREE_FILES files, MAX_FILE_BYTES each and MAX_TREE_BYTES in all,
  checked from lstat sizes (tar headers at a revision) before any content is read, so an
  oversized tree is refused without being read. Each file is then read once, without
  following a link, and refused if its size changed in between.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import stat
import subprocess
import tarfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import util
from pathlib import Path, PurePosixPath
from typing import IO

from orchestrator.backends.registry import capabilities
from orchestrator.errors import UsageError
from orchestrator.regular_file import NotRegularFileError, read_regular
from results_schema import Plan
from results_schema.record import PAYLOAD_PACKAGES, payload_tree_digests

# PAYLOAD_PACKAGES are the harness (the target checks them by that name, results_schema.
# record); kernels travel as trees of their own (`kernel_trees`), ours too.
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", "build", ".mypy_cache"}
SKIPPED_SUFFIXES = {".pyc", ".pyo", ".so", ".o", ".md"}
# Controller-side parts of the shared package: the JSON Schema export and its output.
SKIPPED_PATHS = {"results_schema/jsonschema", "results_schema/export.py"}

# A source tree's bounds: our own packages are under 1 MB, so these leave a user's kernel
# repository room while a stray dataset or build output is refused before it is read.
MAX_TREE_BYTES = 64 * 2**20
MAX_FILE_BYTES = 16 * 2**20
MAX_TREE_FILES = 10_000
GIT_TIMEOUT_SECONDS = 60

# (name relative to the tree's root, contents), sorted by name.
TreeFiles = tuple[tuple[str, bytes], ...]

# What the payload's python must carry; any image python that has these at these versions
# or newer runs the payload as it is (a Deep Learning VM PyTorch image). The same floors as
# pyproject.toml's `vm` extra, plus pydantic for results_schema.
PAYLOAD_MINIMUMS = ["torch>=2.4", "numpy>=1.24", "pydantic>=2.6", "nvidia-ml-py>=12"]
# Installed into a venv on a bare CUDA image (no torch): exact pins, so every such run
# measures the same stack; they match PAYLOAD_PIP_INDEX_ARGS' CUDA 12.8 wheels.
PAYLOAD_PIP_PACKAGES = {
    "cuda": ["torch==2.8.0", "numpy==2.2.6", "pydantic==2.12.5", "nvidia-ml-py==13.580.82"],
    "cpu": ["torch", "numpy", "pydantic"],  # the smoke plan: any versions will do
}


def payload_requirements(backend: str, device: str) -> list[str]:
    """The bare-image venv's pins where bench sets up the run's python; in the user's own
    python only the names."""
    pins = PAYLOAD_PIP_PACKAGES[device]
    return pins if _sets_up_python(backend) else [_name(pin) for pin in pins]


def image_requirements(backend: str, device: str) -> list[str]:
    """What an image's own python must carry for the run to install nothing."""
    if device == "cpu" or not _sets_up_python(backend):
        return payload_requirements(backend, device)
    return PAYLOAD_MINIMUMS


def _sets_up_python(backend: str) -> bool:
    return capabilities(backend).sets_up_python


def _name(requirement: str) -> str:
    return requirement.split("==")[0].split(">=")[0]


PAYLOAD_PIP_INDEX_ARGS = {
    "cuda": "--extra-index-url https://download.pytorch.org/whl/cu128",
    "cpu": "--extra-index-url https://download.pytorch.org/whl/cpu",
}


@dataclass(frozen=True)
class Payload:
    data: bytes
    sha256: str
    # Each tree's digest (the harness's, each kernel tree's folder's: results_schema.record
    # tree_digest), which the target checks just before it uses the tree.
    tree_sha256s: dict[str, str]

    @property
    def size(self) -> int:
        return len(self.data)


def package_dir(name: str) -> Path:
    spec = util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"payload package {name} is not importable")
    return Path(next(iter(spec.submodule_search_locations)))


def payload_root() -> Path:
    """The directory holding the payload packages where Python imports them: the checkout,
    or site-packages for an installed wheel."""
    roots = {package_dir(name).parent for name in PAYLOAD_PACKAGES}
    if len(roots) != 1:
        raise RuntimeError(f"the payload packages lie in several places: {sorted(roots)}")
    return roots.pop()


def payload_skips(name: str) -> bool:
    """The payload's rule for a file named as in the tarball (`package/relative/path`)."""
    path = PurePosixPath(name)
    return (
        bool(SKIPPED_DIRS.intersection(path.parts))
        or path.suffix in SKIPPED_SUFFIXES
        or any(name == p or name.startswith(p + "/") for p in SKIPPED_PATHS)
    )


def skipped_in_kernels(relative: Path) -> bool:
    """The payload's rule for a file of a kernels/ tree (an A/B baseline's too)."""
    return payload_skips(f"kernels/{relative.as_posix()}")


def payload_files(source_root: Path | None = None) -> TreeFiles:
    """(name in the tarball, contents) of every file the VM needs, sorted by name. The
    packages come from `source_root` when given, else from where Python imports them."""
    root = source_root or payload_root()
    label = f"the payload's tree {root}"
    return collect_tree(root, PAYLOAD_PACKAGES, skipped=payload_skips, label=label)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def build_payload(
    plan: Plan,
    source_root: Path | None = None,
    kernel_trees: Sequence[tuple[str, TreeFiles]] = (),
) -> Payload:
    """Tar the payload packages and plan.json; identical inputs give identical bytes.
    Each of `kernel_trees` (a folder, a kernel's tree) goes in as <folder>/..."""
    entries = list(payload_files(source_root))
    for folder, files in kernel_trees:
        entries += [(f"{folder}/{name}", data) for name, data in files]
    plan_json = ("plan.json", plan.model_dump_json(indent=2).encode())
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, filename="") as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, data in [*sorted(entries), plan_json]:
                _add_bytes(tar, name, data)
    data = buffer.getvalue()
    entries.append(plan_json)
    digests = payload_tree_digests((n, hashlib.sha256(d).hexdigest()) for n, d in entries)
    return Payload(data=data, sha256=hashlib.sha256(data).hexdigest(), tree_sha256s=digests)


# ---- A source tree, as git sees it (the module docstring gives the rules) ----------------


def _nothing_skipped(name: str) -> bool:
    return False


def collect_tree(
    root: Path,
    within: Sequence[str] = (),
    *,
    revision: str | None = None,
    skipped: Callable[[str], bool] = _nothing_skipped,
    label: str | None = None,
) -> TreeFiles:
    """(name relative to `root`, contents) of every file of the tree under `root`, or only
    of those under its top-level entries `within`; at `revision` (a git revision of the
    repository holding `root`) instead of the working tree when given. `skipped(name)`
    leaves a file out before any check; `label` names the tree in errors (UsageError)."""
    root = Path(root).resolve()
    label = label or str(root)
    if revision is None:
        files = _files_on_disk(root, within, skipped, label)
    else:
        files = _files_at_revision(root, revision, within, skipped, label)
    _require_every_part(files, within, label)
    return tuple(sorted(files))


def _require_every_part(files: list[tuple[str, bytes]], within: Sequence[str], label: str):
    for part in within:
        if not any(name.startswith(part + "/") for name, _ in files):
            raise UsageError(f"{label}: no files under {part}/")
    if not files:
        raise UsageError(f"{label}: the tree has no files")


@dataclass
class _TreeTally:
    """Files counted so far, so each bound is checked before the next file is read."""

    label: str
    files: int = 0
    total_bytes: int = 0

    def admit(self, name: str, size: int) -> None:
        hint = "is it an output or data file git should ignore?"
        if size > MAX_FILE_BYTES:
            raise UsageError(
                f"{self.label}: {name} is {_mib(size)}, over the {_mib(MAX_FILE_BYTES)} a file "
                f"may be; {hint}"
            )
        self.files += 1
        self.total_bytes += size
        if self.files > MAX_TREE_FILES:
            raise UsageError(f"{self.label}: over {MAX_TREE_FILES} files (at {name}); {hint}")
        if self.total_bytes > MAX_TREE_BYTES:
            raise UsageError(
                f"{self.label}: over {_mib(MAX_TREE_BYTES)} of files in all (at {name}); {hint}"
            )


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


# -- the working tree: git's list of it, or a walk outside git; lstat before any read --


def _files_on_disk(
    root: Path, within: Sequence[str], skipped: Callable[[str], bool], label: str
) -> list[tuple[str, bytes]]:
    names = _git_listing(root, within)
    if names is None:
        names = _walked_names(root, within, label)
    tally, checked_dirs = _TreeTally(label), set()
    sized = []
    for name in (n for n in names if not skipped(n)):
        status = _entry_status(root, name, checked_dirs, label)
        if status is None:
            continue  # tracked but deleted: not part of the tree as it stands
        _require_regular_file(root, name, status, label)
        tally.admit(name, status.st_size)
        sized.append((name, status.st_size))
    return [(name, _read_regular_file(root, name, size, label)) for name, size in sized]


def _git_listing(root: Path, within: Sequence[str]) -> list[str] | None:
    """The files git sees under `root` (names relative to it), or None when `root` lies in
    no git work tree, or in a part of one git ignores (a venv's site-packages, say)."""
    if not _in_a_work_tree(root):
        return None
    listing = run_git(
        root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *within
    )
    # A file with a merge conflict is listed once per stage.
    return sorted({os.fsdecode(name) for name in listing.split(b"\0") if name})


def _in_a_work_tree(root: Path) -> bool:
    try:
        top, prefix = _top_and_prefix(root)
    except UsageError:  # no git, or no repository here: a plain directory
        return False
    if not prefix:
        return True
    ignored = _git_process(top, "check-ignore", "-q", "--", prefix.rstrip("/"))
    return ignored.returncode != 0


def _top_and_prefix(root: Path) -> tuple[Path, str]:
    lines = run_git(root, "rev-parse", "--show-toplevel", "--show-prefix").decode().splitlines()
    if len(lines) != 2:  # inside .git itself: no work tree
        raise UsageError(f"{root} is in no git work tree")
    return Path(lines[0]), lines[1]


def _walked_names(root: Path, within: Sequence[str], label: str) -> list[str]:
    """Every entry under `root` (or its `within` parts) that is not a directory, never
    descending into a link; a linked directory is listed as an entry, to be refused."""
    names = []
    for top in [root / part for part in within] or [root]:
        if top.is_symlink() or not top.is_dir():
            names += [_relative(root, top)] if os.path.lexists(top) else []
            continue
        for current, dirs, files in os.walk(top, onerror=_walk_error(label)):
            here = Path(current)
            linked = [d for d in dirs if (here / d).is_symlink()]
            dirs[:] = [
                d for d in dirs if d != ".git" and d not in linked and not _ignored_whole(here / d)
            ]
            names += [_relative(root, here / f) for f in [*files, *linked] if f != ".git"]
    return sorted(names)


def _ignored_whole(folder: Path) -> bool:
    """Whether the folder's own .gitignore ignores all of it (`*`, as bench's results folder,
    pytest's cache and a venv write): git would list nothing of it, and neither does a walk."""
    try:
        text = read_regular(folder / ".gitignore", 4096).decode()
    except (OSError, UnicodeDecodeError):
        return False
    patterns = [line.strip() for line in text.splitlines()]
    return [p for p in patterns if p and not p.startswith("#")] == ["*"]


def _relative(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def _walk_error(label: str) -> Callable[[OSError], None]:
    def refuse(error: OSError) -> None:
        raise UsageError(f"{label}: cannot read {error.filename}: {error.strerror}")

    return refuse


def _entry_status(
    root: Path, name: str, checked_dirs: set[PurePosixPath], label: str
) -> os.stat_result | None:
    """lstat of `name` once every directory above it is known to be no link (a listed
    file under a directory since replaced by a link would otherwise be read through it);
    None when it no longer exists."""
    above = PurePosixPath(name).parents
    for directory in reversed([d for d in above if d.name and d not in checked_dirs]):
        try:
            status = os.lstat(root / directory)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(status.st_mode):
            raise _link_error(root, directory.as_posix(), label)
        checked_dirs.add(directory)
    try:
        return os.lstat(root / name)
    except FileNotFoundError:
        return None


def _require_regular_file(root: Path, name: str, status: os.stat_result, label: str):
    if stat.S_ISLNK(status.st_mode):
        raise _link_error(root, name, label)
    if stat.S_ISDIR(status.st_mode):
        raise UsageError(
            f"{label}: {name} is a submodule or a nested git repository; "
            "bench carries the files of one tree only"
        )
    if not stat.S_ISREG(status.st_mode):
        raise UsageError(f"{label}: {name} is not a regular file")


def _link_error(root: Path, name: str, label: str) -> UsageError:
    target = os.readlink(root / name)
    inside = Path(os.path.realpath((root / name).parent / target)).is_relative_to(root)
    where = "" if inside else ", outside the tree"
    return _refused_link(label, name, f"{target}{where}")


def _refused_link(label: str, name: str, target: str) -> UsageError:
    return UsageError(
        f"{label}: {name} is a symbolic link (to {target}); bench reads nothing through a "
        "link and the payload carries none: put the file itself there"
    )


def _read_regular_file(root: Path, name: str, size: int, label: str) -> bytes:
    """The file's bytes (orchestrator/regular_file.py: no link followed, no FIFO waited
    on), checked to be what lstat saw."""
    changed = UsageError(f"{label}: {name} changed while bench read it; try again")
    try:
        data = read_regular(root / name, size)
    except NotRegularFileError:
        raise changed from None
    except OSError as error:
        raise UsageError(f"{label}: cannot read {name}: {error.strerror}") from None
    if len(data) != size:
        raise changed
    return data


# -- a git revision: `git archive`'s tar, read as a stream and bounded by its headers --


def resolve_commit(repo: Path, revision: str) -> str:
    """The full commit id `revision` names in the repository holding `repo`."""
    commit = run_git(repo, "rev-parse", "--verify", "--end-of-options", f"{revision}^{{commit}}")
    return commit.decode().strip()


def _files_at_revision(
    root: Path, revision: str, within: Sequence[str], skipped: Callable[[str], bool], label: str
) -> list[tuple[str, bytes]]:
    commit = resolve_commit(root, revision)
    process = _start_git(root, "archive", "--format=tar", commit, "--", *within)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        process.kill()

    timer = threading.Timer(GIT_TIMEOUT_SECONDS, expire)
    timer.start()
    try:
        files = _archive_files(process.stdout, skipped, label)
        _, stderr = process.communicate()  # the tar's end padding, and git's messages
    except tarfile.TarError:
        files = None  # a git that failed wrote no tar: its own message says why, below
        process.kill()
        _, stderr = process.communicate()
    except BaseException:
        process.kill()
        process.communicate()
        raise
    finally:
        timer.cancel()
    if expired.is_set():
        raise UsageError(f"git archive took over {GIT_TIMEOUT_SECONDS} s")
    if process.returncode != 0:
        raise UsageError(f"git archive failed: {_last_line(stderr, process.returncode)}")
    if files is None:
        raise UsageError(f"{label}: git archive wrote no readable tar")
    return files


def _archive_files(
    stream: IO[bytes], skipped: Callable[[str], bool], label: str
) -> list[tuple[str, bytes]]:
    tally, files = _TreeTally(label), []
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            name = member.name
            if member.isdir() or skipped(name):
                continue
            _require_archive_file(member, label)
            tally.admit(name, member.size)
            extracted = tar.extractfile(member)
            files.append((name, extracted.read() if extracted else b""))
    return files


def _require_archive_file(member: tarfile.TarInfo, label: str) -> None:
    path = PurePosixPath(member.name)
    if path.is_absolute() or ".." in path.parts:
        raise UsageError(f"{label}: git archive named a file outside the tree: {member.name}")
    if member.issym() or member.islnk():
        raise _refused_link(label, member.name, member.linkname)
    if not member.isfile():
        raise UsageError(f"{label}: {member.name} is not a regular file")


# -- git itself ---------------------------------------------------------------------------


def run_git(repo: Path, *args: str) -> bytes:
    """git's output, or a UsageError with its last line of error."""
    proc = _git_process(repo, *args)
    if proc.returncode != 0:
        raise UsageError(f"git {args[0]} failed: {_last_line(proc.stderr, proc.returncode)}")
    return proc.stdout


def _git_process(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return _run_bounded(_git_command(repo, *args), args[0])


def _run_bounded(command: list[str], what: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            command, capture_output=True, timeout=GIT_TIMEOUT_SECONDS, env=_git_env(), check=False
        )
    except subprocess.TimeoutExpired:
        raise UsageError(f"git {what} took over {GIT_TIMEOUT_SECONDS} s") from None


def _start_git(repo: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        _git_command(repo, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_git_env()
    )


# What a repository's configuration can make git run during the reads bench makes (git
# 2.39, measured): core.fsmonitor's command on ls-files, check-ignore and status; status
# rewrites the index, which runs the post-index-change hook; a filter driver's clean
# command on status, its smudge or process command on archive; and in a partial clone a
# missing object is fetched, through a transport that runs commands of its own
# (remote.<name>.uploadpack, core.sshCommand, ext::). Each is switched off on git's command
# line, which outranks every configuration file: filter drivers and protocols by the names
# the configuration gives them. Nothing else runs: no pager (the output is a pipe), no diff
# driver (bench runs no diff), no network but that fetch.
GIT_NO_PROGRAMS = ("core.fsmonitor=false", "core.hooksPath=/dev/null", "protocol.allow=never")
FILTER_COMMANDS = ("clean", "smudge", "process")


def _git_command(repo: Path, *args: str) -> list[str]:
    if shutil.which("git") is None:
        raise UsageError("this needs git on this machine, and git is not installed")
    git = ["git", "-C", str(repo), *_config_flags(GIT_NO_PROGRAMS)]
    return [*git, *_config_flags(_declared_programs_off(git, repo)), *args]


def _config_flags(settings: Sequence[str]) -> list[str]:
    return [flag for setting in settings for flag in ("-c", setting)]


def _declared_programs_off(git: list[str], repo: Path) -> list[str]:
    """Settings that switch off every filter driver the configuration declares (its clean,
    smudge and process commands, and `required`: a file is read as committed) and every
    protocol it allows by name. Reading the configuration runs nothing."""
    listing = _run_bounded(
        [*git, "config", "-z", "--get-regexp", r"^(filter|protocol)\."], "config"
    )
    settings: dict[str, None] = {}  # ordered and unique
    for entry in filter(None, listing.stdout.split(b"\0")):
        section, _, rest = os.fsdecode(entry.split(b"\n", 1)[0]).partition(".")
        name = rest.rpartition(".")[0]
        # `-c filter.a=b.smudge=` would set another key: git is not run on this repository
        # (where a caller takes "no git" for a plain directory, it is read as one).
        if "=" in name:
            raise UsageError(
                f"{repo}: its git configuration names a {section} {name!r}, which bench "
                "cannot switch off on git's command line: rename it"
            )
        if name and section == "filter":
            settings.update(dict.fromkeys(f"filter.{name}.{c}=" for c in FILTER_COMMANDS))
            settings[f"filter.{name}.required=false"] = None
        elif name and section == "protocol":
            settings[f"protocol.{name}.allow=never"] = None
    return list(settings)


def _git_env() -> dict[str, str]:
    # Newer gits' own switch for the lazy fetch (protocol.allow=never stops older ones).
    return {**os.environ, "GIT_NO_LAZY_FETCH": "1"}


def _last_line(stderr: bytes, returncode: int) -> str:
    lines = stderr.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else f"exit {returncode}"
