"""A tiny payments service: orders and the refunds issued on them, in one SQLite file.

It stands for the team's own system that the gated function writes to. Nothing here
knows about Airlock: the gate reads ``refunded_total`` as a premise, asks
``find_refund`` after a crash, and passes its effect key as the refund's idempotency
key, so the same refund is never issued twice even if the function were called twice.

``python -m examples.refunds.payments --help`` lists the commands (seed, refund, list).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Refund",
    "connect",
    "find_refund",
    "issue_refund",
    "refunded_total",
    "refunds",
    "seed",
]

#: The payments database; ``REFUNDS_DB`` overrides it (*.db files are never committed).
DEFAULT_DB = Path(".airlock/refunds-example.db")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    order_id TEXT PRIMARY KEY,
    paid INTEGER NOT NULL CHECK (paid > 0)
);
CREATE TABLE IF NOT EXISTS refunds (
    id TEXT PRIMARY KEY,
    order_id TEXT NOT NULL REFERENCES orders(order_id),
    amount INTEGER NOT NULL CHECK (amount > 0),
    idempotency_key TEXT UNIQUE,
    issued_by TEXT NOT NULL,
    at INTEGER NOT NULL
);
"""


@dataclass(frozen=True)
class Refund:
    id: str
    order_id: str
    amount: int
    idempotency_key: str | None
    issued_by: str
    at: int


def _path() -> Path:
    return Path(os.environ.get("REFUNDS_DB", str(DEFAULT_DB)))


def connect(path: Path | None = None) -> sqlite3.Connection:
    """Open the payments database, creating its tables on first use."""
    path = path or _path()
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(_SCHEMA)
    return conn


def seed(conn: sqlite3.Connection) -> None:
    """Three paid orders (amounts in cents); seeding again changes nothing."""
    conn.executemany(
        "INSERT OR IGNORE INTO orders (order_id, paid) VALUES (?, ?)",
        [("order-881", 12_000), ("order-882", 4_500), ("order-883", 30_000)],
    )


def refunded_total(order_id: str, conn: sqlite3.Connection | None = None) -> int:
    """Cents refunded on ``order_id`` so far (0 for none)."""
    conn = conn or connect()
    row = conn.execute(
        "SELECT COALESCE(SUM(amount), 0) FROM refunds WHERE order_id = ?", (order_id,)
    ).fetchone()
    return int(row[0])


def find_refund(idempotency_key: str, conn: sqlite3.Connection | None = None) -> Refund | None:
    """The refund issued under ``idempotency_key``, or None."""
    conn = conn or connect()
    row = conn.execute(
        "SELECT id, order_id, amount, idempotency_key, issued_by, at FROM refunds "
        "WHERE idempotency_key = ?",
        (idempotency_key,),
    ).fetchone()
    return None if row is None else Refund(*row)


def issue_refund(
    order_id: str,
    amount: int,
    *,
    idempotency_key: str | None = None,
    issued_by: str = "support-agent",
    conn: sqlite3.Connection | None = None,
) -> str:
    """Refund ``amount`` cents on ``order_id``; the refund's id.

    Raises:
        ValueError: no such order, or the refunds would exceed what was paid.
    """
    conn = conn or connect()
    conn.execute("BEGIN IMMEDIATE")
    try:
        if idempotency_key is not None:
            found = conn.execute(
                "SELECT id FROM refunds WHERE idempotency_key = ?", (idempotency_key,)
            ).fetchone()
            if found is not None:
                conn.execute("COMMIT")
                return str(found[0])
        paid = conn.execute("SELECT paid FROM orders WHERE order_id = ?", (order_id,)).fetchone()
        if paid is None:
            raise ValueError(f"no order {order_id}")
        total = refunded_total(order_id, conn)
        if total + amount > paid[0]:
            raise ValueError(f"{order_id}: refunds of {total + amount} exceed {paid[0]} paid")
        refund_id = "rf_" + secrets.token_hex(6)
        conn.execute(
            "INSERT INTO refunds (id, order_id, amount, idempotency_key, issued_by, at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (refund_id, order_id, amount, idempotency_key, issued_by, int(time.time())),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return refund_id


def refunds(conn: sqlite3.Connection | None = None) -> list[Refund]:
    """Every refund, oldest first."""
    conn = conn or connect()
    rows = conn.execute(
        "SELECT id, order_id, amount, idempotency_key, issued_by, at FROM refunds ORDER BY at, id"
    ).fetchall()
    return [Refund(*row) for row in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.refunds.payments", description="The example payments service."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("seed", help="create three paid orders")
    by_hand = commands.add_parser("refund", help="issue a refund by hand (no gate)")
    by_hand.add_argument("order")
    by_hand.add_argument("amount", type=int, help="cents")
    commands.add_parser("list", help="list every refund")
    args = parser.parse_args(argv)
    conn = connect()
    seed(conn)
    if args.command == "refund":
        try:
            refund_id = issue_refund(args.order, args.amount, issued_by="by-hand", conn=conn)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"{refund_id}: refunded {args.amount} on {args.order} by hand")
    elif args.command == "list":
        for r in refunds(conn):
            key = r.idempotency_key or "-"
            print(f"{r.id}  {r.order_id}  {r.amount:>7}  {r.issued_by:<14} {key}")
    else:
        print("seeded order-881 (12000), order-882 (4500), order-883 (30000)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
