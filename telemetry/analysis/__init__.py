"""Analysis: offline, over run directories (report, compare, projection, exports); imports no torch."""
