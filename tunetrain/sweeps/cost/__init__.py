"""What a sweep costs before it runs: the budget it may spend (:mod:`.budget`), its
estimate from a smoke run's timings (:mod:`.estimate`), and consent before a costly one
(:mod:`.consent`, ``--ask-above``)."""
