"""GPU and node health: readings, the checks over them, the node agent, remediation policy.

The checks are pure functions of readings and thresholds (``checks``); what reads the GPUs
(``nvml``) and what reports the results (``agent``) are seams around them. Conditions have
node-problem-detector's shape so the Kubernetes executor's existing use of NPD conditions works
for both.
"""
