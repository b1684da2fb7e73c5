"""FlashAttention and naive attention kernel specs (filled in by the FlashAttention work)."""

SPECS = ()
