"""The parts of `warpsph demo` (see `cli.py` and `demo.runner`): accuracy, inverse problem,
Jacobian-free Newton-Krylov."""
