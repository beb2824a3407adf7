"""tools/flash_attention/records.py, the records' shapes timed by the records' own method: its
FLOP count reproduces the published figures from their own times, a ratio is per round against
the fastest peer of that round, and a call's clock is read from the samples taken while it ran."""

from __future__ import annotations

import pytest

from tests.flash_tools import load_tool


@pytest.fixture(scope="module")
def records():
    return load_tool("records")


# cuDNN's H200 CSV (NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/
# h200_919_only_cudnn/llama3.1_20260227_034703.csv): forward ms and the TFLOP/s it printed.
PUBLISHED = [
    ("gqa-d128-8k", 3.182, 691),
    ("gqa-d128-16k", 12.524, 702),
    ("gqa-d128-32k", 50.769, 693),
    ("gqa-d128-16k-causal", 6.531, 673),
    ("gqa-d128-32k-causal", 25.566, 688),
    ("fp8-gqa-d128-16k", 8.335, 1055),
    ("fp8-gqa-d128-16k-causal", 4.357, 1010),
]


@pytest.mark.parametrize(("name", "ms", "published"), PUBLISHED)
def test_the_flop_count_gives_the_published_figure_from_its_own_time(records, name, ms, published):
    c = records.case(name)
    assert c["records"]["cudnn H200"] == published
    assert records.tflops(c, ms) == pytest.approx(published, rel=0.005)


def test_a_batch_of_two_counts_twice_the_work(records):
    one, two = records.case("fp8-mha-d128-16k"), records.case("fp8-mha-d128-16k-b2")
    assert (one["b"], two["b"]) == (1, 2)
    assert records.tflops(two, 2.0) == pytest.approx(2 * records.tflops(one, 2.0))


def test_every_case_is_named_once_and_complete(records):
    names = [values[0] for values in records.CASES]
    assert len(names) == len(set(names))
    for name in names:
        c = records.case(name)
        assert set(c) == set(records.FIELDS)
        assert c["hq"] % c["hk"] == 0
        assert c["dtype"] in ("bfloat16", "float16", "e4m3", "e4m3-scaled")
    with pytest.raises(SystemExit, match="no case"):
        records.case("gqa-d128-64k")


def test_ours_is_compared_with_the_fastest_peer_of_each_round(records):
    c = records.case("mha-d128-16k")

    def call(ms, mhz=1980.0):
        return {"ms": ms, "mhz": mhz, "watts": 600.0, "kernels": {"attn": ms * 1000}}

    # Each round a different peer is the faster; ours is 1.0 ms throughout.
    rounds = [
        {"ours": call(1.0), "a": call(1.10), "b": call(1.30)},
        {"ours": call(1.0), "a": call(1.40), "b": call(0.90)},
        {"ours": call(1.0), "a": call(1.05), "b": call(1.20)},
    ]
    summary = records.regime_summary(c, ["ours", "a", "b"], rounds)
    # Per round: 1.10, 0.90, 1.05; their median. (Either peer's median time alone, 1.10 or
    # 1.20, would read ours as faster than the rounds show.)
    assert summary["ours_vs_best"] == pytest.approx(1.05)
    assert summary["a"]["ms"] == pytest.approx(1.10)
    assert summary["ours"]["tflops"] == pytest.approx(records.tflops(c, 1.0))
    assert summary["ours"]["kernel_shares"] == {"attn": pytest.approx(1.0)}


def test_a_calls_clock_is_the_median_of_the_samples_taken_while_it_ran(records):
    log = object.__new__(records.ClockLog)  # no NVML here: the samples are set by hand
    log.times = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    log.readings = [
        (1980, 100.0),
        (1900, 500.0),
        (1700, 690.0),
        (1650, 700.0),
        (1600, 700.0),
        (1980, 90.0),
    ]
    assert log.during(1.0, 3.0) == (1700, 690.0)
    assert log.during(3.5, 4.5) == (1600, 700.0)
    assert log.during(6.0, 7.0) == (None, None)
