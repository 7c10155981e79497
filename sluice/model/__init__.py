"""``sluice model``: the policies' analytic models, for operators choosing knobs.

Each topic module exposes ``register(subparsers)`` adding its subcommand; a handler returns the
process exit status and raises :class:`plumbing.errors.UserError` for bad input.
"""
