"""How close results in each dtype must be (the one place Python tests take them from; the C++
tests' counterpart is Note [Low-precision tolerances] in tests/cpp/ops/test_util.h)."""

# Relative tolerance of a training loss curve (10 steps of the GPT example's test model) against
# a reference run in the same dtype: another layout of the same job, or the same model in
# PyTorch. float32: summation order only. bfloat16 (Note [Mixed precision] in
# compiler/passes/amp.cpp): each matmul's output is rounded to bfloat16 (2^-8 relative); layouts
# round different partial products (TP splits the contraction), and PyTorch's autocast also runs
# attention and elementwise ops on bfloat16 tensors where ours keeps float32. Measured on the
# test model (2026-11-26): layouts within 1e-4 of one rank, PyTorch's autocast within 7e-5.
# float16 (with dynamic loss scaling) rounds the matmul outputs to 2^-11 and is held to the same.
LOSS_RTOL = {"float32": 1e-4, "bfloat16": 2e-3, "float16": 2e-3}

# One kernel's result in a 16-bit dtype against the float32 kernel on the same rounded inputs,
# when several roundings may differ (a gradient made of several ops): a few roundings of the
# result (the C++ tests' Note [Low-precision tolerances]).
KERNEL_RTOL = {"bfloat16": 4 / 256, "float16": 4 / 2048, "float32": 1e-5}
