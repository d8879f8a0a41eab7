"""``python -m bench run --out FILE.json`` / ``python -m bench compare BASELINE.json NEW.json``."""

from bench.tracking import main

raise SystemExit(main())
