"""Eager training demo: a 2-layer MLP learns a 3-class spiral on one CPU device.

Run: .venv/bin/python examples/mlp/train.py [--steps 300] [--hidden 64] [--lr 0.01]

Multi-rank training (placements, SBP, nn.Graph, the launcher) arrives with the compiler,
actor-runtime, communication and front-end issues; this script is the single-device baseline.
"""

import argparse
import time

import numpy as np

import oneflowlike as flow
import oneflowlike.nn.functional as F


def spiral(points_per_class, classes, rng):
    """The classic spiral toy set: (N, 2) float32 inputs, (N,) int64 labels."""
    x, y = [], []
    for c in range(classes):
        r = np.linspace(0.0, 1.0, points_per_class)
        t = np.linspace(c * 4.0, (c + 1) * 4.0, points_per_class) + rng.normal(0, 0.2, points_per_class)
        x.append(np.stack([r * np.sin(t), r * np.cos(t)], axis=1))
        y.append(np.full(points_per_class, c))
    return np.concatenate(x).astype(np.float32), np.concatenate(y).astype(np.int64)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    x_np, y_np = spiral(200, 3, rng)
    x, y = flow.tensor(x_np), flow.tensor(y_np)

    flow.manual_seed(args.seed)
    w1 = (flow.randn(args.hidden, 2) * 0.5).requires_grad_()
    b1 = flow.zeros(args.hidden, requires_grad=True)
    w2 = (flow.randn(3, args.hidden) * (1.0 / args.hidden ** 0.5)).requires_grad_()
    b2 = flow.zeros(3, requires_grad=True)
    optimizer = flow.optim.AdamW([w1, b1, w2, b2], lr=args.lr, weight_decay=1e-4)

    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        logits = F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)
        loss = F.cross_entropy(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 1 or step % 50 == 0 or step == args.steps:
            with flow.no_grad():
                accuracy = float((flow.tensor(logits.numpy().argmax(1)) == y).float().mean())
            elapsed = (time.perf_counter() - start) * 1000 / step
            print(f"step {step:4d}  loss {loss.item():.4f}  accuracy {accuracy:.3f}  "
                  f"{elapsed:.2f} ms/step")
    print(f"final loss {loss.item():.4f} after {args.steps} steps")


if __name__ == "__main__":
    main()
