"""The MongoDB access tokens: collection ``tokens``, ``_id`` the token's id. The API
reads the whole (small) collection into its cache, so no index beyond ``_id``."""

from __future__ import annotations

from pymongo import ASCENDING

from timer_service.access import AccessToken
from timer_service.constants import TOKENS_COLLECTION
from timer_service.store.mongo.layout import Layout


class MongoTokens:
    def __init__(self, layout: Layout) -> None:
        self._coll = layout.db[TOKENS_COLLECTION]

    async def create_token(self, token: AccessToken) -> None:
        doc = token.to_doc()
        doc["_id"] = doc.pop("id")
        await self._coll.insert_one(doc)

    async def list_tokens(self) -> list[AccessToken]:
        docs = (
            await self._coll.find({})
            .sort([("created_at", ASCENDING), ("_id", ASCENDING)])
            .to_list(None)
        )
        return [AccessToken.from_doc({**d, "id": d["_id"]}) for d in docs]

    async def delete_token(self, token_id: str) -> bool:
        result = await self._coll.delete_one({"_id": token_id})
        return result.deleted_count == 1
