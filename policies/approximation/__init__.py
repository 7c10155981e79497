"""Differential approximation and sprinting (DiAS; Birke et al., Middleware 2019, Sec. 3-4).

One module per decision: ``buffers`` (which job the engine runs next), ``dropping`` (how many
tasks a stage keeps), ``sprinting`` (when a job runs at the sprint frequency), ``phase_type`` and
``job_time`` (the PH job-time models of Sec. 4), ``priority_queues`` (mean response time per
priority) and ``drop_search`` (which drop ratios to use).
"""
