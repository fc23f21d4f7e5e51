"""The application: everything between the input files and a validated plan, grouped by concern.

``planning`` holds :func:`make_plan`, the one function every front end (the CLI, the API, the executor,
capacity planning) calls to plan. Its passes live in ``pipeline`` (input files, compile, sharing
pre-pass, idle-move repair, predicted starts, actions, metrics); ``explain`` gives the reasons and
verified counterfactuals for waiting work; ``validation`` is the rulebook every plan passes;
``capacity`` plans what to re-partition or buy; ``io`` reads other systems' formats and writes theirs;
``executor`` applies plans round by round; ``store`` keeps the plan history; ``cli`` is the command line.
Each package imports only the ones below it in that list's reverse order (see the import contracts).
"""
