import sys

from timer_service.processes.args import run_module

sys.exit(run_module("daemon", "python -m daemon"))
