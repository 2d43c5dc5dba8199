"""devcloud (dev/test only): a local endpoint that speaks the Alibaba Cloud API subset we use.

Never deploy it; it exists so the production adapter runs end to end without an account.
"""
