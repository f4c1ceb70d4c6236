"""The grammar package's errors: a client's grammar or schema is refused (GrammarError, a 400 at the
server), or the compiler has no room for it now (GrammarBusy, worth a retry)."""
from . import limits


class GrammarError(ValueError):
    """A grammar the compiler refuses (over a limit, invalid, unsupported, no possible output), or a token the
    grammar does not allow. The message names the limit or the failure."""


class GrammarBusy(GrammarError):
    """Every compile slot is taken (by compiles still running past their time limit); not cached."""


def over(what: str, n: int, name: str, counting: bool = False) -> GrammarError:
    """The error for n over the limit limits.<name> (counting: n is where the count stopped)."""
    n_text = f"at least {n:,}" if counting else f"{n:,}"
    return GrammarError(f"{what}: {n_text}, over the limit of {getattr(limits, name):,} ({name})")
