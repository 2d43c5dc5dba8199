"""Helpers only tests use (ASGI streams, polling, mutations, TLS, dripping fakes).

What eval and bench use too — the stack on loopback, devcloud, ports, the signed-action
factory — lives in the top-level ``devstack`` package.
"""
