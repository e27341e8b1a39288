from .cart import Cart, CartItem
from .catalog import Product
from .order import Order
from .reservation import Reservation

__all__ = ["Cart", "CartItem", "Order", "Product", "Reservation"]
