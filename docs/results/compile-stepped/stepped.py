"""rk4 x N on Van der Pol (mu = 1), batch 256, float32, one thread: eager, compile=True
(compiled steps) and compile="unrolled" (the whole grid), forward and forward+backward;
the first call (which compiles) timed apart; best of 7 runs of 10 calls."""
import sys, time, json
import torch, odecore
torch.set_num_threads(1)
N = int(sys.argv[1]) if len(sys.argv) > 1 else 100
def vdp(t, y):
    x, v = y[..., 0], y[..., 1]
    return torch.stack((v, (1 - x * x) * v - x), -1)
y0 = torch.randn(256, 2, generator=torch.Generator().manual_seed(0))
t = torch.linspace(0.0, 1.0, 2)
def call(compile, backward):
    y = y0.clone().requires_grad_(backward)
    ys = odecore.odeint(vdp, y, t, method="rk4", options={"n_steps": N, "compile": compile})
    if backward:
        ys[-1].square().sum().backward()
    return ys
rows = {}
for compile in (False, "stepped", True) if N <= 100 else (False, "stepped"):
    for backward in (False, True):
        t0 = time.perf_counter(); call(compile, backward); first = time.perf_counter() - t0
        best = min((lambda s: [call(compile, backward) for _ in range(10)] and (time.perf_counter() - s) / 10)(time.perf_counter()) for _ in range(7))
        rows[f"{compile}/{'fwd+bwd' if backward else 'fwd'}"] = (first, best)
        print(f"compile={compile!s:9} {'fwd+bwd' if backward else 'fwd    '} first {first:8.2f} s  best {best*1e3:8.3f} ms", flush=True)
eager = {k.split('/')[1]: v[1] for k, v in rows.items() if k.startswith('False')}
for k, (first, best) in rows.items():
    print(f"{k:20s} / eager {best / eager[k.split('/')[1]]:.2f}")
