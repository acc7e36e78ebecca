"""Capture orchestration: collectors in child processes under hard deadlines, sampling, the bundle."""
