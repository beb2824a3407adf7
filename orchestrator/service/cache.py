"""The shared build cache: only the controller writes it, and only what a run may build.

A run reads entries under `cache/` and saves what it built as candidates under its own key
(`runs/<run key>/cache/<entry>`; startup_templates/partials/cache.sh.j2). A VM's identity
cannot write `cache/` at all (docs/security.md), so an entry another run will execute comes
only from here: `fetch` judges each candidate entry of the run against the plan launch
made, copies those it may take, and says one line for each entry, taken or refused:

- nothing of a run the user does not trust (`launch --untrusted`, or any launch under CI);
- a kernel tree's build only under the prefix the controller derives for that tree from
  the launched plan (`UserKernel.build_cache_prefix`: its content, requirements, build
  command and env), never under a key the machine chose;
- the environment (a venv that every later run restores) and our kernel's builds only from
  a run that built no user's tree: a user's build ran on that machine and could have
  written any candidate, so such a run gives its own trees' builds alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.kernel_tree.own import is_our_tree
from orchestrator.registry import RunRecord
from orchestrator.text import printable
from results_schema import Plan

# An entry's name: its kind (a venv, a kernel tree's build) and a key of plain characters.
ENTRY_NAME = re.compile(r"^(env|user-kernels)/[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
# An entry's two files (cache.sh.j2): a tarball in one of two formats, then its digest.
TARBALLS = (".tar.zst", ".tar.tar")
DIGEST = ".sha256"
ENTRY_FILES = [sorted((DIGEST, tarball)) for tarball in TARBALLS]
# What the target appends to a tree's prefix: the hash of its toolchain (user_build.sh.j2).
TOOLCHAIN_PART = "-[0-9a-f]{24}"
# A run saves at most a venv and a few kernel trees' builds: past this many entries it is
# not a run of ours, and the rest are refused unread.
MAX_CANDIDATES = 16
# An entry's name as shown: bounded, it comes from the machine.
SHOWN_NAME_CHARS = 120


@dataclass(frozen=True)
class CacheDecision:
    """What fetch did with one candidate entry of a run."""

    entry: str  # as the store listed it: the machine's text
    promoted: bool
    why: str  # whose build it is, or why it stays out

    def line(self) -> str:
        verb = "promoted" if self.promoted else "refused"
        return f"cache: {verb} {printable(self.entry, SHOWN_NAME_CHARS)}: {self.why}"


def promote_cache_candidates(store, record: RunRecord, plan: Plan | None) -> list[CacheDecision]:
    """Copy the run's candidate entries that it may give into cache/ (`plan`: the plan
    launch made, read back through the boundary; None when the registry knows none), and
    say for each entry what was done. A tarball goes before its digest, as the machine
    writes them: a reader that sees the digest finds the tarball it names."""
    prefix = f"{record.run_key}/cache/"
    entries = _entries(key[len(prefix) :] for key in store.list(prefix))
    judge = _Judge(record, plan)
    decisions = []
    for entry, files in sorted(entries.items())[:MAX_CANDIDATES]:
        whose, refusal = judge(entry, files)
        if refusal is None:
            for name in sorted(files, key=lambda name: name.endswith(DIGEST)):
                store.copy(prefix + name, f"cache/{name}")
        decisions.append(CacheDecision(entry, refusal is None, refusal or whose))
    if len(entries) > MAX_CANDIDATES:
        more = f"{len(entries) - MAX_CANDIDATES} more entries"
        decisions.append(CacheDecision(more, False, f"a run saves at most {MAX_CANDIDATES}"))
    return decisions


def _entries(names: Iterable[str]) -> dict[str, list[str]]:
    """Candidate files by entry: 'env/k.tar.zst' and 'env/k.sha256' are entry 'env/k'; a
    file of neither kind is an entry of its own (refused for its name)."""
    entries: dict[str, list[str]] = {}
    for name in names:
        suffix = next((s for s in (*TARBALLS, DIGEST) if name.endswith(s)), "")
        entries.setdefault(name.removesuffix(suffix) if suffix else name, []).append(name)
    return entries


class _Judge:
    """Whether a run may give an entry: (whose build it is, None) or (_, why not)."""

    def __init__(self, record: RunRecord, plan: Plan | None):
        self.trusted, self.plan = record.cache_trusted, plan
        kernels = plan.user_kernels if plan else []
        self.users = [kernel for kernel in kernels if not is_our_tree(kernel)]
        # A run that built a user's tree gives those trees' builds alone.
        self.givers = self.users or kernels
        self.others = [kernel for kernel in kernels if kernel not in self.givers]

    def __call__(self, entry: str, files: list[str]) -> tuple[str, str | None]:
        if not self.trusted:
            return "", "the run was launched --untrusted (or under CI): it gives the cache nothing"
        if self.plan is None:
            return "", "the registry knows no plan of this run: whose build it is is unknown"
        if not ENTRY_NAME.match(entry) or ".." in entry:
            return "", "no cache entry's name (env/KEY or user-kernels/KEY)"
        if sorted(name.removeprefix(entry) for name in files) not in ENTRY_FILES:
            return "", "not an entry's two files (a tarball and its .sha256)"
        if entry.startswith("env/"):
            return "the environment", self._users_built("the environment")
        return self._tree_build(entry)

    def _tree_build(self, entry: str) -> tuple[str, str | None]:
        for kernel in self.givers:
            if re.fullmatch(re.escape(kernel.build_cache_prefix()) + TOOLCHAIN_PART, entry):
                return f"{kernel.identity}'s build", None
        for kernel in self.others:
            if re.fullmatch(re.escape(kernel.build_cache_prefix()) + TOOLCHAIN_PART, entry):
                return "", self._users_built(f"our kernel's build ({kernel.identity})")
        trees = ", ".join(kernel.identity for kernel in self.givers) or "none"
        return "", f"no key bench derives for this run's trees ({trees})"

    def _users_built(self, what: str) -> str | None:
        if not self.users:
            return None
        built = ", ".join(kernel.identity for kernel in self.users)
        return (
            f"{what} comes only from runs that build nothing but bench's own kernel; "
            f"this run built {built}"
        )
