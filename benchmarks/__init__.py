"""Side-by-side benchmarks of rllm-plugins against rLLM's loop, verl's estimators and TRL's inline code."""
