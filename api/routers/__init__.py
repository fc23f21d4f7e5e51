"""One router per resource: plans (jobs and history), capacity gaps, explanations, exports, validation,
and health with metrics."""
