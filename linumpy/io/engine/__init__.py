"""The read and write engines: ``plan -> fetch -> validate -> decode -> scatter``, each stage
written once for every back end (docs/architecture.md describes the modules). Imports run one
way, and nothing here imports cupy, nvCOMP or kvikio.
"""
