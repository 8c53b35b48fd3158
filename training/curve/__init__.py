"""The data-scaling curve as a product: train a draft at fractions of one's own regenerated data under one
steps rule, evaluate every draft the same way on the same held-out prompts, fit the saturating curve and say
how much data a target acceptance length needs.

- `plan`: the settings, the data (regenerated rows, the datasets' own answers for the control), the scales
  and the rows and training config of each point.
- `evaluate`: the held-out prompts and the evaluator (greedy speculative decoding, as `eval-accept` runs it).
- `runner`: the loop over the points, with `curve.json` written whole after every finished point (resume).
- `report`: the fit (`training.forecast`), `curve.md` and the plots.
"""
