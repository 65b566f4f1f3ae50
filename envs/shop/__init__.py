"""The built-in ``shop`` domain (WebShop-like): ``env`` (the :class:`ShopEnv`, tasks and
panels), ``catalog`` (the generated product catalog and its BM25 index) and ``types``
(products, goals and WebShop's reward)."""

from envs.shop.env import ShopEnv

__all__ = ["ShopEnv"]
