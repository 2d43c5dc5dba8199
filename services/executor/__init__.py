"""The executor: verifies approvals, consumes each once in its own ledger, and writes.

The only process with a cloud write credential. It must never hold the approval signing
key, and never import the checkpoint or the agent.
"""
