"""The agent: discovers idle resources with a read-only credential and proposes clean-ups.

It must never hold a write credential, a signing key or operator credentials, and never
import the checkpoint or the executor.
"""
