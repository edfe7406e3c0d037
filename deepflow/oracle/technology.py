"""Technology laws: the V–f–P operating point, die yield and cost. Pure and vectorised.

Every function takes numpy arrays (or scalars) of the same shape and returns arrays; a
single design is a batch of one.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "RETICLE_LIMIT_mm2",
    "alpha_power_frequency",
    "die_cost_usd",
    "dies_per_wafer",
    "negative_binomial_yield",
    "operating_point",
    "solve_voltage",
]

F = NDArray[np.float64]

#: Lithography reticle 26 mm × 33 mm (docs/model.md §A5.3 [MLID-CHIP][CATCH]).
RETICLE_LIMIT_mm2 = 858.0


def alpha_power_frequency(
    voltage_V: ArrayLike,
    nominal_freq_Hz: ArrayLike,
    nominal_voltage_V: ArrayLike,
    threshold_voltage_V: ArrayLike,
) -> F:
    """Clock at ``voltage_V`` by the alpha-power law with α = 2.

    f(V) = f_n · g(V)/g(V_n), g(V) = (V − V_t)²/V (Sakurai & Newton, IEEE JSSC 25(2), 1990;
    docs/model.md §B3.1).
    """
    v = np.asarray(voltage_V, dtype=float)
    vt = np.asarray(threshold_voltage_V, dtype=float)
    vn = np.asarray(nominal_voltage_V, dtype=float)
    g = np.maximum(v - vt, 0.0) ** 2 / v
    gn = (vn - vt) ** 2 / vn
    return np.asarray(nominal_freq_Hz, dtype=float) * g / gn


def solve_voltage(
    power_ratio: ArrayLike, nominal_voltage_V: ArrayLike, threshold_voltage_V: ArrayLike
) -> F:
    """The voltage V > V_t at which dynamic power is ``power_ratio`` × nominal.

    Solves V·(V − V_t)² = r·V_n·(V_n − V_t)² (P = P_n·(f/f_n)·(V/V_n)² with f from the
    alpha-power law; docs/model.md §B3.1) by Newton's method from an upper bound of the
    root. r = 0 gives V = V_t.
    """
    r = np.maximum(np.asarray(power_ratio, dtype=float), 0.0)
    vn = np.asarray(nominal_voltage_V, dtype=float)
    vt = np.asarray(threshold_voltage_V, dtype=float)
    r, vn, vt = np.broadcast_arrays(r, vn, vt)
    c = r * vn * (vn - vt) ** 2
    # x = V − V_t solves h(x) = x³ + V_t·x² − c = 0, convex and increasing for x ≥ 0.
    # min(c^(1/3), (c/V_t)^(1/2)) bounds the root from above, so Newton's method from there
    # converges monotonically (quadratically once close); 12 steps reach machine precision
    # from any c ≥ 0, including c → 0 where a closed form loses all accuracy.
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.minimum(np.cbrt(c), np.sqrt(c / vt))
        for _ in range(12):
            h = x**3 + vt * x**2 - c
            dh = 3 * x**2 + 2 * vt * x
            x = np.where(dh > 0, np.maximum(x - h / np.where(dh > 0, dh, 1.0), 0.0), x)
    return vt + x


def operating_point(
    power_budget_W: ArrayLike,
    nominal_power_W: ArrayLike,
    nominal_freq_Hz: ArrayLike,
    nominal_voltage_V: ArrayLike,
    threshold_voltage_V: ArrayLike,
    margin_voltage_V: ArrayLike,
    max_voltage_V: ArrayLike = np.inf,
) -> tuple[F, F, F]:
    """Voltage, clock and power drawn by a block given its power budget.

    The lowest-power point meeting the budget on the cubic V–f–P law (docs/model.md
    §B3.1), with CrossFlow's bugs fixed (docs/model.md §B8 item 6):

    * below the floor V_min = V_t + V_m the block runs at V_min with the clock lowered so that
      power equals the budget: f = (P/P_n)·f_n·(V_n/V_min)² (the 2021 code's rule; HEAD
      overspends);
    * above ``max_voltage_V`` (DRAM) it clamps to V_max at f(V_max) and draws less than the
      budget (HEAD crashes);
    * a zero budget or a block with no units gives f = 0 and P = 0.

    Returns:
        (voltage_V, freq_Hz, power_W) arrays.
    """
    budget = np.asarray(power_budget_W, dtype=float)
    pn = np.asarray(nominal_power_W, dtype=float)
    fn = np.asarray(nominal_freq_Hz, dtype=float)
    vn = np.asarray(nominal_voltage_V, dtype=float)
    vt = np.asarray(threshold_voltage_V, dtype=float)
    vmin = vt + np.asarray(margin_voltage_V, dtype=float)
    vmax = np.asarray(max_voltage_V, dtype=float)
    active = pn > 0
    ratio = np.divide(budget, pn, out=np.zeros(np.broadcast(budget, pn).shape), where=active)
    v = solve_voltage(ratio, vn, vt)
    f = alpha_power_frequency(v, fn, vn, vt)
    floor = v < vmin
    f_floor = ratio * fn * (vn / vmin) ** 2
    ceiling = v > vmax
    f_ceiling = alpha_power_frequency(np.where(ceiling, vmax, vn), fn, vn, vt)
    v_op = np.where(floor, vmin, np.where(ceiling, vmax, v))
    f_op = np.where(floor, f_floor, np.where(ceiling, f_ceiling, f))
    f_op = np.where(active, f_op, 0.0)
    p_op = np.where(active, pn * (f_op / np.where(fn > 0, fn, 1.0)) * (v_op / vn) ** 2, 0.0)
    return v_op, f_op, p_op


def dies_per_wafer(
    die_area_mm2: ArrayLike,
    *,
    wafer_diameter_mm: float = 300.0,
    edge_exclusion_mm: float = 5.0,
    scribe_mm: float = 0.2,
) -> F:
    """Gross dies per wafer: π(d_e/2)²/S − π·d_e/√(2S), S = (√A + scribe)², d_e = d − 2e.

    docs/model.md §A5.3 [LLMC][CA]; 814 mm² gives 57.6 on a 300 mm wafer.
    """
    side = np.sqrt(np.asarray(die_area_mm2, dtype=float)) + scribe_mm
    s = side**2
    de = wafer_diameter_mm - 2.0 * edge_exclusion_mm
    return np.maximum(np.pi * (de / 2.0) ** 2 / s - np.pi * de / np.sqrt(2.0 * s), 0.0)


def negative_binomial_yield(
    die_area_mm2: ArrayLike, defect_density_per_cm2: ArrayLike, alpha: ArrayLike
) -> F:
    """Die yield Y = (1 + A·D0/α)^(−α) (docs/model.md §A5.3 [LLMC][CA]; A in cm²)."""
    a_cm2 = np.asarray(die_area_mm2, dtype=float) / 100.0
    alpha_arr = np.asarray(alpha, dtype=float)
    return (1.0 + a_cm2 * np.asarray(defect_density_per_cm2, dtype=float) / alpha_arr) ** (
        -alpha_arr
    )


def die_cost_usd(
    die_area_mm2: ArrayLike,
    wafer_cost_usd: ArrayLike,
    defect_density_per_cm2: ArrayLike,
    alpha: ArrayLike,
) -> F:
    """Cost of one good die: wafer price / (dies per wafer × yield), before harvesting."""
    good = dies_per_wafer(die_area_mm2) * negative_binomial_yield(
        die_area_mm2, defect_density_per_cm2, alpha
    )
    return np.divide(
        np.asarray(wafer_cost_usd, dtype=float) * np.ones_like(good),
        good,
        out=np.full_like(good, np.inf),
        where=good > 0,
    )
