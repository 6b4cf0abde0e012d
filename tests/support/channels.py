"""Altair channels as objects: any other kind of channel passed to `encode()` fails the test that draws it.

A channel given as a shorthand string ("stop:Q"), an `alt.value` or an `alt.condition` dict makes altair build a
converter that hashes every schema class it knows (`SchemaBase.from_dict`; vega/altair#3547): 4-6 ms a channel,
25 ms for a four-channel chart, where `alt.X("stop:Q")` takes 0.05 ms and writes the same spec. Before the
figures passed objects, that was 12 % of the app tests' CPU (py-spy), and every page rerun paid it."""
from __future__ import annotations


def strict() -> None:
    """From now on, in this process, `encode()` raises TypeError on a channel that is not a schema object."""
    from altair.utils import core
    from altair.utils.schemapi import SchemaBase

    wrap = core._ChannelCache._wrap_in_channel
    if getattr(wrap, "strict", False):
        return

    def objects_only(self, obj, encoding):
        if not isinstance(obj, (SchemaBase, list, tuple)):
            raise TypeError(f"channel {encoding}={obj!r}: pass an altair channel object (alt.X2, alt.YValue, "
                            "alt.Tooltip, alt.ColorValue(**alt.condition(...)), ...): tests/support/channels.py")
        return wrap(self, obj, encoding)

    objects_only.strict = True
    core._ChannelCache._wrap_in_channel = objects_only
