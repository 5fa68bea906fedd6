"""`python -m spanseek ...`: the `spanseek` command, for an environment whose scripts folder is not on PATH.

    python -m spanseek search --index work/demo-index "who wrote hamlet?"
"""

from __future__ import annotations

from spanseek.cli import main

raise SystemExit(main())
