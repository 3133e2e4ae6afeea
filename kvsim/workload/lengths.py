"""Parametric request-length distributions: lognormal, uniform total with a prefill:decode split,
fixed, and the named synthetic stand-ins ``sharegpt_like`` and ``alpaca_like``.

``sharegpt_like`` is a pair of independent lognormals fitted to the PagedAttention paper's
published ShareGPT means (161.31 prompt / 337.99 output tokens), which are means *after* the
paper's length filter (prompt + output <= 2048). Fit: the log-space standard deviations are those
of the paper's own ShareGPT length list after that filter (``sharegpt_opt_firstturn_lengths.csv``,
rows with input+output <= 2048 and both >= 4: std of ln(length) 1.47 for prompts, 1.02 for
outputs), giving real prompts' heavy right tail; the pre-filter means (213.2 / 392.4 tokens) were
then solved by Monte Carlo (4M draws, fixed-point iteration) so that, after dropping requests with
prompt + output > 2048, the means are 161.31 / 337.99 (about 3.7% of draws are dropped). With a
larger ``max_model_len`` the realised means are higher. ``alpaca_like`` uses the paper's Alpaca
means (19.31 / 58.45) directly (the 2048 filter drops almost nothing); no Alpaca lengths are
available here, so its sigma of 0.8 is an assumption (short single-instruction prompts, a moderate
tail). For a lognormal, mean = exp(mu + sigma^2 / 2), so mu = ln(mean) - sigma^2 / 2. Draws are
rounded to integers and clamped to >= 1 token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class LognormalFit:
    """Parameters of a pair of independent lognormal length distributions.

    Attributes:
        prompt_mean_tokens: mean prompt length in tokens.
        output_mean_tokens: mean output length in tokens.
        prompt_sigma: standard deviation of ln(prompt tokens).
        output_sigma: standard deviation of ln(output tokens).
    """

    prompt_mean_tokens: float
    output_mean_tokens: float
    prompt_sigma: float
    output_sigma: float


SHAREGPT_LIKE = LognormalFit(213.2, 392.4, 1.47, 1.02)
ALPACA_LIKE = LognormalFit(19.31, 58.45, 0.8, 0.8)
NAMED_FITS: dict[str, LognormalFit] = {"sharegpt_like": SHAREGPT_LIKE, "alpaca_like": ALPACA_LIKE}


def lognormal_tokens(
    rng: np.random.Generator, mean_tokens: float, sigma: float, size: int
) -> np.ndarray:
    """Draw token counts from a lognormal with the given mean.

    Args:
        rng: source of randomness.
        mean_tokens: mean of the (unrounded) lognormal, in tokens (> 0).
        sigma: standard deviation of ln(tokens) (>= 0; 0 gives the mean every time).
        size: number of draws.

    Returns:
        int64[size] token counts, each >= 1.
    """
    mu = float(np.log(mean_tokens)) - sigma**2 / 2.0
    draws = rng.lognormal(mean=mu, sigma=sigma, size=size)
    return np.maximum(1, np.rint(draws)).astype(np.int64)


def lognormal_pair(
    rng: np.random.Generator, fit: LognormalFit, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``size`` (prompt, output) token counts from independent lognormals.

    Returns:
        ``(prompt_tokens, output_tokens)``, each int64[size] and >= 1.
    """
    prompt = lognormal_tokens(rng, fit.prompt_mean_tokens, fit.prompt_sigma, size)
    output = lognormal_tokens(rng, fit.output_mean_tokens, fit.output_sigma, size)
    return prompt, output


def uniform_split(
    rng: np.random.Generator,
    min_total_tokens: int,
    max_total_tokens: int,
    prefill_decode_ratio: float,
    size: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Total tokens uniform on [min, max] (integers, inclusive), split prefill:decode.

    Vidur's synthetic benchmark uses totals in 256-2048 with a 3:1 prefill:decode split. The
    output gets ``ceil(total / (1 + ratio))`` tokens (>= 1) and the prompt the rest (>= 1).

    Args:
        rng: source of randomness.
        min_total_tokens: smallest prompt+output total in tokens (>= 2).
        max_total_tokens: largest total in tokens (>= min_total_tokens).
        prefill_decode_ratio: prompt tokens per output token (> 0).
        size: number of draws.

    Returns:
        ``(prompt_tokens, output_tokens)``, each int64[size] and >= 1.
    """
    total = rng.integers(min_total_tokens, max_total_tokens + 1, size=size, dtype=np.int64)
    output = np.ceil(total / (1.0 + prefill_decode_ratio)).astype(np.int64)
    output = np.clip(output, 1, total - 1)
    prompt: np.ndarray = total - output
    return prompt, output


def fixed_pair(prompt_tokens: int, output_tokens: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Every request has the same prompt and output lengths (tokens)."""
    prompt = np.full(size, prompt_tokens, dtype=np.int64)
    output = np.full(size, output_tokens, dtype=np.int64)
    return prompt, output
