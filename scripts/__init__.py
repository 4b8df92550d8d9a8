"""linumpy pipeline scripts (console entry points ``linum-*``)."""
