"""The builder refuses instance metadata Google would refuse (issue 32), before any request:
256 KiB a value, less than 512 KiB for all keys and values
(https://cloud.google.com/compute/docs/metadata/setting-custom-metadata#limitations; the
compute v1 discovery document's Metadata.items). The compute stand-in refuses the same
insert on its own (tests/fakes/insert_rules.py): the builder's error is the one users see."""

from __future__ import annotations

import pytest

from orchestrator.backends.gce.builder import (
    METADATA_TOTAL_LIMIT_BYTES,
    METADATA_VALUE_MAX_BYTES,
    build_instance,
)
from orchestrator.errors import UsageError
from tests.fakes import discovery
from tests.unit.test_gce_builder import make_config, make_spec

ZONE = "us-central1-b"


def build(startup: str, shutdown: str = "#!/bin/bash\necho stop\n"):
    return build_instance(make_spec(), make_config(), ZONE, startup, shutdown, True)


def script_of(size: int) -> str:
    return "#" * size


def test_the_limits_are_googles_in_bytes():
    items = discovery.document("compute", "v1")["schemas"]["Metadata"]["properties"]["items"]
    assert "must be less than 512 KB" in " ".join(items["description"].split())
    value = items["items"]["properties"]["value"]["description"]
    assert f"less than or equal to {METADATA_VALUE_MAX_BYTES} bytes" in " ".join(value.split())
    assert METADATA_TOTAL_LIMIT_BYTES == 512 * 1024


def test_a_value_at_the_limit_is_built():
    instance = build(script_of(METADATA_VALUE_MAX_BYTES))
    assert len(instance.metadata.items[0].value) == METADATA_VALUE_MAX_BYTES


def test_a_value_over_256_kib_is_refused_with_its_size():
    with pytest.raises(UsageError) as refused:
        build(script_of(METADATA_VALUE_MAX_BYTES + 1))
    message = str(refused.value)
    assert "\n" not in message
    assert f"startup-script {METADATA_VALUE_MAX_BYTES + 1:,}" in message
    assert "startup-script too long" in message and "Nothing was created" in message


def test_two_values_each_within_256_kib_but_512_kib_in_all_are_refused_with_the_total():
    """Each script at exactly 256 KiB: every value passes, the keys push the total past
    512 KiB. The old builder checked each value alone and built this request."""
    startup = shutdown = script_of(METADATA_VALUE_MAX_BYTES)
    total = len("startup-script") + len("shutdown-script") + 2 * METADATA_VALUE_MAX_BYTES
    with pytest.raises(UsageError) as refused:
        build(startup, shutdown)
    message = str(refused.value)
    assert f"{total:,} bytes, keys included" in message
    assert "too much in all" in message
    assert f"less than {METADATA_TOTAL_LIMIT_BYTES:,} (512 KiB) in all" in message


def test_just_under_512_kib_in_all_is_built():
    keys = len("startup-script") + len("shutdown-script")
    room = METADATA_TOTAL_LIMIT_BYTES - 1 - keys  # one byte under the limit
    instance = build(script_of(room // 2), script_of(room - room // 2))
    assert sum(len(i.key) + len(i.value) for i in instance.metadata.items) == (
        METADATA_TOTAL_LIMIT_BYTES - 1
    )
