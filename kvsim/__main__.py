"""``python -m kvsim`` runs the command line."""

from kvsim.cli import main

main()
