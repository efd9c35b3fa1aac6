"""Training engines that own the optimizer step in place of the harness's DDP/FSDP2 path (DeepSpeed)."""
