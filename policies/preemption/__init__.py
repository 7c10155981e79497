"""Container-based preemption (BIG-C, Chen, Rao, Zhou, ATC 2017; papers/001_ce8672239b618288.txt).

Every amount in the API is a :class:`policies.scheduling.resources.Resources` ⟨cpu cores,
memory MiB⟩, the scheduler's one resource type. Modules, one decision each:

- :mod:`.settings` — the preemption modes and settings (footprint, graceful step, throttle order).
- :mod:`.vectors` — the edge: Resources to numpy vectors and back, memory rounded up to whole MiB.
- :mod:`.amounts` — how much to reclaim from each over-provisioned queue (Algorithm 1: p = a
  for kill and immediate, COMPUTEDR for graceful), and its over-provisioned dominant resource.
- :mod:`.victims` — which containers give it back, and how: kill, graceful or immediate
  (Algorithm 2, Sec. 3.2-3.3).
- :mod:`.plan` — one round for the whole cluster: Algorithm 1 per queue, then Algorithm 2.
- :mod:`.resumption` — delayed resumption of a preempted container after D offers (Sec. 4.3).
"""
