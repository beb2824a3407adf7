"""The payload harness: `python -m benches run --plan plan.json --out DIR`.

Modules by concept: plan (plan files), environment (fingerprint), telemetry (NVML),
timing (timers and the interleaved rounds), correctness (the gate), stats (summaries and
paired speedups), writers (CSV, status.json, manifest), runner (the phases), cli.
"""
