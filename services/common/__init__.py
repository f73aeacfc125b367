"""Code the three services share (HTTP plumbing); nothing here knows about a particular service."""
