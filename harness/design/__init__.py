"""What a study is, fixed before its runs: every setting declared once (:mod:`harness.design.settings`), one
run's settings (:mod:`harness.design.config`: TrainConfig, RunConfig), the ``[train]`` table's execution keys, value rule and split (:mod:`harness.design.train_table`),
the grid's analysis plan (:mod:`harness.design.analysis_plan`) and its factorial design
(:mod:`harness.design.factorial`). Imports models, data, corpus (a run's CorpusKey) and common, nothing above."""
