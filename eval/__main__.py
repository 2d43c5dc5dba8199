"""``python -m eval``: run the protocol conformance vectors."""

import sys

from eval.conformance import run

sys.exit(run())
