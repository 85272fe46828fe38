"""Broken verifiers for error-handling tests (each breaks one thing on purpose)."""

import numpy as np

from specaudit.verifiers.reference import verify as _reference


def raises(draft, q, p, num_draft, rng):
    raise RuntimeError("kernel launch failed: out of shared memory")


def wrong_shape(draft, q, p, num_draft, rng):
    out, n_out = _reference(draft, q, p, num_draft, rng)
    return out[:, :-1], n_out


def float_ids(draft, q, p, num_draft, rng):
    out, n_out = _reference(draft, q, p, num_draft, rng)
    return out.astype(np.float64), n_out


def nan_ids(draft, q, p, num_draft, rng):
    out, n_out = _reference(draft, q, p, num_draft, rng)
    out = out.astype(np.float64)
    if out.size:  # an empty batch has no row to spoil
        out[0, 0] = np.nan
    return out, n_out


def id_equals_vocab(draft, q, p, num_draft, rng):
    out, n_out = _reference(draft, q, p, num_draft, rng)
    if out.size:  # an empty batch has no row to spoil
        out[0, n_out[0] - 1] = p.shape[-1]
    return out, n_out


def returns_one_thing(draft, q, p, num_draft, rng):
    return _reference(draft, q, p, num_draft, rng)[0]


NOT_CALLABLE = 3
