"""A test-only executor process: long-polls the checkpoint feed, executes, reports receipts.

The executor service has no checkpoint-feed runner of its own yet, so the browser tests
run this one: the real :class:`services.executor.Executor` (ledger, verify, consume once,
re-read, write, signed receipt) with the real Alibaba adapter against devcloud, fed by
the checkpoint's ``/v1/feed`` and reporting to ``/v1/outcomes`` with an executor token.

Run: ``python -m tests.support.executor_feed`` with the ``EXECFEED_*`` variables that
:func:`tests.support.stack.running_executor` sets. It prints ``ready`` once it has the
key set, so the parent knows it is listening.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import httpx

from airlock.cloud.alibaba import AlibabaConfig, AlibabaReader, AlibabaWriter
from airlock.protocol import Binding, KeySet, canonical_bytes
from airlock.store import make_engine
from services.executor import Executor, ReceiptSigner, migrate


def main() -> None:
    env = os.environ
    base = env["EXECFEED_CHECKPOINT_URL"]
    headers = {"Authorization": f"Bearer {env['EXECFEED_TOKEN']}"}
    config = AlibabaConfig(
        access_key_id=env["EXECFEED_KEY_ID"],
        access_key_secret=env["EXECFEED_KEY_SECRET"],
        endpoint=env["EXECFEED_ENDPOINT"],
        protocol="http",
        read_timeout_ms=5_000,
    )
    with httpx.Client(base_url=base, timeout=30.0, trust_env=False) as http:
        keys = _trusted_keys(http)
        engine = make_engine(env["EXECFEED_LEDGER_URL"])
        migrate(engine)
        executor = Executor(
            engine=engine,
            keys=keys,
            binding=Binding(
                env["EXECFEED_AUDIENCE"], "alibaba", env["EXECFEED_ACCOUNT"], env["EXECFEED_REGION"]
            ),
            reader=AlibabaReader(config),
            writer=AlibabaWriter(config),
            signer=ReceiptSigner.from_file(Path(env["EXECFEED_RECEIPT_KEY"])),
            clock=lambda: int(time.time()),
        )
        print("ready", flush=True)
        cursor = 0
        revoked: set[str] = set()
        while True:
            page = (
                http.get("/v1/feed", params={"after": cursor, "wait": 5}, headers=headers)
                .raise_for_status()
                .json()
            )
            for item in page["items"]:
                if item["kind"] == "revocation":
                    revoked.add(item["approval_id"])
                    continue
                outcome = executor.execute(canonical_bytes(item["bundle"]), revoked=revoked)
                if outcome.receipt is not None:
                    http.post(
                        "/v1/outcomes",
                        json={"receipt": outcome.receipt.to_value()},
                        headers=headers,
                    ).raise_for_status()
            cursor = page["cursor"]


def _trusted_keys(http: httpx.Client) -> KeySet:
    # Started alongside the checkpoint: wait (bounded) until it publishes its key set.
    deadline = time.monotonic() + 30
    while True:
        try:
            return KeySet.from_value(http.get("/v1/keys").raise_for_status().json())
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
