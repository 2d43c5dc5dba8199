"""A support agent that refunds orders through an Airlock gate.

``python -m examples.refunds.agent ORDER AMOUNT [--wait SECONDS]`` proposes the refund,
waits for people to decide (up to ``--wait``; calling again later picks the same
proposal up), and, once approved, issues it exactly once. The gate's settings come from
the environment (``AIRLOCK_GATE_*``; ``python -m examples.refunds.setup`` writes them for
``make up``'s stack). Exit codes: 0 refunded, 2 pending, 3 rejected, 4 refused, 1 error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from airlock.gate import Error as GateError
from airlock.gate import Gate, Pending, Refused, Rejected

from . import payments


def gated_refund(gate: Gate, *, wait: float) -> Callable[[str, int], str]:
    """The payments service's refund behind ``gate``: high risk (a person types the
    order), one refund per order ever, refused if a refund landed since it was proposed."""

    @gate.guard(
        risk="high",
        target=lambda order, amount: order,
        effect_key=lambda order, amount: f"refund:{order}",
        premises=lambda order, amount: {"refunded": payments.refunded_total(order)},
        lookup=lambda key: payments.find_refund(key) is not None,
        summary=lambda order, amount: f"Refund {amount} cents on {order}",
        wait=wait,
    )
    def refund(order: str, amount: int, *, idempotency_key: str) -> str:
        return payments.issue_refund(order, amount, idempotency_key=idempotency_key)

    return refund


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.refunds.agent", description=__doc__)
    parser.add_argument("order")
    parser.add_argument("amount", type=int, help="cents")
    parser.add_argument("--wait", type=float, default=600.0, help="seconds to wait for people")
    args = parser.parse_args(argv)
    payments.seed(payments.connect())
    try:
        gate = Gate.from_env()
    except GateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    refund = gated_refund(gate, wait=args.wait)
    gate.recover()  # settle a refund a crash interrupted, before anything new
    try:
        refund_id = refund(args.order, args.amount)
    except Pending as exc:
        print(f"pending: {exc.proposal_id} awaits approval at {exc.url}")
        return 2
    except Rejected as exc:
        print(f"rejected: {exc.reason_code} by {exc.by}: {exc.note}")
        return 3
    except Refused as exc:
        print(f"refused: {exc.code}: {exc.detail}")
        for change in exc.changes:
            print(f"  {change.field}: was {change.was!r}, now {change.now!r}")
        return 4
    except GateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        gate.close()
    print(f"refunded {args.amount} on {args.order}: {refund_id}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
