"""The store's ports, one per caller role; `timer_service.store.base.Store` bundles them."""
