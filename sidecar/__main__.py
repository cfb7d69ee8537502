"""`python -m sidecar` is the CLI."""

from sidecar.cli import main

raise SystemExit(main())
