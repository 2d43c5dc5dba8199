"""verify_bundle throughput beside bare Ed25519 verify, measured in the same run.

``python -m bench.bench_protocol`` (or ``make bench``). The bundle carries a realistic
~1 KiB action (14 days of daily series in its evidence). Goal: verify_bundle at least
0.6 × bare verify: the action travels as the exact bytes that were hashed, so nothing is
re-canonicalized; what remains is strict parsing and model validation.
"""

from __future__ import annotations

import argparse
import base64
import json

from airlock.protocol import APPROVAL_PAYLOAD_TYPE, pae, verify_bundle
from bench._harness import interleaved
from devstack import factory

GOAL = 0.6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.25, help="per subject per round")
    args = parser.parse_args(argv)

    bundle = factory.bundle_for()
    keys = factory.keyset()
    value = json.loads(bundle)
    action_bytes = base64.b64decode(value["action"])
    payload = base64.b64decode(value["envelope"]["payload"])
    signature = base64.b64decode(value["envelope"]["signatures"][0]["sig"])
    message = pae(APPROVAL_PAYLOAD_TYPE, payload)  # the exact bytes verify_bundle verifies
    public_key = next(iter(keys.values())).public_key
    verify_bundle(bundle, keys, factory.BINDING, factory.NOW)  # it must verify at all

    rates = interleaved(
        {
            "bare Ed25519 verify": lambda: public_key.verify(signature, message),
            "verify_bundle": lambda: verify_bundle(bundle, keys, factory.BINDING, factory.NOW),
        },
        rounds=args.rounds,
        seconds=args.seconds,
    )
    ratio = rates["verify_bundle"] / rates["bare Ed25519 verify"]
    print(f"action {len(action_bytes)} B canonical, bundle {len(bundle)} B")
    for name, rate in rates.items():
        print(f"{name:<22} {rate:>10,.0f} /s   {1e6 / rate:7.1f} µs each")
    verdict = "meets" if ratio >= GOAL else "BELOW"
    print(f"ratio verify_bundle / bare verify = {ratio:.2f}  ({verdict} the {GOAL} goal)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
