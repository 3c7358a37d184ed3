"""memacct's evaluation harness: simulated serving scenarios, oracle and accuracy benchmark.

Not part of the installed core. It reaches memacct only through its public API
and the simulated device, and adds the ``memacct bench`` subcommand through the
``memacct.cli`` entry-point group.
"""
