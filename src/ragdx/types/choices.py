"""A fixed set of string choices (:class:`ChoiceEnum`), the base of every enum in :mod:`ragdx.types`.
"""

from __future__ import annotations

import enum

from ragdx.errors import InputError


class ChoiceEnum(str, enum.Enum):
    """A fixed set of string choices whose parser lists the valid values."""

    @classmethod
    def parse(cls, value: object, *, what: str | None = None) -> "ChoiceEnum":
        """Return the member whose value is ``value``.

        Raises:
            InputError: naming the bad value and every valid one.
        """
        for member in cls:
            if member.value == value:
                return member
        valid = ", ".join(repr(m.value) for m in cls)
        raise InputError(f"{what or cls.__name__} must be one of {valid}, not {value!r}")

    def __str__(self) -> str:
        return self.value

    def __eq__(self, other: object) -> bool:
        # A str enum compared with a misspelt string is silently False; a comparison
        # that can never hold is a bug in the caller, so it raises instead.
        if isinstance(other, str) and not isinstance(other, ChoiceEnum):
            if other not in type(self)._value2member_map_:
                valid = ", ".join(repr(m.value) for m in type(self))
                raise TypeError(
                    f"{type(self).__name__}.{self.name} compared with {other!r}, "
                    f"which is none of its values ({valid})"
                )
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__
