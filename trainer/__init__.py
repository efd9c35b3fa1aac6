"""fabric-harness trainer: recipes -> distributed training runs with a run directory."""
