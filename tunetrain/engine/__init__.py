"""The sweep engine, split by role (layers import downwards only):

- :mod:`~tunetrain.engine.cluster`: connect to Ray (embedded or a cluster), its nodes;
- :mod:`~tunetrain.engine.plan`: the experiment checked against the cluster, a SweepPlan;
- :mod:`~tunetrain.engine.policy`: every decision about a trial tunetrain takes (stop rule,
  bad input, diverged, budget, end status); the scheduler decides the rest;
- :mod:`~tunetrain.engine.callback`: the Tune callback; records, decides nothing;
- :mod:`~tunetrain.engine.run`: run a plan through Ray Tune and close its record.

The searchers and schedulers (:mod:`tunetrain.algorithms`) propose and decide; the trial
runner (:mod:`tunetrain.trial`) runs one trial; the recorder (:mod:`tunetrain.tracking`)
writes what the callback hands it.
"""
