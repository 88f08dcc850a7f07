"""What a study is, fixed before its runs: one run's settings (:mod:`harness.design.config`),
the grid's analysis plan and its factorial design. Imports models and data (a variant's spec,
the tokenizer's vocabulary check) and common, nothing above."""
