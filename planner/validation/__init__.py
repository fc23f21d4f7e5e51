"""The rulebook: every rule a plan must obey, checked from the data model alone, independent of every
solver and of the planner's passes, and the error that carries the violations. ``validate`` holds the
entry points (:func:`~gpuplan.planner.validation.validate.check_plan`, ``validate_plan``,
``implied_workloads``) and runs the rule families in a fixed order over one shared ``context``; each family
lives in its own module (``references``, ``mig``, ``gpus``, ``sharing``, ``topology``, ``isolation``,
``disruption``) and words its violations with ``report``.

The same rules on a state: ``occupancy`` (what each GPU and node holds now, and the checks that keep a
state from over-committing), and ``inputs``, the one input check every front end calls
(:func:`~gpuplan.planner.validation.inputs.checked_input`)."""
