"""The help desk's state: paid orders, the refunds issued on them, and every call of the
``refund`` tool, in one SQLite file a person can read.

It stands for the team's own system behind its MCP server (``server.py``) and knows
nothing about Airlock. The ``calls`` table counts each ``refund`` call the server
received, refused ones too: it, not the proxy or the loop, says how often a refund ran.

``python -m examples.helpdesk.desk [--db PATH] show`` prints it all.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sqlite3
import time
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_DB",
    "connect",
    "describe",
    "find_order",
    "money",
    "refund",
    "refund_calls",
    "refunded_by_tool",
    "refunded_total",
]

#: The desk's database, beside ``make up``'s state (*.db files are never committed).
DEFAULT_DB = Path(".airlock/helpdesk.db")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    order_id TEXT PRIMARY KEY,
    customer TEXT NOT NULL,
    paid INTEGER NOT NULL CHECK (paid > 0)
);
CREATE TABLE IF NOT EXISTS refunds (
    id TEXT PRIMARY KEY,
    order_id TEXT NOT NULL REFERENCES orders(order_id),
    amount INTEGER NOT NULL CHECK (amount > 0),
    at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS calls (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    tool TEXT NOT NULL,
    arguments TEXT NOT NULL,
    at INTEGER NOT NULL
);
"""

#: The seeded orders: id, customer, paid in cents.
_ORDERS = [
    ("order-881", "Ada Lovelace", 4_000),
    ("order-882", "Grace Hopper", 12_500),
    ("order-883", "Alan Turing", 1_999),
]


def connect(path: Path = DEFAULT_DB) -> sqlite3.Connection:
    """Open the desk's database, creating and seeding it on first use."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(_SCHEMA)
    conn.executemany("INSERT OR IGNORE INTO orders VALUES (?, ?, ?)", _ORDERS)
    return conn


def money(cents: int) -> str:
    """``2500`` → ``"25.00"``."""
    return f"{cents // 100}.{cents % 100:02d}"


def refunded_total(conn: sqlite3.Connection, order: str) -> int:
    """Cents refunded on ``order`` so far."""
    row = conn.execute("SELECT SUM(amount) FROM refunds WHERE order_id = ?", (order,)).fetchone()
    return int(row[0] or 0)


def find_order(conn: sqlite3.Connection, order: str) -> dict[str, Any]:
    """The order, what was paid and refunded (cents); LookupError if there is none."""
    row = conn.execute("SELECT customer, paid FROM orders WHERE order_id = ?", (order,)).fetchone()
    if row is None:
        raise LookupError(f"there is no order {order}")
    return {
        "order": order,
        "customer": row[0],
        "paid": row[1],
        "refunded": refunded_total(conn, order),
    }


def refund(conn: sqlite3.Connection, order: str, amount: int) -> dict[str, Any]:
    """Refund ``amount`` cents on ``order``: counted first, then checked, then issued.

    Returns ``{"refund_id", "order", "amount", "refunded", "paid"}``: ``amount`` is the
    amount this refund issued (an approver may have edited it). Raises ValueError for an
    amount that is not positive or more than what is left, LookupError for no order.
    """
    conn.execute(
        "INSERT INTO calls (tool, arguments, at) VALUES ('refund', ?, ?)",
        (json.dumps({"order": order, "amount": amount}), int(time.time())),
    )
    conn.execute("BEGIN IMMEDIATE")
    try:
        found = find_order(conn, order)
        left = found["paid"] - found["refunded"]
        if isinstance(amount, bool) or amount <= 0 or amount > left:
            raise ValueError(f"{order} has {left} cents left to refund, not {amount}")
        refund_id = "rf_" + secrets.token_hex(6)
        conn.execute(
            "INSERT INTO refunds VALUES (?, ?, ?, ?)",
            (refund_id, order, amount, int(time.time())),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return {
        "refund_id": refund_id,
        "order": order,
        "amount": amount,
        "refunded": found["refunded"] + amount,
        "paid": found["paid"],
    }


def refunded_by_tool(conn: sqlite3.Connection, order: str) -> bool:
    """Did the ``refund`` tool issue a refund on ``order``? (One per order, ever: the
    proxy's effect key is ``refund:{order}``.)"""
    row = conn.execute("SELECT 1 FROM refunds WHERE order_id = ?", (order,)).fetchone()
    return row is not None


def refund_calls(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every call of the ``refund`` tool the server received, oldest first."""
    rows = conn.execute("SELECT arguments FROM calls WHERE tool = 'refund' ORDER BY n")
    return [json.loads(r[0]) for r in rows]


def describe(conn: sqlite3.Connection) -> str:
    """The desk's state as lines a person reads."""
    lines = []
    for order, customer, paid in conn.execute("SELECT * FROM orders ORDER BY order_id"):
        refunded = money(refunded_total(conn, order))
        lines.append(f"{order}  {customer:<14} paid {money(paid):>7}  refunded {refunded:>7}")
    for refund_id, order, amount, _ in conn.execute("SELECT * FROM refunds ORDER BY at, id"):
        lines.append(f"refund {refund_id} on {order}: {money(amount)}")
    calls = refund_calls(conn)
    lines.append(f"the refund tool was called {len(calls)} time(s)")
    lines.extend(f"  call {i}: {json.dumps(c)}" for i, c in enumerate(calls, 1))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.helpdesk.desk", description=__doc__)
    parser.add_argument("--db", type=Path, default=DEFAULT_DB, help="the desk's SQLite file")
    parser.add_argument("command", choices=["show"])
    args = parser.parse_args(argv)
    print(describe(connect(args.db)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
