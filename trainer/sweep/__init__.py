"""The collective sweep: a job of its own beside training (recipe `workload: collectives`, Recipe.job ==
"sweep"): plan.py (sizes and memory, no torch), checks.py (the recipe's checks), run.py (the sweep and the
job), output.py (nccl-tests' table and files)."""
