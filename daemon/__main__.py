import sys

from daemon.app import run

sys.exit(run())
