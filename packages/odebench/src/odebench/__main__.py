"""``python -m odebench``: the ``odebench`` command line."""

from odebench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
