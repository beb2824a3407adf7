"""Prices from the Cloud Billing Catalog API (issue 32 item 1): `bench prices --refresh` reads
the stand-in through bench's real client path, caches a dated read, and launch and prices use
it for a week, item by item where the API priced the item, the bundled catalog otherwise."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.backends.gce import billing_catalog, pricing
from orchestrator.cli import main
from orchestrator.config import BenchConfig
from tests.fakes.billing_server import FakeBilling, compute_skus

TODAY = datetime.now(UTC).date().isoformat()
API_SOURCE = f"Cloud Billing Catalog API, read {TODAY}"
BUNDLED_SOURCE = f"bench's bundled price catalog, dated {pricing.load_catalog()['catalog_date']}"


@pytest.fixture
def billing(bench_env, monkeypatch):
    """The stand-in, a few SKUs a page so that a read spans pages, bench pointed at it."""
    with FakeBilling(page_size=9) as server:
        monkeypatch.setenv("BENCH_BILLING_ENDPOINT", server.endpoint)
        yield server


def prices_json(capsys) -> dict:
    capsys.readouterr()
    assert main(["prices", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def cache_file(bench_env):
    return bench_env / "state" / billing_catalog.CACHE_NAME


def sku_usd(description: str) -> float:
    (sku,) = [s for s in compute_skus() if s["description"] == description]
    price = sku["pricingInfo"][-1]["pricingExpression"]["tieredRates"][0]["unitPrice"]
    return int(price["units"]) + price["nanos"] / 1e9


def test_refresh_reads_every_page_and_writes_a_dated_cache(billing, bench_env, capsys):
    assert main(["prices", "--refresh"]) == 0
    out = capsys.readouterr().out
    assert f"read {len(billing.skus)} SKUs from the Cloud Billing Catalog API" in out
    pages = -(-len(billing.skus) // 9)
    assert len(billing.requests) == pages and all(
        r["currencyCode"] == "USD" for r in billing.requests
    )
    cached = json.loads(cache_file(bench_env).read_text())
    assert cached["read_at"].startswith(TODAY) and cached["source"] == "Cloud Billing Catalog API"
    # g2-standard-4 = 4 vCPUs + 16 GiB at the spot G2 SKUs of the Americas.
    g2 = cached["prices"]["regions"]["us-central1"]["machines"]["g2-standard-4"]
    core = sku_usd("Spot Preemptible G2 Instance Core running in Americas")
    ram = sku_usd("Spot Preemptible G2 Instance Ram running in Americas")
    assert g2["spot"] == pytest.approx(4 * core + 16 * ram)
    # Neighbours are not ours: the custom core ($5), the regional disk ($9), A3 Mega's GPU.
    assert g2["on_demand"] < 1
    assert cached["prices"]["regions"]["us-central1"]["disks"]["pd-balanced"]["gb_month"] == 0.1
    h100 = cached["prices"]["regions"]["us-central1"]["gpus"]["nvidia-h100-80gb"]
    assert h100["on_demand"] == sku_usd("Nvidia H100 80GB GPU running in Americas")
    document = prices_json(capsys)
    assert document["price_source"] == API_SOURCE
    assert dict(document["rate_items"])["1 x nvidia-l4"] == pytest.approx(
        sku_usd("Nvidia L4 GPU attached to Spot Preemptible VMs running in Americas")
    )


def test_launch_estimate_names_the_api_and_its_date(gce, billing, tmp_path, capsys):
    from tests.e2e.test_gce_cli import image_gb, plan_file

    gce.config.run_scripts = False
    assert main(["prices", "--refresh"]) == 0
    assert (
        main(["launch", "--backend", "gce", "--budget", "1.00", "--plan", plan_file(tmp_path)]) == 0
    )
    assert f"bench: prices from {API_SOURCE}" in capsys.readouterr().out
    (sent,) = gce.inserted
    config = BenchConfig(state_dir=tmp_path / "state", zones=["us-central1-a"])
    rate = pricing.hourly_rate(config, spot=True, disk_gb=image_gb(gce))
    assert rate.price_source == API_SOURCE
    assert int(sent["scheduling"]["maxRunDuration"]["seconds"]) == pricing.max_run_seconds_for(
        1.00, rate
    )


def test_a_sku_the_mapping_cannot_find_leaves_that_item_bundled(billing, bench_env, capsys):
    missing = "Spot Preemptible G2 Instance Ram running in Americas"
    billing.skus = [s for s in billing.skus if s["description"] != missing]
    assert main(["prices", "--refresh"]) == 0
    document = prices_json(capsys)
    assert document["price_source"] == f"{API_SOURCE}; g2-standard-4 from {BUNDLED_SOURCE}"
    bundled = pricing.load_catalog()["regions"]["us-central1"]
    items = dict(document["rate_items"])
    assert items["g2-standard-4"] == bundled["machines"]["g2-standard-4"]["spot"]
    assert items["1 x nvidia-l4"] == pytest.approx(
        sku_usd("Nvidia L4 GPU attached to Spot Preemptible VMs running in Americas")
    )
    assert main(["prices"]) == 0
    assert "g2-standard-4*" in capsys.readouterr().out


def test_odd_skus_are_skipped_never_fatal(billing, bench_env, capsys):
    """Untrusted answers: a negative, a huge, a non-USD or a per-day L4 price, an empty
    pricing timeline; the L4 then keeps its bundled price, and nothing crashes."""
    l4 = "Nvidia L4 GPU attached to Spot Preemptible VMs running in Americas"
    (good,) = [s for s in billing.skus if s["description"] == l4]
    billing.skus.remove(good)
    odd = []
    for change in (
        {"units": "-1", "nanos": 0},
        {"units": "999999999999", "nanos": 0},
        {"units": "0", "nanos": -5},
        {"currencyCode": "EUR", "units": "0", "nanos": 200_000_000},
    ):
        bad = json.loads(json.dumps(good))
        bad["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"].update(change)
        odd.append(bad)
    per_day = json.loads(json.dumps(good))
    per_day["pricingInfo"][0]["pricingExpression"]["usageUnit"] = "d"
    empty = {**json.loads(json.dumps(good)), "pricingInfo": []}
    billing.skus += [*odd, per_day, empty, {"skuId": "X"}]
    assert main(["prices", "--refresh"]) == 0
    document = prices_json(capsys)
    assert document["price_source"] == f"{API_SOURCE}; nvidia-l4 from {BUNDLED_SOURCE}"
    bundled = pricing.load_catalog()["regions"]["us-central1"]["gpus"]["nvidia-l4"]["spot"]
    assert dict(document["rate_items"])["1 x nvidia-l4"] == bundled


def test_a_cache_a_week_old_falls_back_to_the_bundled_catalog_and_says_so(
    billing, bench_env, capsys, tmp_path
):
    assert main(["prices", "--refresh"]) == 0
    path = cache_file(bench_env)
    cached = json.loads(path.read_text())
    for age, source in ((6, "Cloud Billing Catalog API, read "), (8, BUNDLED_SOURCE)):
        read_at = datetime.now(UTC) - timedelta(days=age)
        path.write_text(json.dumps({**cached, "read_at": read_at.isoformat()}))
        assert prices_json(capsys)["price_source"].startswith(source), age
    # Past a week the read is not used, and never silently: prices and launch both say
    # which read was dropped and how to read again.
    stale = (datetime.now(UTC) - timedelta(days=8)).date().isoformat()
    warning = (
        f"the Cloud Billing Catalog API read of {stale} is over 7 days old and was not used: "
        "prices are bench's bundled catalog's"
    )
    document = prices_json(capsys)
    assert document["price_source"] == BUNDLED_SOURCE
    assert document["price_warning"].startswith(warning)
    assert "bench prices --refresh" in document["price_warning"]
    assert main(["prices"]) == 0
    assert warning in " ".join(capsys.readouterr().out.split())
    path.write_text('{"format": 1, "read_at": "garbage"')  # a truncated file: bundled
    document = prices_json(capsys)
    assert document["price_source"] == BUNDLED_SOURCE
    assert "not used" in document["price_warning"]  # unreadable: said so too
    path.unlink()
    assert prices_json(capsys)["price_warning"] is None  # never read: the bundled catalog


def test_a_gce_launch_on_a_week_old_read_says_it_was_not_used(
    gce, billing, bench_env, tmp_path, capsys
):
    from tests.e2e.test_gce_cli import plan_file

    gce.config.run_scripts = False
    assert main(["prices", "--refresh"]) == 0
    path = cache_file(bench_env)
    read_at = datetime.now(UTC) - timedelta(days=9)
    path.write_text(json.dumps({**json.loads(path.read_text()), "read_at": read_at.isoformat()}))
    capsys.readouterr()
    args = ["launch", "--backend", "gce", "--budget", "1.00", "--plan", plan_file(tmp_path)]
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"bench: prices from {BUNDLED_SOURCE}" in out
    assert (
        f"bench: warning: the Cloud Billing Catalog API read of {read_at.date().isoformat()} "
        "is over 7 days old and was not used" in out
    )


def test_refresh_without_credentials_is_one_line(bench_env, monkeypatch, capsys):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(bench_env / "missing.json"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(bench_env / "gcloud"))
    assert main(["prices", "--refresh"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no Google credentials found" in err, err
    assert "gcloud auth application-default login" in err
    assert not cache_file(bench_env).exists()
