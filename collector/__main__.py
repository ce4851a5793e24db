"""`python -m collector` runs the statetrail command line."""

from collector.cli import main

raise SystemExit(main())
