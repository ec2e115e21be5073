"""Transports that carry codec messages between processes.

Each transport lives in its own submodule and imports its library only there, so the
codec itself never depends on one: ``mmcodec.transport.zmq`` needs ``pyzmq`` (the
``mmcodec[zmq]`` extra); importing ``mmcodec``, ``mmcodec.transport`` or a generated
module does not import ``zmq``.
"""
