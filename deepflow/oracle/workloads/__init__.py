"""Workload op graphs: gemm, lstm, transformer."""
