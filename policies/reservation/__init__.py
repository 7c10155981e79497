"""Speculative slot reservation (Chen, Wang, Li, ICDCS 2017; papers/000_235480be5c0ec24e.txt).

Modules, one decision each:

- :mod:`.slot_decisions` — reserve or release a slot when a task completes (Algorithm 1).
- :mod:`.slot_approval` — whether a (possibly reserved) slot may run a task (Algorithm 1,
  TryAllocateTask).
- :mod:`.deadline` — the reservation deadline and the isolation/utilisation trade-off (Eq. 1-4).
- :mod:`.stragglers` — copies of ongoing tasks on reserved idle slots and the T versus T'
  numerical study (Sec. IV-C).
"""
