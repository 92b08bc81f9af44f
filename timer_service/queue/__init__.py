"""The dispatch-queue port and its adapters (RabbitMQ, in-process)."""

from timer_service.queue.base import Consumer, Delivery, DispatchQueue, decode, encode

__all__ = ["Consumer", "Delivery", "DispatchQueue", "decode", "encode"]
