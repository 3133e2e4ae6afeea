"""``python -m kvsim`` runs the command line (a Ctrl-C while it loads exits quietly with 130)."""

import sys

try:
    from kvsim.cli import main
except KeyboardInterrupt:
    sys.stderr.write("interrupted\n")
    raise SystemExit(130) from None

main()
