"""The application: everything between the input files and a validated plan, grouped by concern.

``planning`` holds :func:`make_plan`, the one function every front end (the CLI, the API, the executor,
capacity planning) calls to plan. Its passes live in ``pipeline`` (compile, sharing pre-pass, idle-move
repair, predicted starts, actions, metrics); ``explain`` gives the reasons and verified counterfactuals
for waiting work; ``validation`` is the rulebook every plan passes, with the one input check;
``capacity`` plans what to re-partition or buy; ``io`` reads gpuplan's files and other systems' formats
and writes theirs; ``executor`` applies plans round by round; ``store`` keeps the plan history;
``presentation`` is what people and monitors read of a plan (summary, progress, fleet figures). The
command line, ``gpuplan.cli``, sits above the planner and the API. The import contracts
(``pyproject.toml``) say which may import which.
"""
