"""Performance benchmarks: odecore against its peers, measured side by side in one run.

``odebench perf contnet`` (:func:`run_contnet`) times ContinuousNet against its own
ResNet export; the rest of this page is about the solver benchmark.

``odebench perf solvers`` (:func:`run_solvers` from Python) times odecore against
torchdiffeq, and torchode and torchdyn where they import, on five problems, three
solver configurations and every gradient method; measures peak memory in fresh
processes; and checks gradients against finite differences.

Problems: ``mlp`` (batch 256, state 32, two tanh layers of 128), ``conv_relu`` and
``conv_softplus`` (Chen et al.'s ODE-Net block on a batch of 32 16-channel 8x8 images:
GroupNorm, activation, 3x3 convolution with time as an extra channel, twice), ``vdp``
(Van der Pol, mu = 5, batch 64, t in [0, 5]) and ``linear`` (a damped rotation with an
exact solution). Methods: ``dopri5@0.001``, ``dopri5@1e-06`` (rtol = atol) and
``rk4x100`` (100 uniform steps). Everything runs in float32 on the CPU, except the
gradient check and the stiff problem (float64).

The full run (not ``--quick``, unless ``--problems`` names it) ends with a stiff
problem, ``vdp_stiff`` (Van der Pol, mu = 1000, y0 = (2, 0), t in [0, 3000]), and
its own sweep, forward only, in odecore: ``kvaerno5``, ``scipy:Radau`` and
``scipy:BDF`` at rtol = atol from 1e-4 to 1e-8, and ``dopri5@1e-06,max_steps=10000``,
which runs out of its step budget and is reported as failed.

The JSON document (``--json PATH``) is one object:

``environment``
    ``schema_version`` (5), ``date`` (start of the run, UTC, ISO 8601), ``python``,
    ``platform``, ``machine``, ``processor``, ``cpu_count``, ``torch``, ``threads``,
    ``libraries`` (``{name: version}`` of those measured), ``unavailable``
    (``{name: reason}``), ``quick``, ``repeats``, ``cell_budget_s``, ``dtype``,
    ``command``, ``load_average_start`` and ``load_average_end`` (the machine's
    one-minute load average: other processes slow the timings), ``wall_time_s``.
``problems``
    One object per problem: ``name``, ``description``, ``state_shape``,
    ``n_parameters``, ``t0``, ``t1``, ``eval_time_s`` (one evaluation of the field
    alone, no graph), ``eval_vjp_time_s`` (one evaluation recording the graph plus
    its vector-Jacobian product for the state and every parameter), both measured
    once before the problem's runs, and ``reference`` (where the reference
    ``y(t1)`` for ``error`` comes from).
``evaluations``
    The evaluation times the overhead figures divide by, one object per problem x
    method x mode: ``problem``, ``method``, ``mode``, ``eval_time_s``,
    ``eval_vjp_time_s`` (``null`` where the mode does not use it),
    ``chained_eval_time_s`` (forward cells: one evaluation in a chain of
    evaluations linked by one axpy each, ``y <- y + eps f(t, y)``, the least any
    solver pays per evaluation; ``null`` in the others) and ``blocks``. Each is the
    median of blocks of the field, one per round of that cell's interleaved runs
    and about as long as one run, so the factors do not carry the machine's drift
    between cells.
``results``
    One object per problem x method x library x figure: ``problem``, ``method``,
    ``library``, ``figure``, ``value`` (a finite number, or ``null``), ``unit``,
    ``note`` (why ``value`` is ``null``, or a caveat such as fewer repetitions;
    otherwise ``null``) and ``supported`` (``false`` where the library has no such
    method or gradient mode; the rows of ``memory`` and ``gradients`` carry it too).
    The figures:

    - ``forward_time_s``, ``nfe_forward``, ``error`` (largest absolute difference
      at ``t1`` from the reference), ``forward_overhead`` (time / (NFE x
      ``eval_time_s``)), ``forward_cost_per_eval_us`` ((time - NFE x
      ``eval_time_s``) / NFE: the solver's own time per evaluation, estimated by
      subtraction), with the cell's ``eval_time_s`` from ``evaluations``;
      ``forward_solver_time_s`` (the same solve with the field replaced by a tape
      of the outputs it gave in that library's recorded run: the same steps, no
      evaluation cost, and the same ``y(t1)`` bit for bit; the solver alone,
      measured), ``forward_solver_overhead`` (that over NFE x ``eval_time_s``: the
      solver's part of ``forward_overhead``) and ``forward_solver_cost_per_eval_us``
      (that over NFE);
    - for each gradient mode ``backprop``, ``adjoint``, ``adjoint_seminorm``,
      ``checkpoint``: ``{mode}_time_s`` (forward plus backward of
      ``L = sum(w * y(t1))``), ``{mode}_nfe_backward`` (evaluations during
      ``backward()``; 0 for backprop), ``{mode}_overhead`` (backprop: time / (NFE x
      ``eval_vjp_time_s``); the others: time / (NFE x ``eval_time_s`` + NFE backward
      x ``eval_vjp_time_s``)) and, except for backprop, ``{mode}_grad_diff``
      (``|g - g_backprop| / |g_backprop|`` over ``y0`` and every parameter, against
      the same library's backprop gradient).

    Times are medians of interleaved repetitions (A B F A B F ..., F the field
    alone; in forward cells A B A' B' F, A' the replay of A), in seconds.
``ratios``
    One object per problem x method x figure x peer: ``problem``, ``method``,
    ``figure``, ``library`` (always ``"odecore"``), ``peer``, ``value`` (odecore's
    median over the peer's; below 1 means odecore is faster, needs fewer
    evaluations or is more accurate) and ``note``.
``compiled``
    With ``--compile`` (``SolversConfig(compile=True)``), odecore's compiled solve
    (the library ``odecore-compiled``, also in ``results``) against eager odecore,
    one object per problem x method x mode where it compiles (``rk4``, forward and
    backprop): ``problem``, ``method``, ``mode``, ``eager_time_s``,
    ``compiled_time_s`` (medians of the same interleaved rounds), ``ratio``
    (compiled over eager), ``first_call_s`` (the compiled library's first call,
    which compiles; never in the medians), ``y1_max_abs_diff`` and
    ``grad_rel_diff`` (its ``y(t1)`` and gradient against eager odecore's) and
    ``note`` (a failure). Empty without ``--compile``.
``stiff``
    The stiff problems' sweep, one object per problem x configuration x figure:
    ``problem``, ``method`` (its label, e.g. ``kvaerno5@1e-06``), ``solver``,
    ``rtol``, ``atol``, ``max_steps``, ``library`` (``"odecore"``), ``figure``
    (``forward_time_s``, the median wall time of a forward solve; ``nfe_forward``,
    Jacobians' evaluations included; ``error``, the largest absolute difference at
    ``t1`` from SciPy's Radau at rtol = atol = 1e-12, solved once per run), ``value``,
    ``unit`` and ``note`` (a failure's starts with ``failed:``).
``memory``
    Peak memory of forward plus backward on the MLP problem with rk4, each
    configuration in a fresh process: ``problem``, ``method``, ``n_steps``,
    ``library``, ``gradient`` (``backprop``, ``adjoint`` or ``checkpoint``),
    ``figure``, ``value``, ``unit``, ``note``. Figures: ``peak_delta_mib`` (peak
    resident set above the baseline taken after imports, model creation and a
    two-step warm-up), ``peak_rss_mib``, ``baseline_rss_mib``, ``nfe_forward``,
    ``nfe_backward``; and with ``n_steps`` ``null``: ``mib_per_step`` (slope of
    ``peak_delta_mib`` between the fewest and the most steps) and ``delta_growth``
    (its ratio).
``gradients``
    The gradient check on the conv fields (float64, dopri5 at ``rtol = atol =
    1e-6``): ``problem``, ``method``, ``library``, ``gradient``, ``figure``,
    ``value``, ``unit``, ``note``, with figures ``grad_abs_error`` and
    ``grad_rel_error`` (largest error of the directional derivatives along random
    unit directions in (``y0``, parameters) against central finite differences of a
    fine float64 rk4 solve), ``nfe_forward``, ``nfe_backward``,
    ``nfe_backward_over_forward``, ``time_s``; rows with ``library = "finite
    differences"`` describe the reference (``fd_resolution``: the change of the
    differences when the steps are halved; ``fd_scale``; ``time_s``).
``notes``
    Sentences on how to read the figures, and which libraries or measurements were
    left out and why.

Every ``value`` in ``results``, ``ratios``, ``memory`` and ``gradients`` is a finite
number or ``null`` with a ``note``.

:func:`plot_solvers` (``odebench perf plot JSON``, or ``--plot PATH`` on the run)
draws the document as one figure, and with stiff rows also their work-precision
plot (error against wall time per solver) beside it, as ``PATH`` with ``_stiff``
before the suffix.
"""

from .._figures import Bars, Lines
from ._contnet import ContnetConfig, format_contnet_report, run_contnet
from ._plot import plot_solvers, solver_panels
from ._report import format_report
from ._solvers import SolversConfig, run_solvers

# isort: split
# For the layers above, not for users (not in __all__).
from ._contnet import saved_bytes as saved_bytes
from ._libraries import LIBRARIES as LIBRARIES
from ._problems import PROBLEMS as PROBLEMS

__all__ = [
    "Bars",
    "ContnetConfig",
    "Lines",
    "SolversConfig",
    "format_contnet_report",
    "format_report",
    "plot_solvers",
    "run_contnet",
    "run_solvers",
    "solver_panels",
]
