"""One router per resource: plans (jobs and history), capacity gaps, explanations, exports, maps, validation,
and health with metrics."""
