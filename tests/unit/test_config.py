"""Settings: sources, precedence and one-line errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from orchestrator.backends.registry import resolved_backend
from orchestrator.config import BenchConfig, load_config
from orchestrator.errors import ConfigError


def test_flags_beat_environment_beat_files(bench_env, monkeypatch):
    (bench_env / "work" / "bench.toml").write_text(
        'prefix = "from-file"\nmachine_type = "g2-standard-8"\n'
    )
    monkeypatch.setenv("BENCH_PREFIX", "from-env")
    config = load_config(flags={"prefix": "from-flag"})
    assert config.prefix == "from-flag"
    assert config.machine_type == "g2-standard-8"
    assert load_config().prefix == "from-env"


def test_working_dir_file_beats_user_config_file(bench_env):
    user = bench_env / "config" / "bench"
    user.mkdir(parents=True)
    (user / "bench.toml").write_text('prefix = "user"\nowner = "alice"\n')
    (bench_env / "work" / "bench.toml").write_text('prefix = "project"\n')
    config = load_config()
    assert (config.prefix, config.owner) == ("project", "alice")


def test_list_settings_from_environment(bench_env, monkeypatch):
    monkeypatch.setenv("BENCH_ZONES", "us-east4-a, us-east4-c")
    assert load_config().zones == ["us-east4-a", "us-east4-c"]


@pytest.mark.parametrize(
    "toml, expected",
    [
        ("zonez = ['us-central1-a']\n", "unknown setting 'zonez'"),
        ("zones = ['moon-base-1']\n", "zones"),
        ("bucket = 'Bad_Bucket!'\n", "bucket"),
        ("disk_gb = 'lots'\n", "disk_gb"),
        ("zones = [\n", "not valid TOML"),
    ],
)
def test_bad_file_gives_one_line_naming_the_key(bench_env, toml, expected):
    path = bench_env / "work" / "bench.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as error:
        load_config()
    message = str(error.value)
    assert expected in message
    assert "\n" not in message
    assert error.value.exit_code == 2


def test_unknown_environment_variable_is_an_error(bench_env, monkeypatch):
    monkeypatch.setenv("BENCH_BUCKT", "typo")
    with pytest.raises(ConfigError, match="BENCH_BUCKT"):
        load_config()


def test_backend_choice_says_why(bench_env):
    assert resolved_backend(load_config())[0] == "local"
    assert "no GCP project" in resolved_backend(load_config())[1]
    backend, reason = resolved_backend(load_config(flags={"project": "my-project-1"}))
    assert backend == "gce" and "my-project-1" in reason


@pytest.mark.parametrize(
    "bucket, problem",
    [
        ("my-google-bucket", "google"),
        ("goog-results", "goog"),
        ("192.168.5.4", "IP address"),
        ("a..b", "lowercase"),
        ("ab", "lowercase"),
    ],
)
def test_bucket_names_storage_refuses_are_config_errors(bench_env, monkeypatch, bucket, problem):
    monkeypatch.setenv("BENCH_BUCKET", bucket)
    with pytest.raises(ConfigError, match=problem):
        load_config()


def test_a_gs_url_names_its_bucket(bench_env, monkeypatch):
    monkeypatch.setenv("BENCH_BUCKET", "gs://my-bench-results/")
    assert load_config().bucket == "my-bench-results"


@pytest.mark.parametrize(
    ("machine", "gpu", "count", "ok"),
    [
        ("g2-standard-4", "nvidia-l4", 1, True),
        ("g2-standard-4", "nvidia-l4", 2, False),  # it comes with one L4
        ("g2-standard-4", "nvidia-tesla-t4", 1, False),
        ("a3-highgpu-1g", "nvidia-h100-80gb", 8, False),
        ("n1-standard-4", "nvidia-tesla-t4", 2, True),  # N1 takes 1, 2 or 4 T4s
    ],
)
def test_an_accelerator_optimized_machine_takes_only_the_gpus_it_comes_with(
    machine, gpu, count, ok
):
    """issue 50: `accelerator_count` accepted 1-8 whatever the machine, priced that many
    GPUs, and launch then failed at Compute Engine."""
    settings = {"machine_type": machine, "accelerator_type": gpu, "accelerator_count": count}
    if ok:
        assert BenchConfig(**settings).accelerator_count == count
    else:
        with pytest.raises(ValidationError, match=f"{machine} comes with 1 x "):
            BenchConfig(**settings)
