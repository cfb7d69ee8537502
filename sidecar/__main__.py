"""`python -m sidecar` is the CLI."""

from sidecar.clients.cli import main

raise SystemExit(main())
