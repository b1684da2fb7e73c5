"""The FlashAttention page's sections (web/pages/flash_attention.py runs them), one module each."""
