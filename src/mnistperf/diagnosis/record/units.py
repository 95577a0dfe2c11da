"""How the diagnosis says a time and a rate: in one unit a line, readable whatever the fit's length."""

from __future__ import annotations


def samples_rate(samples_per_s: float) -> str:
    """samples/s as every line and table says the number, thousands apart: 36,828."""
    return f"{samples_per_s:,.0f}"


def throughput(samples_per_s: float | None) -> str:
    """samples/s as printed, or why there is no figure."""
    return "not measured (samples not counted)" if samples_per_s is None else f"{samples_rate(samples_per_s)} samples/s"


SECONDS_SAID_IN_MS = 0.1  # a line whose largest time is under this says its times in ms: "7.70 ms", not "0.01 s"


def seconds(value: float | None, largest: float | None = None) -> str:
    """Seconds as printed ('-' where there are none); in ms where ``largest``, by default the value, is under 0.1 s.

    ``largest``: the line's largest time, so that a line says its times in one unit and they compare at a glance.
    """
    if value is None:
        return "-"
    scale = abs(value if largest is None else largest)
    return f"{value:.2f} s" if scale >= SECONDS_SAID_IN_MS else f"{value * 1e3:.2f} ms"
