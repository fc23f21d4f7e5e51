"""The rulebook: every rule a plan must obey, checked from the data model alone, independent of every
solver and of the planner's passes, and the error that carries the violations."""
