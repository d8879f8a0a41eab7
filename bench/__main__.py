"""``python -m bench run --out FILE.json`` / ``python -m bench compare BASELINE.json NEW.json`` /
``python -m bench check BASE_REF [-k EXPR]`` (:mod:`bench.check`)."""

import sys

if sys.argv[1:2] == ["check"]:
    from bench.check import main as check_main

    raise SystemExit(check_main(sys.argv[2:]))

from bench.tracking import main  # noqa: E402  (after the check command's dispatch)

raise SystemExit(main())
