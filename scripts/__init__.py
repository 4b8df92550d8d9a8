"""The ``linum-*`` pipeline scripts, one module each (installed as ``linumpy.scripts``)."""
