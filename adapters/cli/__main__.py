"""`python -m convstore.adapters.cli`: the command line."""

from convstore.adapters.cli import main

raise SystemExit(main())
