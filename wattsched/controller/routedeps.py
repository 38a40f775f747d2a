"""What a route of the controller's API is handed besides its own parameters: the controller it
serves, the one its app was made for (``app.state.controller``, set by app.create_app). So the
routes live on module-level APIRouters, each module owning one part of the API, and a handler
names what it needs in its signature."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from wattsched.controller.loop import Controller


async def _controller(request: Request) -> Controller:
    # async: FastAPI runs a plain-def dependency on a worker thread, off the loop that owns the state
    return request.app.state.controller


Ctl = Annotated[Controller, Depends(_controller)]
