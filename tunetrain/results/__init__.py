"""The read side: a sweep read back from MLflow (:mod:`.analysis`), its plots (:mod:`.plots`)
and its HTML report (:mod:`.report`). Nothing here starts Ray."""
