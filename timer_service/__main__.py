import sys

from timer_service.cli import main

sys.exit(main())
