import sys

from telemetry.errors import exit_quietly_on_closed_pipe

from .cli import main

sys.exit(exit_quietly_on_closed_pipe(main))
