"""A gce launch without Google credentials is a refusal like any other (issue 31): one line,
exit 2, nothing recorded; a sweep says it once, not once per GPU type."""

from __future__ import annotations

import pytest

from orchestrator.cli import main

GCE = ["--backend", "gce", "--project", "proj-abc", "--bucket", "bkt-x"]


@pytest.fixture
def no_credentials(bench_env, monkeypatch):
    # A credentials file that does not exist: google.auth.default() fails at once, without
    # trying gcloud's configuration or the metadata server.
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(bench_env / "missing.json"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(bench_env / "gcloud"))
    return bench_env


@pytest.mark.parametrize("gpus", [[], ["--gpu", "L4,T4"]], ids=["one-run", "sweep"])
def test_no_credentials_is_one_line_and_nothing_recorded(no_credentials, capsys, gpus):
    args = ["launch", *GCE, "--zones", "us-central1-a", "--budget", "1", *gpus]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("no Google credentials found") == 1, err
    assert main(["status"]) == 0
    assert "no runs yet" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("command", [["stop-all", "--yes"], ["doctor"]])
def test_commands_without_backend_flag_never_suggest_one(no_credentials, capsys, command):
    main([*command, "--project", "proj-abc", "--bucket", "bkt-x"])
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "no Google credentials found" in text
    assert "--backend" not in text
