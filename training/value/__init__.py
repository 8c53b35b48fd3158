"""The measured value of a source or a category: at a fixed budget of training rows, how much acceptance the
draft gains or loses when one unit's rows are swapped out of (or into) the default mix, with its noise.

- `plan`: the settings, the pool (regenerated rows labelled with their source and category) and the points:
  the default mix at several seeds, and one arm per unit.
- `stats`: from the points' acceptance to each unit's value, per eval set, with a 95% interval from the
  seeds' spread (`core.measured_value.MeasuredValue`).
- `runner`: the loop over the points (train, evaluate, save value.json after each: a killed run resumes).
- `results`: value.md, and the `{"points", "values"}` file docs/results/data_value.json holds.
"""
