"""Search: make a captured kernel faster, judged by replay.

space.py     the typed parameters searched for one kernel (pipeline, Polly, launch)
samplers.py  how the next candidate is chosen (Optuna TPE, random), behind one setting
bayes.py     the inner loop: one Optuna study per (kernel, source variant), on a replay pool
store.py     where studies are kept (Optuna's journal, several writers), who holds a running trial
noise.py     how many paired runs an evaluation needs, from how noisy the kernel's pairs are
confirm.py   winners re-verified on every recorded instance and re-measured before reporting
results.py   what a tuned kernel is (KernelResult), the report table, JSON and plot
"""
