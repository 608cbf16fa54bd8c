"""Spot vs on-demand cost for a multi-node job with checkpoint/restart.

daly: checkpoint theory; scenario: resolved inputs and job-level rates; analytic: expected
time and cost, break-even; simulate: Monte Carlo of the same process; rates: preemption rate
from a number, an advisor bucket or a trace; catalog: price snapshot and its validation;
advice: the recommendation; estimate: everything for one run; report and plot: output.
"""
