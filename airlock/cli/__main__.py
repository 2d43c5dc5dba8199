"""``python -m airlock.cli``: the same as the ``airlock`` console script."""

from airlock.cli import main

main()
