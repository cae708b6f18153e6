import sys

from fedmoo.cli import main

sys.exit(main())
