"""`python -m launch.nemo RECIPE [key=value ...] --engine {nemo2,megatron-bridge,automodel} [--print | --run]`:
our recipe in a NeMo engine's own configuration, with our telemetry attached (docs/nemo.md)."""
