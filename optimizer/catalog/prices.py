"""Prices in the catalog: which entries carry one, and the catalog with one of them replaced (a
quote, a discount or a what-if scenario)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from optimizer.catalog.offers import Offer
from optimizer.catalog.records import Cable, Gpu, Nic, Server, Switch
from optimizer.errors import CatalogError, suggest

if TYPE_CHECKING:
    from optimizer.catalog import Catalog

PRICED = ("gpus", "servers", "nics", "switches", "cables", "offers")  # the catalog tables whose entries carry a price
PricedEntry = Gpu | Server | Nic | Switch | Cable | Offer  # an entry of one of those tables


def priced_item(cat: Catalog, item_id: str) -> tuple[str, PricedEntry]:
    """(table, entry) of the priced catalog entry ``item_id``; CatalogError with a suggestion if none."""
    for table in PRICED:
        if item_id in getattr(cat, table):
            return table, getattr(cat, table)[item_id]
    ids = [i for table in PRICED for i in getattr(cat, table)]
    raise CatalogError(f"no GPU, server, NIC, switch, cable or cloud offer '{item_id}' in the catalog."
                       f"{suggest(item_id, ids)} To fix: use an id from 'gpuopt catalog list'.")


def with_used_prices(cat: Catalog, end_of_life_only: bool = False) -> Catalog:
    """The catalog with every GPU whose used-market price is below its new one, or that is no longer
    sold new, priced at its used price, marked used: what a problem that allows used hardware buys
    from (at no saving, new is bought). ``end_of_life_only``: only those no longer sold new."""
    def used(g: Gpu) -> bool:
        return g.used_price is not None and (not g.sold_new or (g.used_price.usd < g.price.usd
                                                                and not end_of_life_only))

    gpus = {gid: g.model_copy(update={"price": g.used_price.model_copy(update={"condition": "used"})})
            if used(g) and g.used_price is not None else g for gid, g in cat.gpus.items()}
    return replace(cat, gpus=gpus)


def with_price(cat: Catalog, item_id: str, usd: float, note: str, date: str | None = None) -> Catalog:
    """The catalog with one entry's price replaced (a quote, a discount or a what-if scenario);
    ``note`` says where the new figure comes from and is kept as its source."""
    table, item = priced_item(cat, item_id)
    update = {"usd": usd, "source": note, "assumption": False, "override": True}
    if date is not None:
        update["date"] = date
    price = item.price.model_copy(update=update)
    entries = dict(getattr(cat, table))
    entries[item_id] = item.model_copy(update={"price": price})
    changes: dict[str, Any] = {table: entries}  # the field named by ``table``: a dict of that table's entries
    return replace(cat, **changes)
