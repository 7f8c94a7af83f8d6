"""Small problems against SciPy: dopri5 at 1e-6, batch 1, float64, one thread, under
torch.no_grad(), eager and compile=True, beside SciPy solve_ivp RK45 (median of 21).

Run from the repository root: python docs/results/compile-loop/small.py
"""
import time, statistics, warnings, sys
import numpy as np, scipy.integrate as si, torch, odecore
torch.set_num_threads(1)
warnings.simplefilter("error", odecore.CompileFallbackWarning)
def vdp_np(t, y): return [y[1], (1 - y[0]**2) * y[1] - y[0]]
def lorenz_np(t, y): return [10*(y[1]-y[0]), y[0]*(28-y[2])-y[1], y[0]*y[1]-8/3*y[2]]
def vdp(t, y):
    x, v = y.unbind(-1)
    return torch.stack((v, (1 - x * x) * v - x), -1)
def lorenz(t, y):
    a, b, c = y.unbind(-1)
    return torch.stack((10 * (b - a), a * (28 - c) - b, a * b - 8 / 3 * c), -1)
P = {"vdp": (vdp_np, vdp, [2.0, 0.0]), "lorenz": (lorenz_np, lorenz, [1.0, 1.0, 1.0])}
def med(fn, n=21):
    t = time.perf_counter(); fn(); first = time.perf_counter() - t; ts = []
    for _ in range(n):
        t = time.perf_counter(); out = fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts), out, first
for name, (fnp, ft, y0) in P.items():
    ref = si.solve_ivp(fnp, (0, 10), y0, method="DOP853", rtol=1e-13, atol=1e-13).y[:, -1]
    s, sol, _ = med(lambda: si.solve_ivp(fnp, (0, 10), y0, method="RK45", rtol=1e-6, atol=1e-6))
    print(name, "scipy RK45", f"{s*1e3:.2f} ms", "steps", sol.t.size - 1, "err", np.abs(sol.y[:, -1] - ref).max())
    y0t = torch.tensor([y0], dtype=torch.float64)
    for compile in (False, True):
        def run():
            with torch.no_grad():
                return odecore.solve(ft, y0t, t0=0.0, t1=10.0, solver=odecore.Dopri5(), controller=odecore.PIDController(rtol=1e-6, atol=1e-6), compile=compile)
        t, sol, first = med(run)
        print(name, "compile" if compile else "eager", f"{t*1e3:.2f} ms first {first:.1f}s", sol.stats, "err", (sol.ys[-1, 0].numpy() - ref).__abs__().max(), f"ratio {t/s:.2f}", flush=True)
