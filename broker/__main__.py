import sys

from broker.app import run

sys.exit(run())
