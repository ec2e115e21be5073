"""Adapters that make mmcodec the serializer of other systems' transports.

Each submodule needs its system's package (an extra: ``mmcodec[ray]``) and is imported
only by its users: importing ``mmcodec`` imports none of them.
"""
