"""One fit's fixed tensors (stimulus, HRF, nuisance basis) and the data projected onto what they leave."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from prfmap.engine.backend import get_backend
from prfmap.engine.backend.ops import tensor, to_numpy
from prfmap.engine.hrf import CANONICAL, HRF, convolution_matrices, hrf_kernels
from prfmap.engine.models import PRFModel
from prfmap.engine.stimulus import Stimulus, StimulusTensors, frames


@dataclass(frozen=True)
class Problem:
    """Tensors shared by every stage of one fit.

    Attributes
    ----------
    model : PRFModel
    stim : StimulusTensors
        The stimulated pixels' apertures, one column per distinct frame
        (:mod:`~prfmap.engine.stimulus.frames`), and coordinates.
    hrf_t : tensor, shape (bases, distinct, frames)
        Transposed per-TR convolution matrices of the HRF bases, folded with the expansion of the
        distinct frames to the frames (:func:`~prfmap.engine.stimulus.frames.fold_expansion`).
    q : tensor, shape (frames, k)
        Orthonormal nuisance basis (a constant first) projected out of data and predictions.
    dtype : str
    n_bases, pixels, frames : int
    hrf : HRF
        The response of the first basis (its derivatives follow when ``n_bases`` is 3).
    frame_index : ndarray of int, shape (frames,)
        Each frame's distinct frame: a neural response (..., distinct) at every frame is
        ``response[..., frame_index]``.
    grid_key : str
        A digest of what grid predictions depend on besides the model and the grid: the stimulated
        pixels, the first HRF basis, the nuisance basis and the dtype.
    cache : FitCache, optional
        Where the problem was kept (:meth:`FitCache.problem`), and its grid predictions are.
    """

    model: PRFModel
    stim: StimulusTensors
    hrf_t: Any
    q: Any
    dtype: str
    n_bases: int
    pixels: int
    frames: int
    hrf: HRF = CANONICAL
    frame_index: np.ndarray | None = None
    grid_key: str = ""
    cache: FitCache | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Units:
    """The units a fit can use and their time courses, projected off the nuisance basis.

    Attributes
    ----------
    index : ndarray of int
        Units with finite data and variance left after the projection.
    y : ndarray, shape (len(index), frames)
        Their projected time courses.
    raw : ndarray, shape (len(index), frames)
        Their time courses as given.
    total : int
        Units of the data they were taken from (the length of every per-unit output).
    """

    index: np.ndarray
    y: np.ndarray
    raw: np.ndarray
    total: int

    def rows(self, chosen: np.ndarray) -> Units:
        """These units' rows ``chosen`` (positions in :attr:`index`), from the same data.

        Parameters
        ----------
        chosen : ndarray of int or bool
            Which of them.

        Returns
        -------
        Units
        """
        return Units(self.index[chosen], self.y[chosen], self.raw[chosen], self.total)


def nuisance_basis(n_frames: int, nuisance: np.ndarray | None) -> np.ndarray:
    """Orthonormal basis (frames, k) of a constant and the mean-centred nuisance regressors.

    Parameters
    ----------
    n_frames : int
        Frames.
    nuisance : ndarray, shape (frames, k), optional
        Regressors.

    Returns
    -------
    ndarray, shape (frames, k')
    """
    cols = [np.ones((n_frames, 1))]
    if nuisance is not None:
        nuisance = np.asarray(nuisance, dtype=np.float64)
        if nuisance.ndim == 1:
            nuisance = nuisance[:, None]
        if nuisance.shape[0] != n_frames:
            raise ValueError(f"nuisance has {nuisance.shape[0]} frames, the data {n_frames}")
        cols.append(nuisance - nuisance.mean(axis=0))
    return _orthonormal_columns(np.hstack(cols))


def _orthonormal_columns(a: np.ndarray) -> np.ndarray:
    """An orthonormal basis of ``a``'s column space (its left singular vectors above 1e-8 of the largest)."""
    u, s, _ = np.linalg.svd(a, full_matrices=False)
    return u[:, s > s.max() * 1e-8]


T = TypeVar("T")


@dataclass
class FitCache:
    """What fits of one design share, kept by their caller for as long as it fits that design.

    The problems (stimulus, HRF and nuisance tensors) of a stimulus and nuisance met again (the
    chunks of a fit, its HRF's sigma points, a participant's HRF and noise estimates and its fit)
    and the grid predictions of a problem and grid met again (they depend on the design, never on
    data: the participant HRF's screen and its best units, cross-validation folds whose training runs
    saw the same apertures with the same nuisance regressors). The caller owns it: a fit handed none
    keeps one for its own call, and nothing in the engine outlives the calls it was given to.

    Attributes
    ----------
    most_problems : int
        Problems kept, the most recently used: a fit with standard errors builds five (its own and its
        HRF's four sigma points, ``fit.hrf_alternatives``), fifteen with a delay prior (three HRFs,
        :mod:`~prfmap.engine.fit.delay_prior`, and each one's four).
    most_grids : int
        Grid predictions kept ((grid, frames) each, e.g. 8,000 × 1,500 float32 = 48 MB).
    most_designs : int
        The tensors no HRF changes (:class:`DesignTensors`) kept, the most recently used: the problems
        of one stimulus and nuisance under different HRFs share them (the distinct frames were found
        again for each of a delay-prior fit's fifteen problems).
    """

    most_problems: int = 16
    most_grids: int = 4
    most_designs: int = 2
    _problems: dict[tuple, tuple[Stimulus, np.ndarray | None, Problem]] = field(
        default_factory=dict, repr=False
    )
    _designs: dict[tuple, tuple[Stimulus, np.ndarray | None, DesignTensors]] = field(
        default_factory=dict, repr=False
    )
    _grids: dict[tuple, np.ndarray] = field(default_factory=dict, repr=False)

    def problem(
        self,
        model: PRFModel,
        stim: Stimulus,
        tr: float,
        n_bases: int,
        nuisance: np.ndarray | None,
        dtype: str,
        slice_time_ref: float,
        hrf: HRF = CANONICAL,
    ) -> Problem:
        """:func:`make_problem`'s problem, built once for the same ``stim`` and ``nuisance`` objects.

        Parameters
        ----------
        model : PRFModel
            The model: the one part of a problem that differs between the fits of different models
            of a design (the tensors are shared).
        stim, tr, n_bases, nuisance, dtype, slice_time_ref, hrf
            As :func:`make_problem`'s.

        Returns
        -------
        Problem
        """
        key = (id(stim), id(nuisance), tr, n_bases, dtype, slice_time_ref, hrf)

        def design() -> tuple[Stimulus, np.ndarray | None, DesignTensors]:
            return stim, nuisance, design_tensors(stim, nuisance, dtype)

        def build() -> tuple[Stimulus, np.ndarray | None, Problem]:
            shared = _kept(self._designs, (id(stim), id(nuisance), dtype), design, self.most_designs)[2]
            prob = problem_of(shared, model, stim, tr, n_bases, slice_time_ref, hrf)
            return stim, nuisance, replace(prob, cache=self)  # the objects keep their ids taken

        return replace(_kept(self._problems, key, build, self.most_problems)[2], model=model)

    def grid(self, key: Hashable, build: Callable[[], np.ndarray]) -> np.ndarray:
        """The grid predictions of ``key``, from ``build()`` the first time.

        Parameters
        ----------
        key : hashable
            The problem's ``grid_key``, the model and a digest of the grid.
        build : callable
            Computes them.

        Returns
        -------
        ndarray
        """
        return _kept(self._grids, key, build, self.most_grids)


def _kept(store: dict[Hashable, T], key: Hashable, build: Callable[[], T], most: int) -> T:
    """``store[key]``, built when missing, the least recently used entries beyond ``most`` dropped."""
    if key in store:
        store[key] = store.pop(key)  # the most recently used last
        return store[key]
    store[key] = value = build()
    while len(store) > most:
        del store[next(iter(store))]
    return value


def make_problem(
    model: PRFModel,
    stim: Stimulus,
    tr: float,
    n_bases: int,
    nuisance: np.ndarray | None,
    dtype: str,
    slice_time_ref: float,
    hrf: HRF = CANONICAL,
) -> Problem:
    """The tensors of one fit.

    Stimulated pixels, convolution matrices of ``hrf`` (and, with ``n_bases`` 3, of its temporal and
    dispersion derivatives) and nuisance basis; built anew (:meth:`FitCache.problem` keeps them).

    Parameters
    ----------
    model : PRFModel
        The model.
    stim : Stimulus
        The apertures.
    tr : float
        Repetition time, s.
    n_bases : int
        1, or 3 with the HRF's derivatives.
    nuisance : ndarray, optional
        (frames, k) regressors removed by preprocessing.
    dtype : str
        ``float32`` or ``float64``.
    slice_time_ref : float
        Where in each TR the volumes sample the signal.
    hrf : HRF
        The response.

    Returns
    -------
    Problem
    """
    return problem_of(design_tensors(stim, nuisance, dtype), model, stim, tr, n_bases, slice_time_ref, hrf)


def problem_of(
    design: DesignTensors,
    model: PRFModel,
    stim: Stimulus,
    tr: float,
    n_bases: int,
    slice_time_ref: float,
    hrf: HRF,
) -> Problem:
    """:func:`make_problem`'s problem from the tensors its HRF does not change, computed before.

    Parameters
    ----------
    design : DesignTensors
        :func:`design_tensors` of the stimulus, nuisance and dtype (the problems of other HRFs share
        them).
    model, stim, tr, n_bases, slice_time_ref, hrf
        As :func:`make_problem`'s.

    Returns
    -------
    Problem
    """
    conv = convolution_matrices(hrf_kernels(tr, n_bases, slice_time_ref, hrf=hrf), stim.run_lengths)
    hrf_t = frames.fold_expansion(np.transpose(conv, (0, 2, 1)), design.frame_index, design.n_distinct)
    digest = design.digest.copy()
    for part in (hrf_t[0], design.basis, design.frame_index):
        digest.update(np.ascontiguousarray(part).tobytes())
    return Problem(
        model,
        design.stim,
        tensor(hrf_t, design.dtype),
        design.q,
        design.dtype,
        n_bases,
        design.pixels,
        stim.n_frames,
        hrf,
        design.frame_index,
        digest.hexdigest(),
    )


@dataclass(frozen=True)
class DesignTensors:
    """What the problems of one stimulus, nuisance basis and dtype share whatever their HRF.

    Attributes
    ----------
    stim : StimulusTensors
        The stimulated pixels' distinct frames and coordinates.
    q : tensor, shape (frames, k)
        The nuisance basis.
    basis : ndarray, shape (frames, k)
        The same in float64.
    frame_index : ndarray of int, shape (frames,)
        Each frame's distinct frame.
    n_distinct, pixels : int
    dtype : str
    digest : hashlib.blake2b
        The grid key's digest of the dtype, the distinct frames, the pixels' coordinates and area, to
        be copied and continued with each problem's HRF (:func:`problem_of`).
    """

    stim: StimulusTensors
    q: Any
    basis: np.ndarray
    frame_index: np.ndarray
    n_distinct: int
    pixels: int
    dtype: str
    digest: Any


def design_tensors(stim: Stimulus, nuisance: np.ndarray | None, dtype: str) -> DesignTensors:
    """The tensors of the problems of ``stim``, ``nuisance`` and ``dtype`` that no HRF changes.

    Parameters
    ----------
    stim : Stimulus
        The apertures.
    nuisance : ndarray, optional
        (frames, k) regressors removed by preprocessing.
    dtype : str
        ``float32`` or ``float64``.

    Returns
    -------
    DesignTensors
    """
    if dtype == "float64":
        get_backend().enable_float64()
    design, px, py = stim.stimulated
    distinct, index = frames.distinct_frames(design)
    pixel_area = stim.pixel_size**2
    stim_t = StimulusTensors(tensor(distinct.T, dtype), tensor(px, dtype), tensor(py, dtype), pixel_area)
    basis = nuisance_basis(stim.n_frames, nuisance)
    digest = hashlib.blake2b(dtype.encode())
    for part in (distinct, px, py, np.float64(pixel_area)):
        digest.update(np.ascontiguousarray(part).tobytes())
    return DesignTensors(
        stim_t, tensor(basis, dtype), basis, index, distinct.shape[0], design.shape[1], dtype, digest
    )


def project_units(prob: Problem, data: np.ndarray) -> Units:
    """The units worth fitting (finite, not flat after the projection) and their projected data.

    Parameters
    ----------
    prob : Problem
        The fit's tensors (its nuisance basis).
    data : ndarray, shape (units, frames)
        The data.

    Returns
    -------
    Units
    """
    q = to_numpy(prob.q).astype(np.float64)
    finite = np.all(np.isfinite(data), axis=1)
    clean = np.where(finite[:, None], data, 0.0)
    y_proj = clean - (clean @ q) @ q.T
    valid = finite & (np.sum(y_proj**2, axis=1) > 1e-12 * np.maximum(np.sum(clean**2, axis=1), 1e-30))
    index = np.flatnonzero(valid)
    return Units(index, y_proj[index], clean[index], len(data))


def whitened(prob: Problem, units: Units, whitening: np.ndarray, label: str) -> tuple[Problem, Units]:
    """The problem and units of generalised least squares: data and predictions multiplied by ``whitening``.

    The problem as :func:`whitened_problem` gives it; the data are whitened, then projected onto the
    complement of its nuisance basis.

    Parameters
    ----------
    prob : Problem
        The ordinary least-squares problem.
    units : Units
        Its units (``raw``: the time courses as given).
    whitening : ndarray, shape (frames, frames)
        W (:meth:`prfmap.engine.noise.NoiseModel.whitening`).
    label : str
        What the whitening is (part of the problem's grid key).

    Returns
    -------
    tuple
        The whitened :class:`Problem` and :class:`Units` (the same units).
    """
    out, q = _whitened_parts(prob, whitening, label)
    raw = units.raw @ whitening.T
    y = raw - (raw @ q) @ q.T
    return out, Units(units.index, y, raw, units.total)


def whitened_problem(prob: Problem, whitening: np.ndarray, label: str) -> Problem:
    """The problem of generalised least squares, for data whitened by ``whitening``.

    The HRF matrices (which map the distinct frames' responses to the frames) are followed by
    ``whitening``; the nuisance basis becomes an orthonormal basis of the whitened regressors. The
    data's part depends on neither the HRF nor the model: problems under other HRFs of the same
    units take it from :func:`whitened` once.

    Parameters
    ----------
    prob : Problem
        The ordinary least-squares problem.
    whitening : ndarray, shape (frames, frames)
        W.
    label : str
        What the whitening is (part of the problem's grid key).

    Returns
    -------
    Problem
    """
    return _whitened_parts(prob, whitening, label)[0]


def _whitened_parts(prob: Problem, whitening: np.ndarray, label: str) -> tuple[Problem, np.ndarray]:
    """:func:`whitened_problem`'s problem, and its nuisance basis in float64 to project whitened data off."""
    hrf_t = np.asarray(to_numpy(prob.hrf_t), dtype=np.float64) @ whitening.T
    q = _orthonormal_columns(whitening @ np.asarray(to_numpy(prob.q), dtype=np.float64))
    digest = hashlib.blake2b(f"{prob.grid_key}:{label}".encode()).hexdigest()
    out = replace(prob, hrf_t=tensor(hrf_t, prob.dtype), q=tensor(q, prob.dtype), grid_key=digest)
    return out, q
