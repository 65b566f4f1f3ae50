"""``python -m sweeps.cli``: the ``hindsight`` command line."""

from sweeps.cli import main

raise SystemExit(main())
