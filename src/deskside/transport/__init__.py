"""Transports: the only way deskside touches a host (run, spawn, put, get)."""

from deskside.transport.base import Result, Transport
from deskside.transport.fake import FakeTransport
from deskside.transport.local import LocalTransport

__all__ = ["FakeTransport", "LocalTransport", "Result", "Transport"]
