"""GPU-side analyses: GPU time per device, the kernel taxonomy, burstiness, why a device idles,
efficiency against the hardware, precision, graph capture and compiled code."""
