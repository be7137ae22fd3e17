"""The ``gpuopt`` command: thin click commands over the stages.

Every command calls the Python API (``optimizer.api``, ``import optimizer as go``) and prints what
it returns. Exceptions become messages and exit codes only in ``cli.common.handle_errors``, which
every command wears: 0 success, 1 infeasible, 2 bad input (and solver failures).
"""

from optimizer.cli.calibrate import fit_cmd, validate_cmd
from optimizer.cli.commands import main
from optimizer.cli.tradeoffs import compare, explain, report_cmd, sweep

for command in (sweep, explain, compare, report_cmd, validate_cmd, fit_cmd):
    main.add_command(command)

__all__ = ["main"]
