"""Policy and the sandbox: what a run may do (deny by default, budgets, approvals, argument
constraints) and the sandboxed filesystem whose limits the policy sets."""
