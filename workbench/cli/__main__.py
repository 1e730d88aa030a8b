"""`python -m workbench.cli ...` (what tests, benchmarks and torchrun use): the same as `workbench ...`."""

import sys

from workbench.cli import main

if __name__ == "__main__":  # importing the module (pkgutil walks do) runs nothing
    sys.exit(main())
