"""The web app: the human review surface. Talks only to the checkpoint API.

It holds nothing but each user's own session: no cloud credentials, keys or service tokens.
"""
