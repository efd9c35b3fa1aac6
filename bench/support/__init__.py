"""Helpers the benchmarks and the tests share (kept here so that bench/ never imports tests/)."""
