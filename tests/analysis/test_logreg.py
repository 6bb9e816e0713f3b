"""The logistic-regression kernel (solo_geometry.analysis.logreg) vs closed forms, scikit-learn."""

from __future__ import annotations

import pytest
import torch

from solo_geometry.analysis.logreg import eigenbasis, fit_logistic, lbfgs

F64 = torch.float64


def _problem(n: int, d: int, classes: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Correlated, standardised features (n, d) with labels that depend on them."""
    gen = torch.Generator().manual_seed(seed)
    mix = torch.randn(d, d, generator=gen, dtype=F64) * torch.logspace(0, -2, d, dtype=F64)
    x = torch.randn(n, d, generator=gen, dtype=F64) @ mix  # (n, d), decaying spectrum
    x = (x - x.mean(0)) / x.std(0)
    y = (x @ torch.randn(d, classes, generator=gen, dtype=F64)).argmax(1)
    return x, y


def _gradient(x: torch.Tensor, y: torch.Tensor, params: torch.Tensor, lam: float) -> torch.Tensor:
    """Gradient (d + 1, C) of mean CE + lam/2 ||W||^2 by autograd in float64."""
    p = params.detach().double().requires_grad_(True)
    logits = x.double() @ p[:-1] + p[-1]
    loss = torch.nn.functional.cross_entropy(logits, y) + 0.5 * lam * p[:-1].pow(2).sum()
    return torch.autograd.grad(loss, p)[0]


def _sklearn_params(x: torch.Tensor, y: torch.Tensor, lam: float) -> torch.Tensor:
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=1.0 / (lam * len(y)), tol=1e-12, max_iter=20000)
    clf.fit(x.numpy(), y.numpy())
    return torch.cat([torch.tensor(clf.coef_.T), torch.tensor(clf.intercept_)[None]])


class TestLbfgs:
    def test_minimises_a_quadratic_to_its_closed_form(self) -> None:
        gen = torch.Generator().manual_seed(0)
        m = torch.randn(30, 30, generator=gen, dtype=F64)
        hess = m @ m.T + 0.1 * torch.eye(30, dtype=F64)  # SPD, condition number ~1e4
        rhs = torch.randn(30, 2, generator=gen, dtype=F64)

        def fun(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            g = hess @ a - rhs
            return (0.5 * (a * (hess @ a)).sum() - (rhs * a).sum()), g

        start = torch.zeros(30, 2, dtype=F64)
        a, evals = lbfgs(fun, start, 500, lambda g: float(g.abs().max()) <= 1e-8)
        assert float(fun(a)[1].abs().max()) <= 1e-8 and evals < 500
        # |a - a*| <= |grad| / lambda_min = 1e-8 / 0.1 per column
        torch.testing.assert_close(a, torch.linalg.solve(hess, rhs), rtol=0, atol=1e-6)
        assert start.abs().max() == 0  # the start is not modified

    def test_stops_at_once_when_converged(self) -> None:
        def fun(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return (a * a).sum(), 2 * a

        a, evals = lbfgs(fun, torch.zeros(3, 1, dtype=F64), 100, lambda g: True)
        assert evals == 1 and a.abs().max() == 0


class TestEigenbasis:
    @pytest.mark.parametrize(("n", "d"), [(60, 200), (300, 40)], ids=["gram", "covariance"])
    def test_basis_is_an_isometry_that_reproduces_the_features(self, n: int, d: int) -> None:
        x, _ = _problem(n, d)
        xfit, (evals, evecs, rest), basis = eigenbasis(x, 4096, torch.Generator())
        assert evecs is None and rest is None and xfit.shape[1] == evals.shape[0] <= min(n, d)
        torch.testing.assert_close(basis.features(x), xfit)  # same map for new features
        w = torch.randn(xfit.shape[1], 3, dtype=F64)
        torch.testing.assert_close(basis.weights(w).norm(dim=0), w.norm(dim=0))  # orthonormal
        torch.testing.assert_close(xfit @ w, x @ basis.weights(w))  # X V w = (X V) w
        cov = torch.linalg.eigvalsh(x.T @ x / n).flip(0)[: evals.shape[0]]
        torch.testing.assert_close(evals.sort(descending=True).values, cov)

    @pytest.mark.parametrize(("n", "d"), [(60, 200), (300, 40)], ids=["gram", "covariance"])
    def test_non_finite_features_are_a_clear_error(self, n: int, d: int) -> None:
        x, _ = _problem(n, d)
        x[3, 5] = float("nan")
        with pytest.raises(ValueError, match="non-finite"):
            eigenbasis(x, 4096, torch.Generator())

    def test_many_rows_keep_the_features_and_estimate_the_preconditioner(self) -> None:
        x, _ = _problem(500, 20)
        xfit, (evals, evecs, rest), basis = eigenbasis(x, 100, torch.Generator().manual_seed(0))
        assert xfit is x and evecs is not None and evals.shape == (20,)
        assert basis.features(x) is x


class TestFitLogistic:
    @pytest.mark.parametrize(
        ("n", "d", "max_rows"),
        [(80, 150, 4096), (400, 30, 4096), (400, 30, 100)],
        ids=["gram", "covariance", "estimated"],
    )
    @pytest.mark.parametrize("lam", [1e-1, 1e-3])
    def test_matches_sklearn_minimiser(self, n: int, d: int, max_rows: int, lam: float) -> None:
        x, y = _problem(n, d)
        xfit, precond, basis = eigenbasis(x, max_rows, torch.Generator().manual_seed(0))
        fit, evals = fit_logistic(xfit, y, 4, lam, None, precond, 2000, 1e-9, basis.weights, d)
        params = torch.cat([basis.weights(fit[:-1]), fit[-1:]])  # back to feature coordinates
        ref = _sklearn_params(x, y, lam)
        # sklearn's intercept and weights are defined up to a shift common to all classes
        params, ref = params - params.mean(1, keepdim=True), ref - ref.mean(1, keepdim=True)
        torch.testing.assert_close(params, ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))
        assert evals < 2000

    @pytest.mark.parametrize("n,d", [(80, 150), (400, 30)], ids=["gram", "covariance"])
    def test_stops_on_sklearn_gradient_test_in_feature_coordinates(self, n: int, d: int) -> None:
        x, y = _problem(n, d, seed=1)
        xfit, precond, basis = eigenbasis(x, 4096, torch.Generator())
        tol, lam = 1e-4, 1e-2
        fit, _ = fit_logistic(xfit, y, 4, lam, None, precond, 500, tol, basis.weights, d)
        params = torch.cat([basis.weights(fit[:-1]), fit[-1:]])
        grad = _gradient(x, y, params, lam)
        assert float(grad.abs().max()) <= tol * 1.01
        loose, _ = fit_logistic(xfit, y, 4, lam, None, precond, 500, 1e-1, basis.weights, d)
        assert float(_gradient(xfit, y, loose, lam).abs().max()) > tol  # tol is what stops it

    def test_warm_start_from_the_solution_costs_one_evaluation(self) -> None:
        x, y = _problem(200, 20)
        xfit, precond, basis = eigenbasis(x, 4096, torch.Generator())
        fit, _ = fit_logistic(xfit, y, 4, 1e-2, None, precond, 500, 1e-6, basis.weights, 20)
        again, evals = fit_logistic(xfit, y, 4, 1e-2, fit, precond, 500, 1e-6, basis.weights, 20)
        assert evals == 1
        torch.testing.assert_close(again, fit)
