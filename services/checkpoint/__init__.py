"""The checkpoint: proposals, votes, policy and the only signer of approvals.

It holds the Ed25519 private signing key and its own database; it must never hold a
cloud credential or import the cloud adapters.
"""
