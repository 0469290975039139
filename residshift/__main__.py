"""``python -m residshift``: the command line lives in :mod:`residshift.tools.cli`."""
import sys

from .tools.cli import entry, main  # noqa: F401  (main: the command line as a function, for tests)

if __name__ == "__main__":
    sys.exit(entry())
