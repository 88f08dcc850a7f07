"""Composed variants: a spec that takes another variant and adds to it (DESIGN section 12).

A composed spec names its ``base`` and lists only what it adds, so ``rd_offset`` (RD-AttnRes
with ``param_matched``'s learned offset on its routes) is not a copy of ``rd_attnres``::

    name = "rd_offset"
    base = "rd_attnres"          # every site table of rd_attnres, plus what follows
    [attn.offsets]
    b_qk = {}                    # new offsets (and new queries, routes) are added by name
    [attn.route_offsets]         # route -> the offset added to its output
    qk = "b_qk"
    v = "b_qk"

Per site (``attn``, ``mlp``, ``out``) a composed spec may add ``queries``, ``offsets`` and
``routes`` under new names, give existing or new routes an offset (``route_offsets``), and
replace the base's ``roles`` / ``head_groups`` (so that a new route can feed a role). It may
not redefine a name the base has, change ``residual``, or give a route a second offset: each
is refused naming the key. The result is an ordinary spec mapping that
:func:`harness.models.spec.parse_spec` checks like any other; so every check, parameter count,
identity and degeneracy record of an ordinary spec holds for a composed one. Identity (tested):
a composed spec whose additions are zero (offsets at their zero initialisation) computes its
base exactly; its parameter count is the base's plus the additions.
"""

from __future__ import annotations

import copy
from typing import Any

from harness.models.spec import DEFAULT_QUERY, DEFAULT_ROUTE, SITE_ROLES

COMPOSED_KEYS = {"name", "base", "role", "description", *SITE_ROLES}
SITE_ADDITIONS = {"queries", "offsets", "routes", "route_offsets", "roles", "head_groups"}


def _default_site(site: str) -> dict[str, Any]:
    """The raw table of the parent's single route at ``site`` (what an omitted site means)."""
    q, r = DEFAULT_QUERY[site], DEFAULT_ROUTE[site]
    return {"queries": {q: {}}, "routes": {r: [q]}, "roles": {role: [r] for role in SITE_ROLES[site]}}


def _route_table(value: Any) -> dict[str, Any]:
    """A route in its table form ``{queries = [...], offset = ...}`` (lists become tables)."""
    if isinstance(value, dict):
        return dict(value)
    return {"queries": [value] if isinstance(value, str) else list(value)}


def _add_names(merged: dict, add: dict, kind: str, site: str, where: str) -> None:
    """New ``queries`` / ``offsets`` / ``routes`` of a site; a name the base has is refused."""
    table = add.get(kind, {})
    if not isinstance(table, dict):
        raise ValueError(f"{where}: [{site}.{kind}] must be a table, got {table!r}")
    into = merged.setdefault(kind, {})
    for name, value in table.items():
        if name in into:
            raise ValueError(
                f"{where}: [{site}.{kind}] {name!r} is already defined by the base; a composed spec adds "
                "new names only (use another name)"
            )
        into[name] = value


def _add_route_offsets(merged: dict, add: dict, site: str, where: str) -> None:
    """``[site.route_offsets]``: route -> offset name, for a route without an offset yet."""
    table = add.get("route_offsets", {})
    if not isinstance(table, dict):
        raise ValueError(
            f"{where}: [{site}.route_offsets] must be a table of route = \"b_...\", got {table!r}"
        )
    routes = merged.get("routes", {})
    for route, offset in table.items():
        if route not in routes:
            raise ValueError(
                f"{where}: [{site}.route_offsets] {route!r} is not a route of the base or of this spec; "
                f"routes: {sorted(routes)}"
            )
        if not isinstance(offset, str):
            raise ValueError(
                f"{where}: [{site}.route_offsets] {route} = {offset!r}: give an offset name (\"b_...\")"
            )
        entry = _route_table(routes[route])
        if entry.get("offset") is not None:
            raise ValueError(
                f"{where}: [{site}.route_offsets] {route!r} already has offset {entry['offset']!r}; "
                "a route has at most one offset"
            )
        entry["offset"] = offset
        routes[route] = entry


def _compose_site(base_site: dict | None, add: Any, site: str, where: str) -> dict:
    if not isinstance(add, dict):
        raise ValueError(f"{where}: [{site}] must be a table, got {add!r}")
    unknown = set(add) - SITE_ADDITIONS
    if unknown:
        raise ValueError(
            f"{where}: [{site}] unknown key(s) {sorted(unknown)}; a composed spec allows {sorted(SITE_ADDITIONS)}"
        )
    merged = copy.deepcopy(base_site) if base_site is not None else _default_site(site)
    for kind in ("queries", "offsets", "routes"):
        _add_names(merged, add, kind, site, where)
    _add_route_offsets(merged, add, site, where)
    if "roles" in add or "head_groups" in add:
        merged.pop("roles", None)
        merged.pop("head_groups", None)
        merged.update({k: add[k] for k in ("roles", "head_groups") if k in add})
    return merged


def compose(base: dict, additions: dict, *, where: str = "<spec>") -> dict:
    """The spec mapping of ``additions`` (a composed spec, with ``base``) applied to ``base``.

    Args:
        base: the base variant's spec mapping (its TOML, parsed; itself already composed).
        additions: the composed spec's mapping: ``name``, ``base``, optional ``role`` and
            ``description``, and per site the additions listed in the module docstring.
        where: the file, for messages.

    Returns:
        An ordinary spec mapping (no ``base``), for :func:`harness.models.spec.parse_spec`.

    Raises:
        ValueError: an unknown key, ``residual`` given, a name the base already defines, an
            offset on an unknown route or on a route that has one; the message names ``where``
            and the key.
    """
    unknown = set(additions) - COMPOSED_KEYS
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {sorted(unknown)} in a composed spec (base = {additions.get('base')!r}); "
            f"allowed: {sorted(COMPOSED_KEYS)} (residual comes from the base)"
        )
    if "name" not in additions:
        raise ValueError(f"{where}: missing key 'name'")
    if base.get("residual") == "prenorm":
        raise ValueError(
            f"{where}: base {additions['base']!r} has no routing sites (residual 'prenorm') to add to"
        )
    merged = {k: copy.deepcopy(v) for k, v in base.items() if k not in ("name", "role", "description")}
    for site in SITE_ROLES:
        if site in additions:
            merged[site] = _compose_site(base.get(site), additions[site], site, where)
    merged["name"] = additions["name"]
    merged["role"] = additions.get("role", base.get("role", "reference"))
    merged["description"] = additions.get("description", "")
    return merged


def spec_toml(data: dict) -> str:
    """A spec mapping as self-contained TOML text (a composed spec's ``text``: a worker that
    lacks the base, e.g. a user spec of ``$HARNESS_SPEC_PATH``, rebuilds it from this alone)."""
    import tomlkit  # lazy: only composed specs are written back; the models need no TOML writer

    return tomlkit.dumps(data)
