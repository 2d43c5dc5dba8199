"""The end-to-end attack suite: named attacks against the running system, judged by
the cloud's own record of writes (devcloud or moto) and the services' own records.

``python -m eval.attacks`` runs them all against devcloud and writes ``eval/RESULTS.md``;
``--cloud moto`` against a moto server (AWS-shaped actions), ``eval/RESULTS-moto.md``. The
cloud: :mod:`eval.attacks.clouds`. Registry:
:mod:`eval.attacks.registry`; processes: :mod:`eval.attacks.rig`; judge and report:
:mod:`eval.attacks.runner`. The attacks never write to the cloud themselves and never
change a service's code or settings beyond what each names.
"""

from .registry import REGISTRY, Attack, Observation, Target, attack
from .runner import Result, Suite, render, run_on, run_suite, selected

__all__ = [
    "REGISTRY",
    "Attack",
    "Observation",
    "Result",
    "Suite",
    "Target",
    "attack",
    "render",
    "run_on",
    "run_suite",
    "selected",
]
