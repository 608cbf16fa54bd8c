"""Spot vs on-demand cost for a multi-node job with checkpoint/restart.

daly: checkpoint theory; scenario: resolved inputs and job-level rates; analytic: expected
time and cost, break-even; simulate: Monte Carlo of the same process; rates: preemption rate
from a number, an advisor bucket or a trace; catalog: price snapshot and its validation;
advice: the recommendation; estimate: everything for one run; inputs: the flags, the
inventory's block, the catalog and the defaults resolved into one run; report and plot:
output; refresh: `cost prices update` (over prices_update and fetch).

Layer: features. Start at: estimate.py.
"""
