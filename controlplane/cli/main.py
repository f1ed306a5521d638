"""Entry point of the ``unicron`` console script."""

from __future__ import annotations

import sys


def main() -> None:
    sys.exit("unicron: the command-line client is not installed in this build")
