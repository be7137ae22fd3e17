"""The trade-off views over the same stages: sweeps of budgets, deadlines, demands and prices
(``sweep``), why the optimum is what it is (``explain``), every GPU side by side (``compare``),
predicted GPU-hours of published runs (``gpu_hours``), and their charts and HTML report
(``plots``, ``html``)."""
