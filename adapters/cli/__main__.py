"""`python -m convstore.adapters.cli`: the command line."""

from convstore.adapters.cli import run

run()
