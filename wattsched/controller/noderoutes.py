"""The nodes' routes of the controller's API (v1): the node and partition listings (sinfo, scontrol
show node), a node's energy readings, scontrol update nodename, scontrol create, update and delete
partitionname, and the agents' heartbeats."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from wattsched import auth, hostlist
from wattsched.api import AgentHeartbeat, HeartbeatReply, NodeUpdate, PartitionChange
from wattsched.controller import nodes as nodes_mod
from wattsched.controller import partitions as partitions_mod
from wattsched.controller import permissions
from wattsched.controller.actions import Refused
from wattsched.controller.routedeps import Ctl
from wattsched.controller.views import node_views, partition_views
from wattsched.service.httpauth import Who, require_role

NodeAgent = Annotated[auth.Identity, require_role("node")]
router = APIRouter()


@router.get("/v1/nodes")
async def nodes(controller: Ctl, who: Who) -> JSONResponse:
    state = controller.state
    now = time.time()
    return JSONResponse({"time": now, "nodes": node_views(state.nodes, state.resv, now)})


@router.get("/v1/nodes/{name}/energy")
async def node_energy(controller: Ctl, name: str, who: Who) -> dict[str, Any]:
    state = controller.state
    node = state.nodes.get(name)
    if node is None:
        raise Refused(f"Invalid node name specified: {name}", 404)
    return {"node": name, "samples": node.energy_samples, "current_watts": node.current_watts}


@router.patch("/v1/nodes/{node_expr}")
async def update_nodes(controller: Ctl, node_expr: str, upd: NodeUpdate, who: Who) -> dict[str, Any]:
    state = controller.state
    _admin_only(controller, who)  # before the expression is even read
    try:  # ALL: every node, as Slurm's scontrol update NodeName=ALL
        names = list(state.nodes) if node_expr.upper() == "ALL" else hostlist.expand(node_expr, len(state.nodes))
    except hostlist.HostlistError as exc:
        raise Refused(str(exc)) from exc
    controller.act(nodes_mod.update_nodes(state, names, upd.state, upd.reason, who, time.time(),
                                          (upd.instance_id, upd.instance_type), upd.cap_watts))
    return {"updated": names}


@router.get("/v1/partitions")
async def partitions(controller: Ctl, who: Who) -> JSONResponse:
    state = controller.state
    return JSONResponse({"time": time.time(), "partitions": partition_views(state.config, state.nodes)})


@router.post("/v1/partitions")
async def create_partition(controller: Ctl, change: PartitionChange, who: Who) -> dict[str, Any]:
    _admin_only(controller, who)
    partitions_mod.create(controller.state, change.name, change.settings)
    controller.changed()
    return {"created": change.name}


@router.patch("/v1/partitions/{name}")
async def update_partition(controller: Ctl, name: str, change: PartitionChange, who: Who) -> dict[str, Any]:
    _admin_only(controller, who)
    partitions_mod.update(controller.state, name, change.settings)
    controller.changed()
    return {"updated": name}


@router.delete("/v1/partitions/{name}")
async def delete_partition(controller: Ctl, name: str, who: Who) -> dict[str, Any]:
    _admin_only(controller, who)
    partitions_mod.delete(controller.state, name)
    controller.changed()
    return {"deleted": name}


def _admin_only(controller: Ctl, who: auth.Identity) -> None:
    if not permissions.is_admin(controller.state, who):
        raise Refused("Access/permission denied", 403)


@router.post("/v1/agents/heartbeat", response_model=HeartbeatReply)
async def heartbeat(controller: Ctl, hb: AgentHeartbeat, who: NodeAgent) -> HeartbeatReply:
    state = controller.state
    acked, to_kill, actions = nodes_mod.heartbeat(state, hb, time.time())
    controller.act(actions)
    return HeartbeatReply(acknowledged=acked, cancel=to_kill, lease=state.store.fencing_token,
                          power_limits=nodes_mod.power_limits(state, hb))
