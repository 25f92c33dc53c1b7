"""`python -m cli ...` is `offhook ...`: how the server starts its own children."""

from cli.main import main

raise SystemExit(main())
