"""The shared build cache: only the controller writes it, and only from trusted runs.

A run reads entries under `cache/` and saves what it built as candidates under its own key
(`runs/<run key>/cache/<entry>`; startup_templates/partials/cache.sh.j2). A VM's identity
cannot write `cache/` at all (docs/security.md), so an entry another run will execute comes
only from here: `fetch` copies a run's candidates into `cache/` when the user trusts the
run (`launch --trusted`, the default outside CI). A run of foreign code (`--untrusted`, or
any launch under CI) is fetched as usual and its candidates stay where they are.
"""

from __future__ import annotations

import re

from orchestrator.registry import RunRecord

# What a candidate may be named: an entry kind (a venv, our kernel's library, the A/B
# baseline tree's, a user's kernel tree's build outputs), a key of plain characters, and one
# of the two files an entry has (cache.sh.j2). Anything else under a run's cache/ is ignored.
CANDIDATE_NAME = re.compile(
    r"^(env|kernels|kernels-baseline|user-kernels)/[A-Za-z0-9][A-Za-z0-9._-]{0,199}"
    r"\.(sha256|tar\.zst|tar\.tar)$"
)
# A run saves at most a venv, our kernel's two builds and two user kernel trees' builds;
# more is not a run of ours.
MAX_CANDIDATES = 16


def promote_cache_candidates(store, record: RunRecord) -> list[str]:
    """Copy a trusted run's candidates into cache/; returns the cache keys written.

    Tarballs go before their sha256 objects, as the VM writes them: a reader that sees the
    digest finds the tarball it names (cache_restore checks it anyway)."""
    if not record.cache_trusted:
        return []
    prefix = f"{record.run_key}/cache/"
    names = [key[len(prefix) :] for key in store.list(prefix)]
    names = [name for name in names if CANDIDATE_NAME.match(name) and ".." not in name]
    names = sorted(names[:MAX_CANDIDATES], key=lambda name: name.endswith(".sha256"))
    for name in names:
        store.copy(prefix + name, f"cache/{name}")
    return [f"cache/{name}" for name in names]
