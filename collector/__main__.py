"""`python -m collector` runs the statetrail command line."""

from collector.cli.main import main

raise SystemExit(main())
