"""`sluice sim`: a discrete-event simulator that drives the resource manager's core and the job
master's plan with virtual time and the network removed (docs/simulator.md)."""
