"""`POST /stream/{streamId}/token`: a short-lived token that lets an `EventSource` follow one
stream where the server wants an API key (see `app.api.tokens`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse

from app.api.deps import runtime_of
from app.api.documented import errors
from app.api.routing import ApiRoute
from app.api.tokens import StreamTokens
from app.protocol.browser import StreamToken
from app.protocol.values import SessionId

router = APIRouter(tags=["stream"], route_class=ApiRoute)


def tokens_of(request: Request) -> StreamTokens:
    """The app's stream token signer."""
    tokens: StreamTokens = request.app.state.stream_tokens
    return tokens


@router.post(
    "/stream/{stream_id}/token",
    response_model=StreamToken,
    responses=errors(404, 422, 503, meaning={404: "Unknown stream.", 422: "Invalid stream id."}),
    summary="A token to follow one stream from a browser",
)
async def stream_token(
    request: Request,
    stream_id: Annotated[SessionId, Path(description="The stream the token opens.")],
) -> JSONResponse:
    """Mint a token for `GET /stream/{streamId}?token=...` (and its `/ai-sdk` and `/ag-ui`
    views), for clients that cannot send `Authorization`, such as a browser's `EventSource`.
    It opens this stream only, until `expiresAt` (`STREAM_TOKEN_SECONDS`); a connection open by
    then stays open. Minting needs the API key like any other call."""
    await runtime_of(request).store.get_stream(stream_id)
    token, expires_at = tokens_of(request).mint(stream_id)
    body = StreamToken(stream_id=stream_id, token=token, expires_at=expires_at)
    return JSONResponse(body.model_dump(by_alias=True))
