"""Policy review: what each rule of a policy costs (``cost``: every rule relaxed in turn, ``relax``) and
what a proposed policy would have changed on the plan history (``replay``), both measured on validated
plans by the same figures (``measure``)."""
