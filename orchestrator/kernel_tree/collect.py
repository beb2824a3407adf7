"""A source tree read as bench ships it: its files, as (name, contents), sorted.

Every source tree bench ships (the candidate's packages, an A/B baseline's kernels/ as a
directory or a git revision, a user's kernel repository) is read by one function,
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

import hashlib
import os
import stat
import tarfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import util
from pathlib import Path, PurePosixPath
from typing import IO

from orchestrator.errors import UsageError
from orchestrator.kernel_tree.git import (
    GIT_TIMEOUT_SECONDS,
    git_process,
    last_line,
    resolve_commit,
    run_git,
    start_git,
)
from orchestrator.regular_file import NotRegularFileError, read_regular
from results_schema.record import tree_digest

# (name relative to the tree's root, contents), sorted by name.
TreeFiles = tuple[tuple[str, bytes], ...]

# A source tree's bounds: our own packages are under 1 MB, so these leave a user's kernel
# repository room while a stray dataset or build output is refused before it is read.
MAX_TREE_BYTES = 64 * 2**20
MAX_FILE_BYTES = 16 * 2**20
MAX_TREE_FILES = 10_000
# What a tree of bench's own (the harness's packages, a kernels/ tree) leaves out when it
# is shipped: caches, build outputs, docs.
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", "build", ".mypy_cache"}
SKIPPED_SUFFIXES = {".pyc", ".pyo", ".so", ".o", ".md"}
# Controller-side parts of the shared package: the JSON Schema export and its output.
SKIPPED_PATHS = {"results_schema/jsonschema", "results_schema/export.py"}


def package_dir(name: str) -> Path:
    """Where Python imports the package `name` from: the checkout, or site-packages."""
    spec = util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"payload package {name} is not importable")
    return Path(next(iter(spec.submodule_search_locations)))


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
    ignored = git_process(top, "check-ignore", "-q", "--", prefix.rstrip("/"))
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


def _files_at_revision(
    root: Path, revision: str, within: Sequence[str], skipped: Callable[[str], bool], label: str
) -> list[tuple[str, bytes]]:
    commit = resolve_commit(root, revision)
    process = start_git(root, "archive", "--format=tar", commit, "--", *within)
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
        raise UsageError(f"git archive failed: {last_line(stderr, process.returncode)}")
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


# -- the tree's identity -------------------------------------------------------------------


def tree_sha256(files: TreeFiles) -> str:
    """The tree's content hash (results_schema.record.tree_digest, which the target
    computes from its disk)."""
    return tree_digest((name, hashlib.sha256(data).hexdigest()) for name, data in files)
