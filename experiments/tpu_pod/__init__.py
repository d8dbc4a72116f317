"""TPU pod slices: launch scripts and ahead-of-time compilation (`python -m experiments.tpu_pod.aot`)."""
