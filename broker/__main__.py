import sys

from timer_service.processes.args import run_module

sys.exit(run_module("broker", "python -m broker"))
