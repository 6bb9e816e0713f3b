"""The measurement, spectrum, alert, head, predictor and initialiser nodes of ``geometry``."""

from __future__ import annotations

from dataclasses import dataclass, field

from solo_geometry.config.choices import (
    ACTIVATION_CHOICES,
    ALERT_FEATURES,
    DTYPE_CHOICES,
    FAMILY_CHOICES,
    HEAD_CHOICES,
    NORM_CHOICES,
    PARAMETRIZATION_CHOICES,
    PREDICTOR_CHOICES,
    check_at_least,
    check_choice,
    check_choices,
    check_fraction,
    check_positive,
)


@dataclass
class MeasureConfig:
    """Which measurements the monitor takes at its cadence."""

    # Spectra of H_eff, GN and M plus ||M||/||H_eff|| (docs/design.md section 3): the headline
    # numbers.
    hessian: bool = True
    # Normalised std, covariance condition number and effective rank of Z and of H: cheap.
    stats: bool = True
    # Metric singularity rho along augmentation tangents: one backbone JVP per family and
    # image, the costliest part, hence one colour family on 8 images by default (add contrast,
    # saturation, hue at will).
    augment: bool = True
    augment_families: list[str] = field(default_factory=lambda: ["brightness"])
    # Images used for the augmentation tangents (a backbone JVP each).
    augment_samples: int = 8
    # Per-epoch gradient norms and relative update sizes of head and backbone (the paper's
    # timescale separation) in <run>/updates.jsonl: a few parameter norms every step.
    updates: bool = False
    # Deprecated, read for one release: geometry.spectrum.density_probes and
    # geometry.spectrum.tau (GeometryConfig moves a value given here there, with a warning).
    density_probes: int | None = None
    tau: float | None = None

    def __post_init__(self) -> None:
        check_at_least(self.augment_samples, "geometry.measure.augment_samples")
        check_choices(self.augment_families, FAMILY_CHOICES, "geometry.measure.augment_families")


@dataclass
class SpectrumConfig:
    """The spectra's settings, one to one the keyword arguments of the spectrum function.

    Each field is the keyword argument of the same name of
    :func:`~solo_geometry.geometry.spectrum.effective_hessian_spectrum`; ``dtype`` is the name
    of the torch dtype; ``density_probes`` applies to the records that carry H_eff's density
    (the first and the final), the others run none. A record's settings call ``max_steps``
    and ``tol`` ``lanczos_max_steps`` and ``lanczos_tol``.
    """

    # Lanczos (full reorthogonalisation) runs per operator until both extreme Ritz values have a
    # residual bound under tol times the operator's spectral scale (or under the floor), or
    # max_steps is reached; an extreme that did not converge is recorded as null.
    max_steps: int = 200
    tol: float = 1e-3
    # Arithmetic of the operator products, never of training: float32 products cost about half
    # of float64's on a CPU, their round-off (about 1e-6 of the scale) is far under tol, and the
    # Lanczos recurrences stay float64 whatever this says (so does the tridiagonal).
    dtype: str = "float32"
    # Samples whose rows form the operators' principal sub-block (operator dim =
    # V * max_samples * d); the loss always sees the whole batch (docs/design.md section 3).
    max_samples: int = 16
    # Negative-eigenvalue floor relative to max|lambda(H_eff)|; None: docs/design.md's default
    # (1e-10 in float64, 1e-5 in float32).
    tau: float | None = None
    # SLQ probes for the H_eff density stored in the first and the final record.
    density_probes: int = 2

    def __post_init__(self) -> None:
        check_at_least(self.max_steps, "geometry.spectrum.max_steps", 2)
        check_positive(self.tol, "geometry.spectrum.tol")
        check_choice(self.dtype, DTYPE_CHOICES, "geometry.spectrum.dtype")
        check_at_least(self.max_samples, "geometry.spectrum.max_samples", 2)
        if self.tau is not None:
            check_positive(self.tau, "geometry.spectrum.tau")
        check_at_least(self.density_probes, "geometry.spectrum.density_probes")


@dataclass
class StatsConfig:
    """Representation statistics (normalised std, covariance spectrum, RankMe)."""

    # Also pool the features of the last `queue` training batches before a measurement (RankMe-
    # style), so rank and condition numbers mean something when the batch is smaller than d.
    # 0: the measured batch alone.
    queue: int = 0

    def __post_init__(self) -> None:
        check_at_least(self.queue, "geometry.stats.queue", 0)


@dataclass
class AlertConfig:
    """The collapse alert (:mod:`solo_geometry.runtime.alert`).

    No threshold depends on a data set or on the batch: the normalised std against
    sqrt(M / ((M - 1) d)), the most it can be on M rows of width d; the effective rank (RankMe)
    over min(M, d) against its own running maximum in the run. A state is entered below its
    ``enter`` fraction and left above its ``leave`` fraction, and only after ``patience``
    consecutive records say so: one noisy batch does not flip it. The defaults were calibrated
    on half of benchmarks/collapse_detection.py's runs (docs/reproducing.md).
    """

    enabled: bool = True
    # "h": the head's outputs (the paper's collapse statistic); "z": the backbone's features.
    features: str = "h"
    # Also read Z beside H (the lower reading counts): a BatchNorm-ended head holds the std of
    # H up through a collapse that Z shows.
    read_z: bool = True
    # Opt-in: read the statistics of this many images of the validation folder (data.val_path,
    # else geometry.probes.data), the same clean images at every record, instead of the
    # augmented training batch (runtime/heldout.py); 0 (the default, which the calibration on
    # half of benchmarks/collapse_detection.py's runs chose over 256: docs/reproducing.md), or
    # no folder: the training batch.
    heldout: int = 0
    # complete collapse: the normalised std below 1/20 of its ceiling; left above 1/10.
    complete_enter: float = 0.05
    complete_leave: float = 0.1
    # dimensional collapse (the std holds): effective rank below 0.35 of its running maximum
    # in the run; left above 0.525 (calibrated: docs/reproducing.md).
    dimensional_enter: float = 0.35
    dimensional_leave: float = 0.525
    # on the held-out batch (heldout > 0): effective rank below 0.6 of its reading before the
    # first optimiser step (the network as it started); left above 0.8 (calibrated likewise,
    # the other settings at their defaults).
    heldout_enter: float = 0.6
    heldout_leave: float = 0.8
    # consecutive records that must agree before the state changes.
    patience: int = 2
    # Opt-in: ask Lightning to stop (trainer.should_stop) once `complete` has lasted
    # `stop_after` records. By default the monitor never changes training.
    stop: bool = False
    stop_after: int = 5

    def __post_init__(self) -> None:
        check_choice(self.features, ALERT_FEATURES, "geometry.alert.features")
        for name in ("complete", "dimensional", "heldout"):
            enter, leave = getattr(self, f"{name}_enter"), getattr(self, f"{name}_leave")
            check_fraction(enter, f"geometry.alert.{name}_enter")
            check_fraction(leave, f"geometry.alert.{name}_leave")
            if leave < enter:
                raise ValueError(
                    f"geometry.alert.{name}_leave: must be >= {name}_enter "
                    f"({enter!r}), got {leave!r}"
                )
        check_at_least(self.patience, "geometry.alert.patience")
        check_at_least(self.stop_after, "geometry.alert.stop_after")
        rows = self.heldout
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0 or rows == 1:
            raise ValueError(
                "geometry.alert.heldout: must be 0 (read the training batch) or an integer >= 2 "
                f"(images of the validation folder), got {rows!r}"
            )


@dataclass
class HeadConfig:
    """Projection head used while geometry is on."""

    # "projector": keep the recipe's own projector, so switching geometry on never changes the
    # experiment it measures (docs/design.md section 5). Otherwise a key of
    # solo_geometry.models.heads.HEADS.
    name: str = "projector"
    # Smooth activations (swish, gelu, softplus) make collapse a strict saddle; relu cannot.
    activation: str = "swish"
    # None: the recipe's own proj_hidden_dim.
    hidden_dim: int | None = None
    depth: int = 2
    # "bn" as solo-learn's projectors; "none" for a head whose metric is per-sample.
    norm: str = "bn"
    # metric_linear only: how W is stored.
    parametrization: str = "spectral"
    # Softplus/Swish sharpness.
    beta: float = 1.0
    # smooth_mlp only: Linear biases where no norm follows (False: none at all, the paper's
    # heads), and the norm also after the last Linear (the paper's heads with BatchNorm).
    bias: bool = True
    out_norm: bool = False

    def __post_init__(self) -> None:
        check_choice(self.name, HEAD_CHOICES, "geometry.head.name")
        check_choice(self.activation, ACTIVATION_CHOICES, "geometry.head.activation")
        check_choice(self.norm, NORM_CHOICES, "geometry.head.norm")
        check_choice(self.parametrization, PARAMETRIZATION_CHOICES, "geometry.head.parametrization")
        check_at_least(self.depth, "geometry.head.depth")
        check_positive(self.beta, "geometry.head.beta")
        if self.hidden_dim is not None:
            check_at_least(self.hidden_dim, "geometry.head.hidden_dim")


@dataclass
class PredictorConfig:
    """Predictor used while geometry is on (methods with one: BYOL, SimSiam).

    Every option left null takes the ``geometry.head`` node's value, so one override of the
    head sets projector and predictor together (the paper's SimSiam shares the activation and
    the norm between them).
    """

    # "predictor": keep the method's own predictor; "smooth_mlp": this package's MLP;
    # "identity": no predictor (Chen and He 2021's collapse ablation of SimSiam; BYOL too).
    name: str = "predictor"
    # null: the head's activation, norm, beta, bias and out_norm.
    activation: str | None = None
    norm: str | None = None
    beta: float | None = None
    bias: bool | None = None
    out_norm: bool | None = None
    # null: the recipe's own pred_hidden_dim.
    hidden_dim: int | None = None
    depth: int = 2

    def __post_init__(self) -> None:
        check_choice(self.name, PREDICTOR_CHOICES, "geometry.predictor.name")
        if self.activation is not None:
            check_choice(self.activation, ACTIVATION_CHOICES, "geometry.predictor.activation")
        if self.norm is not None:
            check_choice(self.norm, NORM_CHOICES, "geometry.predictor.norm")
        if self.beta is not None:
            check_positive(self.beta, "geometry.predictor.beta")
        if self.hidden_dim is not None:
            check_at_least(self.hidden_dim, "geometry.predictor.hidden_dim")
        check_at_least(self.depth, "geometry.predictor.depth")


@dataclass
class InitConfig:
    """Opt-in initialisers applied once, after the head is built."""

    # Multiply the head's Linear weights by alpha (the paper's "pseudo-collapse" start).
    pseudo_collapse: bool = False
    alpha: float = 0.1
    # Also scale the backbone's last layer.
    backbone: bool = False

    def __post_init__(self) -> None:
        check_positive(self.alpha, "geometry.init.alpha")
