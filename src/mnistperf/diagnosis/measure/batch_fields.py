"""What a batch's containers hold: their fields in order, and every tensor in any nest of them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import torch

T = TypeVar("T")
LEAVES = (torch.Tensor, str, bytes, int, float, bool, type(None))  # what holds no tensor of its own to look into


def fields_of(item: Any) -> list[Any] | None:
    """The items a batch's container holds, in order; None for anything else (a tensor, a number, a string)."""
    if isinstance(item, (tuple, list)):
        return list(item)
    if isinstance(item, Mapping):
        values = list(item.values())
        if all(isinstance(value, torch.Tensor) for value in values):
            return values
        plain = as_dict(item)  # a TensorDict's holds its strings as lists, where its values hold stacks of them
        return values if plain is None else list(plain.values())
    if dataclasses.is_dataclass(item) and not isinstance(item, type):  # its fields first, even where it iterates
        return [getattr(item, field.name, None) for field in dataclasses.fields(item)]
    if isinstance(item, (*LEAVES, type)):
        return None
    named = named_fields(item)
    return None if named is None else list(named.values())


def named_fields(item: Any) -> Mapping[Any, Any] | None:
    """An object's fields by name: its ``to_dict()`` (a graph batch's store), else its public attributes; or None."""
    found = as_dict(item)
    if found is not None:
        return found
    try:
        attributes = vars(item)
    except TypeError:  # no __dict__: its slots' (an attrs class's), where it has any
        slots = [name for kind in type(item).__mro__ for name in getattr(kind, "__slots__", ()) if hasattr(item, name)]
        if not slots:
            return None
        attributes = {name: getattr(item, name) for name in slots}
    return {name: value for name, value in attributes.items() if not name.startswith("_")}


def as_dict(item: Any) -> Mapping[Any, Any] | None:
    """An object's ``to_dict()``, where it has one that gives a mapping; else None."""
    method = getattr(item, "to_dict", None)
    try:
        found = method() if callable(method) else None
    except Exception:
        return None
    return found if isinstance(found, Mapping) else None


def names_of(item: Any, wanted: Callable[[Any], bool]) -> list[str]:
    """The names of ``item``'s own fields whose value is ``wanted``, in order (none of a plain sequence's)."""
    if isinstance(item, Mapping):
        named: Mapping[Any, Any] | None = item
    elif isinstance(item, tuple) and hasattr(item, "_fields"):
        named = dict(zip(item._fields, item, strict=False))
    elif isinstance(item, (list, tuple, *LEAVES, type)):
        named = None
    elif dataclasses.is_dataclass(item):
        named = {field.name: getattr(item, field.name, None) for field in dataclasses.fields(item)}
    else:
        named = named_fields(item)
    # (not `named or {}`: a TensorDict refuses to be read as true or false)
    return [] if named is None else [str(name) for name, value in named.items() if wanted(value)]


def tensors_of(batch: Any) -> list[torch.Tensor]:
    """Every tensor of a batch (a NumPy array as one), in order, in any nest of what :func:`fields_of` reads."""
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, np.ndarray):
        return array_tensors(batch)
    found = fields_of(batch)
    if found is None:
        return []
    if all(isinstance(item, torch.Tensor) for item in found):
        return found  # the common batch, read without recursion: this runs every step
    return [tensor for item in found if not isinstance(item, LEAVES[1:]) for tensor in tensors_of(item)]


def array_tensors(array: np.ndarray) -> list[torch.Tensor]:
    """A NumPy array as a tensor sharing its memory (a copy where torch cannot share it), in a list; none of strings.

    Dates and durations (``datetime64``, ``timedelta64``) are their counts of their unit, as int64.
    """
    if array.dtype.kind in "mM":
        array = array.view(np.int64)
    try:  # (torch shares a writeable array in native byte order: a read-only one it shares with a warning)
        return [torch.from_numpy(np.require(array, array.dtype.newbyteorder("="), ["C", "W"]))]
    except TypeError:  # strings, objects: torch has no type for them
        return []


def rows_beside(batch: Any, samples: int, apart: Sequence[Any]) -> list[torch.Tensor]:
    """The tensors of ``batch`` that lead with ``samples``, those of ``apart`` (a graph's nodes, edges) left out."""
    skipped = set(map(id, apart))
    return [t for t in tensors_of(batch) if id(t) not in skipped and t.ndim and t.size(0) == samples]


def first_found(batch: Any, find: Callable[[Any], T | None], depth: int = 3) -> tuple[T | None, Any]:
    """The first ``find(item)`` not None, of ``batch`` or its fields ``depth`` down, and that item; else Nones."""
    found = find(batch)
    if found is not None:
        return found, batch
    if depth and not isinstance(batch, LEAVES):
        for item in fields_of(batch) or []:
            if not isinstance(item, LEAVES):
                nested = first_found(item, find, depth - 1)
                if nested[0] is not None:
                    return nested
    return None, None
