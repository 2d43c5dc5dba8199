"""``airlock gate``: pinning the checkpoint's keys, the gate's receipt key, and the
operator's view of a gate's ledger (status, recover, resolve).

The keys commands talk to a real checkpoint served on loopback (tests/cli/conftest.py);
the ledger commands run on a gate's ledger that a real guarded call left behind.
"""

from __future__ import annotations

import json
import multiprocessing
import signal
import stat
import time
from pathlib import Path
from typing import Any

from airlock.gate import ReceiptSigner
from airlock.protocol import KeySet, canonical_bytes, verify_receipt
from tests.gate import workers
from tests.gate.support import FakeCheckpoint, gate_files
from tests.support.polling import wait_for

from .conftest import Served, airlock, dead_url

_SPAWN = multiprocessing.get_context("spawn")


def _published(served: Served) -> KeySet:
    return served.world.checkpoint.keys.public_keyset()


def test_fetch_pins_the_checkpoints_key_set(served: Served, tmp_path: Path) -> None:
    out = tmp_path / "pinned.json"
    result = airlock("gate", "keys", "fetch", "--checkpoint", served.url, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == canonical_bytes(_published(served).to_value())
    for kid in _published(served):
        assert kid in result.output


def test_fetch_reads_the_gate_settings(served: Served, tmp_path: Path) -> None:
    out = tmp_path / "from-env.json"
    env = {"AIRLOCK_GATE_CHECKPOINT_URL": served.url, "AIRLOCK_GATE_KEYS": str(out)}
    result = airlock("gate", "keys", "fetch", env=env)
    assert result.exit_code == 0, result.output
    assert KeySet.from_json_bytes(out.read_bytes()).keys() == _published(served).keys()


def test_a_key_set_without_the_expected_key_is_refused(served: Served, tmp_path: Path) -> None:
    out = tmp_path / "pinned.json"
    expected = "ed25519:" + "0" * 64
    result = airlock(
        "gate", "keys", "fetch", "--checkpoint", served.url, "--out", str(out), "--expect", expected
    )
    assert result.exit_code == 1
    assert "E_KEY_MISMATCH" in result.output
    assert not out.exists()


def test_a_pinned_set_is_never_replaced_silently(served: Served, tmp_path: Path) -> None:
    out = tmp_path / "pinned.json"
    out.write_bytes(b'{"keys": []}')
    result = airlock("gate", "keys", "fetch", "--checkpoint", served.url, "--out", str(out))
    assert result.exit_code == 1
    assert "E_PINNED" in result.output
    assert out.read_bytes() == b'{"keys": []}'
    again = airlock(
        "gate", "keys", "fetch", "--checkpoint", served.url, "--out", str(out), "--replace"
    )
    assert again.exit_code == 0, again.output
    assert out.read_bytes() == canonical_bytes(_published(served).to_value())


def test_an_unreachable_checkpoint_is_one_line_with_a_code(tmp_path: Path) -> None:
    out = tmp_path / "pinned.json"
    result = airlock("gate", "keys", "fetch", "--checkpoint", dead_url(), "--out", str(out))
    assert result.exit_code == 1
    assert result.output.startswith("error: E_UNAVAILABLE")
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()


def test_init_creates_a_private_key_and_keeps_it(tmp_path: Path) -> None:
    key = tmp_path / "state" / "gate-receipt.pem"
    first = airlock("gate", "keys", "init", "--out", str(key))
    assert first.exit_code == 0, first.output
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    pem = key.read_bytes()
    second = airlock("gate", "keys", "init", "--out", str(key))
    assert second.exit_code == 0, second.output
    assert "kept" in second.output
    assert key.read_bytes() == pem


def test_init_registers_the_public_key_under_its_audience(tmp_path: Path) -> None:
    register = tmp_path / "gate-keys.json"
    register.write_text(json.dumps({"other": {"keys": []}}))
    for n in (1, 2):
        result = airlock(
            "gate", "keys", "init", "--out", str(tmp_path / f"k{n}.pem"),
            "--register", str(register), "--audience", "refunds",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
    again = airlock(
        "gate", "keys", "init", "--out", str(tmp_path / "k1.pem"),
        "--register", str(register), "--audience", "refunds",
    )  # fmt: skip
    assert again.exit_code == 0, again.output
    value = json.loads(register.read_text())
    assert value["other"] == {"keys": []}
    refunds = KeySet.from_value(value["refunds"])
    assert len(refunds) == 2  # both gates' keys, the first not added twice


def test_register_without_an_audience_is_refused(tmp_path: Path) -> None:
    register = tmp_path / "gate-keys.json"
    result = airlock(
        "gate", "keys", "init", "--out", str(tmp_path / "k.pem"), "--register", str(register)
    )
    assert result.exit_code == 1
    assert "E_CONFIG" in result.output
    assert not register.exists()


def test_init_prints_the_public_key_set_for_verifiers(tmp_path: Path) -> None:
    result = airlock("gate", "keys", "init", "--out", str(tmp_path / "k.pem"), "--public", "-")
    assert result.exit_code == 0, result.output
    first_line = result.stdout.splitlines()[0]
    assert len(KeySet.from_json_bytes(first_line.encode())) == 1


def test_ledger_commands_without_settings_name_what_is_missing() -> None:
    for command in (["status"], ["recover"], ["resolve", "apv_x", "--happened"]):
        result = airlock("gate", *command)
        assert result.exit_code == 1, command
        assert "E_CONFIG: AIRLOCK_GATE_CHECKPOINT_URL is required" in result.output


# -- the ledger commands, on a ledger a SIGKILLed call left behind --------------------------


def _gate_env(values: dict[str, Any]) -> dict[str, str]:
    return {
        "AIRLOCK_GATE_CHECKPOINT_URL": values["checkpoint_url"],
        "AIRLOCK_GATE_TOKEN": values["token"],
        "AIRLOCK_GATE_KEYS": values["keys"],
        "AIRLOCK_GATE_AUDIENCE": values["audience"],
        "AIRLOCK_GATE_LEDGER_URL": values["ledger_url"],
        "AIRLOCK_GATE_RECEIPT_KEY": values["receipt_key"],
        "AIRLOCK_GATE_LEASE_SECONDS": "1",
    }


def test_status_recover_and_resolve_settle_an_interrupted_call(
    tmp_path: Path, sqlite_url: str
) -> None:
    fake = FakeCheckpoint(auto_approve=True)
    with fake.serve() as url:
        # A short lease, so recovery may take the row over soon after the crash; long
        # enough that a loaded machine does not lose it between the claim and the call
        # (1 s did, in a full suite at load 5-7: fenced, refused, never called).
        config = gate_files(tmp_path, checkpoint_url=url, ledger_url=sqlite_url, lease_seconds=4)
        fake.receipt_keys = ReceiptSigner.from_file(config.receipt_key).key_set()
        values = workers.config_values(config)
        env = _gate_env(values)
        counter = tmp_path / "counter"
        crashed = _SPAWN.Process(
            target=workers.call_effects,
            args=(values, str(counter), ["order-9"], None, str(tmp_path / "r.json")),
            kwargs={"failpoints": "after_call"},
        )
        crashed.start()
        crashed.join(90)
        assert crashed.exitcode == -signal.SIGKILL
        assert workers.counted(counter) == ["refund:order-9"]

        # The lease (4 s) must end before recovery may take the row over: poll, bounded.
        def recovered() -> str | None:
            result = airlock("gate", "recover", env=env)
            assert result.exit_code == 0, result.output
            return result.output if "in_doubt" in result.output else None

        output = wait_for("the lease to end and recovery to settle the call", recovered, 30)
        approval_id = output.split(":")[0]
        assert approval_id.startswith("apv_")
        assert workers.counted(counter) == ["refund:order-9"]  # recovery never calls

        status = airlock("gate", "status", env=env)
        assert status.exit_code == 3, status.output
        assert f"in_doubt: {approval_id}" in status.output
        assert "refund on order-9" in status.output

        unsaid = airlock("gate", "resolve", approval_id, env=env)
        assert unsaid.exit_code == 1
        assert "E_INVALID" in unsaid.output
        resolved = airlock(
            "gate", "resolve", approval_id, "--happened", "--by", "carol",
            "--note", "in the PSP's log", env=env,
        )  # fmt: skip
        assert resolved.exit_code == 0, resolved.output
        again = airlock("gate", "resolve", approval_id, "--did-not-happen", "--by", "dave", env=env)
        assert again.exit_code == 1
        assert "E_ALREADY_RESOLVED" in again.output

        after = airlock("gate", "status", env=env)
        assert after.exit_code == 0, after.output
        assert "in_doubt:" not in after.output
        assert "receipts not yet delivered: 0" in after.output
    decisions = [
        verify_receipt(envelope, fake.receipt_keys, int(time.time())).receipt.resolution
        for _, envelope in fake.receipts
    ]
    assert [(d.decision, d.by) for d in decisions if d is not None] == [("happened", "carol")]
