"""The development stack: Airlock run on loopback for tests, the eval suites and benchmarks.

``tests/``, ``eval/`` and ``bench/`` each depend on this package, and on none of each other
for it (import-linter enforces both directions). Its modules:

* :mod:`devstack.stack` — devcloud, the checkpoint, the executor daemon and the web app as
  real processes on free 127.0.0.1 ports, each awaited until ready and stopped on exit;
* :mod:`devstack.devcloud` — devcloud as a subprocess, and a client of its admin API;
* :mod:`devstack.ports` — the loopback ports those servers are told to bind;
* :mod:`devstack.factory` — deterministic signed actions, statements and bundles.

Why the name: it is the development stack, as ``devcloud`` is the development cloud; a
top-level package beside ``tests``, ``eval`` and ``bench`` rather than a module of
``airlock`` so that no one mistakes it for part of the kernel.

Never shipped: pyproject's package discovery leaves it out of the wheel, and it must never
be imported by ``airlock``, ``services`` or ``webapp``, nor import ``tests``, ``eval`` or
``bench``. Its keys, passwords and seeds are fixed or thrown away: tests and vectors only.
"""
