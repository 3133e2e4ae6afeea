"""``refuse_coerced_scalars`` on a model of its own: each kind of number field, optional or
not, refuses a string or a boolean that pydantic would coerce."""

from __future__ import annotations

import re

import pytest
from pydantic import BaseModel, model_validator

from kvsim.base.limits import refuse_coerced_scalars


class Fields(BaseModel):
    rates: tuple[float, ...] = ()
    counts: list[int] = []
    maybe_rates: tuple[float, ...] | None = None
    size: int | None = None
    on: bool = False

    @model_validator(mode="before")
    @classmethod
    def _strict(cls, data: object) -> object:
        return refuse_coerced_scalars(cls.model_fields, data)


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"rates": [0.9, "0.5"]}, "rates[1]: expected a number"),  # a plain tuple field
        ({"counts": [1, True]}, "counts[1]: expected a number"),  # a plain list field
        ({"maybe_rates": ["0.1"]}, "maybe_rates[0]: expected a number"),
        ({"size": "3"}, "size: expected a number"),
        ({"on": 1}, "on: expected true or false"),
    ],
)
def test_each_number_field_refuses_a_coerced_scalar(data: dict, said: str) -> None:
    with pytest.raises(ValueError, match=re.escape(said)):
        Fields(**data)


def test_numbers_pass() -> None:
    got = Fields(rates=[0.9, 0.5], counts=[1, 2], maybe_rates=None, size=3, on=True)
    assert got.rates == (0.9, 0.5)
    assert got.counts == [1, 2]
