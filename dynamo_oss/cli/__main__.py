"""`python -m dynamo_oss.cli ...` is the `dynamo` command."""

import sys

from dynamo_oss.cli import main

sys.exit(main())
