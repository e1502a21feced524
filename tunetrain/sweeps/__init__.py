"""A sweep's life, one module per stage (layers import downwards only):

- :mod:`~tunetrain.sweeps.request`: what was asked (the experiment, the changed fields, the
  overrides, where it runs), built once by the CLI or :func:`tunetrain.sweep`;
- :mod:`~tunetrain.sweeps.session`: the Session: request -> where -> plan -> dry run or run -> result;
- :mod:`~tunetrain.sweeps.where`: the store, the Ray and the storage, resolved and checked;
- :mod:`~tunetrain.sweeps.warm`: the earlier sweeps' trials a warm start hands the searcher;
- :mod:`~tunetrain.sweeps.plan`: the experiment checked against the cluster, a SweepPlan;
- :mod:`~tunetrain.sweeps.cost`: budget, cost estimate, consent before a costly sweep;
- :mod:`~tunetrain.sweeps.policy`: every decision about a trial tunetrain takes (stop rule,
  bad input, diverged, budget, end status); the scheduler decides the rest;
- :mod:`~tunetrain.sweeps.callback`: the Tune callback; records, decides nothing;
- :mod:`~tunetrain.sweeps.run`: run a plan through Ray Tune and close its record;
- :mod:`~tunetrain.sweeps.resumable`: which sweep a resume continues, what changed;
- :mod:`~tunetrain.sweeps.result`: the typed :class:`SweepResult` a sweep hands back.

(Not ``tunetrain.sweep``: that name is the user's function, and a subpackage of the same
name would replace it as an attribute of ``tunetrain`` once imported.)

The searchers and schedulers (:mod:`tunetrain.algorithms`) propose and decide; the trial
runner (:mod:`tunetrain.trial`) runs one trial; the recorder (:mod:`tunetrain.tracking`)
writes what the callback hands it. The read side is :mod:`tunetrain.results`. What is not a
stage lives beside this package: where a sweep runs (:mod:`tunetrain.cluster`: the Ray to
connect to, its nodes, the machine's shared Ray), what it shows (:mod:`tunetrain.console`:
the live status line and the summary) and a registered model served (:mod:`tunetrain.serving`).
"""
