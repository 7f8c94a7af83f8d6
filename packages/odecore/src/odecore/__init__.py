"""odecore: ODE solvers for PyTorch.

Two ways in:

* :func:`odeint`, torchdiffeq's signature (``method`` by name, ``options`` dict);
* :func:`solve`, the structured form: a solver built from a Butcher tableau, a
  step-size controller and a :class:`SaveAt`, returning a :class:`Solution` with
  statistics and a status.

:class:`OdeSpec` holds a solver choice as objects; :meth:`OdeSpec.from_method` is the
one place where a method name and options become them.
"""

from ._controllers import (
    AbstractController,
    Adaptation,
    ConstantStepSize,
    PIDController,
    rms_norm,
)
from ._errors import (
    CompileFallbackWarning,
    ConfigurationError,
    OdeCoreError,
    SolverError,
    Status,
)
from ._esdirk import Kvaerno5
from ._events import Event
from ._gradients import AbstractGradient, Adjoint, Autograd, Checkpoint, Stats
from ._implicit import (
    SDIRK2,
    TRBDF2,
    AbstractImplicitRK,
    GaussLegendre2,
    GaussLegendre4,
    GaussLegendre6,
    ImplicitButcherTableau,
    ImplicitEuler,
    ImplicitMidpoint,
    RadauIIA3,
    RadauIIA5,
    Trapezoid,
)
from ._newton import Newton
from ._odeint import odeint, odeint_adjoint, odeint_dense, odeint_event
from ._reversible import Reversible
from ._rosenbrock import RODAS4_TABLEAU, RODAS5P_TABLEAU, Rodas4, Rodas5P, RosenbrockTableau
from ._solve import SaveAt, Solution, solve
from ._solvers import (
    RK4,
    AbstractExplicitRK,
    AbstractSolver,
    Bosh3,
    Dopri5,
    Dopri8,
    Euler,
    Fehlberg2,
    Heun,
    Heun3,
    HeunEuler,
    Midpoint,
    Ralston,
    RK4ThreeEighths,
    SolveState,
    StepResult,
    Tsit5,
)
from ._spec import (
    ADAPTIVE_METHODS,
    ADAPTIVE_OPTIONS,
    FIXED_METHODS,
    FIXED_OPTIONS,
    GRADIENTS,
    IMPLICIT_METHODS,
    IMPLICIT_OPTIONS,
    ROSENBROCK_METHODS,
    OdeSpec,
)
from ._tableau import (
    BOSH3_TABLEAU,
    DOPRI5_TABLEAU,
    DOPRI8_TABLEAU,
    EULER_TABLEAU,
    FEHLBERG2_TABLEAU,
    HEUN3_TABLEAU,
    HEUN_EULER_TABLEAU,
    HEUN_TABLEAU,
    MIDPOINT_TABLEAU,
    RALSTON_TABLEAU,
    RK4_38_TABLEAU,
    RK4_TABLEAU,
    TSIT5_TABLEAU,
    ButcherTableau,
)

__version__ = "0.1.0"

__all__ = [
    "ADAPTIVE_METHODS",
    "ADAPTIVE_OPTIONS",
    "BOSH3_TABLEAU",
    "DOPRI5_TABLEAU",
    "DOPRI8_TABLEAU",
    "EULER_TABLEAU",
    "FEHLBERG2_TABLEAU",
    "FIXED_METHODS",
    "FIXED_OPTIONS",
    "GRADIENTS",
    "HEUN3_TABLEAU",
    "HEUN_EULER_TABLEAU",
    "HEUN_TABLEAU",
    "IMPLICIT_METHODS",
    "IMPLICIT_OPTIONS",
    "MIDPOINT_TABLEAU",
    "RALSTON_TABLEAU",
    "RK4",
    "RK4_38_TABLEAU",
    "RK4_TABLEAU",
    "RODAS4_TABLEAU",
    "RODAS5P_TABLEAU",
    "ROSENBROCK_METHODS",
    "SDIRK2",
    "TRBDF2",
    "TSIT5_TABLEAU",
    "AbstractController",
    "AbstractExplicitRK",
    "AbstractGradient",
    "AbstractImplicitRK",
    "AbstractSolver",
    "Adaptation",
    "Adjoint",
    "Autograd",
    "Bosh3",
    "ButcherTableau",
    "Checkpoint",
    "CompileFallbackWarning",
    "ConfigurationError",
    "ConstantStepSize",
    "Dopri5",
    "Dopri8",
    "Euler",
    "Event",
    "Fehlberg2",
    "GaussLegendre2",
    "GaussLegendre4",
    "GaussLegendre6",
    "Heun",
    "Heun3",
    "HeunEuler",
    "ImplicitButcherTableau",
    "ImplicitEuler",
    "ImplicitMidpoint",
    "Kvaerno5",
    "Midpoint",
    "Newton",
    "OdeCoreError",
    "OdeSpec",
    "PIDController",
    "RK4ThreeEighths",
    "RadauIIA3",
    "RadauIIA5",
    "Ralston",
    "Reversible",
    "Rodas4",
    "Rodas5P",
    "RosenbrockTableau",
    "SaveAt",
    "Solution",
    "SolveState",
    "SolverError",
    "Stats",
    "Status",
    "StepResult",
    "Trapezoid",
    "Tsit5",
    "odeint",
    "odeint_adjoint",
    "odeint_dense",
    "odeint_event",
    "rms_norm",
    "solve",
]
