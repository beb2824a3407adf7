"""The wait for a linked worker's reply (benches/bracket.py): how long the parent gives a
worker to answer before it starts its bracket and releases the call anyway."""

from __future__ import annotations

import collections
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from benches import bracket


def link_with(replies_us: list[float]) -> SimpleNamespace:
    return SimpleNamespace(replies=collections.deque(replies_us, maxlen=bracket.REPLY_HISTORY))


def test_a_new_link_waits_the_floor():
    assert bracket.CudaBracket.reply_wait_us(link_with([])) == bracket.REPLY_WAIT_US


def test_the_wait_follows_the_workers_recent_replies_within_its_bounds():
    """Quick replies keep the floor; a slower host lengthens the wait (REPLY_FACTOR x the
    median), so that an honest kernel slow to enqueue is not late at every call; the
    ceiling bounds what a kernel that syncs at every call costs a sample."""
    wait = bracket.CudaBracket.reply_wait_us
    assert wait(link_with([300.0, 400.0, 350.0])) == bracket.REPLY_WAIT_US
    assert wait(link_with([3000.0, 2500.0, 3500.0, 90000.0])) == bracket.REPLY_FACTOR * 3250.0
    assert wait(link_with([50000.0] * 5)) == bracket.REPLY_WAIT_MAX_US


def test_only_the_latest_replies_count():
    link = link_with([50000.0] * bracket.REPLY_HISTORY)
    link.replies.extend([400.0] * (bracket.REPLY_HISTORY // 2 + 1))
    assert bracket.CudaBracket.reply_wait_us(link) == bracket.REPLY_WAIT_US


VERDICT_EXPERIMENTS = Path(__file__).resolve().parents[2] / "tools" / "verdict" / "experiments"


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
@pytest.mark.parametrize("patch", sorted(p.name for p in VERDICT_EXPERIMENTS.glob("*.patch")))
def test_a_verdict_experiment_applies_to_the_tree(patch: str):
    """A bracket experiment waiting for its GPU measurement still applies (the host gate's
    patch once stopped applying unnoticed, two sessions after it was made)."""
    checked = subprocess.run(
        ["git", "apply", "--check", str(VERDICT_EXPERIMENTS / patch)],
        cwd=VERDICT_EXPERIMENTS.parents[2],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr
