"""`python -m generator ...`: see generator.cli."""

from generator.cli import main

raise SystemExit(main())
