"""gpuopt: which GPU cluster to buy or rent for your AI work, proven optimal.

    import optimizer as go

    answer = go.recommend(go.load_problem("problems/lab_budget.yaml"))
    print(answer.render("markdown"))

The public API is ``optimizer.api``'s (see its docstring), re-exported here. Its functions
``recommend`` and ``report`` share their names with stage packages: ``optimizer.recommend`` is the
function, and code inside gpuopt imports a stage's names by their full path
(``from optimizer.recommend import plan_table``).
"""

from optimizer.api import *  # noqa: F403 (the public surface, listed in optimizer.api.__all__)
from optimizer.api import __all__  # noqa: F401
