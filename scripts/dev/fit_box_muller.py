"""Fits the polynomials of Note [Box-Muller in float arithmetic] (oneflowlike/box_muller.h).

Each is a weighted least-squares fit of the float64 function on a dense grid, re-weighted by
Lawson's iteration towards the minimax fit, then rounded to float32. Prints each fit's largest
weighted error in float64 and the float32 coefficients; the errors in float arithmetic are
measured over every input by tests/cpp/ops/random_test.cpp (BoxMuller).

    .venv/bin/python scripts/dev/fit_box_muller.py
"""

import numpy as np


def lawson(x, target, powers, weight, iterations=60):
    """Coefficients of sum c_k x^k (k in powers) minimising max |weight (fit - target)|."""
    basis = np.stack([x**k for k in powers], axis=1)
    w = np.ones_like(x)
    for _ in range(iterations):
        scale = np.sqrt(w) * weight
        c, *_ = np.linalg.lstsq(basis * scale[:, None], target * scale, rcond=None)
        err = np.abs((basis @ c - target) * weight)
        w = w * err
        w /= w.sum()
    return c, err.max()


def show(name, coefficients, error):
    values = ", ".join(repr(float(np.float32(c))) + "f" for c in coefficients)
    print(f"{name} (largest weighted error {error:.3g}): {values}")


def main():
    # log(1 + f) = f - f^2/2 + f^3 P(f), f in [sqrt(1/2) - 1, sqrt(2) - 1], relative to log(1+f).
    f = np.linspace(np.sqrt(0.5) - 1, np.sqrt(2) - 1, 200001)
    f = f[np.abs(f) > 1e-6]
    target = (np.log1p(f) - f + f * f / 2) / f**3
    show("P", *lawson(f, target, range(8), f**3 / np.log1p(f)))

    # cos(2 pi r) = 1 + z C(z), z = r^2, r in [-1/8, 1/8], relative to cos.
    z = np.linspace(0, 1 / 64, 400001)[1:]
    r = np.sqrt(z)
    cos = np.cos(2 * np.pi * r)
    show("C", *lawson(z, (cos - 1) / z, range(4), z / np.abs(cos)))

    # sin(2 pi r) = r (2pi_hi + 2pi_lo + z S(z)), relative to sin.
    two_pi_hi = float(np.float32(2 * np.pi))
    print(f"2pi_hi {two_pi_hi!r}f, 2pi_lo {float(np.float32(2 * np.pi - two_pi_hi))!r}f")
    sin_over_r = np.sin(2 * np.pi * r) / r
    show("S", *lawson(z, (sin_over_r - 2 * np.pi) / z, range(3), z / np.abs(sin_over_r)))


if __name__ == "__main__":
    main()
