"""Explanations: why each waiting replica waits (one reason code and sentence), the smallest verified
changes that would place it, the state a plan leaves that both are asked on, and what one team may see
of a plan. The reasons are split by job: the codes (``findings``), one alternative's diagnosis
(``diagnose``), gangs, reserved capacity, and the explainer with its entry points (``reasons``)."""
