"""One router per resource: plans (jobs and history), validation, and health with metrics."""
